"""Does a free-text answer state what was asked, and say where it was read?

    python bench/asked_facts.py --graph graphs/classics --n 100 --config configs/serving/classics.yaml

Samples ``--n`` entities (seeded) that have at least one triple of each asked relation family below
and asks, through the one answering pipeline (LLM-free), three questions about each, in the phrasing
a user types: ``X的功效是什么？`` (has_effect / treats), ``X主治什么？`` (treats / has_effect),
``X的性味如何？`` (has_flavour / has_nature). Reports, per question form: the share of answers whose
first fact line is a fact of an asked relation about X, the share of fact lines carrying an [n]
citation, and the share of answers citing a passage that names X. The questions come from the graph
itself (no benchmark record is used), so it measures the answering path, not knowledge coverage.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
import time

FORMS = {"功效": ("{x}的功效是什么？", ("has_effect", "treats")),
         "主治": ("{x}主治什么？", ("treats", "has_effect")),
         "性味": ("{x}的性味如何？", ("has_flavour", "has_nature"))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--graph", required=True)
    ap.add_argument("--config", default=None)
    ap.add_argument("--set", action="append", default=[], help="serving overrides, key=value")
    ap.add_argument("--n", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    from bencao.retrieval.graph.store import Graph
    from bencao.serving.config import load_serve_config
    from bencao.serving.pipeline import AnswerPipeline

    with Graph.open(args.graph, read_only=True) as g:
        rows = g.conn.execute(
            "SELECT e.id, e.name FROM entities e WHERE e.type='substance' AND length(e.name) >= 2 "
            "AND EXISTS (SELECT 1 FROM triples t WHERE t.head_id=e.id AND t.relation IN ('has_effect','treats')) "
            "AND EXISTS (SELECT 1 FROM triples t WHERE t.head_id=e.id AND t.relation IN ('has_flavour','has_nature')) "
            "ORDER BY e.id").fetchall()
    names = sorted({r[1] for r in rows})
    sample = random.Random(args.seed).sample(names, min(args.n, len(names)))
    pipe = AnswerPipeline(args.graph, load_serve_config(args.config, args.set))
    fact_line = re.compile(r"（置信度 [0-9.]+）( \[\d+\])?$")
    out: dict[str, dict[str, float]] = {}
    t0 = time.time()
    for form, (tmpl, rels) in FORMS.items():
        qs = [tmpl.format(x=x) for x in sample]
        res = pipe.answer_many(qs)
        first_asked = cited = facts = names_x = 0
        for x, r in zip(sample, res):
            lines = r["answer"].splitlines()
            fl = [line for line in lines if fact_line.search(line)]
            facts += len(fl)
            cited += sum(1 for line in fl if line.endswith("]"))
            ok = bool(fl) and any(_reads_as(pipe, x, rel, fl[0]) for rel in rels)
            first_asked += ok
            snips = {s["id"]: s["text"] for s in r["evidence"]["snippets"]}
            names_x += any(x in snips.get(c["snippet_id"], "") for c in r["references"]
                           if f"[{c['n']}]" in r["answer"])
        n = len(sample)
        out[form] = {"questions": n, "first_fact_asked": round(first_asked / n, 3), "fact_lines": facts,
                     "fact_lines_cited": round(cited / facts, 3) if facts else 0.0, "cites_a_passage_naming_x": round(names_x / n, 3)}
    print(json.dumps({"graph": args.graph, "n": len(sample), "entities": len(names), "seconds": round(time.time() - t0, 1),
                      "forms": out, "python": sys.executable}, ensure_ascii=False, indent=1))


def _reads_as(pipe, x: str, rel: str, line: str) -> bool:
    """The answer line states a fact of ``rel`` about ``x`` (the answerer's own Chinese template)."""
    tmpl = pipe.graph_answerer.cfg.relation_templates.get("zh", {}).get(rel)
    if not tmpl:
        return False
    prefix = tmpl.split("{t}")[0].format(h=x)
    return line.startswith(prefix)


if __name__ == "__main__":
    main()
