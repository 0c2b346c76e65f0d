"""Recompute the pattern extractors' precision from the judged samples under bench/extraction_precision/.

    .venv/bin/python bench/extraction_precision.py --markdown        # the reported figures
    .venv/bin/python bench/extraction_precision.py --dir bench/extraction_precision/round1

Each ``<family>.jsonl`` line is a sampled triple (see ``extraction_sample.py``) with ``judgment``
true/false (and a ``reason`` for every false). Prints per family: triples judged, precision, its
95 % Wilson interval, the family's triples in the graph the sample was drawn from
(``graph_counts.json``) and the folder it came from. Several ``--dir`` may be given: a family judged
in a later folder replaces the earlier one (the default, ``round2`` then ``round3``, is how the
reported table was made: every family from a fresh sample after the development round, the two
indication families from a second fresh sample after their rules changed again). Refuses a file
with an unjudged line or a false without a reason.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

BAR = 0.90
ORDER = ("flavour_nature", "toxicity", "meridian", "treats", "effect", "alias", "formula_composition", "formula_treats")


def wilson(k: int, n: int, z: float = 1.959964) -> tuple[float, float]:
    """95 % Wilson score interval of k successes in n trials."""
    if n == 0:
        return (0.0, 1.0)
    p = k / n
    d = 1 + z * z / n
    c = (p + z * z / (2 * n)) / d
    h = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return (max(0.0, c - h), min(1.0, c + h))


def load(path: Path) -> list[dict]:
    rows = []
    for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        r = json.loads(line)
        if not isinstance(r.get("judgment"), bool):
            raise SystemExit(f"{path}:{i}: not judged (judgment must be true or false)")
        if r["judgment"] is False and not str(r.get("reason", "")).strip():
            raise SystemExit(f"{path}:{i}: a false judgment needs a reason")
        rows.append(r)
    return rows


def table(folders: list[Path]) -> list[dict]:
    files: dict[str, tuple[Path, dict]] = {}
    for folder in folders:  # a later folder's judgment of a family replaces an earlier one
        counts = {}
        cpath = folder / "graph_counts.json"
        if cpath.exists():
            counts = json.loads(cpath.read_text(encoding="utf-8")).get("triples_per_family", {})
        for p in folder.glob("*.jsonl"):
            files[p.stem] = (p, counts)
    out = []
    for fam in [f for f in ORDER if f in files] + sorted(set(files) - set(ORDER)):
        path, counts = files[fam]
        rows = load(path)
        k = sum(1 for r in rows if r["judgment"])
        lo, hi = wilson(k, len(rows))
        out.append({"family": fam, "judged": len(rows), "true": k, "precision": k / len(rows) if rows else 0.0,
                    "wilson_low": lo, "wilson_high": hi, "in_graph": counts.get(fam), "sample": path.parent.name,
                    "loaded_by_default": (k / len(rows) if rows else 0) >= BAR})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    here = Path(__file__).resolve().parent / "extraction_precision"
    ap.add_argument("--dir", action="append", help="folder of judged JSONL files (repeatable; default: round2, round3)")
    ap.add_argument("--markdown", action="store_true", help="print a markdown table")
    args = ap.parse_args()
    folders = [Path(d) for d in args.dir] if args.dir else [here / "round2", here / "round3"]
    rows = table(folders)
    if not rows:
        sys.exit(f"{', '.join(map(str, folders))}: no judged files")
    if args.markdown:
        print("| family | judged | precision | 95 % Wilson | triples in the sampled graph | sample | loaded by default |")
        print("|---|---|---|---|---|---|---|")
        for r in rows:
            g = f"{r['in_graph']:,}" if r["in_graph"] is not None else "—"
            print(f"| {r['family']} | {r['judged']} | {r['precision']:.1%} | {r['wilson_low']:.1%}–{r['wilson_high']:.1%} | {g} | "
                  f"{r['sample']} | {'yes' if r['loaded_by_default'] else 'no (all_families: true)'} |")
    else:
        print(json.dumps(rows, ensure_ascii=False, indent=1))


if __name__ == "__main__":
    main()
