"""MkDocs hook: the reference pages, generated at build time from the code, so nothing drifts.

- ``reference/cli.md``: every command of ``bencao.cli.app`` (walked through Typer's Click command
  tree): usage, help text, arguments and options with their help and defaults, exactly as
  ``--help`` prints them.
- ``reference/configuration.md``: every key of the typed run configs, from the dataclasses' help
  strings (``bencao.config.describe``).
- ``reference/recipes.md``: every shipped recipe (``bencao.recipes.list_recipes``) with its header comment.
- ``results.md``: ``bench/RESULTS.md``, the recorded measurements, as a page of the site.

Registered in ``mkdocs.yml`` under ``hooks:``. The functions below are also used by
``tests/test_docs.py``.
"""

from __future__ import annotations

import dataclasses
import importlib
import os
import re
import typing
from pathlib import Path
from typing import Any, Iterator

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "bench" / "RESULTS.md"

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


# ---- Markdown helpers ------------------------------------------------------------------------

_MD_SPECIAL = re.compile(r"([\\*_\[\]])")


def md_text(text: str, *, table: bool = False) -> str:
    """Plain help text → Markdown: `code spans` kept, everything else escaped (HTML, emphasis, links)."""
    parts = re.split(r"(`[^`]*`)", text)
    out = []
    for i, part in enumerate(parts):
        if i % 2 == 1:  # a code span (Python-Markdown's tables leave pipes inside code spans alone)
            out.append(part)
            continue
        part = part.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
        part = _MD_SPECIAL.sub(r"\\\1", part)
        if table:
            part = part.replace("|", "\\|")
        out.append(part)
    return "".join(out)


def md_code(text: str, *, table: bool = False) -> str:
    """``text`` as one code span (backticks inside it handled; a pipe inside a code span does not split a table cell)."""
    fence = "``" if "`" in text else "`"
    pad = " " if "`" in text else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def paragraphs(help_text: str) -> str:
    """A docstring-style help text (lines wrapped, blank lines between paragraphs) → Markdown paragraphs."""
    paras = [" ".join(line.strip() for line in block.splitlines() if line.strip() and line.strip() != "\b")
             for block in re.split(r"\n\s*\n", help_text.strip())]
    return "\n\n".join(md_text(p) for p in paras if p)


# ---- the CLI reference ------------------------------------------------------------------------

def _click_context(command: Any, name: str, parent: Any = None) -> Any:
    try:  # typer >= 0.20 vendors its own Click
        from typer._click import Context
    except ImportError:  # pragma: no cover - older typer on the real click
        from click import Context
    return Context(command, info_name=name, parent=parent)


def walk_commands(command: Any | None = None, path: tuple[str, ...] = (), parent_ctx: Any = None) -> Iterator[tuple[tuple[str, ...], Any, Any]]:
    """(path below ``bencao``, command, its Click context) for the app and every group and command, depth first."""
    if command is None:
        import typer

        from bencao.cli import app

        command = typer.main.get_command(app)
    ctx = _click_context(command, path[-1] if path else "bencao", parent_ctx)
    yield path, command, ctx
    for name, sub in (getattr(command, "commands", None) or {}).items():
        if getattr(sub, "hidden", False):
            continue
        yield from walk_commands(sub, (*path, name), ctx)


def command_paths() -> list[str]:
    """Every runnable command (not the groups), e.g. ``graph build``, ``train sft``, ``ask``."""
    return [" ".join(p) for p, cmd, _ in walk_commands() if p and not getattr(cmd, "commands", None)]


def _anchor(path: tuple[str, ...]) -> str:
    return "bencao" + "".join("-" + re.sub(r"[^a-z0-9]+", "-", p.lower()).strip("-") for p in path)


def cli_markdown() -> str:
    entries = list(walk_commands())
    out = [
        "# Command-line reference",
        "",
        "Generated from the command line itself when the site is built (each entry is what "
        "`bencao COMMAND --help` prints), so it always matches the installed version. Every command "
        "also takes `-h`/`--help`, which prints the same text in a terminal.",
        "",
        "## Commands",
        "",
    ]
    for path, cmd, _ in entries:
        if not path:
            continue
        depth = "    " * (len(path) - 1)
        short = (cmd.help or "").strip().split("\n\n")[0].replace("\n", " ")
        first = re.split(r"(?<=[.!?])\s", short, maxsplit=1)[0]
        out.append(f"{depth}- [`bencao {' '.join(path)}`](#{_anchor(path)}): {md_text(first)}")
    out.append("")
    for path, cmd, ctx in entries:
        level = "#" * min(2 + max(len(path) - 1, 0), 4)
        title = "bencao " + " ".join(path) if path else "bencao"
        out += [f"{level} `{title}` {{#{_anchor(path)}}}", ""]
        usage = cmd.get_usage(ctx).strip()
        out += ["```text", usage, "```", ""]
        if cmd.help:
            out += [paragraphs(cmd.help), ""]
        params = [p for p in cmd.get_params(ctx) if not getattr(p, "hidden", False) and p.name != "help"]
        args = [p for p in params if p.param_type_name == "argument"]
        opts = [p for p in params if p.param_type_name != "argument"]
        for label, group in (("Arguments", args), ("Options", opts)):
            rows = [p.get_help_record(ctx) for p in group]
            rows = [r for r in rows if r]
            if not rows:
                continue
            out += [f"**{label}**", ""]
            for decl, text in rows:
                text = " ".join(text.split())
                out.append(f"- {md_code(decl)}" + (f": {md_text(text)}" if text else ""))
            out.append("")
        subs = getattr(cmd, "commands", None)
        if subs:
            out += ["**Commands**", ""]
            for name, sub in subs.items():
                if getattr(sub, "hidden", False):
                    continue
                short = (sub.help or "").strip().split("\n\n")[0].replace("\n", " ")
                out.append(f"- [`{name}`](#{_anchor((*path, name))}): {md_text(short)}")
            out.append("")
    return "\n".join(out)


# ---- the configuration reference -----------------------------------------------------------------

#: (section title, "module:Class", what reads it). Every dataclass with help strings in bencao must be one
#: of these or nested inside one (tests/test_docs.py checks it).
CONFIG_SECTIONS: list[tuple[str, str, str]] = [
    ("Graph build recipe", "bencao.retrieval.build:GraphBuildConfig",
     "`bencao graph build --config RECIPE` (recipes in `configs/graph/`). See [Building a graph](../graph.md)."),
    ("A source of a graph build recipe", "bencao.retrieval.build:SourceConfig",
     "Each entry of a build recipe's `sources:` list."),
    ("Reading limits (every input format)", "bencao.io:ReadLimits",
     "Loader options every format takes: `-O key=value` (`--loader-option`) of `bencao graph add`, a source's `options:` or the recipe's "
     "`options.FORMAT.KEY`. See [Reliability](../reliability.md#input-limits)."),
    ("Book options (`books-txt`, `books-md`, `sections-jsonl`)", "bencao.retrieval.ingest.books:BookOptions",
     "Loader options of the book formats. See [The classics corpus](../corpus.md)."),
    ("Catalogue options (`catalog-csv`)", "bencao.retrieval.ingest.catalog:CatalogOptions",
     "Loader options of the medicine-food homology catalogue format."),
    ("KB CSV mapping file (`kb-csv`)", "bencao.retrieval.ingest.kb_csv:KbMapping",
     "The YAML file named by the `kb-csv` option `mapping` (shipped: `configs/graph/idisk_*.yaml`)."),
    ("KB CSV mapping: `entities:`", "bencao.retrieval.ingest.kb_csv:EntityMapping", "The `entities:` block of a mapping file."),
    ("KB CSV mapping: `relations:`", "bencao.retrieval.ingest.kb_csv:RelationMapping", "The `relations:` block of a mapping file."),
    ("KB CSV mapping: an alias column", "bencao.retrieval.ingest.kb_csv:AliasColumn", "Each entry of `entities.aliases`."),
    ("KB CSV mapping: an attribute column", "bencao.retrieval.ingest.kb_csv:AttributeColumn",
     "Each entry of `entities.attributes` and `relations.attributes`."),
    ("Retrieval recipe", "bencao.retrieval.search.config:RetrievalConfig",
     "`bencao graph index --config`, `bencao link`, and the `retrieval:` section of a serving recipe (recipes in "
     "`configs/retrieval/`). In a serving recipe every key below is prefixed `retrieval.`; on the command line the "
     "prefix may be left out (`--set linking.tau=0.6`). See [Retrieval](../retrieval.md)."),
    ("Serving recipe", "bencao.serving.config:ServeConfig",
     "`bencao ask`, `serve`, `infer` and `eval --config` (recipes in `configs/serving/`). The `retrieval.*` keys are "
     "those of the [retrieval recipe](#retrieval-recipe); `eval.*` keys may leave out the `eval.` prefix on the "
     "command line. See [Answering](../answering.md)."),
    ("LLM block", "bencao.llm.base:LLMConfig",
     "Every LLM a run talks to (teacher, generator, CoT model, understanding, planner, linking selector/scorer/"
     "synonyms, judge) is one of these blocks: `llm:` in data-generation recipes, `generator:`, `cot.llm:`, "
     "`understand.llm:`, `planner.llm:`, `retrieval.linking.llm:` ... in serving recipes."),
    ("Integration", "bencao.retrieval.graph.integrate:IntegrateConfig",
     "`bencao graph integrate --config` (`configs/graph/integrate.yaml`). See [Building a graph](../graph.md#integration-one-entity-per-thing)."),
    ("Confidence (UKGE)", "bencao.retrieval.graph.confidence:ConfidenceConfig",
     "`bencao graph confidence --config` (`configs/graph/confidence.yaml`). See [Confidence and completion](../confidence.md)."),
    ("Completion", "bencao.retrieval.graph.completion:CompleteConfig",
     "`bencao graph complete --config` (`configs/graph/complete.yaml`). See [Confidence and completion](../confidence.md)."),
    ("Clinical cases", "bencao.retrieval.search.cases:CasesConfig",
     "`bencao graph cases classify|therapy --config` (`configs/cases/cases.yaml`). See [Clinical cases](../cases.md)."),
    ("CoT distillation", "bencao.data_gen.cot:CotDistillConfig",
     "`bencao data cot --config` (`configs/data_gen/cot_*.yaml`). See [Data generation](../data-generation.md)."),
    ("Multiple-choice items", "bencao.data_gen.mcq:McqConfig",
     "`bencao data mcq --config` (`configs/data_gen/mcq.yaml`). See [Data generation](../data-generation.md#multiple-choice-items-in-the-scored-prompt-bencao-data-mcq)."),
    ("Question–entity pairs", "bencao.data_gen.pairs:PairsConfig",
     "`bencao data pairs --config` (`configs/data_gen/pairs.yaml`)."),
    ("Hard negatives", "bencao.data_gen.negatives:NegativesConfig",
     "`bencao data negatives --config` (`configs/data_gen/negatives.yaml`)."),
    ("Triple extraction", "bencao.data_gen.extract:ExtractConfig",
     "`bencao data extract --config` (`configs/data_gen/extract.yaml`)."),
    ("SFT recipe: bencao's keys", "bencao.training.sft:SFTScriptArguments",
     "`bencao train sft --config` (`configs/sft/`). A recipe also takes every key of trl's `SFTConfig` (all of "
     "transformers' `TrainingArguments`) and trl's `ModelConfig`; see [Training](../training.md)."),
    ("Embedder recipe: bencao's keys", "bencao.training.embedder:EmbedderScriptArguments",
     "`bencao train embedder --config` (`configs/embed/`). A recipe also takes every key of sentence-transformers' "
     "`SentenceTransformerTrainingArguments`; see [Training](../training.md)."),
    ("Reranker recipe: bencao's keys", "bencao.training.reranker:RerankerScriptArguments",
     "`bencao train reranker --config` (`configs/rerank/`). A recipe also takes every key of sentence-transformers' "
     "`CrossEncoderTrainingArguments`; see [Training](../training.md#reranker-recipes)."),
    ("Static distillation recipe", "bencao.training.static_distill:DistillArguments",
     "`bencao train distill-static --config` (`configs/embed/qwen2.5-coder-0.5b/distill-static.yaml`): a static embedder "
     "distilled from a language model's vocabulary; see [Training](../training.md#a-static-embedder-distilled-from-a-real-lm)."),
]


def load_class(spec: str) -> type:
    module, name = spec.split(":")
    return getattr(importlib.import_module(module), name)


def _slug(title: str) -> str:
    """The anchor Python-Markdown's toc gives a heading (ASCII words joined by '-')."""
    import unicodedata

    value = unicodedata.normalize("NFKD", title).encode("ascii", "ignore").decode("ascii")
    value = re.sub(r"[^\w\s-]", "", value).strip().lower()
    return re.sub(r"[-\s]+", "-", value)


def nested_classes(cls: type) -> set[type]:
    """Dataclasses reachable from ``cls`` through its fields' types (inside Optional, list, dict too), and the
    dataclasses they extend (``ServeConfig`` documents every key of its base ``PipelineConfig``)."""
    seen: set[type] = set()

    def visit(tp: Any) -> None:
        if isinstance(tp, type) and dataclasses.is_dataclass(tp):
            if tp in seen:
                return
            seen.add(tp)
            for base in tp.__mro__[1:]:
                if dataclasses.is_dataclass(base):
                    visit(base)
            for f in dataclasses.fields(tp):
                visit(typing.get_type_hints(tp)[f.name])
            return
        for arg in typing.get_args(tp):
            visit(arg)

    visit(cls)
    return seen


def section_rows(cls: type) -> list[tuple[str, str, str]]:
    """The rows a section shows: ``describe(cls)``, less the serving recipe's ``retrieval.*`` (its own section)."""
    from bencao.config import describe

    rows = describe(cls)
    if cls.__name__ == "ServeConfig":
        rows = [r for r in rows if not r[0].startswith("retrieval.")]
    return rows


def configuration_markdown() -> str:
    out = [
        "# Configuration reference",
        "",
        "Every run reads one YAML recipe into a typed configuration; `key=value` overrides on the command line "
        "patch it (dotted keys reach nested sections: `index.embedder.batch_size=32`; lists as "
        "`kinds=[entities,triples]`). An unknown key or a value of the wrong type is a one-line error naming the "
        "file and the key. This page is generated from the configuration classes' own help strings when the site "
        "is built; see [Recipes](../recipes.md) for how recipes are found and combined.",
        "",
    ]
    out += ["| section | class | defined in |", "|---|---|---|"]
    for title, spec, _ in CONFIG_SECTIONS:
        out.append(f"| [{md_text(title, table=True)}](#{_slug(title)}) | `{spec.split(':')[1]}` | `{spec.split(':')[0]}` |")
    out.append("")
    for title, spec, intro in CONFIG_SECTIONS:
        cls = load_class(spec)
        out += [f"## {title} {{#{_slug(title)}}}", "", intro, ""]
        doc = (cls.__doc__ or "").strip()
        if doc and not doc.startswith(cls.__name__ + "("):  # dataclasses' generated signature is no documentation
            out += [paragraphs(doc), ""]
        out += ["| key | default | meaning |", "|---|---|---|"]
        for key, default, help_text in section_rows(cls):
            default = default if len(default) <= 300 else default[:297] + "..."
            out.append(f"| {md_code(key, table=True)} | {md_code(default, table=True)} | {md_text(' '.join(help_text.split()), table=True)} |")
        out.append("")
    return "\n".join(out)


# ---- recipes and recorded results ---------------------------------------------------------------

def _header_comment(path: Path) -> str:
    lines = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("#"):
            lines.append(line[1:].strip())
        elif line.strip():
            break
    return "\n".join(lines)


def recipes_markdown() -> str:
    """The shipped recipes as ``bencao recipes list`` finds them (bencao.recipes), each with its header comment."""
    from bencao.recipes import list_recipes

    recipes = list_recipes()
    if not recipes:
        raise RuntimeError("bencao.recipes.list_recipes() found no shipped recipes")
    out = [
        "# Shipped recipes",
        "",
        "Every recipe bencao ships, by the name `--config` takes, with the comment it opens with (usually what it "
        "is for and the command that runs it). `bencao recipes list` prints the same list, `bencao recipes show NAME` "
        "a recipe, and `bencao recipes show NAME -o FILE` copies it to edit. Generated from the files when the site "
        "is built; see [Recipes](../recipes.md) for how to use and override them, and the "
        "[configuration reference](configuration.md) for every key.",
        "",
    ]
    current = None
    for recipe in recipes:
        kind = recipe.kind or "other"
        if kind != current:
            out += [f"## {kind}", ""]
            current = kind
        out += [f"### `{recipe.name}`", ""]
        comment = _header_comment(recipe.path) if recipe.path.suffix != ".json" else ""
        if comment:
            out += ["```text", comment, "```", ""]
        else:
            out += [f"`{recipe.path.name}` (no header comment).", ""]
    return "\n".join(out)


def results_markdown() -> str:
    text = RESULTS.read_text(encoding="utf-8")
    note = ("!!! note \"Recorded runs\"\n    This page is `bench/RESULTS.md`, where every measurement quoted in these "
            "documents was recorded, newest sections last, with the command that made it and the machine it ran on. "
            "Earlier sections may describe code that has changed since; later sections say so where a figure was "
            "re-measured.\n")
    head, _, rest = text.partition("\n")
    return f"{head}\n\n{note}\n{rest}"


GENERATED: dict[str, Any] = {
    "reference/cli.md": cli_markdown,
    "reference/configuration.md": configuration_markdown,
    "reference/recipes.md": recipes_markdown,
    "results.md": results_markdown,
}


# ---- MkDocs events --------------------------------------------------------------------------------

def on_files(files: Any, config: Any) -> Any:
    from mkdocs.structure.files import File

    for uri, make in GENERATED.items():
        existing = files.get_file_from_path(uri)
        if existing is not None:
            files.remove(existing)
        files.append(File.generated(config, uri, content=make()))
    return files


def on_config(config: Any) -> Any:
    # Rebuild the generated pages when their sources change under `mkdocs serve`.
    watch = [str(REPO / "bench" / "RESULTS.md"), str(REPO / "configs")]
    for w in watch:
        if w not in config.watch:
            config.watch.append(w)
    return config
