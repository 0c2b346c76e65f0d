"""`bencao graph ...`: build, grow, shrink, inspect and export a knowledge graph."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

import typer

graph_app = typer.Typer(help="Build and manage a knowledge graph directory (graph.sqlite + indexes + manifest.json).", no_args_is_help=True)

GRAPH_OPT = typer.Option(..., "--graph", "-g", help="Graph directory.")


def _console():
    from rich.console import Console

    return Console(stderr=True)


def _parse_options(items: list[str]) -> dict[str, Any]:
    from bencao.config import apply_overrides

    return apply_overrides({}, items)


@graph_app.command("build")
def build(
    config: Path = typer.Option(..., "--config", "-c", help="Build recipe YAML (e.g. configs/graph/sample.yaml)."),
    graph: Path = GRAPH_OPT,
    no_index: bool = typer.Option(False, "--no-index", help="Skip building the retrieval indexes."),
    overrides: Optional[list[str]] = typer.Argument(None, help="key=value overrides of the recipe, e.g. index=false."),
) -> None:
    """Build a graph from a recipe into DIR. The old graph is replaced only when the build succeeds."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from bencao.retrieval.build import build_graph, load_build_config

    cfg, root = load_build_config(config, overrides or [])
    if no_index:
        cfg.index = False
    with Progress(TextColumn("[bold]ingest[/] {task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                  TimeElapsedColumn(), console=_console(), transient=True) as prog:
        task = prog.add_task("", total=len(cfg.sources))

        def on_progress(name: str, i: int, n: int) -> None:
            prog.update(task, description=name, completed=i, total=n)

        result = build_graph(cfg, root, graph, progress=on_progress)
    s = result["stats"]
    typer.echo(f"built {result['graph']} in {result['seconds']:.1f}s: {s['documents']} documents, {s['sections']} sections, "
               f"{s['snippets']} snippets, {s['entities']} entities, {s['triples']} triples")


@graph_app.command("index")
def index(
    graph: Path = GRAPH_OPT,
    config: Optional[Path] = typer.Option(None, "--config", "-c", help="Retrieval YAML whose `index` section is used (default: the configuration recorded at the last index build, else built-in defaults)."),
    force: bool = typer.Option(False, "--force", help="Rebuild every index even when its items did not change (vectors still come from the cache)."),
    overrides: Optional[list[str]] = typer.Argument(None, help="Index overrides key=value, e.g. embedder.languages=[en,zh] dense_kinds=[entities]."),
) -> None:
    """Build or refresh the retrieval indexes: BM25 per kind, dense vectors per embedder (cached by model fingerprint and text).

    Prints a JSON summary; `embedded` counts the texts this run embedded. A config that names no
    embedder model keeps the one the index was built with."""
    from bencao.retrieval.graph.store import Graph
    from bencao.retrieval.graph.versions import writer_lock
    from bencao.retrieval.index import resolve_index_config, update_indexes

    con = _console()
    with writer_lock(graph), Graph.open(graph) as g:
        cfg = resolve_index_config(g, config, overrides or [])
        summary = update_indexes(g, cfg, force=force, progress=lambda kind, i, n: con.print(f"embedding {kind}: {i}/{n}", end="\r"))
    typer.echo(json.dumps(summary, ensure_ascii=False, indent=2))


@graph_app.command("add")
def add(
    path: Path = typer.Argument(..., help="Input file (.gz accepted)."),
    graph: Path = GRAPH_OPT,
    format: str = typer.Option(..., "--format", "-f", help="Input format: see `bencao graph formats`."),
    option: Optional[list[str]] = typer.Option(None, "--option", "-o", help="Loader option key=value (repeatable), e.g. -o materia_medica=true."),
    title: Optional[str] = typer.Option(None, help="Document title."),
    licence: Optional[str] = typer.Option(None, help="Licence to record."),
    create: bool = typer.Option(False, "--create", help="Create the graph directory if it does not exist."),
) -> None:
    """Add one document to an existing graph (a no-op when the same input is already there)."""
    from bencao.faults import fault
    from bencao.retrieval.graph.store import Graph
    from bencao.retrieval.graph.versions import writer_lock
    from bencao.retrieval.index import refresh_indexes
    from bencao.retrieval.ingest.registry import ingest_file

    with writer_lock(graph), Graph.open(graph, create=create) as g:  # one writer at a time: others wait, then go on
        doc_id, added, counts = ingest_file(g, format, path, _parse_options(option or []), title=title, licence=licence)
        if added:
            g.write_manifest("add", {"document": doc_id, "source": path.name, "format": format, **counts})
            fault("add.manifest")
        # also when unchanged: a run killed between its commit and this step left the indexes behind
        refreshed = refresh_indexes(g)
        if added:
            typer.echo(f"added {doc_id} ({path.name}): " + ", ".join(f"{v} {k}" for k, v in counts.items()))
        else:
            done = " (indexes brought up to date)" if refreshed and not refreshed.get("unchanged") else ""
            typer.echo(f"unchanged: {path.name} is already in the graph as {doc_id}{done}")


@graph_app.command("remove")
def remove(
    document_id: str = typer.Argument(..., help="Document id (see `bencao graph stats --documents`)."),
    graph: Path = GRAPH_OPT,
) -> None:
    """Remove a document and only what no other document supports."""
    from bencao.retrieval.graph.store import Graph
    from bencao.retrieval.graph.versions import writer_lock
    from bencao.retrieval.index import refresh_indexes

    with writer_lock(graph), Graph.open(graph) as g:
        doc = g.get_document(document_id)
        removed = g.remove_document(document_id)
        g.write_manifest("remove", {"document": document_id, "source": doc["source"] if doc else None, "removed": removed})
        refresh_indexes(g)
    typer.echo(f"removed {document_id}: " + ", ".join(f"{v} {k}" for k, v in removed.items() if v))


@graph_app.command("stats")
def stats(
    graph: Path = GRAPH_OPT,
    as_json: bool = typer.Option(False, "--json", help="Print JSON: documents, sections, snippets, entities, triples, by_layer, by_entity_type, by_relation."),
    documents: bool = typer.Option(False, "--documents", help="Also list the documents with their ids."),
) -> None:
    """Print counts of the graph: documents, sections, snippets, entities, triples, by layer/type/relation."""
    from bencao.retrieval.graph.store import Graph

    with Graph.open(graph, read_only=True) as g:
        s = g.stats()
        docs = g.documents() if documents else None
    if as_json:
        if docs is not None:
            s["document_list"] = [{k: d[k] for k in ("id", "source", "title", "kind", "format", "n_sections", "n_snippets", "n_triple_sources")} for d in docs]
        typer.echo(json.dumps(s, ensure_ascii=False, indent=2))
        return
    from rich.console import Console
    from rich.table import Table

    con = Console()
    t = Table(title=f"graph {graph}", show_header=False)
    for k in ("documents", "sections", "snippets", "entities", "aliases", "triples", "links"):
        t.add_row(k, f"{s[k]:,}")
    con.print(t)
    for key, title in (("by_layer", "triples by layer"), ("by_relation", "triples by relation"), ("by_entity_type", "entities by type")):
        tt = Table(title=title)
        tt.add_column("name")
        tt.add_column("count", justify="right")
        for name, n in list(s[key].items())[:25]:
            tt.add_row(str(name), f"{n:,}")
        con.print(tt)
    if docs is not None:
        dt = Table(title="documents")
        for col in ("id", "source", "kind", "format", "sections", "snippets", "triple sources"):
            dt.add_column(col)
        for d in docs:
            dt.add_row(d["id"], d["source"], d["kind"], d["format"] or "", str(d["n_sections"]), str(d["n_snippets"]), str(d["n_triple_sources"]))
        con.print(dt)


@graph_app.command("formats")
def formats_cmd() -> None:
    """List the input formats `graph add --format` accepts, with their options."""
    from bencao.retrieval.ingest.registry import LOADERS, formats

    for name in formats():
        spec = LOADERS[name]
        opts = f" [options: {', '.join(spec.options)}]" if spec.options else ""
        typer.echo(f"{name:16s} {spec.kind:9s} {spec.description}{opts}")


from bencao.retrieval.graph import cli_confidence as _cli_confidence  # noqa: E402

graph_app.command("confidence")(_cli_confidence.confidence)
graph_app.command("complete")(_cli_confidence.complete)

from bencao.retrieval.graph.export_neo4j import export_command as _export_command  # noqa: E402

graph_app.command("export")(_export_command)
