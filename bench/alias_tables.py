"""Opening the entity linker's alias tables of a graph in a fresh process: seconds and memory.

    python bench/alias_tables.py --graph out/corpus/graph                # as the code decides (in memory below 50 k aliases)
    python bench/alias_tables.py --graph out/corpus/graph --disk-min 0   # force the on-disk key maps: first run builds, next opens

Runs the code it is imported with, so the same script measures a baseline commit. One JSON line:
aliases, seconds to the tables, RSS growth (MiB), where the key maps live, and the links of a few
mentions (to check that both ways link alike).
"""

from __future__ import annotations

import argparse
import json
import time

MENTIONS = ["山药", "人参", "大枣", "甘草", "当归", "黄芪", "apple", "honey", "ginger", "rice"]


def _rss_mib() -> float:
    for line in open("/proc/self/status", encoding="ascii"):
        if line.startswith("VmRSS"):
            return int(line.split()[1]) / 1024
    return float("nan")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--graph", required=True)
    ap.add_argument("--disk-min", type=int, default=None, help="override DISK_MIN_ALIASES (new code only)")
    args = ap.parse_args()
    import bencao.retrieval.linking as linking
    from bencao.retrieval.graph.store import Graph

    if args.disk_min is not None:
        linking.DISK_MIN_ALIASES = args.disk_min
    g = Graph.open(args.graph, read_only=args.disk_min is None)
    n = g.conn.execute("SELECT COUNT(*) FROM aliases").fetchone()[0]
    r0 = _rss_mib()
    t = time.perf_counter()
    linker = linking.EntityLinker(g, linking.LinkingConfig())
    secs = time.perf_counter() - t
    grow = _rss_mib() - r0
    links = {m: linker.link(m).chosen_id for m in MENTIONS}
    print(json.dumps({"aliases": n, "seconds": round(secs, 2), "rss_growth_mib": round(grow),
                      "maps": type(linker.tables.base).__name__, "links": links}, ensure_ascii=False))


if __name__ == "__main__":
    main()
