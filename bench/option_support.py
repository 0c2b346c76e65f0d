"""Which retrieval support answers multiple-choice questions best? Variants of the classic IR solver, on halves.

For every option of every question: candidate passages (BM25 of the option's text, and of question +
option), kept when they hold the option; then the option's support under each variant:

- ``qo_max``: best BM25 of question + option (what ``macro.option_support: qo`` computes);
- ``q_max``: best BM25 of the question alone over the passages that hold the option (no bias toward
  long options, whose own tokens add to every passage that holds them);
- ``q_top3``: sum of the three best question-only scores (an option stated in several relevant passages);
- ``q_max_idf``: ``q_max`` minus the question-only score of a random holding passage baseline is not
  defined here; instead the q_max of each option is divided by the mean q_max of the question's options.

Accuracy of the argmax (argmin for exception questions is not applied here) and top-1 for SD, on two
fixed halves of each file (SHA-1 of the record id), so a variant is chosen on one half and checked on
the other. Dev files only; nothing here changes the product.

    python bench/option_support.py --graph DIR --bench data/dev/tcmbench_mcq.jsonl [--bench ...] [--limit N]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import time
from pathlib import Path


def half(rid: str) -> int:
    return hashlib.sha1(rid.encode("utf-8")).digest()[0] % 2


def supports(g, lex, ix, question: str, options: list[str], candidates: int = 20) -> dict[str, list[float]]:  # noqa: ANN001
    from bencao.retrieval.search.macro import holds_option

    out: dict[str, list] = {"qo_max": [], "q_max": [], "q_top3": [], "q_list": [], "n_holding": []}
    pools = []
    for opt in options:
        hits = ix.lexical_search("snippets", opt, candidates) + ix.lexical_search("snippets", f"{question} {opt}", candidates)
        pools.append(list(dict.fromkeys(s for s, _ in hits)))
    rows = g.get_snippets({s for p in pools for s in p})
    for opt, pool in zip(options, pools):
        holding = [s for s in pool if s in rows and holds_option(rows[s]["text"], opt)]
        qo = lex.score_ids(f"{question} {opt}", holding) if holding else {}
        q = lex.score_ids(question, holding) if holding else {}
        qs = sorted(q.values(), reverse=True)
        out["qo_max"].append(max(qo.values(), default=0.0))
        out["q_max"].append(qs[0] if qs else 0.0)
        out["q_top3"].append(sum(qs[:3]))
        out["q_list"].append([round(x, 3) for x in qs[:20]])
        out["n_holding"].append(len(holding))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--graph", required=True)
    ap.add_argument("--bench", action="append", required=True)
    ap.add_argument("--limit", type=int, default=0)
    ap.add_argument("--candidates", type=int, default=20, help="BM25 hits per search (option alone; question + option)")
    ap.add_argument("--out", default="out/option_support.jsonl")
    args = ap.parse_args()
    from bencao.retrieval.graph.store import Graph
    from bencao.retrieval.index.build import open_indexes

    g = Graph.open(args.graph, read_only=True)
    ix = open_indexes(g)
    lex = ix.lexical("snippets")
    rows = []
    t0 = time.perf_counter()
    for path in args.bench:
        recs = [json.loads(x) for x in Path(path).read_text(encoding="utf-8").splitlines() if x.strip()]
        for rec in recs[: args.limit or None]:
            letters = list(rec["options"])
            sup = supports(g, lex, ix, rec["question"], [rec["options"][k] for k in letters], args.candidates)
            rows.append({"bench": Path(path).stem, "id": rec["id"], "task": rec["task"], "letters": letters, "answer": rec["answer"],
                         "half": half(rec["id"]), "question": rec["question"], **sup})
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    variants = ["qo_max", "q_max", "q_top3"]
    print(f"{len(rows)} records in {time.perf_counter() - t0:.0f} s")
    for bench in sorted({r["bench"] for r in rows}):
        line = [bench]
        for v in variants:
            accs = []
            for h in (0, 1):
                rs = [r for r in rows if r["bench"] == bench and r["half"] == h]
                ok = 0
                for r in rs:
                    sc = r[v]
                    best = max(range(len(sc)), key=lambda i: (sc[i], -i))
                    ok += r["letters"][best] in r["answer"] and (r["task"] == "sd" or len(r["answer"]) == 1)
                accs.append(ok / max(1, len(rs)))
            line.append(f"{v} {accs[0]:.3f}/{accs[1]:.3f}")
        print(" | ".join(line))


if __name__ == "__main__":
    main()
