"""Retrieval peers side by side: plain BM25 over the graph's snippets, bencao's question-only retrieval, and
bencao with each channel switched off — the same graph, the same records, the same metrics (issue 24).

    HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 .venv/bin/python bench/retrieval_peers.py --graph graphs/sample \\
        --bench DEV/tcm_best4sdt_sd.jsonl --bench DEV/cmmlu_traditional_chinese_medicine.jsonl \\
        [--config serving/default] [--set key=value ...] [--limit N] [--append bench/RESULTS.md] [--json out.json]

Rows (every one scored by ``bencao.evaluation.probe.passage_ranks`` and ``bencao.evaluation.metrics.aggregate``,
the code behind ``bencao eval``'s answer_recall@k / distractor_rate@k / margin@k / mrr / passage_chars@10):

- ``bm25 (plain)``: BM25 over every snippet of the graph — its heading path and text, the passage the probe
  reads — tokenised as bencao's lexical index tokenises (``analyze``; the question with ``analyze_query``),
  the question alone, the 20 best. bm25s' Lucene variant and its scores (built by the streaming builder
  that tests/test_index.py checks bit for bit against ``bm25s.BM25.index``), ranked by bm25s'
  ``get_scores`` over every document: no linking, no fusion, no section or triple channel.
- ``bencao``: the probe of ``bencao eval``: the serving recipe's retrieval (``--config``, ``--set``), the
  question alone, no options, ``retrieval.macro.option_queries=false``; the Evidence's snippets in order.
- ``bencao −micro`` / ``−macro`` / ``−paths`` / ``−layers``: the same with one channel off
  (``retrieval.micro.enabled=false``: query → triples → their snippets; ``retrieval.macro.enabled=false``:
  snippets and sections by dense + lexical fusion; ``retrieval.paths.enabled=false``: reasoning paths;
  ``retrieval.layers.enabled=false``: cross-layer links and the therapy descent through the section tree).
- ``bencao with options (coverage)``: the system as shipped sees the options and queries once per option.
  Not question-only retrieval: shown because its recall looks high while its margin stays near 0.

``bm25 top N → rerank (…)``, with ``--rerank key=value`` (a ``retrieval.rerank`` block, repeatable): plain BM25's
``candidates`` (N) best passages, ordered by that reranker's scores — the same passages as the bm25 row's top N, so
recall@N is unchanged and every difference at k < N is the reranker's. E.g. the LM's yes/no scores:
``--rerank backend=llm-yes-no --rerank model=qwen2.5-coder-0.5b-instruct --rerank candidates=20``.

``--rows`` picks the optional rows (default ``channels,options``; ``none`` runs only plain BM25, dense only with
``--dense``, and bencao: the comparison an embedder change needs, in a third of the time).

``dense only`` needs a graph with dense indexes (the sample graph built with ``retrieval/lexical`` has
none): with one, add ``--dense`` for a row of the snippet index's dense search, question only.

The table pools the records of every file (per-file recall@10 / margin@10 below it); intervals are
percentile bootstraps over records with the same resamples for every row, and "Δ vs bm25" is the
paired bootstrap of the per-record difference. Dev files are for measuring only: nothing here is tuned
to them.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

CHANNELS = [
    ("bencao −micro", ["retrieval.micro.enabled=false"]),
    ("bencao −macro", ["retrieval.macro.enabled=false"]),
    ("bencao −paths", ["retrieval.paths.enabled=false"]),
    ("bencao −layers", ["retrieval.layers.enabled=false"]),
]


class PlainBM25:
    """BM25 over every snippet of a graph, question only (see the module docstring)."""

    def __init__(self, graph: Any, cache: str | Path | None = None):
        """``cache``: a folder that keeps the built index, keyed by the graph's store id and generation, so another
        run over the same graph (or a copy of it) loads it instead of building it again (2 min to 18 min for the
        corpus graph, by the machine's load)."""
        from bencao.evaluation.probe import passage_text
        from bencao.retrieval.index.lexical import LexicalIndex, analyze

        self.g = graph
        ids: list[str] = []
        t = time.perf_counter()
        key = f"{graph.store_id()}-{graph.generation()}"
        where = Path(cache) / key if cache else None
        if where is not None and where.is_dir():
            loaded = LexicalIndex.load(where)
            if loaded is not None:
                self.index, self.build_s = loaded, time.perf_counter() - t
                return

        def tokens():
            for s in graph.iter_snippets():
                ids.append(s["id"])
                yield analyze(passage_text(s.get("path"), s["text"]))

        self.index = LexicalIndex.build(tokens(), ids)  # streamed: ids fill as the token lists are consumed
        self.build_s = time.perf_counter() - t
        if where is not None:
            where.parent.mkdir(parents=True, exist_ok=True)
            self.index.save(where)

    def ranked(self, question: str, k: int = 20) -> list[tuple[str, float]]:
        """The ``k`` best snippets with a positive score, (id, BM25), best first."""
        scores = self.index.scores(question)  # analyze_query, then bm25s' get_scores over every document
        order = np.argsort(-scores, kind="stable")[:k]
        return [(self.index.ids[i], float(scores[i])) for i in order if scores[i] > 0]

    def search(self, question: str, k: int = 20) -> list[str]:
        return [sid for sid, _ in self.ranked(question, k)]

    def passages(self, question: str, k: int = 20) -> tuple[list[str], list[str]]:
        from bencao.evaluation.probe import passage_text

        ids = self.search(question, k)
        rows = self.g.get_snippets(ids)
        return [passage_text(rows[i].get("path"), rows[i]["text"]) for i in ids], ids


def load_records(paths: list[str], limit: int | None) -> list[tuple[str, dict[str, Any]]]:
    from bencao.evaluation.bench_format import load_benches
    from bencao.evaluation.probe import option_texts

    out = []
    for b in load_benches([Path(p) for p in paths]):
        recs = [r for r in b.records if option_texts(r) is not None]
        out += [(b.name, r) for r in (recs[:limit] if limit else recs)]
    return out


ROW_SETS = ("channels", "options")


def rerank_config(items: list[str]) -> Any:
    """A :class:`~bencao.retrieval.search.rerank.RerankConfig` from ``key=value`` items (None when there are none)."""
    if not items:
        return None
    from bencao.config import apply_overrides, from_dict
    from bencao.retrieval.search.rerank import RerankConfig

    cfg = from_dict(RerankConfig, apply_overrides({}, list(items)), "--rerank")
    if not cfg.model:
        raise SystemExit("--rerank: model=... is required (the reranker to measure)")
    return cfg


def rerank_row_name(cfg: Any) -> str:
    return f"bm25 top {cfg.candidates} → rerank ({cfg.backend} {Path(str(cfg.model)).name})"


def run_rows(graph: str, config: str | None, overrides: list[str], records: list[tuple[str, dict[str, Any]]],
             dense: bool = False, progress: bool = True, rows: tuple[str, ...] = ROW_SETS,
             rerank: Any = None, bm25_cache: str | None = None) -> dict[str, dict[str, Any]]:
    """Row name → {"rows": per-record probe rows, "seconds": per question}. ``rows``: which optional row sets
    to run besides bm25 (plain), dense only (``dense``) and bencao: ``channels`` (one channel off each), ``options``.
    ``rerank`` (a RerankConfig): a row of plain BM25's ``candidates`` best passages ordered by that reranker."""
    from bencao.evaluation.bench_format import query_text
    from bencao.evaluation.probe import RetrievalProbe, passage_ranks, passage_text
    from bencao.serving.config import load_serve_config
    from bencao.serving.pipeline import AnswerPipeline
    from bencao.serving.tasks import Query

    recs = [r for _, r in records]
    base_cfg = load_serve_config(config, [*overrides, "answerer=none"])
    base_cfg.generator = None
    base = AnswerPipeline(graph, base_cfg)
    out: dict[str, dict[str, Any]] = {}

    def timed(name: str, fn: Callable[[], list[Any]]) -> None:
        t = time.perf_counter()
        rows = fn()
        out[name] = {"rows": rows, "seconds": (time.perf_counter() - t) / max(1, len(recs))}
        if progress:
            print(f"  {name}: {out[name]['seconds']:.3f} s/question", file=sys.stderr, flush=True)

    base.run([Query(query_text(recs[0]))], answer=False)  # untimed warm-up: lazily opened indexes, caches
    bm25 = PlainBM25(base.retriever.g, bm25_cache)
    if progress:
        print(f"  bm25 index over {len(bm25.index):,} snippets built or loaded in {bm25.build_s:.1f} s", file=sys.stderr, flush=True)
    timed("bm25 (plain)", lambda: [passage_ranks(r, *bm25.passages(query_text(r))) for r in recs])
    if rerank is not None:
        from bencao.retrieval.search.rerank import load_reranker

        reranker = load_reranker(rerank)

        def reranked_rows() -> list[Any]:
            out_rows = []
            for r in recs:
                passages, ids = bm25.passages(query_text(r), rerank.candidates)
                scores = reranker.score(query_text(r), passages)
                order = sorted(range(len(ids)), key=lambda i: (-scores[i], i))  # ties keep BM25's order
                out_rows.append(passage_ranks(r, [passages[i] for i in order], [ids[i] for i in order]))
            return out_rows

        timed(rerank_row_name(rerank), reranked_rows)
    if dense:
        def dense_rows() -> list[Any]:
            ix, g, rows = base.retriever.ix, base.retriever.g, []
            for r in recs:
                ids = [i for i, _ in ix.dense_search("snippets", query_text(r), 20)]
                sn = g.get_snippets(ids)
                rows.append(passage_ranks(r, [passage_text(sn[i].get("path"), sn[i]["text"]) for i in ids if i in sn], ids))
            return rows

        timed("dense only", dense_rows)
    for name, extra in [("bencao", []), *(CHANNELS if "channels" in rows else [])]:
        cfg = load_serve_config(config, [*overrides, "answerer=none", *extra])
        probe = RetrievalProbe(graph, cfg, pipeline=base)
        timed(name, lambda: probe.run(recs))

    def with_options() -> list[Any]:
        rows = []
        for r in recs:
            a = base.run([Query.from_record(r)], answer=False)[0]  # as served: options passed, option queries as configured
            sn = a.evidence.snippets if a.evidence is not None else []
            rows.append(passage_ranks(r, [passage_text(s.path, s.text) for s in sn], [s.id for s in sn]))
        return rows

    if "options" in rows:
        timed("bencao with options (coverage)", with_options)
    return out


def table(results: dict[str, dict[str, Any]], records: list[tuple[str, dict[str, Any]]], n_resamples: int = 1000,
          seed: int = 0) -> str:
    from bencao.evaluation.metrics import aggregate, retrieval_arrays
    from bencao.evaluation.report import fmt

    recs = [r for _, r in records]
    # aggregate() takes one task; the probe metrics do not depend on it: score every record as mcq-shaped
    shaped = [{**r, "task": "mcq"} if r["task"] == "sd" else r for r in recs]
    n = len(recs)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, n, size=(n_resamples, n))
    base = retrieval_arrays(results["bm25 (plain)"]["rows"])
    cols = ["answer_recall@5", "answer_recall@10", "answer_recall@20", "distractor_rate@10", "margin@10", "mrr"]
    lines = ["| retriever | n | s/question | passages@10 | passage_chars@10 | " + " | ".join(cols)
             + " | Δ recall@10 vs bm25 | Δ margin@10 vs bm25 |",
             "|---|---:|---:|---:|---:|" + "---:|" * (len(cols) + 2)]
    for name, res in results.items():
        m = aggregate(shaped, [None] * n, answers=False, retrieval=res["rows"], n_resamples=n_resamples, seed=seed, by_source=False)
        ci = m.get("ci95", {})
        cells = [fmt(c, m.get(c), ci.get(c) if c in ("answer_recall@10", "distractor_rate@10", "margin@10", "mrr") else None) for c in cols]
        arr = retrieval_arrays(res["rows"])
        deltas = []
        for key in ("recall", "margin"):
            def per(a: dict[str, np.ndarray]) -> np.ndarray:
                return a["gold@10"] if key == "recall" else (a["gold@10"] - a["distractors@10"])
            if name == "bm25 (plain)" or arr is None or base is None:
                deltas.append("–")
                continue
            d = per(arr) - per(base)
            lo, hi = np.percentile(d[idx].mean(axis=1), [2.5, 97.5])
            deltas.append(f"{100 * d.mean():+.1f} [{100 * lo:+.1f}, {100 * hi:+.1f}]")
        lines.append(f"| {name} | {n} | {res['seconds']:.3f} | {fmt('passages@10', m.get('passages@10'))} | "
                     f"{fmt('passage_chars@10', m.get('passage_chars@10'))} | " + " | ".join(cells) + " | " + " | ".join(deltas) + " |")
    # per file: recall@10 / margin@10
    files = list(dict.fromkeys(b for b, _ in records))
    lines += ["", "| retriever | " + " | ".join(f"{f} (n={sum(1 for b, _ in records if b == f)}) recall@10 / margin@10" for f in files) + " |",
              "|---|" + "---:|" * len(files)]
    for name, res in results.items():
        cells = []
        for f in files:
            sel = [i for i, (b, _) in enumerate(records) if b == f]
            m = aggregate([shaped[i] for i in sel], [None] * len(sel), answers=False, retrieval=[res["rows"][i] for i in sel],
                          n_resamples=0, by_source=False)
            cells.append(f"{fmt('r', m.get('answer_recall@10'))} / {fmt('m', m.get('margin@10'))}")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--graph", required=True, help="a built graph directory")
    ap.add_argument("--bench", action="append", required=True, help="benchmark JSONL (repeatable): mcq, sd, rec with candidates, qa")
    ap.add_argument("--config", default=None, help="serving recipe (default: the built-in defaults, as `bencao eval` without --config)")
    ap.add_argument("--set", dest="overrides", action="append", default=[], help="key=value override of the recipe (repeatable)")
    ap.add_argument("--limit", type=int, default=None, help="only the first N records of each file that have an answer text")
    ap.add_argument("--n-resamples", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dense", action="store_true", help="add a dense-only row (needs the graph's dense snippet index)")
    ap.add_argument("--rows", default=",".join(ROW_SETS),
                    help="optional row sets besides bm25 (plain), dense only and bencao, comma-separated: channels (each channel off), "
                         "options (with options, coverage); 'none' for neither")
    ap.add_argument("--rerank", action="append", default=[], metavar="KEY=VALUE",
                    help="a retrieval.rerank setting (repeatable: backend=llm-yes-no model=NAME candidates=20 ...): adds a row of "
                         "plain BM25's `candidates` best passages ordered by that reranker")
    ap.add_argument("--bm25-cache", default=None, metavar="DIR",
                    help="keep the plain BM25 index here, keyed by the graph's store id and generation, and load it in later runs")
    ap.add_argument("--append", default=None, help="append the table, with this command, to a results file (bench/RESULTS.md)")
    ap.add_argument("--json", default=None, help="write the per-record rows here")
    args = ap.parse_args(argv)

    records = load_records(args.bench, args.limit)
    if not records:
        raise SystemExit("no record with an answer text (mcq, sd, rec with candidates, qa) in the files given")
    t0 = time.perf_counter()
    rows = tuple(x for x in args.rows.split(",") if x and x != "none")
    bad = [x for x in rows if x not in ROW_SETS]
    if bad:
        raise SystemExit(f"--rows: {', '.join(bad)} not among {', '.join(ROW_SETS)} (or none)")
    results = run_rows(args.graph, args.config, args.overrides, records, dense=args.dense, rows=rows,
                       rerank=rerank_config(args.rerank), bm25_cache=args.bm25_cache)
    text = table(results, records, args.n_resamples, args.seed)
    wall = time.perf_counter() - t0
    print(text)
    print(f"\n{len(records)} records, {wall:.0f} s", file=sys.stderr)
    if args.json:
        import json

        Path(args.json).write_text(json.dumps({"records": [f"{b}/{r['id']}" for b, r in records],
                                               "rows": {k: v["rows"] for k, v in results.items()}}, ensure_ascii=False), encoding="utf-8")
    if args.append:
        append_result(args.append, "Retrieval peers, question only", "retrieval_peers.py", argv, f"{wall:.0f} s, {len(records)} records",
                      "Values in % of records (mrr, passages and characters as they are), [95 % bootstrap interval]; "
                      "metrics as in docs/evaluation-metrics.md.\n\n" + text)
    return 0


def append_result(path: str, title: str, script: str, argv: list[str] | None, cost: str, text: str) -> None:
    """Append a run to a results file (bench/RESULTS.md): ``## title: `bench/script` (UTC time)``, the command as
    it was given, what it cost, then ``text``."""
    cmd = f"python bench/{script} " + " ".join(a if " " not in a else repr(a) for a in (argv if argv is not None else sys.argv[1:]))
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(f"\n## {title}: `bench/{script}` ({stamp})\n\nCommand ({cost}):\n\n    {cmd}\n\n{text}\n")


def paired_delta(d: np.ndarray, rng: np.random.Generator, n_resamples: int = 2000) -> tuple[float, float, float]:
    """Mean of a per-record difference and its 95 % percentile-bootstrap interval."""
    idx = rng.integers(0, len(d), size=(n_resamples, len(d)))
    lo, hi = np.percentile(d[idx].mean(axis=1), [2.5, 97.5])
    return float(d.mean()), float(lo), float(hi)


if __name__ == "__main__":
    raise SystemExit(main())
