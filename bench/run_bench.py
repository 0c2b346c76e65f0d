"""Scale and speed figures on a synthetic TCM-DiffRAG-size graph, appended to bench/RESULTS.md.

    .venv/bin/python bench/run_bench.py --scale 0.01            # `make bench`: 1 %, a few minutes
    .venv/bin/python bench/run_bench.py --scale 1.0 --runs 1    # full size (434 k snippets, ~3.5 M triples)

Figures, each with a baseline measured in the same run:

1. store build (``bencao graph build`` of the generated recipe, in a child process): seconds and
   peak RSS; baseline = SQLite alone copying the finished tables into an empty store with the
   same schema (``INSERT … SELECT``), the floor of any loader;
2. encode path: bencao's ``embed_with_cache`` (hash, cache, batches) vs ``SentenceTransformer.encode``
   called directly on the same texts with the same model object (the packaged all-MiniLM-L6-v2);
   the full index build (lexical + dense + FAISS) uses the stand-in embedder of ``standin.py``;
3. LLM-free query latency over ``queries.jsonl`` (linking + micro + macro + paths + PageRank +
   therapy), p50/p95 of per-query medians, with a per-stage breakdown;
4. PageRank on each query's path subgraph: bencao (igraph) vs ``networkx.pagerank`` on the same
   weighted edges, and whether the PathScore ranking is identical;
5. approximate (HNSW, IVF) vs exact (flat) dense search on real MiniLM vectors of the graph's
   English triple texts: recall@10 and speed-up.

Timings are medians over ``--runs``; the machine, its load and the command go into the results.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
sys.path.insert(0, str(BENCH))
for _v in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE"):
    os.environ.setdefault(_v, "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

STANDIN_OVERRIDES = ["index.embedder.backend=hashing", "index.embedder.model=char-ngram-hash-384",
                     "index.embedder.languages=[\"*\"]", "index.shared_cache=false", "index.embed_batch=4096",
                     "index.embedder.batch_size=4096"]


def _rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def _pct(xs: list[float], p: float) -> float:
    if not xs:
        return float("nan")
    s = sorted(xs)
    k = (len(s) - 1) * p
    lo, hi = int(k), min(int(k) + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def _child(args: list[str]) -> dict[str, Any]:
    """Run a sub-step of this script in a fresh process (own peak RSS); returns its JSON line."""
    proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), *args], capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"bench step {args[0]} failed:\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


# --------------------------------------------------------------------------- child steps


def step_build(recipe: str, graph: str) -> dict[str, Any]:
    from bencao.retrieval.build import build_graph, load_build_config

    cfg, root = load_build_config(recipe)
    t0 = time.perf_counter()
    res = build_graph(cfg, root, graph)
    return {"seconds": time.perf_counter() - t0, "rss_mib": _rss_mib(), "stats": {k: res["stats"][k] for k in
            ("documents", "sections", "snippets", "entities", "aliases", "triples")},
            "per_format": _per_format(res["documents"])}


def _per_format(docs: list[dict[str, Any]]) -> dict[str, float]:
    """Seconds per kind of source: KB entity files, books, KB relation files."""
    out: dict[str, float] = {}
    for d in docs:
        key = d["format"] + ("" if d["format"] != "kb-csv" else ":relations" if d["source"].startswith("relations") else ":entities")
        out[key] = round(out.get(key, 0.0) + d["seconds"], 2)
    return out


def step_floor(graph: str, scratch: str) -> dict[str, Any]:
    """SQLite alone: copy every table of the finished store into an empty one with the same schema."""
    from bencao.retrieval.graph.store import Graph

    shutil.rmtree(scratch, ignore_errors=True)
    g = Graph.create(scratch)
    g.conn.execute("DELETE FROM meta")
    g.conn.execute("PRAGMA foreign_keys=OFF")  # rows are copied table by table in dependency order anyway
    src = str(Path(graph) / "graph.sqlite")
    g.conn.execute("ATTACH DATABASE ? AS src", (src,))
    tables = ["meta", "documents", "sections", "snippets", "entities", "entity_sources", "aliases", "relations", "triples",
              "triple_sources", "links"]
    # warm the page cache for the source so the floor measures writing, not a cold disk
    for t in tables:
        g.conn.execute(f"SELECT COUNT(*) FROM src.{t}").fetchone()
    t0 = time.perf_counter()
    g.conn.execute("BEGIN")
    for t in tables:
        g.conn.execute(f"INSERT INTO main.{t} SELECT * FROM src.{t}")
    g.conn.execute("COMMIT")
    secs = time.perf_counter() - t0
    g.conn.execute("DETACH DATABASE src")
    g.close()
    shutil.rmtree(scratch, ignore_errors=True)
    return {"seconds": secs, "rss_mib": _rss_mib()}


def step_index(graph: str) -> dict[str, Any]:
    import logging

    import standin  # noqa: F401  registers the 'hashing' backend
    from bencao.retrieval.graph.store import Graph
    from bencao.retrieval.index import update_indexes
    from bencao.retrieval.search.config import load_retrieval_config

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", stream=sys.stderr)  # per-kind progress
    cfg = load_retrieval_config(None, STANDIN_OVERRIDES)
    g = Graph.open(graph)
    t0 = time.perf_counter()
    summary = update_indexes(g, cfg.index, force=True)
    secs = time.perf_counter() - t0
    g.close()
    return {"seconds": secs, "rss_mib": _rss_mib(), "summary": summary}


def step_encode(graph: str, n: int, runs: int, n_queries: int, out_npy: str) -> dict[str, Any]:
    """MiniLM: bencao's encode path vs SentenceTransformer.encode on the same English triple texts."""
    import tempfile

    import numpy as np

    from bencao.retrieval.graph.store import Graph
    from bencao.retrieval.index.embedder import EmbedderConfig, EmbeddingCache, embed_with_cache, get_embedder

    g = Graph.open(graph, read_only=True)
    texts = english_triple_texts(g, n + n_queries)
    g.close()
    docs, queries = texts[:n], texts[n:]
    emb = get_embedder(EmbedderConfig())  # packaged all-MiniLM-L6-v2, batch 64
    emb.encode(docs[:64])  # warm-up
    # interleaved blocks (ours / direct, the order alternating) so both see the same machine load
    block = max(1000, len(docs) // 20)
    ours, direct = [], []
    vecs = None
    for _ in range(runs):
        t_ours = t_direct = 0.0
        parts_ours, parts_ref = [], []
        with tempfile.TemporaryDirectory() as tmp:
            cache = EmbeddingCache(Path(tmp) / "cache.sqlite", emb.dim)
            for j, i in enumerate(range(0, len(docs), block)):
                chunk = docs[i : i + block]
                for who in (("ours", "direct") if j % 2 == 0 else ("direct", "ours")):
                    t0 = time.perf_counter()
                    if who == "ours":
                        v, _n_new = embed_with_cache(emb, cache, chunk, batch=256)
                        t_ours += time.perf_counter() - t0
                        parts_ours.append(v)
                    else:
                        v = emb.model.encode(chunk, batch_size=emb.batch_size, normalize_embeddings=True, convert_to_numpy=True,
                                             show_progress_bar=False)
                        t_direct += time.perf_counter() - t0
                        parts_ref.append(v)
            cache.close()
        ours.append(t_ours)
        direct.append(t_direct)
        vecs, ref = np.concatenate(parts_ours), np.concatenate(parts_ref)
    assert vecs is not None
    max_diff = float(np.abs(vecs - ref).max())
    qv = emb.encode(queries)
    np.save(out_npy, vecs)
    np.save(out_npy.replace(".npy", ".queries.npy"), qv)
    single = []
    for q in queries[:50]:
        t0 = time.perf_counter()
        emb.encode([q], query=True)
        single.append(time.perf_counter() - t0)
    return {"n": len(docs), "block": block, "ours_s": ours, "direct_s": direct, "max_abs_diff": max_diff, "query_encode_ms_p50": 1000 * _median(single),
            "texts_per_s": len(docs) / _median(direct), "example": docs[0], "rss_mib": _rss_mib()}


def english_triple_texts(g, n: int) -> list[str]:
    """'head relation tail' in English (the entities' English synonyms), distinct, in a fixed order."""
    import re

    en: dict[str, str] = {}
    ascii_re = re.compile(r"^[\x20-\x7e]+$")
    for _norm, eid, alias, kind in g.iter_aliases():
        if kind == "synonym" and eid not in en and ascii_re.match(alias):
            en[eid] = alias
    out: list[str] = []
    seen: set[str] = set()
    for h, r, t in g.conn.execute("SELECT head_id, relation, tail_id FROM triples ORDER BY id"):
        if h in en and t in en:
            s = f"{en[h]} {r.replace('_', ' ')} {en[t]}"
            if s not in seen:
                seen.add(s)
                out.append(s)
                if len(out) >= n:
                    break
    return out


def step_ann(vec_npy: str, runs: int) -> dict[str, Any]:
    import numpy as np

    from bencao.retrieval.index.dense import DenseIndex, DenseParams

    x = np.load(vec_npy)
    q = np.load(vec_npy.replace(".npy", ".queries.npy"))
    ids = [str(i) for i in range(len(x))]
    out: dict[str, Any] = {"n": int(len(x)), "queries": int(len(q))}
    flat = DenseIndex.build(x, ids, DenseParams(exact_max=len(x) + 1))
    truth = [set(r for r, _ in hits) for hits in flat.search(q, 10)]

    def per_query(index: DenseIndex) -> float:
        times = []
        for _ in range(runs):
            t0 = time.perf_counter()
            for row in q:
                index.search(row[None, :], 10)
            times.append((time.perf_counter() - t0) / len(q))
        return _median(times)

    t_flat = per_query(flat)
    out["flat_ms"] = 1000 * t_flat
    for ann in ("hnsw", "ivf"):
        t0 = time.perf_counter()
        idx = DenseIndex.build(x, ids, DenseParams(exact_max=0, ann=ann))
        build = time.perf_counter() - t0
        got = idx.search(q, 10)
        recall = sum(len(truth[i] & {r for r, _ in got[i]}) for i in range(len(q))) / (10 * len(q))
        t = per_query(idx)
        out[ann] = {"build_s": build, "ms": 1000 * t, "recall@10": recall, "speedup": t_flat / t if t else float("nan")}
    return out


def step_query(graph: str, queries_path: str, runs: int, limit: int = 0) -> dict[str, Any]:
    """Per-query latency (median of ``runs`` passes) with per-stage times; PageRank vs networkx."""
    import standin  # noqa: F401
    from bencao.io import iter_jsonl
    from bencao.retrieval.graph.store import Graph
    from bencao.retrieval.search import retriever as rmod
    from bencao.retrieval.search.config import load_retrieval_config

    questions = [rec["question"] for _, rec in iter_jsonl(queries_path, required=("question",))]
    questions = questions[:limit] if limit else questions
    stage_t: dict[str, float] = {}

    def timed(name: str, fn: Callable) -> Callable:
        def wrap(*a, **k):
            t0 = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                stage_t[name] = stage_t.get(name, 0.0) + time.perf_counter() - t0
        return wrap

    for name in ("micro_retrieve", "macro_retrieve", "top_paths", "therapy_retrieve"):
        setattr(rmod, name, timed(name, getattr(rmod, name)))
    t0 = time.perf_counter()
    g = Graph.open(graph)
    r = rmod.Retriever(g, load_retrieval_config(None, STANDIN_OVERRIDES))
    r.link_entities = timed("link_entities", r.link_entities)  # type: ignore[method-assign]
    first = r.retrieve(questions[0])
    cold = time.perf_counter() - t0
    lat: dict[int, list[float]] = {i: [] for i in range(len(questions))}
    stages: dict[str, list[float]] = {}
    n_paths, n_linked = [], []
    for _ in range(runs):
        for i, q in enumerate(questions):
            stage_t.clear()
            t0 = time.perf_counter()
            ev = r.retrieve(q)
            lat[i].append(time.perf_counter() - t0)
            for k, v in stage_t.items():
                stages.setdefault(k, []).append(v)
            if _ == 0:
                n_paths.append(len(ev.paths))
                n_linked.append(len(ev.entities))
    per_q = [_median(v) * 1000 for v in lat.values()]
    pr = pagerank_vs_networkx(g, r, questions)
    return {"queries": len(questions), "cold_s": cold, "first_linked": len(first.entities), "p50_ms": _pct(per_q, 0.5),
            "p95_ms": _pct(per_q, 0.95), "max_ms": max(per_q), "stages_p50_ms": {k: 1000 * _median(v) for k, v in stages.items()},
            "stages_p95_ms": {k: 1000 * _pct(v, 0.95) for k, v in stages.items()},
            "mean_paths": statistics.mean(n_paths), "mean_linked": statistics.mean(n_linked), "pagerank": pr, "rss_mib": _rss_mib()}


def pagerank_vs_networkx(g, r, questions: list[str]) -> dict[str, Any]:
    """Same subgraphs (each query's path entities + neighbours, as the path stage builds them):
    bencao's PageRank (igraph PRPACK on node numbers) vs ``networkx.pagerank``, both given the same
    merged weighted edges (one per ordered pair, mean confidence; what the path stage reads from its
    cached adjacency) and each building its own graph inside the timing."""
    import networkx as nx

    from bencao.retrieval.search.adjacency import adjacency_for
    from bencao.retrieval.search.pagerank import merge_parallel, pagerank_arrays, path_score
    from bencao.retrieval.search.paths import enumerate_paths, graph_patterns

    p = r.cfg.paths
    adj = adjacency_for(g)
    ours, theirs, sizes, same_rank, max_diff = [], [], [], 0, 0.0
    n = 0
    for q in questions:
        linked = [e.id for e in r.link_entities(q, [])][:8]
        if not linked:
            continue
        paths = enumerate_paths(g, linked, graph_patterns(g, p.max_hops, p.n_patterns), max_hops=p.max_hops, max_paths=p.max_paths,
                                fanout=p.neighbour_limit)
        if not paths:
            continue
        sub = adj.neighbourhood({e for x in paths for e in x.entities}, p.neighbour_limit)
        # the same input for both: the subgraph's edges, parallel relations merged to their mean
        h, t, w = adj.merged_edges_among(sub)
        names = [adj.ids[i] for i in sub.tolist()]
        hl, tl, wl = h.tolist(), t.tolist(), w.tolist()
        t0 = time.perf_counter()
        scores = pagerank_arrays(len(sub), h, t, w, damping=p.damping, merged=True)
        pr = dict(zip(names, scores.tolist()))
        ours.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        G = nx.DiGraph()
        G.add_nodes_from(range(len(names)))
        G.add_weighted_edges_from(zip(hl, tl, wl))
        prx_local = nx.pagerank(G, alpha=p.damping, weight="weight", tol=1e-10, max_iter=1000)
        prx = {names[i]: v for i, v in prx_local.items()}
        theirs.append(time.perf_counter() - t0)
        # bencao's merge of the raw edges agrees with networkx-side merging of the same triples
        raw_h, raw_t, raw_w = adj.edges_among(sub)
        merged = merge_parallel((adj.ids[a], adj.ids[b], c) for a, b, c in zip(raw_h.tolist(), raw_t.tolist(), raw_w.tolist()))
        assert len(merged) == len(hl) and all(abs(merged[(names[a], names[b])] - x) < 1e-12 for a, b, x in zip(hl, tl, wl))
        sizes.append((len(sub), len(hl)))
        max_diff = max(max_diff, max(abs(pr[k] - prx[k]) for k in pr))
        rank_a = sorted(range(len(paths)), key=lambda i: -path_score(paths[i].confidences, paths[i].entities, pr)[0])[: p.top_k]
        rank_b = sorted(range(len(paths)), key=lambda i: -path_score(paths[i].confidences, paths[i].entities, prx)[0])[: p.top_k]
        same_rank += rank_a == rank_b
        n += 1
    if not n:
        return {"subgraphs": 0}
    return {"subgraphs": n, "nodes_p50": _median([s[0] for s in sizes]), "edges_p50": _median([s[1] for s in sizes]),
            "bencao_ms_p50": 1000 * _median(ours), "networkx_ms_p50": 1000 * _median(theirs),
            "speedup": _median(theirs) / _median(ours), "same_top_k": same_rank, "max_abs_diff": max_diff}


# --------------------------------------------------------------------------- orchestration


def machine() -> str:
    try:
        mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError):
        mem = float("nan")
    return f"{platform.machine()} {os.cpu_count()} cores, {mem:.0f} GiB, Python {platform.python_version()}"


def load() -> str:
    try:
        return "load avg " + " / ".join(f"{x:.1f}" for x in os.getloadavg())
    except OSError:
        return "load n/a"


def run(args: argparse.Namespace) -> dict[str, Any]:
    from synth import generate

    work = Path(args.work).resolve()
    tag = f"{args.scale:g}"
    syn = work / f"synth-{tag}"
    graph = work / f"graph-{tag}"
    res: dict[str, Any] = {"scale": args.scale, "machine": machine(), "load_start": load(), "runs": args.runs, "build_runs": args.build_runs,
                           "command": " ".join(["python bench/run_bench.py", *sys.argv[1:]]),
                           "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    t0 = time.perf_counter()
    if not (syn / "synth.json").exists() or args.regenerate:
        res["synth"] = generate(syn, args.scale, args.seed)
    else:
        res["synth"] = json.loads((syn / "synth.json").read_text(encoding="utf-8"))
    log = lambda msg: print(f"[{time.perf_counter() - t0:7.1f}s] {msg}", file=sys.stderr, flush=True)  # noqa: E731
    log(f"inputs ready in {syn}")
    if not args.skip_build or not (graph / "graph.sqlite").exists():
        builds, floors = [], []
        for i in range(args.build_runs or args.runs):
            builds.append(_child(["_build", str(syn / "recipe.yaml"), str(graph)]))
            log(f"build {i + 1}: {builds[-1]['seconds']:.1f}s, {builds[-1]['rss_mib']:.0f} MiB")
            floors.append(_child(["_floor", str(graph), str(work / f"floor-{tag}")]))
        res["build"] = {"seconds": [b["seconds"] for b in builds], "rss_mib": max(b["rss_mib"] for b in builds),
                        "stats": builds[-1]["stats"], "per_format": builds[-1]["per_format"],
                        "floor_seconds": [f["seconds"] for f in floors]}
    if not args.skip_index:
        idx = []
        for i in range(args.build_runs or args.runs):
            idx.append(_child(["_index", str(graph)]))
            log(f"index {i + 1}: {idx[-1]['seconds']:.1f}s")
        res["index"] = {"seconds": [x["seconds"] for x in idx], "rss_mib": max(x["rss_mib"] for x in idx), "summary": idx[-1]["summary"]}
    n_enc = args.minilm_n or min(100_000, max(2000, int(200_000 * args.scale)))
    if not args.skip_encode:
        npy = str(work / f"minilm-{tag}.npy")
        res["encode"] = _child(["_encode", str(graph), str(n_enc), str(args.encode_runs or (3 if n_enc <= 20_000 else 1)), "500", npy])
        log(f"encode: ours {res['encode']['ours_s']} direct {res['encode']['direct_s']}")
        res["ann"] = _child(["_ann", npy, str(args.runs)])
        log("ann done")
    if not args.skip_query:
        res["query"] = _child(["_query", str(graph), str(syn / "queries.jsonl"), str(args.runs)])
        log(f"query p50 {res['query']['p50_ms']:.1f} ms p95 {res['query']['p95_ms']:.1f} ms")
    res["load_end"] = load()
    res["seconds"] = time.perf_counter() - t0
    (work / f"results-{tag}.json").write_text(json.dumps(res, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
    if args.results:
        append_markdown(Path(args.results), res)
    return res


def _fmt_s(xs: list[float]) -> str:
    return f"{_median(xs):.1f} s" + (f" (runs: {', '.join(f'{x:.1f}' for x in xs)})" if len(xs) > 1 else "")


def append_markdown(path: Path, r: dict[str, Any]) -> None:
    lines = [f"\n## Scale and speed — scale {r['scale']:g} ({r['date']})\n",
             f"Command: `{r['command']}` · machine: {r['machine']} · {r['load_start']} at start, {r['load_end']} at end "
             f"(shared machine) · medians over {r['runs']} run(s) (builds: {r.get('build_runs') or r['runs']}) · total {r['seconds'] / 60:.1f} min.\n"]
    s = r["synth"]
    lines.append(f"Synthetic inputs (bench/synth.py, seed {s['seed']}): {s['entities']:,} KB entities, {s['sections']:,} sections in "
                 f"{s['books']} books (materia-medica entries + commentary), {s['kb_relation_rows']:,} KB relation rows.\n")
    lines.append("| figure | bencao | baseline (same run) | ratio | goal (full scale) |\n|---|---|---|---|---|")
    if "build" in r:
        b = r["build"]
        st = b["stats"]
        lines.append(f"| store build ({st['snippets']:,} snippets, {st['triples']:,} triples, {st['entities']:,} entities) | "
                     f"{_fmt_s(b['seconds'])}, peak RSS {b['rss_mib']:.0f} MiB | SQLite `INSERT…SELECT` of the same tables: "
                     f"{_fmt_s(b['floor_seconds'])} | {_median(b['seconds']) / _median(b['floor_seconds']):.1f}× | ≤ 10 min, ≤ 6 GiB |")
    if "index" in r:
        x = r["index"]
        dense = ", ".join(f"{k} {v['n']:,} {v['type']}" for k, v in x["summary"]["dense"].items())
        lines.append(f"| index build, stand-in embedder (lexical: {sum(x['summary']['lexical'].values()):,} items; dense: {dense}) | "
                     f"{_fmt_s(x['seconds'])}, peak RSS {x['rss_mib']:.0f} MiB | — | — | — |")
    if "encode" in r:
        e = r["encode"]
        lines.append(f"| encode path, MiniLM, {e['n']:,} English triple texts | {_fmt_s(e['ours_s'])} | "
                     f"`SentenceTransformer.encode`: {_fmt_s(e['direct_s'])} ({e['texts_per_s']:.0f} texts/s) | "
                     f"{_median(e['ours_s']) / _median(e['direct_s']):.3f}× (max |Δ| {e['max_abs_diff']:.1e}) | overhead ≤ 10 % |")
    if "ann" in r:
        a = r["ann"]
        for ann in ("hnsw", "ivf"):
            lines.append(f"| {ann} vs exact, {a['n']:,} MiniLM vectors, {a['queries']} queries | {a[ann]['ms']:.2f} ms/query, "
                         f"recall@10 {a[ann]['recall@10']:.3f}, build {a[ann]['build_s']:.1f} s | flat: {a['flat_ms']:.2f} ms/query | "
                         f"{a[ann]['speedup']:.1f}× faster | — |")
    q = r.get("query")
    if q is None:
        if "build" in r:
            lines.append("\nBuild seconds by source: " + ", ".join(f"{k} {v:.1f}" for k, v in r["build"]["per_format"].items()) + ".")
        _write(path, lines)
        return
    lines.append(f"| query latency, {q['queries']} LLM-free queries (stand-in query encoder) | p50 {q['p50_ms']:.1f} ms, p95 "
                 f"{q['p95_ms']:.1f} ms (max {q['max_ms']:.0f}); cold open + first query {q['cold_s']:.1f} s | — | — | p50 ≤ 50 ms, p95 ≤ 150 ms |")
    pr = q["pagerank"]
    if pr.get("subgraphs"):
        lines.append(f"| PageRank on {pr['subgraphs']} query subgraphs (median {pr['nodes_p50']:.0f} nodes, {pr['edges_p50']:.0f} edges) | "
                     f"{pr['bencao_ms_p50']:.2f} ms | `networkx.pagerank`: {pr['networkx_ms_p50']:.2f} ms | {pr['speedup']:.1f}× faster; "
                     f"same top-k {pr['same_top_k']}/{pr['subgraphs']}, max |ΔPR| {pr['max_abs_diff']:.1e} | ≥ 10× |")
    lines.append("\nQuery stages, p50 / p95 ms: " + ", ".join(f"{k} {v:.1f} / {q['stages_p95_ms'][k]:.1f}" for k, v in q["stages_p50_ms"].items())
                 + f"; mean {q['mean_linked']:.1f} linked entities and {q['mean_paths']:.1f} paths per query.")
    if "encode" in r:
        lines.append(f"One MiniLM query encode: {r['encode']['query_encode_ms_p50']:.1f} ms (p50), to add to the latency for a real query encoder.")
    if "build" in r:
        lines.append("Build seconds by source: " + ", ".join(f"{k} {v:.1f}" for k, v in r["build"]["per_format"].items()) + ".")
    _write(path, lines)


def _write(path: Path, lines: list[str]) -> None:
    """Append to the results file (created with a title when missing); other sections are kept."""
    path.parent.mkdir(parents=True, exist_ok=True)
    new = not path.exists() or path.stat().st_size == 0
    with open(path, "a", encoding="utf-8") as f:
        if new:
            f.write("# Benchmark results\n")
        f.write("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0].startswith("_"):
        step, rest = argv[0], argv[1:]
        fn = {"_build": lambda: step_build(*rest), "_floor": lambda: step_floor(*rest), "_index": lambda: step_index(*rest),
              "_encode": lambda: step_encode(rest[0], int(rest[1]), int(rest[2]), int(rest[3]), rest[4]),
              "_ann": lambda: step_ann(rest[0], int(rest[1])), "_query": lambda: step_query(rest[0], rest[1], int(rest[2]))}[step]
        print(json.dumps(fn(), ensure_ascii=False, default=str))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scale", type=float, default=0.01, help="1.0 = TCM-DiffRAG size; 0.01 = 1%% (make bench)")
    ap.add_argument("--runs", type=int, default=3, help="repetitions of each timed step (medians are reported)")
    ap.add_argument("--build-runs", type=int, default=0, help="repetitions of the store and index builds (0: --runs)")
    ap.add_argument("--seed", type=int, default=8)
    ap.add_argument("--work", default=str(REPO / "out" / "bench"), help="where inputs, graphs and JSON results go")
    ap.add_argument("--results", default=str(BENCH / "RESULTS.md"), help="markdown file the figures are appended to ('' = none)")
    ap.add_argument("--minilm-n", type=int, default=0, help="texts for the MiniLM encode/ANN figures (0: 200k×scale, 2k..100k)")
    ap.add_argument("--encode-runs", type=int, default=0, help="MiniLM encode repetitions (0: 3 up to 20k texts, else 1)")
    ap.add_argument("--regenerate", action="store_true", help="rewrite the synthetic inputs even when present")
    ap.add_argument("--skip-build", action="store_true", help="reuse the graph from an earlier run when present")
    ap.add_argument("--skip-index", action="store_true", help="reuse the indexes from an earlier run")
    ap.add_argument("--skip-encode", action="store_true", help="no MiniLM encode / ANN figures")
    ap.add_argument("--skip-query", action="store_true", help="no query latency / PageRank figures")
    args = ap.parse_args(argv)
    res = run(args)
    print(json.dumps({k: res[k] for k in ("scale", "seconds")}, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
