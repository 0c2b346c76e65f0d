"""Mined names (alias kind ``book_variant``) of a built graph, as a TSV to judge by hand (bench/judged/alias_sample.tsv).

The books' other names — 旧作X notes, 又名/别名/俗名/俗呼 X, a title's modern name (薯蓣（山药）) — are
written by the materia-medica extractor with ``name_variants`` on (docs/aliases.md). A seeded sample
of them is printed with the entity they name, the book, the section heading and the passage that says
it, for a reader to fill ``verdict`` (1: the alias names the same substance as the entity; 0:
anything else) and ``reason``. ``--score FILE`` reads a judged file back and prints the precision
with its 95 % Wilson interval.

    python bench/alias_sample.py --graph G --n 50 --seed 0 > bench/judged/alias_sample.tsv
    python bench/alias_sample.py --score bench/judged/alias_sample.tsv
"""

from __future__ import annotations

import argparse
import csv
import random
import re
import sqlite3
import sys
from pathlib import Path

COLUMNS = ["alias", "entity", "entity_layer", "book", "heading", "passage", "verdict", "reason"]


def wilson(k: int, n: int, z: float = 1.959964) -> tuple[float, float]:
    from extraction_precision import wilson as w

    return w(k, n, z)


def passage(conn: sqlite3.Connection, document_id: str, alias: str, entity: str) -> tuple[str, str]:
    """(heading, the sentences around the alias) of the first passage of the document that names the alias near
    the entity's name, else the first that names the alias."""
    rows = conn.execute("SELECT p.text, s.title FROM snippets p JOIN sections s ON s.id = p.section_id "
                        "WHERE p.document_id = ? AND (instr(p.text, ?) > 0 OR instr(s.title, ?) > 0) ORDER BY p.rowid",
                        (document_id, alias, alias)).fetchall()
    best = next((r for r in rows if entity in r[0] or entity in r[1]), rows[0] if rows else ("", ""))
    text, title = best
    i = text.find(alias)
    window = text[max(0, i - 60): i + 60] if i >= 0 else text[:120]
    return title, re.sub(r"\s+", " ", window)


def sample(graph: Path, n: int, seed: int) -> None:
    conn = sqlite3.connect(graph / "graph.sqlite")
    rows = conn.execute("SELECT a.alias, e.name, e.layer, a.document_id, COALESCE(NULLIF(d.title, ''), d.source) FROM aliases a "
                        "JOIN entities e ON e.id = a.entity_id JOIN documents d ON d.id = a.document_id "
                        "WHERE a.kind = 'book_variant' ORDER BY a.rowid").fetchall()
    picked = random.Random(seed).sample(rows, min(n, len(rows)))
    w = csv.writer(sys.stdout, delimiter="\t", lineterminator="\n")
    print(f"# {len(picked)} of the {len(rows)} book_variant aliases of {graph} (seed {seed}); verdict 1: the alias names the "
          "same substance as the entity, 0: anything else")
    w.writerow(COLUMNS)
    for alias, ent, layer, doc, title in picked:
        heading, text = passage(conn, doc, alias, ent)
        w.writerow([alias, ent, layer, title, heading, text, "", ""])


def score(path: Path) -> None:
    rows = [r for r in csv.DictReader((ln for ln in path.open(encoding="utf-8") if not ln.startswith("#")), delimiter="\t")]
    judged = [r for r in rows if r["verdict"].strip() in ("0", "1")]
    k = sum(r["verdict"].strip() == "1" for r in judged)
    lo, hi = wilson(k, len(judged))
    print(f"| judged | right | precision | 95 % interval |\n|---:|---:|---:|---|\n| {len(judged)} | {k} | {k / max(1, len(judged)):.1%} | "
          f"[{lo:.1%}, {hi:.1%}] |")
    if judged and "default" in judged[0]:  # a census: the shipped setting's share too
        mine = [r for r in judged if r["default"].strip() == "1"]
        k2 = sum(r["verdict"].strip() == "1" for r in mine)
        lo2, hi2 = wilson(k2, len(mine))
        print(f"| name_variants: default | {len(mine)} | {k2} | {k2 / max(1, len(mine)):.1%} | [{lo2:.1%}, {hi2:.1%}] |")
    for r in judged:
        if r["verdict"].strip() == "0":
            print(f"- wrong: {r['alias']} → {r['entity']} ({r['book']}): {r['reason']}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--graph", type=Path)
    ap.add_argument("--n", type=int, default=50)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--score", type=Path, help="a judged TSV: print its precision")
    a = ap.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    if a.score:
        score(a.score)
    elif a.graph:
        sample(a.graph, a.n, a.seed)
    else:
        ap.error("--graph or --score")


if __name__ == "__main__":
    main()
