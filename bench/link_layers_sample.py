"""The links `bencao graph link-layers` made, as a TSV to judge by hand (bench/judged/link_layers_sample.tsv).

Every embedding link and every link to a case record is listed; name (exact) links are sampled
(``--exact N``, seeded) since a name match is judged only for homonyms. The verdict column is
filled by reading each pair: 1 when the target names the same thing as the source (a synonym, or
the source is that concept qualified: 劳伤羸瘦 → 羸瘦), 0 otherwise (a herb linked to a patient
record, or to another herb).

    python bench/link_layers_sample.py --graph G --label after --exact 30 >> sample.tsv
"""

from __future__ import annotations

import argparse
import random
import sqlite3
from pathlib import Path

COLUMNS = ["graph", "pair", "method", "source", "source_type", "target", "target_type", "score", "verdict"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--graph", type=Path, required=True)
    ap.add_argument("--label", required=True, help="first column: before / after")
    ap.add_argument("--exact", type=int, default=30, help="name links sampled per layer pair")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--header", action="store_true")
    a = ap.parse_args()
    conn = sqlite3.connect(a.graph / "graph.sqlite")
    rows = conn.execute(
        "SELECT json_extract(d.meta, '$.source_layer') || '->' || json_extract(d.meta, '$.target_layer'), s.name, s.type, t.name, t.type, l.score "
        "FROM links l JOIN documents d ON d.id = l.document_id JOIN entities s ON s.id = l.src_id JOIN entities t ON t.id = l.dst_id "
        "WHERE d.format = 'layer-links' ORDER BY 1, s.rowid, t.rowid").fetchall()
    if a.header:
        print("\t".join(COLUMNS))
    rng = random.Random(a.seed)
    for pair in sorted({r[0] for r in rows}):
        mine = [r for r in rows if r[0] == pair]
        exact = [r for r in mine if r[5] >= 1.0 and r[4] != "case"]
        keep = set(map(id, rng.sample(exact, min(a.exact, len(exact)))))
        for r in mine:
            if r in exact and id(r) not in keep:
                continue
            method = "name" if r in exact else "embedding"
            print("\t".join([a.label, pair, method, r[1], r[2], r[3], r[4], f"{r[5]:.4f}", ""]))


if __name__ == "__main__":
    main()
