"""Draw a random sample of pattern-extracted triples per relation family from a built graph, to judge.

    .venv/bin/python bench/extraction_sample.py --graph graphs/classics --n 200 --seed 7 --out bench/extraction_precision

Writes one JSONL file per family (``<out>/<family>.jsonl``) with, per sampled triple: the family,
head, relation, tail, triple attributes (a formula ingredient's dose), book, section path,
snippet id, ``source``: the sentence(s) of the snippet that state it (the snippet text around the
tail) and ``snippet``: the whole snippet, for when the window is not enough. ``judgment`` (true/false) and
``reason`` (required when false) are left empty for a reader to fill in; an existing file is
never overwritten (``--force`` to replace it). ``bench/extraction_precision.py`` recomputes
precision from the judged files. ``<out>/graph_counts.json`` records the graph, seed, triples per family,
the commit the graph was built with (``--commit``; default this checkout's, ``+dirty`` when
retrieval/ingest has uncommitted changes) and when its build finished (the graph's manifest), so a
reader can tell which rules a sample measures.

Families: flavour_nature (has_flavour, has_nature), toxicity, meridian (enters_meridian), treats
and effect (substance → symptom/effect, materia-medica extractor), alias (一名 aliases, kind
book_synonym), formula_composition (has_ingredient from the formula extractor) and formula_treats.
Triples are drawn uniformly among the family's distinct triples (seeded); each is judged against
one of its sources, drawn with the same seed.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sqlite3
import subprocess
from pathlib import Path
from typing import Any

FAMILIES: dict[str, tuple[str, str]] = {
    # family: (SQL condition on triples t / head entity h, origin)
    "flavour_nature": ("t.relation IN ('has_flavour', 'has_nature')", "pattern:materia_medica"),
    "toxicity": ("t.relation = 'toxicity'", "pattern:materia_medica"),
    "meridian": ("t.relation = 'enters_meridian'", "pattern:materia_medica"),
    "treats": ("t.relation = 'treats' AND h.type = 'substance'", "pattern:materia_medica"),
    "effect": ("t.relation = 'has_effect' AND h.type = 'substance'", "pattern:materia_medica"),
    "formula_composition": ("t.relation = 'has_ingredient' AND h.type = 'formula'", "pattern:formula"),
    "formula_treats": ("t.relation = 'treats' AND h.type = 'formula'", "pattern:formula"),
}
ALIAS_FAMILY = "alias"
ALIAS_KIND = "book_synonym"


def _window(text: str, needles: list[str], head: str = "", width: int = 2) -> str:
    """The sentence of ``text`` holding the first needle found (after the head's name, when the snippet
    names it: a snippet may hold several entries), with ``width`` sentences either side."""
    sents = [s for s in re.split(r"(?<=[。！？；])", text) if s]
    first = next((i for i, s in enumerate(sents) if head and head in s), 0)
    for n in needles:
        if not n:
            continue
        for order in (range(first, len(sents)), range(0, first)):
            for i in order:
                if n in sents[i]:
                    return "".join(sents[max(0, i - width): i + width + 1])
    return text[:240]


def family_counts(con: sqlite3.Connection) -> dict[str, int]:
    out = {}
    for fam, (cond, origin) in FAMILIES.items():
        out[fam] = con.execute(f"SELECT COUNT(*) FROM triples t JOIN entities h ON h.id = t.head_id WHERE {cond} AND "
                               "EXISTS (SELECT 1 FROM triple_sources s WHERE s.triple_id = t.id AND s.origin = ?)", (origin,)).fetchone()[0]
    out[ALIAS_FAMILY] = con.execute("SELECT COUNT(*) FROM aliases WHERE kind = ?", (ALIAS_KIND,)).fetchone()[0]
    return out


def sample_triples(con: sqlite3.Connection, family: str, n: int, rng: random.Random) -> list[dict[str, Any]]:
    cond, origin = FAMILIES[family]
    ids = [r[0] for r in con.execute(
        f"SELECT t.id FROM triples t JOIN entities h ON h.id = t.head_id WHERE {cond} AND "
        "EXISTS (SELECT 1 FROM triple_sources s WHERE s.triple_id = t.id AND s.origin = ?) ORDER BY t.id", (origin,))]
    out = []
    for tid in rng.sample(ids, min(n, len(ids))):
        t = con.execute("SELECT t.id, h.name, t.relation, x.name, t.attributes FROM triples t JOIN entities h ON h.id = t.head_id "
                        "JOIN entities x ON x.id = t.tail_id WHERE t.id = ?", (tid,)).fetchone()
        srcs = con.execute("SELECT s.snippet_id, s.attributes FROM triple_sources s WHERE s.triple_id = ? AND s.origin = ? "
                           "AND s.snippet_id IS NOT NULL ORDER BY s.rowid", (tid, origin)).fetchall()
        sid, s_attrs = rng.choice(srcs)
        p = con.execute("SELECT p.text, s.path, d.title, d.source FROM snippets p JOIN sections s ON s.id = p.section_id "
                        "JOIN documents d ON d.id = p.document_id WHERE p.id = ?", (sid,)).fetchone()
        attrs = json.loads(s_attrs or "{}")
        needles = [attrs.get("as_written", ""), t[3], t[3][:2]]
        out.append({"family": family, "triple_id": t[0], "head": t[1], "relation": t[2], "tail": t[3], "attributes": attrs,
                    "book": p[2], "file": p[3], "section": json.loads(p[1]), "snippet_id": sid,
                    "source": _window(p[0], needles, t[1]), "snippet": p[0], "judgment": None, "reason": ""})
    return out


def sample_aliases(con: sqlite3.Connection, n: int, rng: random.Random) -> list[dict[str, Any]]:
    rows = con.execute("SELECT a.entity_id, e.name, a.alias, a.document_id, d.title, d.source FROM aliases a "
                       "JOIN entities e ON e.id = a.entity_id JOIN documents d ON d.id = a.document_id "
                       "WHERE a.kind = ? ORDER BY a.rowid", (ALIAS_KIND,)).fetchall()
    out = []
    for eid, name, alias, doc, title, source in rng.sample(rows, min(n, len(rows))):
        # the snippet of this book that names the alias, preferring the entry's own section
        cands = con.execute("SELECT p.id, p.text, s.path, s.title FROM snippets p JOIN sections s ON s.id = p.section_id "
                            "WHERE p.document_id = ? AND p.text LIKE ? ORDER BY (s.title LIKE ?) DESC, p.rowid LIMIT 50",
                            (doc, f"%{alias}%", f"%{name}%")).fetchall()
        # where the book gives it: 一名X / 又名X / 【释名】…X, in the entry's own section first
        ranked = sorted(cands, key=lambda c: (not (name in c[3] or name in c[1]),
                                              not any(k in c[1] for k in (f"一名{alias}", f"又名{alias}", f"名{alias}")),
                                              "【释名】" not in c[1]))
        best = ranked[0] if ranked else None
        out.append({"family": ALIAS_FAMILY, "head": name, "relation": "alias", "tail": alias, "attributes": {},
                    "book": title, "file": source, "section": json.loads(best[2]) if best else [],
                    "snippet_id": best[0] if best else None,
                    "source": _window(best[1], [f"一名{alias}", f"又名{alias}", f"名{alias}", alias], name) if best else "",
                    "snippet": best[1] if best else "", "judgment": None, "reason": ""})
    return out


def checkout_commit() -> str:
    """This checkout's commit, ``+dirty`` when the extractors' code has uncommitted changes ('' outside git)."""
    repo = Path(__file__).resolve().parents[1]
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=repo, capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "retrieval/ingest"], cwd=repo, capture_output=True, text=True,
                               check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""
    return head + ("+dirty" if dirty else "")


def built_at(graph: Path) -> str | None:
    """When the graph's last build finished (its manifest's history)."""
    try:
        history = json.loads((graph / "manifest.json").read_text(encoding="utf-8")).get("history", [])
    except (OSError, ValueError):
        return None
    return next((h.get("at") for h in reversed(history) if h.get("op") == "build"), None)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--graph", required=True, help="built graph directory")
    ap.add_argument("--n", type=int, default=200, help="triples per family")
    ap.add_argument("--seed", type=int, default=7, help="random seed (say which one a judged sample used)")
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent / "extraction_precision"), help="output folder")
    ap.add_argument("--families", nargs="*", default=[*FAMILIES, ALIAS_FAMILY], help="families to sample")
    ap.add_argument("--force", action="store_true", help="replace existing sample files (their judgments are lost)")
    ap.add_argument("--commit", default=None, help="the commit the graph was built with (recorded; default: this checkout's, "
                                                   "+dirty when retrieval/ingest has uncommitted changes)")
    args = ap.parse_args()
    con = sqlite3.connect(f"file:{Path(args.graph) / 'graph.sqlite'}?mode=ro", uri=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    counts = family_counts(con)
    for fam in args.families:
        path = out / f"{fam}.jsonl"
        if path.exists() and not args.force:
            print(f"{path}: exists (judged?); --force to replace")
            continue
        rng = random.Random(f"{args.seed}:{fam}")
        rows = sample_aliases(con, args.n, rng) if fam == ALIAS_FAMILY else sample_triples(con, fam, args.n, rng)
        with open(path, "w", encoding="utf-8") as fh:
            for r in rows:
                fh.write(json.dumps(r, ensure_ascii=False) + "\n")
        print(f"{fam}: {len(rows)} sampled of {counts[fam]:,} → {path}")
    (out / "graph_counts.json").write_text(json.dumps({"graph": str(Path(args.graph).resolve()), "seed": args.seed, "n": args.n,
                                                       "triples_per_family": counts,
                                                       "commit": args.commit if args.commit is not None else checkout_commit(),
                                                       "built_at": built_at(Path(args.graph))}, ensure_ascii=False, indent=1) + "\n",
                                           encoding="utf-8")


if __name__ == "__main__":
    main()
