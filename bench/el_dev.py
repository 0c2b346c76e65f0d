"""Entity-linking figure: strict Acc@1, abstention and retry rates on an `el` JSONL file.

    .venv/bin/python bench/el_dev.py --graph graphs/sample \
        --data data/dev/cafeteria_fcd_el.jsonl [--no-index] [--set linking.tau=0.6]

A hit is a top-1 ``chosen_id`` in ``gold_ids``; an abstention counts as a miss for Acc@1.
Acc@1 is also reported on two fixed halves of the file (``half0``/``half1``: SHA-1 of the mention,
modulo 2), so a rule developed on one half can be checked on the other.
With ``--build-foodon`` a graph holding only the bundled FoodOn slice is built (and indexed) at
``--graph`` first when it does not exist.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--graph", required=True)
    ap.add_argument("--data", default=str(Path(__file__).resolve().parents[2] / "shared/data/dev/cafeteria_fcd_el.jsonl"))
    ap.add_argument("--config", default=None, help="retrieval YAML (defaults: configs/retrieval/default.yaml)")
    ap.add_argument("--set", action="append", default=[], help="config override key=value")
    ap.add_argument("--no-index", action="store_true", help="alias tables only (no BM25/dense candidates)")
    ap.add_argument("--build-foodon", action="store_true", help="build a FoodOn-only graph at --graph when missing")
    ap.add_argument("--errors", action="store_true", help="print the misses")
    ap.add_argument("--context", default=None, help="context passed with every mention that has no `context` field of its own")
    args = ap.parse_args(argv)

    from bencao.io import iter_jsonl
    from bencao.retrieval.graph.store import Graph
    from bencao.retrieval.linking import EntityLinker
    from bencao.retrieval.search.config import load_retrieval_config

    graph_dir = Path(args.graph)
    repo = Path(__file__).resolve().parents[1]
    cfg = load_retrieval_config(args.config, args.set)
    if args.build_foodon and not (graph_dir / "graph.sqlite").exists():
        from bencao.retrieval.index import update_indexes
        from bencao.retrieval.ingest.registry import ingest_file

        g = Graph.create(graph_dir)
        ingest_file(g, "foodon-jsonl", repo / "data/sample/foodon/foodon_terms.jsonl.gz")
        update_indexes(g, cfg.index)
    g = Graph.open(graph_dir)
    indexes = None
    if not args.no_index:
        from bencao.retrieval.index import open_indexes

        indexes = open_indexes(g, cfg.index)
    linker = EntityLinker(g, cfg.linking, indexes=indexes)
    n = hits = abst = retr = 0
    halves = {0: [0, 0], 1: [0, 0]}
    t0 = time.time()
    for _, rec in iter_jsonl(args.data, required=("mention", "gold_ids")):
        r = linker.link(rec["mention"], context=rec.get("context") or args.context)
        n += 1
        ok = r.chosen_id in set(rec["gold_ids"])
        hits += ok
        half = halves[int(hashlib.sha1(rec["mention"].encode("utf-8")).hexdigest(), 16) % 2]
        half[0] += ok
        half[1] += 1
        abst += r.abstained
        retr += r.retried
        if args.errors and not ok:
            print(f"  miss {rec['mention']!r}: {r.chosen_id} {r.label!r} conf={r.confidence} ({r.rationale})")
    dt = time.time() - t0
    out = {"data": str(args.data), "n": n, "acc@1": round(hits / n, 4),
           **{f"acc@1_half{h}": round(k / max(m, 1), 4) for h, (k, m) in halves.items()},
           "abstention": round(abst / n, 4), "retry": round(retr / n, 4),
           "index": not args.no_index, "context": args.context, "tau": cfg.linking.tau, "ms_per_mention": round(1000 * dt / max(n, 1), 1)}
    print(json.dumps(out, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
