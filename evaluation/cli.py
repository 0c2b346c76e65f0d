"""``bencao eval``: run the answering pipeline over benchmark files and write metrics, predictions and a report."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from bencao import cliopts

app = typer.Typer()


@app.command("eval")
def eval_command(
    bench: List[Path] = typer.Option(..., "--bench", "-b", help="Benchmark JSONL file (repeatable)."),
    graph: Optional[Path] = cliopts.graph(False),
    out: Optional[Path] = cliopts.out(help="Output directory: metrics.json, report.md, metrics.png, predictions.jsonl."),
    config: Optional[Path] = cliopts.config(f"Serving {cliopts.RECIPE}: eval runs exactly the pipeline `bencao serve --config` runs "
                                            "(retrieval, LLM stages, answerer; eval.* settings)."),
    overrides: Optional[List[str]] = cliopts.overrides("key=value override of the recipe (repeatable), e.g. -s linking.tau=0.6 "
                                                       "-s generator.model=/models/qwen -s eval.n_resamples=200."),
    system: Optional[str] = typer.Option(None, "--system", help="Preset of the pipeline: pipeline (the recipe as given; default) | "
                                                                "llm-free | llm | cot+llm-free | cot+llm | retrieval | random."),
    llm: Optional[str] = typer.Option(None, "--llm", help="Generator LLM: MODEL@URL, URL or a local model path (sets generator.*)."),
    cot: Optional[str] = typer.Option(None, "--cot", help="CoT model: MODEL@URL, URL or a local model path (sets cot.llm.*)."),
    no_retrieval: bool = typer.Option(False, "--no-retrieval", help="Closed book: the generator answers without evidence."),
    limit: Optional[int] = typer.Option(None, "--limit", min=1, help="Only the first N records of each benchmark."),
    restart: bool = typer.Option(False, "--restart", help="Discard the predictions already in --out instead of resuming."),
    check: bool = typer.Option(False, "--check", help="Only validate the benchmark files and print their sizes."),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Show a progress bar."),
    strict: bool = typer.Option(False, "--strict", help="Refuse a benchmark file with any bad record (default: skip bad records, report how many)."),
) -> None:
    """Evaluate the answering pipeline on benchmark files (resumable: rerun the same command to continue)."""
    from bencao.errors import BencaoError
    from bencao.evaluation.bench_format import load_benches
    from bencao.evaluation.systems import system_overrides
    from bencao.serving.cli import load_config

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
    name = system or "pipeline"
    extra = system_overrides(name) + (["answer.closed_book=true"] if no_retrieval else [])
    cfg = load_config(config, [*extra, *(overrides or [])], llm, cot, graph)
    from bencao.evaluation.runner import evaluate

    metrics = evaluate(benches, name, graph, out, cfg, limit=limit, restart=restart, progress=progress)
    from bencao.evaluation.report import fmt, main_metric

    for bname, m in metrics.items():
        key = main_metric(m)
        ci = m.get("ci95", {})
        shown = [key] + [k for k in ("answer_recall@10", "margin@10") if k in m and k != key]
        leak = f" leaked={m['leaked']}" if m.get("leaked") else ""
        typer.echo(f"{bname}: {m['task']} n={m['n']} " + " ".join(f"{k}={fmt(k, m.get(k), ci.get(k))}" for k in shown) + leak)
    typer.echo(f"wrote {out / 'metrics.json'}, {out / 'report.md'}, {out / 'predictions.jsonl'}")
