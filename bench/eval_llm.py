"""What bencao's evidence does for a real reader: the same model, the same evidence budget, four conditions (issue 35).

    HF_HUB_OFFLINE=1 .venv/bin/python bench/eval_llm.py --graph graphs/classics --model qwen2.5-coder-0.5b-instruct \\
        --bench DEV/tcmbench_mcq.jsonl --bench DEV/tcm_best4sdt_sd.jsonl [--budget-chars 1200] [--limit N] \\
        [--half a|b] [--out out/eval-llm] [--append bench/RESULTS.md]

Every multiple-choice (``mcq``) and syndrome (``sd``) record is answered four times by the same model, which
picks the option whose letter it scores highest as the next token (lm-eval-harness's multiple-choice scoring,
the generator's ``answer.mcq_mode: letters``), under the same prompt template (``generate_mcq`` / ``generate_sd``)
and the same evidence budget in characters:

- ``closed``: (a) closed book, no evidence;
- ``bm25``: (b) plain bm25s over the graph's snippets (heading path + text, bencao's tokeniser), the question
  alone, the best passages laid out as bencao lays out passages (``passages_context``), cut to the budget;
- ``bencao``: (c) bencao's served evidence from the question alone: exactly the ``context`` that ``/v1/retrieve``
  returns for ``{"question", "budget_chars"}`` (``AnswerPipeline.retrieve_dict``, the graph's serving recipe);
- ``full``: (d) bencao with its full recipe: the question with its options (option queries, option support), the
  context the generator would read for it, cut to the same budget;
- ``oracle`` (opt-in, ``--conditions ...,oracle``; an upper bound, not a system): plain bm25s over the question with
  the gold option's text appended, laid out as (b). It answers "can this reader use passages about the answer at
  all?": where it does not beat (a), no choice of question-only evidence can.

Each scored row records whether its context holds the gold option's text (``gold_in``) and how many distractors'
(``distractors_in``), by the coverage proxy's rule (``bench/context_coverage.py``); the table then splits each
condition's paired difference against (a) by whether the context held the gold option. ``--coverage`` fills the
flags in for rows scored before they existed (retrieval only, no model).

Accuracy (sd: the top letter is a gold one) per file with a 95 % percentile-bootstrap interval, and the paired
differences (c)−(b), (c)−(a), (d)−(a), (d)−(b) with paired bootstrap intervals over records. Each (record,
condition) is written as it is scored to ``OUT/<model>/<condition>.jsonl``; a rerun resumes. ``--half a|b`` keeps
the records whose id hashes into that half (the other half is for choosing settings, or for training:
``bencao data mcq|cot --half a``).

Training, measured (issue 34):

- ``--compare-to DIR``: another run's folder (``OUT/<model>/<tag>`` of the model before training, the same
  records and conditions): per condition and file, the paired difference this run − that run over the records
  both scored, with a paired bootstrap interval.
- ``--decompose N``: TCM-DiffRAG's decomposition check on the first N records of each file: the model is asked
  for the question's knowledge triples exactly as the CoT model is asked in serving (``serving.cot.cot_messages``:
  the question alone, greedy, ``--decompose-tokens``), the reply is parsed as serving parses it
  (``parse_triples``), and each triple is checked: does its head name a graph entity (an exact alias match, the
  personal layer left out) and is its relation one of the graph's schema relations? Written to
  ``decompose.jsonl`` (resumable); with ``--compare-to``, paired before/after differences per question.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from bencao.data_gen.leakage import half_of

sys.path.insert(0, str(Path(__file__).resolve().parent))

CONDITIONS = ("closed", "bm25", "bencao", "full", "oracle")
DEFAULT_CONDITIONS = CONDITIONS[:4]
LABEL = {"closed": "(a) closed book", "bm25": "(b) plain BM25 passages", "bencao": "(c) bencao, question only",
         "full": "(d) bencao, full recipe", "oracle": "(o) BM25 given the gold answer"}
PAIRS = (("bencao", "bm25"), ("bencao", "closed"), ("full", "closed"), ("full", "bm25"), ("oracle", "closed"))


def load(paths: list[str], limit: int | None, half: str | None) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for p in paths:
        name = Path(p).stem
        recs = []
        for line in Path(p).read_text(encoding="utf-8").splitlines():
            if not line.strip():
                continue
            r = json.loads(line)
            if r.get("task") not in ("mcq", "sd") or not r.get("options"):
                continue
            if half and half_of(str(r["id"])) != half:
                continue
            recs.append(r)
        out += [(name, r) for r in (recs[:limit] if limit else recs)]
    return out


class Runner:
    def __init__(self, args: argparse.Namespace, load_model: bool = True):
        from bencao.llm import LLMConfig, make_client
        from bencao.serving.config import load_serve_config, recorded_serving_recipe
        from bencao.serving.pipeline import AnswerPipeline

        recipe = args.config or recorded_serving_recipe(args.graph)
        self.cfg = load_serve_config(recipe, list(args.set or []))
        self.cfg.answer.context.budget_chars = args.budget_chars
        self.acfg = self.cfg.answer
        self.budget = args.budget_chars
        if "@" in args.model and args.model.split("@", 1)[1].startswith("http"):
            name, url = args.model.split("@", 1)
            llm = LLMConfig(backend="openai", model=name, base_url=url, temperature=0.0, max_retries=2)
        else:
            llm = LLMConfig(backend=args.engine, model=args.model, temperature=0.0, dtype=args.dtype, device="cpu",
                            n_threads=args.threads, batch_size=1)
        self.client = make_client(llm, default_cache=None if args.no_cache else Path(args.out) / "score_cache.sqlite") if load_model else None
        self.model = args.model
        self.pipe = AnswerPipeline(args.graph, self.cfg) if set(args.conditions) & {"bencao", "full", "bm25", "oracle"} else None
        self.bm25 = None
        if {"bm25", "oracle"} & set(args.conditions):
            from retrieval_peers import PlainBM25

            t = time.perf_counter()
            self.bm25 = PlainBM25(self.pipe.retriever.g)
            print(f"plain BM25 over {len(self.bm25.index.ids):,} snippets built in {time.perf_counter() - t:.0f} s", file=sys.stderr)

    def bm25_context(self, query: str, language: str) -> Any:
        """Plain bm25s's best passages for ``query``, whole from their start as a naive RAG gives them, laid out as
        bencao lays out passages and cut to the budget, whatever bencao's own settings."""
        from bencao.retrieval.evidence import SnippetHit
        from bencao.serving.answer import context_limits
        from bencao.serving.context import ContextConfig, passages_context

        ranked = self.bm25.ranked(query, 20)
        rows = self.pipe.retriever.g.get_snippets([i for i, _ in ranked])
        hits = [SnippetHit(id=i, text=rows[i]["text"], path=list(rows[i].get("path") or []), score=s) for i, s in ranked]
        return passages_context(hits, ContextConfig(budget_chars=self.budget), language, self.budget, context_limits(self.acfg))

    def contexts(self, rec: dict[str, Any], conditions: list[str]) -> dict[str, Any]:
        from bencao.serving.answer import generator_context
        from bencao.serving.context import RenderedContext
        from bencao.serving.tasks import Query

        q = Query.from_record(rec)
        out: dict[str, Any] = {}
        for c in conditions:
            if c == "closed":
                out[c] = None
            elif c == "bm25":
                out[c] = self.bm25_context(q.question, q.language)
            elif c == "oracle":
                gold = " ".join(str((rec.get("options") or {}).get(k, "")) for k in rec["answer"])
                out[c] = self.bm25_context(f"{q.question} {gold}", q.language)
            elif c == "bencao":
                ret = self.pipe.retrieve_dict(q.question, budget_chars=self.budget)  # what /v1/retrieve returns
                out[c] = RenderedContext.from_text(ret["context"], self.budget)
            elif c == "full":
                a = self.pipe.run([q], answer=False)[0]
                out[c] = generator_context(q, a.evidence, self.acfg, self.budget)
        return out

    def score(self, rec: dict[str, Any], contexts: dict[str, Any]) -> dict[str, dict[str, Any]]:
        from bencao.llm import LLMError
        from bencao.serving.answer import ANSWER_PREFIX, build_messages, prompt_language
        from bencao.serving.tasks import Query

        q = Query.from_record(rec)
        conds = list(contexts)
        batch = [build_messages(q, None, self.acfg, context=contexts[c], scoring=True) for c in conds]
        prefix = ANSWER_PREFIX[prompt_language(q, self.acfg)]
        res = self.client.score_choices_many(batch, [list(q.options or {})] * len(conds), prefix=prefix)
        out = {}
        gold = set(rec["answer"])
        for c, r in zip(conds, res):
            if isinstance(r, LLMError):
                print(f"{rec['id']} {c}: {r}", file=sys.stderr)
                continue
            ranking = sorted((k for k, v in r.scores.items() if v is not None), key=lambda k: -r.scores[k])  # type: ignore[operator]
            ctx = contexts[c]
            out[c] = {"id": rec["id"], "condition": c, "pred": ranking[:1], "gold": sorted(gold), "correct": bool(ranking and ranking[0] in gold),
                      "scores": {k: (None if v is None else round(v, 4)) for k, v in r.scores.items()}, "prompt_tokens": r.prompt_tokens,
                      "context_chars": len(ctx.text) if ctx is not None else 0, **coverage(rec, ctx)}
        return out


def coverage(rec: dict[str, Any], ctx: Any) -> dict[str, Any]:
    """Does the context hold the gold option's text, and how many distractors' (the coverage proxy's rule)?"""
    from context_coverage import holds

    text = ctx.text if ctx is not None else ""
    gold = set(rec["answer"])
    opts = {k: str(v) for k, v in (rec.get("options") or {}).items()}
    return {"gold_in": any(holds(text, opts[k]) for k in gold if k in opts),
            "distractors_in": sum(holds(text, v) for k, v in opts.items() if k not in gold)}


def fill_coverage(records: list[tuple[str, dict[str, Any]]], outdir: Path, conditions: list[str], runner: Runner) -> None:
    """Rows scored before ``gold_in`` existed get it: each record's context rebuilt as it was scored (retrieval only)."""
    from bencao.io import atomic_write_text

    recs = {r["id"]: r for _, r in records}
    for c in conditions:
        path = outdir / f"{c}.jsonl"
        rows = read_rows(path)
        todo = [i for i, r in rows.items() if "gold_in" not in r and i in recs]
        if not todo:
            continue
        for n, i in enumerate(todo, 1):
            rows[i].update(coverage(recs[i], runner.contexts(recs[i], [c])[c]))
            if n % 50 == 0:
                print(f"coverage {c}: {n}/{len(todo)}", file=sys.stderr, flush=True)
        atomic_write_text(path, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows.values()))


def coverage_table(records: list[tuple[str, dict[str, Any]]], outdir: Path, conditions: list[str], seed: int = 0) -> str:
    """Per evidence condition, pooled: records whose context held the gold option's text and those whose did not, the
    accuracy of each group and its paired difference against closed book (where (a) was scored)."""
    from retrieval_peers import paired_delta

    if "closed" not in conditions:
        return ""
    closed = read_rows(outdir / "closed.jsonl")
    ids = {r["id"] for _, r in records}
    lines = ["| condition | context holds the gold option | n | accuracy | closed book, same records | difference [95 % CI] "
             "| distractors held, mean |", "|---|---|---:|---:|---:|---:|---:|"]
    any_row = False
    for c in conditions:
        if c == "closed":
            continue
        rows = {i: r for i, r in read_rows(outdir / f"{c}.jsonl").items() if i in ids and i in closed and "gold_in" in r}
        for flag, label in ((True, "yes"), (False, "no")):
            grp = [i for i, r in rows.items() if r["gold_in"] is flag]
            if not grp:
                continue
            a = np.array([float(rows[i]["correct"]) for i in grp])
            b = np.array([float(closed[i]["correct"]) for i in grp])
            m, lo, hi = paired_delta(a - b, np.random.default_rng(seed))
            dis = np.mean([rows[i]["distractors_in"] for i in grp])
            lines.append(f"| {LABEL[c]} | {label} | {len(grp)} | {100 * a.mean():.1f} | {100 * b.mean():.1f} | "
                         f"{100 * m:+.1f} [{100 * lo:+.1f}, {100 * hi:+.1f}] | {dis:.2f} |")
            any_row = True
    return "\n".join(lines) if any_row else ""


def done_ids(path: Path) -> set[str]:
    if not path.exists():
        return set()
    out = set()
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            out.add(json.loads(line)["id"])
        except (ValueError, KeyError):
            continue  # a torn last line of a killed run: scored again
    return out


def read_rows(path: Path) -> dict[str, dict[str, Any]]:
    rows = {}
    if path.exists():
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                r = json.loads(line)
                rows[r["id"]] = r
            except (ValueError, KeyError):
                continue
    return rows


def boot_ci(x: np.ndarray, rng: np.random.Generator, n: int = 2000) -> tuple[float, float]:
    idx = rng.integers(0, len(x), size=(n, len(x)))
    lo, hi = np.percentile(x[idx].mean(axis=1), [2.5, 97.5])
    return float(lo), float(hi)


def table(records: list[tuple[str, dict[str, Any]]], outdir: Path, conditions: list[str], seed: int = 0) -> str:
    from retrieval_peers import paired_delta

    rows = {c: read_rows(outdir / f"{c}.jsonl") for c in conditions}
    files = list(dict.fromkeys(name for name, _ in records))
    lines = ["| file | n | " + " | ".join(LABEL[c] for c in conditions) + " |", "|---|---:|" + "---:|" * len(conditions)]
    deltas = ["", "| file | " + " | ".join(f"{a} − {b}" for a, b in PAIRS if a in conditions and b in conditions) + " |",
              "|---|" + "---:|" * sum(1 for a, b in PAIRS if a in conditions and b in conditions)]
    for f in files + ["pooled"]:
        ids = [r["id"] for name, r in records if (f == "pooled" or name == f) and all(r["id"] in rows[c] for c in conditions)]
        if not ids:
            continue
        rng = np.random.default_rng(seed)
        cells = []
        for c in conditions:
            x = np.array([rows[c][i]["correct"] for i in ids], dtype=float)
            lo, hi = boot_ci(x, rng)
            cells.append(f"{100 * x.mean():.1f} [{100 * lo:.1f}, {100 * hi:.1f}]")
        lines.append(f"| {f} | {len(ids)} | " + " | ".join(cells) + " |")
        dcells = []
        for a, b in PAIRS:
            if a in conditions and b in conditions:
                d = np.array([float(rows[a][i]["correct"]) - float(rows[b][i]["correct"]) for i in ids])
                m, lo, hi = paired_delta(d, np.random.default_rng(seed))
                dcells.append(f"{100 * m:+.1f} [{100 * lo:+.1f}, {100 * hi:+.1f}]")
        deltas.append(f"| {f} | " + " | ".join(dcells) + " |")
    chars = {c: np.mean([r["context_chars"] for r in rows[c].values()]) if rows[c] else 0 for c in conditions}
    letters = []
    for c in conditions:
        picks = [r["pred"][0] for r in rows[c].values() if r["pred"]]
        if picks:
            from collections import Counter

            top = Counter(picks).most_common(2)
            letters.append(f"{c}: {', '.join(f'{k} {100 * v / len(picks):.0f} %' for k, v in top)}")
    return ("\n".join(lines) + "\n" + "\n".join(deltas) + "\n\nMean evidence characters: "
            + ", ".join(f"{c} {v:.0f}" for c, v in chars.items()) + ".  Most picked letters: " + "; ".join(letters) + ".")


class Decomposer:
    """The model as CoT model: question → triples, each checked against the graph (entity heads, schema relations)."""

    def __init__(self, client: Any, graph: Any, max_tokens: int = 96):
        from bencao.text import norm_key

        self.client, self.g, self.max_tokens = client, graph, max_tokens
        self.relations = {norm_key(r["name"]) for r in self.g.relations()}

    def check(self, triple: dict[str, str]) -> dict[str, Any]:
        from bencao.text import norm_key

        head = self.g.find_entity_id(norm_key(triple["head"]), exclude_layers=("personal",)) if triple["head"].strip() else None
        rel = norm_key(triple["relation"]) in self.relations
        return {**triple, "head_linked": head is not None, "relation_in_schema": rel, "valid": head is not None and rel}

    def __call__(self, rec: dict[str, Any]) -> dict[str, Any]:
        from bencao.llm import LLMError
        from bencao.serving.cot import cot_messages, parse_triples

        r = self.client.complete_many([cot_messages(str(rec["question"]))], max_tokens=self.max_tokens, temperature=0.0)[0]
        if isinstance(r, LLMError):
            return {"id": rec["id"], "error": str(r), "reply": "", "triples": []}
        triples = [self.check(t) for t in parse_triples(r.text, 8)]
        return {"id": rec["id"], "reply": r.text, "triples": triples, "n": len(triples), "valid": sum(t["valid"] for t in triples),
                "head_linked": sum(t["head_linked"] for t in triples), "relation_in_schema": sum(t["relation_in_schema"] for t in triples)}


def decompose_records(records: list[tuple[str, dict[str, Any]]], n: int) -> list[tuple[str, dict[str, Any]]]:
    """The first ``n`` records of each file."""
    seen: dict[str, int] = {}
    out = []
    for name, r in records:
        if seen.get(name, 0) < n:
            seen[name] = seen.get(name, 0) + 1
            out.append((name, r))
    return out


def _ratio_ci(num: np.ndarray, den: np.ndarray, rng: np.random.Generator, n: int = 2000) -> tuple[float, float]:
    """95 % bootstrap interval of Σnum/Σden, resampling questions (a cluster bootstrap over their triples)."""
    idx = rng.integers(0, len(num), size=(n, len(num)))
    tot = den[idx].sum(axis=1)
    vals = np.where(tot > 0, num[idx].sum(axis=1) / np.maximum(tot, 1), 0.0)
    lo, hi = np.percentile(vals, [2.5, 97.5])
    return float(lo), float(hi)


def decompose_rows(records: list[tuple[str, dict[str, Any]]], outdir: Path, other: Path | None = None, seed: int = 0) -> list[dict[str, Any]]:
    """Per file (and pooled): triples per question; the share of triples whose head links and whose relation is in the
    schema (``valid``), and its two parts, with cluster-bootstrap intervals; questions with a valid triple; with
    ``other``, the paired differences this run − that run per question (valid share; has a valid triple)."""
    from retrieval_peers import paired_delta

    rows = read_rows(outdir / "decompose.jsonl")
    before = read_rows(other / "decompose.jsonl") if other is not None else {}
    files = list(dict.fromkeys(name for name, _ in records))
    out = []
    for f in files + ["pooled"]:
        ids = [r["id"] for name, r in records if (f == "pooled" or name == f) and r["id"] in rows and "error" not in rows[r["id"]]]
        if not ids:
            continue
        rng = np.random.default_rng(seed)
        n = np.array([rows[i]["n"] for i in ids], dtype=float)
        row: dict[str, Any] = {"file": f, "n": len(ids), "triples_per_question": round(float(n.mean()), 3)}
        for key in ("valid", "head_linked", "relation_in_schema"):
            k = np.array([rows[i][key] for i in ids], dtype=float)
            lo, hi = _ratio_ci(k, n, rng)
            row[key] = [round(float(k.sum() / max(n.sum(), 1)), 4), round(lo, 4), round(hi, 4)]
        anyv = np.array([rows[i]["valid"] > 0 for i in ids], dtype=float)
        lo, hi = boot_ci(anyv, rng)
        row["with_valid_triple"] = [round(float(anyv.mean()), 4), round(lo, 4), round(hi, 4)]
        both = [i for i in ids if i in before and "error" not in before[i]]
        if both:
            share = lambda r: r["valid"] / r["n"] if r["n"] else 0.0  # noqa: E731
            d1 = np.array([share(rows[i]) - share(before[i]) for i in both])
            d2 = np.array([float(rows[i]["valid"] > 0) - float(before[i]["valid"] > 0) for i in both])
            row["paired_n"] = len(both)
            row["delta_valid_share"] = [round(v, 4) for v in paired_delta(d1, np.random.default_rng(seed))]
            row["delta_with_valid_triple"] = [round(v, 4) for v in paired_delta(d2, np.random.default_rng(seed))]
        out.append(row)
    return out


def _pct(v: list[float], sign: bool = False) -> str:
    f = "{:+.1f}" if sign else "{:.1f}"
    return f"{f.format(100 * v[0])} [{f.format(100 * v[1])}, {f.format(100 * v[2])}]"


def decompose_table(records: list[tuple[str, dict[str, Any]]], outdir: Path, other: Path | None = None, seed: int = 0) -> str:
    rows = decompose_rows(records, outdir, other, seed)
    lines = ["| file | n | triples / question | valid triples (head linked and relation in schema), % | head linked, % "
             "| relation in schema, % | questions with a valid triple, % |", "|---|---:|---:|---:|---:|---:|---:|"]
    lines += [f"| {r['file']} | {r['n']} | {r['triples_per_question']:.2f} | {_pct(r['valid'])} | {_pct(r['head_linked'])} | "
              f"{_pct(r['relation_in_schema'])} | {_pct(r['with_valid_triple'])} |" for r in rows]
    paired = [r for r in rows if "paired_n" in r]
    if paired:
        lines += ["", "| file | n (both runs) | valid-triple share per question, this − other, points | questions with a valid triple, "
                      "this − other, points |", "|---|---:|---:|---:|"]
        lines += [f"| {r['file']} | {r['paired_n']} | {_pct(r['delta_valid_share'], True)} | {_pct(r['delta_with_valid_triple'], True)} |"
                  for r in paired]
    return "\n".join(lines)


def compare_rows(records: list[tuple[str, dict[str, Any]]], outdir: Path, other: Path, conditions: list[str], seed: int = 0) -> list[dict[str, Any]]:
    """Per condition and file (and pooled): the other run's accuracy, this run's, and the paired difference [95 % CI]."""
    from retrieval_peers import paired_delta

    files = list(dict.fromkeys(name for name, _ in records))
    out = []
    for c in conditions:
        now, then = read_rows(outdir / f"{c}.jsonl"), read_rows(other / f"{c}.jsonl")
        for f in files + ["pooled"]:
            ids = [r["id"] for name, r in records if (f == "pooled" or name == f) and r["id"] in now and r["id"] in then]
            if not ids:
                continue
            a = np.array([float(now[i]["correct"]) for i in ids])
            b = np.array([float(then[i]["correct"]) for i in ids])
            out.append({"condition": c, "file": f, "n": len(ids), "before": round(float(b.mean()), 4), "after": round(float(a.mean()), 4),
                        "delta": [round(v, 4) for v in paired_delta(a - b, np.random.default_rng(seed))]})
    return out


def compare_table(records: list[tuple[str, dict[str, Any]]], outdir: Path, other: Path, conditions: list[str], seed: int = 0) -> str:
    lines = ["| condition | file | n | other run | this run | this − other [95 % CI] |", "|---|---|---:|---:|---:|---:|"]
    lines += [f"| {LABEL[r['condition']]} | {r['file']} | {r['n']} | {100 * r['before']:.1f} | {100 * r['after']:.1f} | {_pct(r['delta'], True)} |"
              for r in compare_rows(records, outdir, other, conditions, seed)]
    return "\n".join(lines)


def write_comparison(path: Path, records: list[tuple[str, dict[str, Any]]], outdir: Path, other: Path, args: argparse.Namespace,
                     conditions: list[str]) -> dict[str, Any]:
    """``comparison.json``: what ``bencao export --evaluation`` puts in a model's record and card (names, never paths)."""
    from bencao.io import atomic_write_json

    files = list(dict.fromkeys(name for name, _ in records))
    doc = {"kind": "bencao.eval_llm.comparison", "model": Path(args.model.split("@")[0]).name, "compared_to": f"{other.parent.name}/{other.name}", "half": args.half, "files": files,
           "budget_chars": args.budget_chars, "scoring": "option letters, next-token log-probability after 答案：",
           "accuracy": compare_rows(records, outdir, other, conditions),
           "decomposition": decompose_rows(records, outdir, other) if (outdir / "decompose.jsonl").exists() else [],
           "date": time.strftime("%Y-%m-%d", time.gmtime())}
    atomic_write_json(path, doc)
    return doc


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--graph", required=True)
    ap.add_argument("--bench", action="append", required=True)
    ap.add_argument("--model", required=True, help="An installed model's name, a transformers folder, or NAME@http://host:port/v1.")
    ap.add_argument("--engine", default="local-hf", help="local-hf (transformers; fastest on prompts on a CPU) | llama-cpp.")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--config", default=None, help="Serving recipe (default: the one the graph recorded).")
    ap.add_argument("--set", action="append", default=[], help="key=value override of the serving recipe.")
    ap.add_argument("--budget-chars", type=int, default=1200)
    ap.add_argument("--conditions", default=",".join(DEFAULT_CONDITIONS), help=f"Comma-separated, of {', '.join(CONDITIONS)}.")
    ap.add_argument("--coverage", action="store_true", help="Fill in gold_in / distractors_in for rows scored without them "
                                                            "(their contexts rebuilt, no model) before the table.")
    ap.add_argument("--limit", type=int, default=None, help="The first N records of each file (after --half).")
    ap.add_argument("--half", choices=["a", "b"], default=None)
    ap.add_argument("--out", default="out/eval-llm")
    ap.add_argument("--tag", default=None, help="A sub-folder of OUT/<model> for this run's settings (the score cache is shared).")
    ap.add_argument("--no-cache", action="store_true")
    ap.add_argument("--table-only", action="store_true", help="Print the table of what is already scored.")
    ap.add_argument("--append", default=None, help="Append the table to this results file (bench/RESULTS.md).")
    ap.add_argument("--title", default=None)
    ap.add_argument("--compare-to", default=None, help="Another run's folder (OUT/<model>/<tag>, e.g. the model before training): "
                                                       "paired differences this run − that run per condition and file.")
    ap.add_argument("--decompose", type=int, default=0, help="Also run the decomposition check on the first N records of each file "
                                                             "(the model asked for the question's triples as the CoT model is).")
    ap.add_argument("--decompose-tokens", type=int, default=96, help="Longest decomposition reply in tokens.")
    args = ap.parse_args(argv)
    args.conditions = [c.strip() for c in args.conditions.split(",") if c.strip()]
    bad = [c for c in args.conditions if c not in CONDITIONS]
    if bad:
        ap.error(f"unknown condition(s) {bad}; known: {', '.join(CONDITIONS)}")
    records = load(args.bench, args.limit, args.half)
    outdir = Path(args.out) / Path(args.model.split("@")[0]).name / (args.tag or "")
    outdir.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    if not args.table_only:
        runner = Runner(args)
        done = {c: done_ids(outdir / f"{c}.jsonl") for c in args.conditions}
        fhs = {c: open(outdir / f"{c}.jsonl", "a", encoding="utf-8") for c in args.conditions}
        try:
            for i, (name, rec) in enumerate(records, 1):
                todo = [c for c in args.conditions if rec["id"] not in done[c]]
                if not todo:
                    continue
                t = time.perf_counter()
                res = runner.score(rec, runner.contexts(rec, todo))
                for c, row in res.items():
                    fhs[c].write(json.dumps({**row, "file": name}, ensure_ascii=False) + "\n")
                    fhs[c].flush()
                print(f"{i}/{len(records)} {name} {rec['id']} " + " ".join(f"{c}={'✓' if r['correct'] else '·'}" for c, r in res.items())
                      + f" ({time.perf_counter() - t:.1f} s)", file=sys.stderr, flush=True)
        finally:
            for fh in fhs.values():
                fh.close()
        if args.decompose:
            from bencao.retrieval.graph.store import Graph

            graph = runner.pipe.retriever.g if runner.pipe is not None else Graph.open(args.graph, read_only=True)
            dec = Decomposer(runner.client, graph, args.decompose_tokens)
            path = outdir / "decompose.jsonl"
            done = done_ids(path)
            todo = [(name, r) for name, r in decompose_records(records, args.decompose) if r["id"] not in done]
            with open(path, "a", encoding="utf-8") as fh:
                for i, (name, rec) in enumerate(todo, 1):
                    t = time.perf_counter()
                    row = dec(rec)
                    fh.write(json.dumps({**row, "file": name}, ensure_ascii=False) + "\n")
                    fh.flush()
                    print(f"decompose {i}/{len(todo)} {rec['id']}: {row.get('valid', 0)}/{row.get('n', 0)} valid "
                          f"({time.perf_counter() - t:.1f} s)", file=sys.stderr, flush=True)
    if args.coverage:
        fill_coverage(records, outdir, [c for c in args.conditions if c != "closed"], Runner(args, load_model=False))
    if args.conditions:
        text = table(records, outdir, args.conditions)
        split = coverage_table(records, outdir, args.conditions)
        if split:
            text += "\n\n" + split
    else:
        text = ""
    other = Path(args.compare_to) if args.compare_to else None
    if other is not None:
        if not other.is_dir():
            ap.error(f"--compare-to {other}: no such folder")
        text += f"\n\nThis run ({outdir}) against {other}, paired over the records both scored:\n\n" + compare_table(records, outdir, other, args.conditions)
        write_comparison(outdir / "comparison.json", records, outdir, other, args, args.conditions)
    if args.decompose or (outdir / "decompose.jsonl").exists():
        dtext = decompose_table(decompose_records(records, args.decompose) if args.decompose else records, outdir, other)
        text += "\n\nDecomposition (the model's query triples for the question alone, checked against the graph):\n\n" + dtext
    print(text)
    if args.append:
        from retrieval_peers import append_result

        title = args.title or f"A real reader with bencao's evidence: {Path(args.model).name}, budget {args.budget_chars} characters"
        append_result(args.append, title, "eval_llm.py", argv, f"{(time.perf_counter() - t0) / 60:.0f} min on this machine", text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
