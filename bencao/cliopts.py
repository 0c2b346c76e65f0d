"""The options every ``bencao`` command spells the same way. Commands take them from here so one flag
means one thing everywhere (tests/test_cli_grammar.py walks the command tree and checks it):

* ``--graph/-g DIR``: the graph directory a command reads or writes.
* ``--config/-c RECIPE``: the command's recipe, a recipe name or YAML path (see ``bencao recipes list``).
* ``--set/-s key=value``: an override of that recipe (repeatable); where a command also takes
  ``key=value`` arguments after its options, those are the same overrides.
* ``--out/-o``: the output. A *directory* for a command that writes several files, a *file* for one that
  writes one; its help says which ("Output directory: ..." / "Output file: ...").
* ``--input/-i``: the input, a file or a directory by the same rule.
* ``--dry-run``: show what would run or change, and change nothing.
* ``-b`` is ``--bench`` (``bencao eval``); ``--batch-size`` has no short flag.
"""

from __future__ import annotations

import typer

#: How every help string names a recipe.
RECIPE = "recipe name or YAML path (see `bencao recipes list`)"

#: The one help text of ``--dry-run``.
DRY_RUN_HELP = "Show what would run or change, and change nothing."


def graph(required: bool = True, help: str = "Graph directory (built by `bencao graph build`).") -> object:
    return typer.Option(... if required else None, "--graph", "-g", help=help, metavar="DIR")


def config(help: str = f"Serving {RECIPE}: retrieval, LLM stages, answerer; default: built-in values.",
           required: bool = False) -> object:
    return typer.Option(... if required else None, "--config", "-c", help=help, metavar="RECIPE")


def overrides(help: str = "key=value override of the recipe (repeatable), e.g. -s linking.tau=0.6.") -> object:
    return typer.Option(None, "--set", "-s", help=help, metavar="KEY=VALUE")


def overrides_arg(help: str = "key=value overrides of the recipe, the same as --set.") -> object:
    """Positional ``key=value`` overrides, kept where a command took them before ``--set``."""
    return typer.Argument(None, help=help, show_default=False, metavar="KEY=VALUE")


def out(required: bool = False, help: str = "Output file.") -> object:
    """``--out/-o``; ``help`` starts "Output file" or "Output directory" (tests/test_cli_grammar.py checks it)."""
    return typer.Option(... if required else None, "--out", "--output", "-o", help=help, metavar=_metavar(help))


def input_(required: bool = False, help: str = "Input file (JSONL).") -> object:
    """``--input/-i``; ``help`` starts "Input file" or "Input directory"."""
    return typer.Option(... if required else None, "--input", "-i", help=help, metavar=_metavar(help))


def _metavar(help: str) -> str:
    first = help.split(":")[0].split("(")[0]
    return "FILE" if " file" in first else "DIR" if " directory" in first else "PATH"


def dry_run() -> object:
    return typer.Option(False, "--dry-run", help=DRY_RUN_HELP)


def merged(*lists: list[str] | None) -> list[str]:
    """Positional overrides and ``--set`` ones, in that order (a later one wins)."""
    return [item for items in lists for item in (items or [])]
