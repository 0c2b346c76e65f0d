"""Yaoshi-RAG's ablation on bencao: does retrieval do better with real triple confidences than with all ones?

Three arms over copies of one indexed graph, scored by the evaluation harness on the same benchmarks:

- ``extracted``: the confidences as ingested (curated 1.0, recipes 0.9, pattern extraction 0.6);
- ``calibrated``: after ``bencao graph confidence`` (UKGE plausibility pooled with the evidence);
- ``ones``: every triple's confidence set to 1 (the paper's ablation).

    .venv/bin/python bench/confidence_ablation.py --graph graphs/sample \
        --bench data/dev/tcmbench_mcq.jsonl --bench data/dev/tcm_best4sdt_sd.jsonl \
        --out out/confidence_ablation

Prints a Markdown table (main metric per benchmark and arm) and writes it to ``OUT/table.md``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

MAIN_METRIC = {"mcq": "accuracy", "tf": "accuracy", "sd": "top1", "el": "acc_at_1", "rec": "hits_at_1"}
REPO = Path(__file__).resolve().parents[1]


def bencao(*args: str) -> None:
    cmd = [str(Path(sys.executable).with_name("bencao")), *args]
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--graph", required=True, help="an indexed graph (e.g. built by `make demo`)")
    ap.add_argument("--bench", action="append", required=True, help="benchmark JSONL (repeatable)")
    ap.add_argument("--out", default="out/confidence_ablation")
    ap.add_argument("--retrieval-config", default=str(REPO / "configs/retrieval/default.yaml"))
    args = ap.parse_args(argv)

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    arms = ("extracted", "calibrated", "ones")
    t0 = time.time()
    for arm in arms:
        g = out / "graphs" / arm
        if not (g / "graph.sqlite").exists():
            shutil.rmtree(g, ignore_errors=True)
            shutil.copytree(args.graph, g, ignore=shutil.ignore_patterns("ukge"))
            if arm == "calibrated":
                bencao("graph", "confidence", "--graph", str(g), "-c", str(REPO / "configs/graph/confidence.yaml"))
            elif arm == "ones":
                with sqlite3.connect(g / "graph.sqlite") as conn:
                    conn.execute("UPDATE triples SET confidence = 1.0")
        eval_args = ["eval", "--graph", str(g), "--system", "llm-free", "--out", str(out / "eval" / arm),
                     "--set", f"retrieval={args.retrieval_config}"]
        for b in args.bench:
            eval_args += ["--bench", b]
        bencao(*eval_args)

    metrics = {arm: json.loads((out / "eval" / arm / "metrics.json").read_text()) for arm in arms}
    stems = list(metrics[arms[0]])
    lines = ["| benchmark | task | n | metric | " + " | ".join(arms) + " |", "|---|---|---|---|" + "---|" * len(arms)]
    for stem in stems:
        m0 = metrics[arms[0]][stem]
        key = MAIN_METRIC.get(m0["task"], "accuracy")
        vals = [metrics[a][stem].get(key) for a in arms]
        lines.append(f"| {stem} | {m0['task']} | {m0['n']} | {key} | " + " | ".join(f"{v:.3f}" if isinstance(v, (int, float)) else "–" for v in vals) + " |")
        if "evidence_contains_gold" in m0:
            ev = [metrics[a][stem].get("evidence_contains_gold") for a in arms]
            lines.append(f"| {stem} | {m0['task']} | {m0['n']} | evidence_contains_gold | " + " | ".join(f"{v:.3f}" for v in ev) + " |")
    table = "\n".join(lines)
    (out / "table.md").write_text(table + "\n", encoding="utf-8")
    print(table)
    print(f"total {time.time() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
