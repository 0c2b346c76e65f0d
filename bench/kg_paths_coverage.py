"""Coverage and path quality of the LLM-free kg-paths CoT teacher on benchmark files, hubs allowed vs excluded.

    .venv/bin/python bench/kg_paths_coverage.py --graph graphs/sample \
        --bench data/dev/tcmbench_mcq.jsonl --bench data/dev/tcm_best4sdt_sd.jsonl [--results bench/RESULTS.md]

Per file and setting (``hubs allowed``: ``hub_degree=0 hub_relation_fanin=0``, the teacher before hubs
were excluded; ``hubs excluded``: the shipped defaults), in one run on the same linker:
- ``linked``: records whose gold answer and question both link to graph entities (alias table);
- ``answered``: records the teacher writes (a path of ≤ ``max_hops`` joins them);
- ``hub middle``: answered records with a path through a hub (an entity of more than 100 triples, or a
  value of a hub relation: has_flavour, has_nature, listed_in ... — the definition of the shipped defaults);
- ``both named``: answered records whose paths name an entity written in the question text and an
  entity written in the gold answer text (names compared after ``norm_key``);
- ``hops``: mean length of the kept paths.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path


def measure(items, graph, linker, settings, hub_ref):
    from bencao.data_gen.kg_teacher import link_and_find_paths
    from bencao.data_gen.runner import Skip
    from bencao.text import norm_key

    finder = settings.finder(graph)
    c = {"n": len(items), "linked": 0, "answered": 0, "hub_middle": 0, "both_named": 0, "paths": 0, "hops": 0, "skips": {}}
    for it in items:
        if it.problem:
            c["skips"]["bad_record"] = c["skips"].get("bad_record", 0) + 1
            continue
        lp = link_and_find_paths(it, linker, finder, settings)
        if isinstance(lp, Skip):
            c["skips"][lp.reason] = c["skips"].get(lp.reason, 0) + 1
            if lp.reason == "no_path":
                c["linked"] += 1
            continue
        c["linked"] += 1
        c["answered"] += 1
        paths = lp.paths
        ids = {x for p in paths for s in p for x in (s.head_id, s.tail_id)}
        names = {norm_key(e["name"]) for e in graph.get_entities(ids).values()}
        q, a = norm_key(it.question), norm_key(" ".join(it.answer_text))
        if any(n and n in q for n in names) and any(n and (n in a or a in n) for n in names):
            c["both_named"] += 1
        mids = [s.tail_id if s.forward else s.head_id for p in paths for s in p[:-1]]
        if any(hub_ref.is_hub(m) for m in mids):
            c["hub_middle"] += 1
        c["paths"] += len(paths)
        c["hops"] += sum(len(p) for p in paths)
    c["mean_hops"] = round(c["hops"] / c["paths"], 2) if c["paths"] else None
    return c


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--graph", required=True)
    ap.add_argument("--bench", action="append", required=True, help="benchmark JSONL (mcq/sd or {question, answer}); repeatable")
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--results", default=None, help="append a markdown section to this file")
    args = ap.parse_args(argv)

    from bencao.data_gen.kg_teacher import PathSettings
    from bencao.data_gen.linking import AliasLinker
    from bencao.data_gen.qa_input import read_qa
    from bencao.retrieval.graph.store import Graph

    g = Graph.open(args.graph, read_only=True)
    t0 = time.time()
    linker = AliasLinker(g)
    after = PathSettings()
    before = PathSettings(hub_degree=0, hub_relation_fanin=0.0)
    hub_ref = after.finder(g)
    rows = []
    for path in args.bench:
        items = read_qa(path)[: args.limit] if args.limit else read_qa(path)
        for label, s in (("hubs allowed", before), ("hubs excluded", after)):
            r = measure(items, g, linker, s, hub_ref)
            r.update(bench=Path(path).stem, setting=label)
            rows.append(r)
            print(json.dumps(r, ensure_ascii=False), flush=True)
    secs = time.time() - t0
    hub_rel = sorted(hub_ref.hub_relations)
    lines = [f"## kg-paths CoT teacher: coverage and hubs ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())})", "",
             f"Graph `{args.graph}`; command: `.venv/bin/python bench/kg_paths_coverage.py --graph {args.graph} "
             + " ".join(f"--bench {b}" for b in args.bench) + (f" --limit {args.limit}" if args.limit else "") + "`; "
             f"{secs:.0f} s. Hub relations detected (> {after.hub_relation_fanin:g} triples per tail): {', '.join(hub_rel) or 'none'}; "
             f"{len(hub_ref.hubs)} hub entities.", "",
             "| bench | setting | n | linked | answered | hub middle (of answered) | both named (of answered) | mean hops |",
             "|---|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        pct = lambda k: f"{r[k]} ({100 * r[k] / r['answered']:.0f} %)" if r["answered"] else "0"  # noqa: E731
        lines.append(f"| {r['bench']} | {r['setting']} | {r['n']} | {r['linked']} | {r['answered']} | {pct('hub_middle')} | "
                     f"{pct('both_named')} | {r['mean_hops'] if r['mean_hops'] is not None else '–'} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.results:
        with open(args.results, "a", encoding="utf-8") as fh:
            fh.write("\n" + text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
