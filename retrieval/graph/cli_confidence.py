"""`bencao graph confidence` and `bencao graph complete`: the uncertain-graph commands.

Plain typer command functions; ``retrieval/cli.py`` registers them on its ``graph`` sub-app.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from bencao import cliopts


def _progress(label: str):
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(TextColumn(f"[bold]{label}[/] {{task.description}}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                    TimeElapsedColumn(), console=Console(stderr=True), transient=True)


def confidence(
    graph: Path = cliopts.graph(help="Graph directory."),
    config: Optional[Path] = cliopts.config(f"Confidence {cliopts.RECIPE}, e.g. graph/confidence; built-in defaults when omitted."),
    reset: bool = typer.Option(False, "--reset", help="Undo: give every triple back the confidence it had before calibration."),
    set_: Optional[list[str]] = cliopts.overrides("key=value override of the recipe (repeatable), e.g. -s model.epochs=50 -s evidence.curated=2."),
    overrides: Optional[list[str]] = cliopts.overrides_arg("key=value overrides of the recipe, the same as --set, e.g. model.epochs=50."),
) -> None:
    """Train the UKGE model on the graph's triples and set each triple's confidence from it and the evidence."""
    from bencao.config import load_config
    from bencao.retrieval.graph.confidence import ConfidenceConfig, calibrate_graph, reset_confidences
    from bencao.retrieval.graph.store import Graph
    from bencao.retrieval.index import refresh_indexes

    from bencao.retrieval.graph.versions import writer_lock

    with writer_lock(graph), Graph.open(graph) as g:  # one writer at a time
        if reset:
            n = reset_confidences(g)
            refresh_indexes(g)
            typer.echo(f"restored the original confidence of {n} triples")
            return
        cfg = load_config(ConfidenceConfig, config, cliopts.merged(overrides, set_))
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
    graph: Path = cliopts.graph(help="Graph directory (with a model from `bencao graph confidence`)."),
    config: Optional[Path] = cliopts.config(f"Completion {cliopts.RECIPE}, e.g. graph/complete; built-in defaults when omitted."),
    evaluate: bool = typer.Option(False, "--evaluate", help="Measure instead of adding: hide --test-fraction of the open triples, retrain UKGE on the rest, "
                                  "and report the precision/recall of what completion proposes (written to <graph>/ukge/completion_eval.json; "
                                  "completion with min_precision > 0 needs it)."),
    test_fraction: float = typer.Option(0.1, "--test-fraction", help="--evaluate: share of the open triples hidden."),
    seed: int = typer.Option(0, "--seed", help="--evaluate: seed of the held-out split."),
    dry_run: bool = cliopts.dry_run(),
    set_: Optional[list[str]] = cliopts.overrides("key=value override of the recipe (repeatable), e.g. -s threshold=0.9 -s relations=[treats]."),
    overrides: Optional[list[str]] = cliopts.overrides_arg("key=value overrides of the recipe, the same as --set, e.g. threshold=0.9."),
) -> None:
    """Add missing triples the UKGE model scores above the threshold, as one removable derived document.

    Closed-world relations (recipe ingredients, catalogue lists, ontology parents) are never completed;
    a relation is completed only when `--evaluate` measured its held-out precision ≥ min_precision.
    Functional relations (has_nature, and any with at most one value per head in the data) never get a
    second value for a head, nor more than one new one.

    Measured held-out precision at the default threshold 0.85 on the sample graph: 0.00 — 11 treats
    triples proposed, 0 of them hidden true ones (10% held out, seed 0); below 0.85 it stays under
    0.02 (0.013 at 0.5 over 8,956 proposals). So with min_precision 0.5 nothing is added there; see
    docs/confidence.md. Run --evaluate on your own graph before trusting it.
    """
    from bencao.config import load_config
    from bencao.retrieval.graph.completion import CompleteConfig, complete_graph
    from bencao.retrieval.graph.store import Graph
    from bencao.retrieval.index import refresh_indexes

    cfg = load_config(CompleteConfig, config, cliopts.merged(overrides, set_) + (["dry_run=true"] if dry_run else []))
    if evaluate and cfg.dry_run:
        typer.echo(f"dry run: would hide {test_fraction:g} of the open triples (seed {seed}), retrain UKGE on the rest and write "
                   f"{graph / 'ukge' / 'completion_eval.json'}")
        return
    if evaluate:
        _evaluate_completion(graph, cfg, test_fraction, seed)
        return
    from bencao.retrieval.graph.versions import writer_lock

    with writer_lock(graph), Graph.open(graph) as g:  # one writer at a time
        with _progress("complete") as prog:
            task = prog.add_task("", total=1)

            def on_relation(name: str, i: int, n: int) -> None:
                prog.update(task, description=name, completed=i, total=n)

            report = complete_graph(g, cfg, progress=on_relation)
        names = {e["id"]: e["name"] for e in g.get_entities([x for c in report["examples"] for x in (c["head_id"], c["tail_id"])]).values()}
        if report["added"]:
            refresh_indexes(g)
    for rel, why in report.get("closed", {}).items():
        typer.echo(f"  not completed: {rel}: {why}")
    for rel, why in report.get("gated", {}).items():
        typer.echo(f"  not completed: {rel}: {why}")
    for rel, r in report["relations"].items():
        m = report.get("measured", {}).get(rel)
        held = (f"; held-out precision {m['precision']:.2f} ({m['correct']}/{m['proposed']})" if m and m.get("precision") is not None else
                "; held-out precision unmeasured" if not m else "; held-out evaluation proposed none")
        fun = f"; functional: {r['heads_with_a_value']} heads with a value skipped" if "functional" in r else ""
        typer.echo(f"  {rel}: {r['heads']} heads, {r['candidates']} candidates ≥ {cfg.threshold}{held}{fun}")
    if cfg.dry_run:
        typer.echo(f"dry run: {report['kept']} triples would be added")
        for c in report["examples"][:10]:
            typer.echo(f"  {names.get(c['head_id'], c['head_id'])} {c['relation']} {names.get(c['tail_id'], c['tail_id'])}  {c['score']:.3f}")
    elif report["document"]:
        typer.echo(f"added {report['added']} completed triples as document {report['document']} "
                   f"(remove them with `bencao graph remove {report['document']} --graph {graph}`)")
    else:
        typer.echo(f"nothing to add: no candidate scored ≥ {cfg.threshold}")


def _evaluate_completion(graph: Path, cfg, test_fraction: float, seed: int) -> None:
    from bencao.retrieval.graph.completion import evaluate_completion, write_evaluation
    from bencao.retrieval.graph.store import Graph

    from bencao.retrieval.graph.versions import writer_lock

    with writer_lock(graph), Graph.open(graph) as g:  # one writer at a time
        with _progress("held-out ukge") as prog:
            task = prog.add_task("training", total=1)

            def on_epoch(epoch: int, epochs: int, loss: float) -> None:
                prog.update(task, completed=epoch, total=epochs, description=f"epoch {epoch}/{epochs} loss {loss:.4f}")

            report = evaluate_completion(g, cfg, test_fraction=test_fraction, seed=seed, progress=on_epoch)
        path = write_evaluation(g, report)
    fmt = lambda v: "–" if v is None else f"{v:.3f}"  # noqa: E731
    for rel, why in report["closed"].items():
        typer.echo(f"  not completed: {rel}: {why}")
    typer.echo(f"held out {report['hidden']} of {report['open_triples']} open triples (seed {seed}); at threshold {report['threshold']}:")
    for rel, m in report["by_relation"].items():
        typer.echo(f"  {rel}: {m['proposed']} proposed, {m['correct']} hidden ones among them: precision {fmt(m['precision'])}, "
                   f"recall {fmt(m['recall'])} of {m['hidden']}")
    typer.echo("  precision by threshold: " + ", ".join(f"{t}: {fmt(c['precision'])} (n={c['proposed']})" for t, c in report["curve"].items()))
    typer.echo(f"wrote {path}")
