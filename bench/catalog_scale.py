"""A catalogue CSV of N rows added to an empty lexical-indexed graph: wall time and peak memory.

    .venv/bin/python bench/catalog_scale.py --rows 1000000 [--baseline-ref REV] [--out bench/results/catalog_scale.json]

The rows are the bundled MFH catalogue's, repeated with unique names (``name_zh``, ``base_name_zh`` and every
variant suffixed with the row number, the id made unique), so each row is a new substance with its variants,
aliases and ``listed_in`` triples, as in issue 28's and issue 33's reports. Each run is
``bencao graph add --format catalog-csv`` under ``/usr/bin/time -v`` (wall, peak RSS), the index refresh
included, after ``bencao graph build`` of an empty recipe with ``index_config: retrieval/lexical``.
``--baseline-ref REV`` first runs the same add with the ``retrieval/`` package of git revision REV (over the
rest of this tree): the comparison is measured in the same run, on the same file.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SOURCE = REPO / "data/sample/mfh_catalog/mfh_catalog_106.csv"
#: Runs ``bencao`` with the retrieval package taken from another folder (a baseline revision's ``retrieval/``).
_OVERLAY = ("import sys; import bencao.retrieval as r; r.__path__[:] = [sys.argv[1]]; from bencao.cli import main; "
            "sys.exit(main(sys.argv[2:]))")


def write_catalogue(path: Path, rows: int) -> None:
    with open(SOURCE, encoding="utf-8") as fh:
        base = list(csv.DictReader(fh))
    with open(path, "w", encoding="utf-8", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(base[0]))
        w.writeheader()
        for k in range(rows):
            r = dict(base[k % len(base)])
            r["mfh_id"] = f"X{k:07d}"
            r["name_zh"] = f"{r['name_zh']}{k}"
            r["base_name_zh"] = f"{r['base_name_zh']}{k}"
            if r["variants_zh"]:
                r["variants_zh"] = "、".join(f"{v}{k}" for v in r["variants_zh"].split("、"))
            w.writerow(r)


def _env() -> dict[str, str]:
    return {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}


def run_add(where: Path, catalogue: Path, retrieval_dir: Path | None, timeout_s: float) -> dict:
    recipe = where / "empty.yaml"
    recipe.write_text("name: empty\nindex: true\nindex_config: retrieval/lexical\nsources: []\n", encoding="utf-8")
    graph = where / "g"
    subprocess.run([sys.executable, "-m", "bencao.cli", "graph", "build", "--config", str(recipe), "--graph", str(graph)],
                   check=True, cwd=REPO, env=_env(), capture_output=True)
    head = [sys.executable, "-c", _OVERLAY, str(retrieval_dir)] if retrieval_dir else [sys.executable, "-m", "bencao.cli"]
    cmd = ["/usr/bin/time", "-v", *head, "graph", "add", "--graph", str(graph), "--format", "catalog-csv", str(catalogue)]
    t = time.perf_counter()
    try:
        p = subprocess.run(cmd, cwd=REPO, env=_env(), capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return {"status": f"killed at the {timeout_s:g} s limit", "wall_s": round(time.perf_counter() - t, 1)}
    wall = time.perf_counter() - t
    rss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", p.stderr)
    out = {"status": "ok" if p.returncode == 0 else f"exit {p.returncode}: {p.stderr.strip().splitlines()[-1][:300] if p.stderr.strip() else ''}",
           "wall_s": round(wall, 1), "peak_rss_mib": round(int(rss.group(1)) / 1024, 1) if rss else None,
           "summary": p.stdout.strip().splitlines()[-1][:400] if p.stdout.strip() else ""}
    with __import__("sqlite3").connect(graph / "graph.sqlite") as c:
        out["counts"] = {t: c.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0] for t in ("entities", "aliases", "triples")}
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--baseline-ref", default="", help="git revision whose retrieval package runs the same add first")
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds an add may run before it is killed")
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "catalog_scale.json")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="catalog-scale-"))
    catalogue = tmp / "catalogue.csv"
    write_catalogue(catalogue, args.rows)
    result = {"rows": args.rows, "bytes": catalogue.stat().st_size, "cpus": os.cpu_count(), "load_avg_before": os.getloadavg()[0], "runs": {}}
    if args.baseline_ref:
        ref = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", args.baseline_ref], check=True, capture_output=True,
                             text=True).stdout.strip()
        src = tmp / f"retrieval-{ref}"
        src.mkdir()
        archive = subprocess.run(["git", "-C", str(REPO), "archive", ref, "retrieval"], check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(src)], input=archive, check=True)
        (tmp / "base").mkdir()
        result["runs"][f"baseline {ref}"] = run_add(tmp / "base", catalogue, src / "retrieval", args.timeout)
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    (tmp / "this").mkdir()
    result["runs"][f"this tree {head}"] = run_add(tmp / "this", catalogue, None, args.timeout)
    result["load_avg_after"] = os.getloadavg()[0]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
    for name, r in result["runs"].items():
        print(f"{args.rows:,} rows [{name}]: {r}")
    return 0 if all(r["status"] == "ok" for r in result["runs"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
