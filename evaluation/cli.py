"""``bencao eval``: run a system over benchmark files and write metrics, predictions and a report."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer


def eval_command(
    bench: List[Path] = typer.Option(..., "--bench", "-b", help="Benchmark JSONL file (repeatable)."),
    system: str = typer.Option("llm-free", "--system", "-s", help="System under test: llm-free | llm | retrieval | random."),
    graph: Optional[Path] = typer.Option(None, "--graph", "-g", help="Graph directory (llm-free, retrieval, llm with retrieval)."),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="Output directory: metrics.json, report.md, metrics.png, predictions.jsonl."),
    config: Optional[Path] = typer.Option(None, "--config", "-c", help="Evaluation settings (YAML, keys as in EvalConfig)."),
    overrides: List[str] = typer.Option([], "--set", help="key=value override of a setting (repeatable), e.g. llm.model=/models/qwen."),
    no_retrieval: bool = typer.Option(False, "--no-retrieval", help="llm system: closed book, no evidence in the prompt."),
    limit: Optional[int] = typer.Option(None, "--limit", min=1, help="Only the first N records of each benchmark."),
    restart: bool = typer.Option(False, "--restart", help="Discard the predictions already in --out instead of resuming."),
    check: bool = typer.Option(False, "--check", help="Only validate the benchmark files and print their sizes."),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Show a progress bar."),
    strict: bool = typer.Option(False, "--strict", help="Refuse a benchmark file with any bad record (default: skip bad records, report how many)."),
) -> None:
    """Evaluate a system on benchmark files (resumable: rerun the same command to continue)."""
    from bencao.config import load_config
    from bencao.errors import BencaoError
    from bencao.evaluation.bench_format import load_benches
    from bencao.evaluation.systems import EvalConfig

    from bencao.evaluation.bench_format import skipped_summary

    benches = load_benches(bench, strict=strict)
    for b in benches:
        if b.skipped:
            typer.echo(f"warning: {skipped_summary(b)}", err=True)
    if check:
        for b in benches:
            sources = sorted({r.get("source", "") for r in b.records})
            typer.echo(f"{b.path}: {len(b)} {b.task} records, ok ({len(sources)} source(s))")
        return
    if out is None:
        raise BencaoError("--out DIR is required (unless --check)")
    cfg = load_config(EvalConfig, config, list(overrides) + (["no_retrieval=true"] if no_retrieval else []))
    from bencao.evaluation.runner import evaluate

    metrics = evaluate(benches, system, graph, out, cfg, limit=limit, restart=restart, progress=progress)
    from bencao.evaluation.metrics import MAIN_METRIC
    from bencao.evaluation.report import fmt

    for name, m in metrics.items():
        main = MAIN_METRIC[m["task"]]
        key = main if main in m else "evidence_contains_gold"
        typer.echo(f"{name}: {m['task']} n={m['n']} {key}={fmt(key, m.get(key), m.get('ci95', {}).get(key))}")
    typer.echo(f"wrote {out / 'metrics.json'}, {out / 'report.md'}, {out / 'predictions.jsonl'}")
