"""`bencao graph ...`: build, grow, shrink, inspect and export a knowledge graph."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

import typer

from bencao import cliopts

graph_app = typer.Typer(help="Build and manage a knowledge graph directory (graph.sqlite + indexes + manifest.json).", no_args_is_help=True)

GRAPH_OPT = cliopts.graph(help="Graph directory.")


def _console():
    from rich.console import Console

    return Console(stderr=True)


def _parse_options(items: list[str]) -> dict[str, Any]:
    from bencao.config import apply_overrides

    return apply_overrides({}, items)


@graph_app.command("build")
def build(
    config: Path = cliopts.config(f"Build {cliopts.RECIPE}, e.g. graph/sample.", required=True),
    graph: Path = cliopts.graph(help="Graph directory to build (replaced when the build succeeds)."),
    no_index: bool = typer.Option(False, "--no-index", help="Skip building the retrieval indexes."),
    skip_current: bool = typer.Option(False, "--skip-current", help="Keep DIR when this recipe built it from the same inputs "
                                      "(recipe settings, source files' bytes, bencao's ingestion code) and nothing wrote to it "
                                      "since; its indexes are still brought up to date."),
    set_: Optional[list[str]] = cliopts.overrides("key=value override of the recipe (repeatable), e.g. -s index=false -s root=/data/books."),
    overrides: Optional[list[str]] = cliopts.overrides_arg("key=value overrides of the recipe, the same as --set, e.g. index=false."),
) -> None:
    """Build a graph from a recipe into DIR. The old graph is replaced only when the build succeeds."""
    from bencao.progress import StepProgress
    from bencao.retrieval.build import build_graph, load_build_config

    cfg, root = load_build_config(config, cliopts.merged(overrides, set_))
    if no_index:
        cfg.index = False
    with StepProgress("build") as on_progress:  # a bar on a terminal, plain lines in logs
        result = build_graph(cfg, root, graph, progress=on_progress, skip_current=skip_current)
    s = result["stats"]
    if result.get("skipped"):
        typer.echo(f"{result['graph']} is current (built by this recipe from the same inputs): {s['documents']} documents, "
                   f"{s['snippets']} snippets, {s['entities']} entities, {s['triples']} triples")
        return
    typer.echo(f"built {result['graph']} in {result['seconds']:.1f}s: {s['documents']} documents, {s['sections']} sections, "
               f"{s['snippets']} snippets, {s['entities']} entities, {s['triples']} triples")
    dropped = result.get("dropped_documents") or []
    if dropped:
        names = ", ".join(d["source"] for d in dropped[:5]) + (f" and {len(dropped) - 5} more" if len(dropped) > 5 else "")
        typer.echo(f"warning: the graph this build replaced held {len(dropped)} document(s) the recipe does not make ({names}), "
                   "added with `bencao graph add` (perhaps while this build ran): they are not in the rebuilt graph; add them again",
                   err=True)


@graph_app.command("index")
def index(
    graph: Path = GRAPH_OPT,
    config: Optional[Path] = cliopts.config(f"Retrieval {cliopts.RECIPE}, whose `index` section is used (default: the configuration "
                                            "recorded at the last index build, else built-in defaults)."),
    force: bool = typer.Option(False, "--force", help="Rebuild every index even when its items did not change (vectors still come from the cache)."),
    set_: Optional[list[str]] = cliopts.overrides("Index override key=value (repeatable), e.g. -s embedder.languages=[en,zh] -s dense_kinds=[entities]."),
    overrides: Optional[list[str]] = cliopts.overrides_arg("Index overrides key=value, the same as --set, e.g. embedder.languages=[en,zh]."),
) -> None:
    """Build or refresh the retrieval indexes: BM25 per kind, dense vectors per embedder (cached by model fingerprint and text).

    Prints a JSON summary; `embedded` counts the texts this run embedded. A config that names no
    embedder model keeps the one the index was built with."""
    from bencao.retrieval.graph.store import Graph
    from bencao.retrieval.graph.versions import writer_lock
    from bencao.retrieval.index import resolve_index_config, update_indexes

    con = _console()
    with writer_lock(graph), Graph.open(graph) as g:
        if force:  # the repair of a damaged manifest (its one-line error names this command)
            why = g.repair_manifest()
            if why:
                typer.echo(f"warning: {g.manifest_path()} was damaged ({why}); kept as {g.manifest_path().name}.damaged, "
                           "a new one written from the store; rebuilding every index", err=True)
        cfg = resolve_index_config(g, config, cliopts.merged(overrides, set_))
        summary = update_indexes(g, cfg, force=force, progress=lambda kind, i, n: con.print(f"index {kind}: {i}/{n}", end="\r"))
    typer.echo(json.dumps(summary, ensure_ascii=False, indent=2))


@graph_app.command("add")
def add(
    path: Path = typer.Argument(..., help="Input file (.gz accepted)."),
    graph: Path = GRAPH_OPT,
    format: str = typer.Option(..., "--format", "-f", help="Input format: see `bencao graph formats`."),
    option: Optional[list[str]] = typer.Option(None, "--loader-option", "-O", help="Loader option key=value (repeatable), e.g. -O materia_medica=true; "
                                               "see `bencao graph formats`."),
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
        try:
            if added:
                g.write_manifest("add", {"document": doc_id, "source": path.name, "format": format, **counts})
                fault("add.manifest")
                _reintegrate(g)
            # also when unchanged: a run killed between its commit and this step left the indexes behind
            refreshed = refresh_indexes(g)
        except OSError as exc:
            from bencao.errors import DiskFull, is_disk_full

            if not is_disk_full(exc):
                raise
            raise DiskFull(f"no space left on device while writing {exc.filename or graph}; the document {doc_id} is in the graph "
                           "but its indexes are behind (temporary files removed): free some space and run the command again") from None
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

    from bencao.retrieval.graph.integrate import FORMAT as INTEGRATION, undo_integration

    from bencao.faults import fault

    with writer_lock(graph), Graph.open(graph) as g:
        doc = g.get_document(document_id)
        if doc is not None and doc["format"] == INTEGRATION:  # its journal says how to put the rows back
            out = undo_integration(g)
            refresh_indexes(g)
            typer.echo(f"removed {document_id}: integration undone ({out['entities_restored']} merged entities restored)")
            return
        if doc is None:  # gone already: perhaps a remove killed after its commit left the manifest or the indexes behind
            healed = _finish_interrupted_remove(g, document_id)
            if healed:
                typer.echo(f"{document_id} is not in the graph (removed by an earlier run); {healed}")
                return
        removed = g.remove_document(document_id)
        fault("remove.committed")
        g.write_manifest("remove", {"document": document_id, "source": doc["source"] if doc else None, "removed": removed})
        fault("remove.manifest")
        _reintegrate(g)
        refresh_indexes(g)
    typer.echo(f"removed {document_id}: " + ", ".join(f"{v} {k}" for k, v in removed.items() if v))


def _finish_interrupted_remove(g: Any, document_id: str) -> str | None:
    """What a ``graph remove`` of ``document_id`` killed after its commit left undone, done now: the manifest's
    record and counts, re-integration, the indexes. Says what it did, or None when nothing was behind (the id
    is simply not in the graph: the caller's one-line error follows)."""
    from bencao.retrieval.index import refresh_indexes
    from bencao.retrieval.index.build import stale_reasons

    m = g.read_manifest()
    recorded = any(h.get("op") == "remove" and h.get("document") == document_id for h in m.get("history") or [])
    manifest_behind = m.get("counts") != g.counts()
    indexes_behind = bool(stale_reasons(g))
    if not (manifest_behind or (recorded and indexes_behind)):
        return None
    done = []
    if manifest_behind:
        g.write_manifest("remove" if not recorded else "repair", {"document": document_id, "completed": "an interrupted remove"})
        _reintegrate(g)
        done.append("manifest updated")
    if refresh_indexes(g) is not None and indexes_behind:
        done.append("indexes brought up to date")
    return "finished what the interrupted run left: " + ", ".join(done)


def _reintegrate(g: Any) -> None:
    """An integrated graph stays integrated: after a document came or went, merge again."""
    from bencao.retrieval.graph.integrate import reintegrate_if_integrated

    report = reintegrate_if_integrated(g)
    if report is not None:
        _console().print(f"re-integrated: {report['entities_merged']} entities merged into {report['groups']}")


@graph_app.command("integrate")
def integrate_cmd(
    graph: Path = GRAPH_OPT,
    config: Optional[Path] = cliopts.config(f"Integration {cliopts.RECIPE}, e.g. graph/integrate (keys of IntegrateConfig); built-in defaults when omitted."),
    set_: Optional[list[str]] = cliopts.overrides("key=value override of the recipe (repeatable), e.g. -s type_groups=[[chemical,supplement_ingredient]]."),
    dry_run: bool = cliopts.dry_run(),
    undo: bool = typer.Option(False, "--undo", help="Undo the graph's integration (restores every merged entity whose sources remain)."),
    as_json: bool = typer.Option(False, "--json", help="Print the full JSON report (every group, with the reason it was merged)."),
    show_quarantined: bool = typer.Option(False, "--quarantined", help="List the entities the graph's integration quarantined "
                                                                        "(noise-only names) with their aliases and triples; changes nothing."),
) -> None:
    """Merge entities across sources (iDISK 2.0): shared CUI/xref ids (a CUI matches in any spelling),
    same-as statements (exact_match, same_as, ...), whatever the types; or the same normalised name within a type.
    Then entities of different types that share a name and are both substances (FoodOn's, UBERON's and iDISK's
    honey) are linked same_as with the evidence; other homonyms stay apart, counted before and after.

    Entities whose every name is noise ('8', '%', 'X') are quarantined: out of the graph, journalled,
    listed by `--quarantined`. Every source id stays an alias of the merged entity and every row keeps
    its source document, so `graph remove` of a source still removes exactly what only it supported.
    Running it again re-integrates from scratch; the merge is journalled in a derived document
    (`--undo` reverts it, quarantine included).
    """
    from bencao.config import load_config
    from bencao.retrieval.graph.integrate import IntegrateConfig, integrate, integration_document, quarantined, summary, undo_integration
    from bencao.retrieval.graph.store import Graph
    from bencao.retrieval.graph.versions import writer_lock
    from bencao.retrieval.index import refresh_indexes

    if show_quarantined:
        with Graph.open(graph) as g:
            q = quarantined(g)
        if as_json:
            typer.echo(json.dumps(q, ensure_ascii=False, indent=2))
        elif q["document"] is None:
            typer.echo("not integrated: nothing quarantined")
        else:
            typer.echo(f"{len(q['entities'])} entities quarantined by integration {q['document']} (`--undo` restores them)")
            for e in q["entities"]:
                typer.echo(f"  {e['name']!r} [{e['id']}, {e['type']}]: {e['triples']} triples"
                           + "".join(f"\n    {h} —{r}→ {t}" for h, r, t in e.get("triple_rows", [])[:5]))
        return
    cfg = load_config(IntegrateConfig, config, list(set_ or []) + (["dry_run=true"] if dry_run else []))
    with writer_lock(graph), Graph.open(graph) as g:
        if undo and dry_run:
            doc = integration_document(g)
            typer.echo(json.dumps({"dry_run": True, "would_undo": doc["id"] if doc else None}, ensure_ascii=False) if as_json else
                       (f"dry run: would undo integration {doc['id']}" if doc else "not integrated: nothing to undo"))
            return
        if undo:
            out = undo_integration(g)
            if out["undone"]:
                refresh_indexes(g)
            typer.echo(json.dumps(out, ensure_ascii=False) if as_json else
                       (f"undid integration {out['undone']}: {out['entities_restored']} merged entities restored" if out["undone"] else "not integrated: nothing to undo"))
            return
        with _console().status("integrating entities ..."):
            report = integrate(g, cfg)
        if report.get("document") or report.get("replaced"):
            refresh_indexes(g)
    typer.echo(json.dumps(report, ensure_ascii=False, indent=2) if as_json else summary(report))


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

from bencao.retrieval import cli_cases as _cli_cases  # noqa: E402

graph_app.add_typer(_cli_cases.cases_app, name="cases")
graph_app.command("link-layers")(_cli_cases.link_layers_command)
