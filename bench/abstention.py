"""Abstention of the LLM-free answerer: "not in the knowledge base" exactly when the graph does not answer.

Runs the constructed question set (``tests/fixtures/abstention/questions.jsonl``: half answerable from
the graph, half asking a relation the graph does not hold; Chinese and English; yes/no, "does X treat
Y" and open questions) through the one answering pipeline on a graph and prints abstention precision
(of the questions it abstained on, the share that the graph cannot answer) and recall (of those the
graph cannot answer, the share it abstained on), with 95 % Wilson intervals, per language and overall,
and every miss. The fixture's graph is the test graph of ``tests/test_trusted_answers.py`` (the
catalogue, the FoodOn demo subset, iDISK's 400 ingredients and four classics).

    python bench/abstention.py --graph G [--config serving/default] [--questions FILE] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
QUESTIONS = REPO / "tests" / "fixtures" / "abstention" / "questions.jsonl"


def measure(pipe, rows: list[dict]) -> dict:
    """Abstention precision and recall of ``pipe`` (an AnswerPipeline) on ``rows`` ({question, answerable, lang})."""
    from bencao.serving.tasks import Query

    answers = pipe.run([Query(r["question"]) for r in rows])
    out = []
    for r, a in zip(rows, answers):
        out.append({**r, "abstained": bool(a.abstained), "answer": (a.answer or "").splitlines()[:3]})
    return summarise(out)


def summarise(out: list[dict]) -> dict:
    def stats(items: list[dict]) -> dict:
        abst = [x for x in items if x["abstained"]]
        neg = [x for x in items if not x["answerable"]]
        tp = sum(not x["answerable"] for x in abst)
        return {"n": len(items), "abstained": len(abst), "unanswerable": len(neg), "tp": tp,
                "precision": tp / len(abst) if abst else 1.0, "recall": tp / len(neg) if neg else 1.0,
                "precision_ci": _wilson(tp, len(abst)), "recall_ci": _wilson(tp, len(neg))}

    return {"all": stats(out), "zh": stats([x for x in out if x["lang"] == "zh"]), "en": stats([x for x in out if x["lang"] == "en"]),
            "misses": [x for x in out if x["abstained"] == x["answerable"]], "items": out}


def _wilson(k: int, n: int) -> list[float]:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from extraction_precision import wilson

    lo, hi = wilson(k, n)
    return [round(lo, 4), round(hi, 4)]


def table(res: dict) -> str:
    lines = ["| questions | n | abstained | unanswerable | abstention precision | 95 % interval | abstention recall | 95 % interval |",
             "|---|---:|---:|---:|---:|---|---:|---|"]
    for key, label in (("zh", "Chinese"), ("en", "English"), ("all", "all")):
        s = res[key]
        lines.append(f"| {label} | {s['n']} | {s['abstained']} | {s['unanswerable']} | {s['precision']:.3f} | "
                     f"[{s['precision_ci'][0]:.3f}, {s['precision_ci'][1]:.3f}] | {s['recall']:.3f} | "
                     f"[{s['recall_ci'][0]:.3f}, {s['recall_ci'][1]:.3f}] |")
    for m in res["misses"]:
        what = "answered an unanswerable question" if not m["answerable"] else "abstained on an answerable question"
        lines.append(f"- {what}: {m['question']} → {' / '.join(m['answer'])[:160]}")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--graph", type=Path, required=True)
    ap.add_argument("--config", default="serving/default")
    ap.add_argument("--questions", type=Path, default=QUESTIONS)
    ap.add_argument("--json", type=Path, help="write the full result (every answer) here")
    a = ap.parse_args()
    from bencao.serving.config import load_serve_config
    from bencao.serving.pipeline import AnswerPipeline

    rows = [json.loads(ln) for ln in a.questions.read_text(encoding="utf-8").splitlines() if ln.strip()]
    res = measure(AnswerPipeline(a.graph, load_serve_config(a.config)), rows)
    print(table(res))
    if a.json:
        a.json.write_text(json.dumps(res, ensure_ascii=False, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
