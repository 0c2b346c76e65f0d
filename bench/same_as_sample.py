"""Cross-type unification of `bencao graph integrate`, as a TSV to judge by hand (bench/judged/same_as_sample.tsv).

Every ``same_as`` link the integration made (up to ``--links``, seeded) and a seeded sample of the names it
kept apart (entities of different types sharing a name, left unlinked), each with both entities' ids,
types and definitions, for a reader to fill ``verdict``: for a link, 1 when both entities denote the
same substance; for a name kept apart, 1 when they are indeed different things (a homonym, or an
organism and the ingredient made of it). ``--score FILE`` reads a judged file back and prints both
precisions with 95 % Wilson intervals.

    python bench/same_as_sample.py --graph G --links 50 --apart 24 --seed 0 > bench/judged/same_as_sample.tsv
    python bench/same_as_sample.py --score bench/judged/same_as_sample.tsv
"""

from __future__ import annotations

import argparse
import csv
import random
import sqlite3
import sys
from pathlib import Path

COLUMNS = ["kind", "name", "a_id", "a_type", "a_name", "a_definition", "b_id", "b_type", "b_name", "b_definition", "verdict", "reason"]


def _ent(conn: sqlite3.Connection, eid: str) -> list[str]:
    name, typ, desc = conn.execute("SELECT name, type, COALESCE(description, '') FROM entities WHERE id=?", (eid,)).fetchone()
    parents = [r[0] for r in conn.execute("SELECT x.name FROM triples t JOIN entities x ON x.id = t.tail_id "
                                          "WHERE t.head_id=? AND t.relation='is_a' LIMIT 3", (eid,))]
    text = " ".join(desc.split())[:160] + (f" [is_a {', '.join(parents)}]" if parents else "")
    return [eid, typ, name, text]


def sample(graph: Path, n_links: int, n_apart: int, seed: int) -> None:
    from bencao.retrieval.graph.same_as import KIND

    conn = sqlite3.connect(graph / "graph.sqlite")
    rng = random.Random(seed)
    links = conn.execute("SELECT l.src_id, l.dst_id, s.name FROM links l JOIN entities s ON s.id = l.src_id WHERE l.kind=? ORDER BY 1, 2",
                         (KIND,)).fetchall()
    links = rng.sample(links, min(n_links, len(links)))
    linked = {(a, b) for a, b, _ in conn.execute("SELECT src_id, dst_id, 1 FROM links WHERE kind=?", (KIND,))}
    linked |= {(b, a) for a, b in linked}
    apart = []
    for norm, ids in conn.execute("SELECT norm, group_concat(id, char(31)) FROM entities WHERE norm IN "
                                  "(SELECT norm FROM entities GROUP BY norm HAVING COUNT(DISTINCT type) > 1) GROUP BY norm ORDER BY norm"):
        ents = ids.split("\x1f")
        types = dict(conn.execute(f"SELECT id, type FROM entities WHERE id IN ({','.join('?' * len(ents))})", ents).fetchall())
        pairs = [(a, b) for i, a in enumerate(ents) for b in ents[i + 1:] if types[a] != types[b] and (a, b) not in linked]
        if pairs:
            apart.append((norm, rng.choice(pairs)))
    apart = rng.sample(apart, min(n_apart, len(apart)))
    w = csv.writer(sys.stdout, delimiter="\t", lineterminator="\n")
    print(f"# {graph}: {len(links)} same_as links and {len(apart)} names kept apart (seed {seed}); verdict 1 = right "
          "(a link: one substance; kept apart: different things)")
    w.writerow(COLUMNS)
    for a, b, name in links:
        w.writerow(["link", name, *_ent(conn, a), *_ent(conn, b), "", ""])
    for norm, (a, b) in apart:
        w.writerow(["apart", norm, *_ent(conn, a), *_ent(conn, b), "", ""])


def score(path: Path) -> None:
    from extraction_precision import wilson

    rows = list(csv.DictReader((ln for ln in path.open(encoding="utf-8") if not ln.startswith("#")), delimiter="\t"))
    print("| judged | n | right | share | 95 % interval |\n|---|---:|---:|---:|---|")
    for kind, label in (("link", "same_as links (precision)"), ("apart", "names kept apart, rightly")):
        judged = [r for r in rows if r["kind"] == kind and r["verdict"].strip() in ("0", "1")]
        k = sum(r["verdict"].strip() == "1" for r in judged)
        lo, hi = wilson(k, len(judged))
        print(f"| {label} | {len(judged)} | {k} | {k / max(1, len(judged)):.1%} | [{lo:.1%}, {hi:.1%}] |")
    for r in rows:
        if r["verdict"].strip() == "0":
            print(f"- wrong {r['kind']}: {r['a_name']} [{r['a_type']}] / {r['b_name']} [{r['b_type']}]: {r['reason']}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--graph", type=Path)
    ap.add_argument("--links", type=int, default=50)
    ap.add_argument("--apart", type=int, default=24)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--score", type=Path)
    a = ap.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    if a.score:
        score(a.score)
    elif a.graph:
        sample(a.graph, a.links, a.apart, a.seed)
    else:
        ap.error("--graph or --score")


if __name__ == "__main__":
    main()
