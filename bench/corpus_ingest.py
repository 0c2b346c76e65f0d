"""Ingest of the real classics corpus through configs/graph/classics.yaml, appended to bench/RESULTS.md.

    .venv/bin/python bench/corpus_ingest.py --root data/corpus/tcm_ancient_books --graph /tmp/classics
    .venv/bin/python bench/corpus_ingest.py --root data/corpus/tcm_ancient_books --graph graphs/classics --with-index

Two figures from the same run:

1. baseline: every book of ``--root`` streamed through ``TextLines`` (gunzip + decode + line split),
   in this process: the floor of any books-txt ingest;
2. the store build: ``bencao graph build --config configs/graph/classics.yaml --graph GRAPH
   root=ROOT index=false`` in a child process under ``/usr/bin/time -v`` (wall time, CPU time, peak
   RSS), and the per-book report's totals (books, sections, snippets, characters, anything skipped);
   with ``--with-index`` the full build, every index the recipe builds (without ``index=false``),
   its ingest and index phases timed from the manifest's history.

The machine's load is recorded with the figures: the machine is shared, so CPU seconds are the
comparable number and wall time is what a user waited; the range of the 1-minute load average
during the build is sampled every 10 s.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
RECIPE = REPO / "configs" / "graph" / "classics.yaml"


def baseline(root: Path) -> dict[str, Any]:
    from bencao.retrieval.ingest.text_reader import TextLines

    t0, c0 = time.perf_counter(), time.process_time()
    files = sorted(p for p in root.iterdir() if p.name.endswith((".txt", ".txt.gz")))
    chars = lines = 0
    for p in files:
        for _, line in TextLines(p):
            lines += 1
            chars += len(line)
    return {"files": len(files), "lines": lines, "chars_with_spaces": chars,
            "wall_s": round(time.perf_counter() - t0, 1), "cpu_s": round(time.process_time() - c0, 1)}


def _time_v(stderr: str, key: str) -> str:
    m = re.search(rf"{re.escape(key)}: (.+)", stderr)
    return m.group(1).strip() if m else ""


def _seconds(elapsed: str) -> float:
    parts = [float(x) for x in elapsed.split(":")]
    return sum(v * 60 ** i for i, v in enumerate(reversed(parts)))


def _load_range(stop: threading.Event, seen: list[float]) -> None:
    while True:
        seen.append(os.getloadavg()[0])
        if stop.wait(10):
            return


def build(root: Path, graph: Path, overrides: list[str], nice: int, with_index: bool = False) -> dict[str, Any]:
    bencao = Path(sys.executable).with_name("bencao")
    cmd = ["/usr/bin/time", "-v", "nice", "-n", str(nice), str(bencao), "graph", "build", "--config", str(RECIPE),
           "--graph", str(graph), f"root={root}", *([] if with_index else ["index=false"]), *overrides]
    loads: list[float] = []
    stop = threading.Event()
    sampler = threading.Thread(target=_load_range, args=(stop, loads), daemon=True)
    sampler.start()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"})
    finally:
        stop.set()
        sampler.join()
    if proc.returncode != 0:
        raise SystemExit(f"build failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    err = proc.stderr
    manifest = json.loads((graph / "manifest.json").read_text(encoding="utf-8"))
    shown = ["bencao", *[str(c).replace(str(REPO) + "/", "") for c in cmd[6:]]]
    return {"command": " ".join(shown), "wall_s": round(_seconds(_time_v(err, "Elapsed (wall clock) time (h:mm:ss or m:ss)")), 1),
            "cpu_s": round(float(_time_v(err, "User time (seconds)")) + float(_time_v(err, "System time (seconds)")), 1),
            "max_rss_mib": round(int(_time_v(err, "Maximum resident set size (kbytes)")) / 1024, 1),
            "books": manifest.get("books", {}), "counts": manifest.get("counts", {}),
            "by_relation": _relations(graph), "load_range": [min(loads), max(loads)],
            "phases_s": _phases(manifest), "indexes": _index_counts(manifest) if with_index else None}


def _phases(manifest: dict[str, Any]) -> dict[str, float]:
    """Seconds of the ingest (create → build entry) and index (build → index entry) phases."""
    at = {h["op"]: dt.datetime.fromisoformat(h["at"]) for h in manifest.get("history", [])}
    out = {}
    if "create" in at and "build" in at:
        out["ingest"] = (at["build"] - at["create"]).total_seconds()
    if "build" in at and "index" in at:
        out["index"] = (at["index"] - at["build"]).total_seconds()
    return out


def _index_counts(manifest: dict[str, Any]) -> str:
    ix = manifest.get("indexes") or {}
    lex = ", ".join(f"{k} {v:,}" for k, v in (ix.get("lexical") or {}).items())
    dense = ", ".join(f"{k} {v['n']:,} of {v['of']:,} ({v['type']})" for k, v in (ix.get("dense") or {}).items())
    return f"BM25 {lex}; dense ({ix.get('embedder')}) {dense}"


def _relations(graph: Path) -> dict[str, int]:
    import sqlite3

    con = sqlite3.connect(f"file:{graph / 'graph.sqlite'}?mode=ro", uri=True)
    try:
        return {r: n for r, n in con.execute("SELECT relation, COUNT(*) FROM triples GROUP BY relation ORDER BY 2 DESC")}
    finally:
        con.close()


def append_markdown(path: Path, r: dict[str, Any]) -> None:
    b, base, bk = r["build"], r["baseline"], r["build"]["books"]
    what = "build with every index" if b.get("indexes") else "ingest"
    step = "full build, every index" if b.get("indexes") else "store build"
    skipped = ", ".join(f"{k} {v:,}" for k, v in bk.get("skipped_lines", {}).items()) or "none"
    rel = ", ".join(f"{k} {v:,}" for k, v in b["by_relation"].items())
    lines = [
        f"\n## Classics corpus {what} ({r['at']})\n",
        f"`{r['command']}` on {r['machine']} (load average at start {r['load']}; during the build "
        f"{b['load_range'][0]:.1f}–{b['load_range'][1]:.1f}).\n",
        "| step | wall s | CPU s | peak RSS MiB | CPU vs baseline |",
        "|---|---|---|---|---|",
        f"| baseline: stream-read every book (gunzip + GB18030 decode + line split) | {base['wall_s']} | {base['cpu_s']} | — | 1.0× |",
        f"| {step} (`{b['command']}`) | {b['wall_s']} | {b['cpu_s']} | {b['max_rss_mib']} | "
        f"{b['cpu_s'] / max(base['cpu_s'], 0.1):.1f}× |",
        "",
        f"- Books {bk.get('books', 0):,} ({bk.get('plain_books', 0)} without markup), sections {bk.get('sections', 0):,}, "
        f"snippets {bk.get('snippets', 0):,}; graph: {b['counts'].get('documents', 0):,} documents, "
        f"{b['counts'].get('sections', 0):,} section nodes, {b['counts'].get('entities', 0):,} entities, {b['counts'].get('triples', 0):,} triples.",
        f"- Characters (non-whitespace): {bk.get('chars', 0):,} read = markup {bk.get('markup_chars', 0):,} + header "
        f"{bk.get('header_chars', 0):,} + headings {bk.get('heading_chars', 0):,} + body {bk.get('body_chars', 0):,}; "
        f"snippets hold {bk.get('snippet_chars', 0):,} = body + {bk.get('added_chars', 0):,} added 【】 (checked per book).",
        f"- Undecodable bytes: {bk.get('undecodable_bytes', 0)} ({', '.join(bk.get('books_with_undecodable_bytes', [])) or 'none'}); "
        f"lines without text: {skipped}.",
        f"- Triples by relation: {rel or 'none'}.",
        *(["- Phases (manifest history): " + ", ".join(f"{k} {v:.0f} s" for k, v in b["phases_s"].items()) + "."] if b["phases_s"] else []),
        *([f"- Indexes: {b['indexes']}."] if b.get("indexes") else []),
        "",
    ]
    with open(path, "a", encoding="utf-8") as fh:
        fh.write("\n".join(lines))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", required=True, help="folder of the corpus books (.txt or .txt.gz)")
    ap.add_argument("--graph", required=True, help="graph directory to build (replaced atomically)")
    ap.add_argument("--nice", type=int, default=10, help="niceness of the build (the machine is shared)")
    ap.add_argument("--with-index", action="store_true", help="the full build: every index the recipe builds (default: index=false)")
    ap.add_argument("--results", default=str(BENCH / "RESULTS.md"), help="markdown file the figures are appended to ('' = none)")
    ap.add_argument("overrides", nargs="*", help="extra recipe overrides key=value")
    args = ap.parse_args()
    root = Path(args.root).resolve()
    r: dict[str, Any] = {"at": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "machine": f"{os.cpu_count()} cores",
                         "load": " ".join(f"{x:.1f}" for x in os.getloadavg()),
                         "command": "python bench/corpus_ingest.py " + " ".join(sys.argv[1:])}
    r["baseline"] = baseline(root)
    r["build"] = build(root, Path(args.graph).resolve(), args.overrides, args.nice, args.with_index)
    print(json.dumps(r, ensure_ascii=False))
    if args.results:
        append_markdown(Path(args.results), r)


if __name__ == "__main__":
    main()
