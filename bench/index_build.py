"""Time and peak memory of a full index build (every kind, from scratch) on a copy of a graph.

    python bench/index_build.py --graph out/corpus/graph --work out/bench/ix --embedder default
    python bench/index_build.py --graph out/corpus/graph --work out/bench/ix --embedder standin

``default``: the shipped index defaults (BM25 over entities, triples, snippets, sections; the packaged
MiniLM embeds English items of entities, snippets and sections). ``standin``: every item of those
kinds embedded (``languages: ["*"]``) by the hashing stand-in of ``bench/standin.py`` (~10^4-10^5
texts/s, the speed class of a static Chinese embedder): the dense path at full size. The graph is
copied first (its old indexes and caches removed), the per-user embedding cache is a fresh empty
directory, so every vector is computed. One JSON line: wall and CPU seconds (the machine is
shared: CPU seconds compare across loads), peak RSS (MiB), the summary.

Runs the code it is imported with, so the same script measures a baseline commit (see
bench/RESULTS.md for how).
"""

from __future__ import annotations

import argparse
import json
import logging
import resource
import shutil
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--graph", required=True)
    ap.add_argument("--work", required=True, help="scratch directory (the copy of the graph goes here)")
    ap.add_argument("--embedder", choices=["default", "standin"], default="default")
    args = ap.parse_args()
    import os

    work = Path(args.work)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    g_dir = work / "graph"
    shutil.copytree(args.graph, g_dir, ignore=shutil.ignore_patterns("index", "lexical", "cache", ".index.lock"))
    os.environ["BENCAO_CACHE_DIR"] = str(work / "usercache")
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(message)s")
    sys.path.insert(0, str(BENCH))
    from bencao.retrieval.graph.store import Graph
    from bencao.retrieval.index import update_indexes

    cfg: dict = {"shared_cache": False}
    if args.embedder == "standin":
        import standin  # noqa: F401  registers the 'hashing' backend

        cfg.update({"embedder": {"backend": "hashing", "model": standin.STANDIN_MODEL, "languages": ["*"], "batch_size": 4096},
                    "embed_batch": 4096})
    m = json.loads((g_dir / "manifest.json").read_text(encoding="utf-8"))
    m.pop("indexes", None)
    (g_dir / "manifest.json").write_text(json.dumps(m), encoding="utf-8")
    t = time.perf_counter()
    ru0 = resource.getrusage(resource.RUSAGE_SELF)
    cpu0 = ru0.ru_utime + ru0.ru_stime
    with Graph.open(g_dir) as g:
        summary = update_indexes(g, cfg, force=True)
    secs = time.perf_counter() - t
    ru = resource.getrusage(resource.RUSAGE_SELF)
    print(json.dumps({"embedder": args.embedder, "seconds": round(secs, 1), "cpu_seconds": round(ru.ru_utime + ru.ru_stime - cpu0, 1),
                      "peak_rss_mib": round(ru.ru_maxrss / 1024), "load": open("/proc/loadavg").read().split()[:3],
                      "summary": summary}, ensure_ascii=False))


if __name__ == "__main__":
    main()
