"""`bencao graph confidence` and `bencao graph complete`: the uncertain-graph commands.

Plain typer command functions; ``retrieval/cli.py`` registers them on its ``graph`` sub-app.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer


def _progress(label: str):
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(TextColumn(f"[bold]{label}[/] {{task.description}}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                    TimeElapsedColumn(), console=Console(stderr=True), transient=True)


def confidence(
    graph: Path = typer.Option(..., "--graph", "-g", help="Graph directory."),
    config: Optional[Path] = typer.Option(None, "--config", "-c", help="Recipe YAML (e.g. configs/graph/confidence.yaml); built-in defaults when omitted."),
    reset: bool = typer.Option(False, "--reset", help="Undo: give every triple back the confidence it had before calibration."),
    overrides: Optional[list[str]] = typer.Argument(None, help="key=value overrides, e.g. model.epochs=50 evidence.curated=2."),
) -> None:
    """Train the UKGE model on the graph's triples and set each triple's confidence from it and the evidence."""
    from bencao.config import load_config
    from bencao.retrieval.graph.confidence import ConfidenceConfig, calibrate_graph, reset_confidences
    from bencao.retrieval.graph.store import Graph
    from bencao.retrieval.index import refresh_indexes

    with Graph.open(graph) as g:
        if reset:
            n = reset_confidences(g)
            refresh_indexes(g)
            typer.echo(f"restored the original confidence of {n} triples")
            return
        cfg = load_config(ConfidenceConfig, config, overrides or [])
        with _progress("ukge") as prog:
            task = prog.add_task("training", total=cfg.model.epochs)

            def on_epoch(epoch: int, epochs: int, loss: float) -> None:
                prog.update(task, completed=epoch, description=f"epoch {epoch}/{epochs} loss {loss:.4f}")

            s = calibrate_graph(g, cfg, progress=on_epoch)
        refresh_indexes(g)
    loss = f"; loss {s['loss_first']:.4f} → {s['loss_last']:.4f}" if s["loss_first"] is not None else ""
    typer.echo(f"calibrated {s['triples']} triples over {s['entities']} entities and {s['relations']} relations{loss}; "
               f"mean confidence {s['mean_before']:.3f} → {s['mean_after']:.3f}; model {s['model']}")


def complete(
    graph: Path = typer.Option(..., "--graph", "-g", help="Graph directory (with a model from `bencao graph confidence`)."),
    config: Optional[Path] = typer.Option(None, "--config", "-c", help="Recipe YAML (e.g. configs/graph/complete.yaml); built-in defaults when omitted."),
    overrides: Optional[list[str]] = typer.Argument(None, help="key=value overrides, e.g. threshold=0.9 relations=[is_a] dry_run=true."),
) -> None:
    """Add missing triples the UKGE model scores above the threshold, as one removable derived document."""
    from bencao.config import load_config
    from bencao.retrieval.graph.completion import CompleteConfig, complete_graph
    from bencao.retrieval.graph.store import Graph
    from bencao.retrieval.index import refresh_indexes

    cfg = load_config(CompleteConfig, config, overrides or [])
    with Graph.open(graph) as g:
        with _progress("complete") as prog:
            task = prog.add_task("", total=1)

            def on_relation(name: str, i: int, n: int) -> None:
                prog.update(task, description=name, completed=i, total=n)

            report = complete_graph(g, cfg, progress=on_relation)
        names = {e["id"]: e["name"] for e in g.get_entities([x for c in report["examples"] for x in (c["head_id"], c["tail_id"])]).values()}
        refresh_indexes(g)
    if report.get("skipped_curated"):
        typer.echo(f"  not completed (curated sources only): {', '.join(report['skipped_curated'])}")
    for rel, r in report["relations"].items():
        typer.echo(f"  {rel}: {r['heads']} heads, {r['candidates']} candidates ≥ {cfg.threshold}")
    if cfg.dry_run:
        typer.echo(f"dry run: {report['kept']} triples would be added")
        for c in report["examples"][:10]:
            typer.echo(f"  {names.get(c['head_id'], c['head_id'])} {c['relation']} {names.get(c['tail_id'], c['tail_id'])}  {c['score']:.3f}")
    elif report["document"]:
        typer.echo(f"added {report['added']} completed triples as document {report['document']} "
                   f"(remove them with `bencao graph remove {report['document']} --graph {graph}`)")
    else:
        typer.echo(f"nothing to add: no candidate scored ≥ {cfg.threshold}")
