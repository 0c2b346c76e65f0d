"""``bencao recipes list|show``: the recipes bencao ships, to use by name or to copy and edit."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from bencao import cliopts

recipes_app = typer.Typer(
    help="The shipped recipes (graph, retrieval, serving, sft, embed, data_gen, accelerate, deepspeed, cases). "
    "Every --config takes a recipe name (e.g. graph/sample, sft/qwen2.5-7b-instruct/lora_zero2) as well as a path.",
    no_args_is_help=True,
)


@recipes_app.command("list")
def list_(kind: Optional[str] = typer.Argument(None, help="Only this kind (the first part of the name), e.g. sft."),
          paths: bool = typer.Option(False, "--paths", help="Print each recipe's file path too.")) -> None:
    """List the shipped recipes: name and the first line of its description."""
    from bencao.errors import ConfigError
    from bencao.recipes import list_recipes

    rows = [r for r in list_recipes() if kind is None or r.kind == kind.strip("/")]
    if not rows:
        kinds = sorted({r.kind for r in list_recipes() if r.kind})
        raise ConfigError(f"no recipes of kind {kind!r}; kinds: {', '.join(kinds)}")
    width = max(len(r.name) for r in rows)
    for r in rows:
        extra = f"  {r.path}" if paths else ""
        typer.echo(f"{r.name:<{width}}  {r.summary}{extra}".rstrip())


@recipes_app.command("show")
def show(name: str = typer.Argument(..., help="Recipe name (see `bencao recipes list`) or path."),
         out: Optional[Path] = cliopts.out(help="Output file: a copy of the recipe to edit (refused when it exists), instead of printing it."),
         path: bool = typer.Option(False, "--path", help="Print only where the recipe's file is.")) -> None:
    """Print a shipped recipe, or copy it to a file to edit (`bencao recipes show graph/sample -o my.yaml`)."""
    from bencao.errors import ConfigError
    from bencao.io import atomic_write_text
    from bencao.recipes import resolve

    file = resolve(name)
    if path:
        typer.echo(str(file))
        return
    text = file.read_text(encoding="utf-8")
    if out is None:
        typer.echo(text, nl=False)
        return
    if out.exists():
        raise ConfigError(f"{out}: already exists; choose another file or remove it first")
    atomic_write_text(out, text)
    typer.echo(f"wrote {out} (from {file})", err=True)
