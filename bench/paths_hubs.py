"""Top reasoning paths for a fixed list of questions: how many end at a hub, and how many tie (issue 27 item 3).

    HF_HUB_OFFLINE=1 .venv/bin/python bench/paths_hubs.py --graph graphs/sample [--config serving/default] [--top 5]

For each question: the linked entities, the top paths of the retriever's path stage (PathScore, the
confidence product, mean PageRank, the hub factor) and the degree of each path's end. The summary counts
paths whose end has more than ``retrieval.paths.hub_degree`` triples and paths whose score equals
another's among a question's top paths. The questions are fixed here (herbs and foods of the sample
graph), not drawn from a benchmark.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

QUESTIONS = [
    "山药有什么功效？",
    "大枣的性味是什么？",
    "生姜能治什么病？",
    "杏仁有什么作用？",
    "枸杞子的功效",
    "薏苡仁主治什么？",
    "What kind of food is almond?",
    "Is ginger a spice?",
]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--graph", required=True)
    ap.add_argument("--config", default="serving/default", help="serving recipe (name or path)")
    ap.add_argument("--set", dest="sets", action="append", default=[], help="key=value override of the recipe")
    ap.add_argument("--top", type=int, default=5)
    ap.add_argument("--json", help="write the per-question paths to this file")
    args = ap.parse_args(argv)

    from bencao.retrieval.search.paths import degree
    from bencao.retrieval.search.adjacency import adjacency_for
    from bencao.serving.config import load_serve_config
    from bencao.serving.pipeline import AnswerPipeline, Query

    cfg = load_serve_config(args.config, args.sets)
    hub = cfg.retrieval.paths.hub_degree
    pipe = AnswerPipeline(args.graph, cfg)
    adj = adjacency_for(pipe.retriever.g)
    t0 = time.perf_counter()
    rows, n_paths, n_hub_end, n_tied = [], 0, 0, 0
    for q in QUESTIONS:
        ev = pipe.run([Query(q)], answer=False)[0].evidence
        paths = (ev.paths if ev is not None else [])[: args.top]
        scores = [round(p.score, 6) for p in paths]
        out = []
        for p in paths:
            d = degree(adj, p.entities[-1])
            tied = scores.count(round(p.score, 6)) > 1
            n_paths += 1
            n_hub_end += d > hub
            n_tied += tied
            out.append({"path": p.text, "score": p.score, "confidence_product": p.confidence_product, "pagerank": p.pagerank,
                        "connects": p.connects, "end_degree": d, "tied": tied})
        rows.append({"question": q, "paths": out})
        print(f"\n{q}")
        for o in out:
            flag = (" HUB-END" if o["end_degree"] > hub else "") + (" tie" if o["tied"] else "")
            print(f"  {o['score']:.5f}  deg(end)={o['end_degree']:<5}{flag}  {o['path']}")
    print(f"\n{n_paths} top-{args.top} paths over {len(QUESTIONS)} questions: {n_hub_end} end at a hub (> {hub} triples), "
          f"{n_tied} tie with another path's score ({time.perf_counter() - t0:.1f} s)")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(rows, fh, ensure_ascii=False, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
