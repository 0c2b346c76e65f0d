"""`bencao serve` (HTTP API + web page) and `bencao infer` (offline batch answers)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

serving_app = typer.Typer(help="Answer questions: HTTP API and web page, offline batch inference.")

CONFIG_OPT = typer.Option(None, "--config", "-c", help="Serving recipe YAML (e.g. configs/serving/default.yaml); default: all defaults (LLM-free answers).")
SET_OPT = typer.Option(None, "--set", "-s", help="key=value override of the recipe (repeatable), e.g. -s api.max_concurrency=4.")


def _pipeline(graph: Path, cfg):  # noqa: ANN001
    from bencao.retrieval.graph.store import DB_NAME
    from bencao.errors import BencaoError
    from bencao.serving.pipeline import AnswerPipeline

    if not (graph / DB_NAME).exists():
        raise BencaoError(f"{graph}: no graph here (expected {DB_NAME}); build one with `bencao graph build`")
    return AnswerPipeline(graph, cfg)


@serving_app.command("serve")
def serve(
    graph: Path = typer.Option(..., "--graph", "-g", help="Graph directory."),
    config: Optional[Path] = CONFIG_OPT,
    host: Optional[str] = typer.Option(None, help="Interface to listen on (default api.host, 127.0.0.1)."),
    port: Optional[int] = typer.Option(None, help="TCP port (default api.port, 8000)."),
    api_key: Optional[str] = typer.Option(None, "--api-key", help="Bearer key required on /v1/* (default: $BENCAO_API_KEY, see api.api_key_env)."),
    overrides: Optional[list[str]] = SET_OPT,
) -> None:
    """Serve the OpenAI-compatible API (/v1/chat/completions, /v1/retrieve, /v1/models, /healthz) and the web page at /."""
    import uvicorn

    from bencao.serving.api import create_app, resolve_api_key
    from bencao.serving.config import load_serve_config

    cfg = load_serve_config(config, overrides or [])
    pipeline = _pipeline(graph, cfg)
    h, p = host or cfg.api.host, port if port is not None else cfg.api.port
    key = resolve_api_key(cfg.api, api_key)
    if key is None and h not in ("127.0.0.1", "localhost", "::1"):
        typer.echo(f"warning: serving on {h} without an API key; set ${cfg.api.api_key_env} or --api-key", err=True)
    app = create_app(pipeline, cfg.api, key, reload=lambda: _pipeline(graph, cfg))  # reloads when the graph changes
    typer.echo(f"bencao serving {graph} on http://{h}:{p}/ (answers by {pipeline.info()['answerer']})", err=True)
    uvicorn.run(app, host=h, port=p, log_level="warning", timeout_graceful_shutdown=5, limit_concurrency=cfg.api.max_connections)


@serving_app.command("infer")
def infer(
    questions: Path = typer.Argument(..., help="Questions JSONL: {\"id\",\"question\"} lines or benchmark records."),
    output: Path = typer.Option(..., "--output", "-o", help="Answers JSONL; appended to and resumed (ids already there are skipped)."),
    graph: Path = typer.Option(..., "--graph", "-g", help="Graph directory."),
    config: Optional[Path] = CONFIG_OPT,
    batch_size: Optional[int] = typer.Option(None, "--batch-size", "-b", help="Questions per batch (default infer.batch_size)."),
    overrides: Optional[list[str]] = SET_OPT,
) -> None:
    """Answer a file of questions with evidence and timings; safe to interrupt and run again."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
    from rich.console import Console

    from bencao.serving.config import load_serve_config
    from bencao.serving.infer import read_questions, run_inference

    cfg = load_serve_config(config, overrides or [])
    if batch_size is not None:
        cfg.infer.batch_size = batch_size
    read_questions(questions)  # validate before loading models
    pipeline = _pipeline(graph, cfg)
    with Progress(TextColumn("[bold]infer[/]"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), TimeRemainingColumn(),
                  console=Console(stderr=True), transient=True) as prog:
        task = prog.add_task("", total=None)

        def on_progress(done: int, total: int) -> None:
            prog.update(task, completed=done, total=total)

        res = run_inference(pipeline, questions, output, cfg.infer, progress=on_progress)
    typer.echo(f"answered {res['answered']} of {res['total']} questions ({res['skipped']} already in {output}) -> {output}")
