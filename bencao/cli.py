"""The one ``bencao`` command. Sub-commands live beside the code they drive and are mounted here.

Heavy libraries (torch, transformers, faiss) are imported inside the commands, so ``bencao --help``
and light commands start fast. User mistakes end in a one-line ``error: ...`` and exit code 2,
never a traceback.
"""

from __future__ import annotations

import logging
import os
import sys

import typer

app = typer.Typer(
    name="bencao",
    help="bencao (本草): build a knowledge graph from TCM books, food ontologies and supplement KBs; "
    "distill data from a teacher LLM; train a CoT model and an embedder; answer with traceable evidence.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _print_version(value: bool) -> None:
    if value:
        from bencao import __version__

        typer.echo(f"bencao {__version__}")
        raise typer.Exit()


@app.callback()
def _root(verbose: bool = typer.Option(False, "--verbose", "-v", help="Log debug messages."),
          version: bool = typer.Option(False, "--version", "-V", callback=_print_version, is_eager=True,
                                       help="Print the bencao version and exit.")) -> None:
    logging.basicConfig(level=logging.DEBUG if verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s")


@app.command()
def version() -> None:
    """Print the bencao version."""
    from bencao import __version__

    typer.echo(__version__)


#: Where each command lives: (module, its Typer app, the group it is mounted as; None = top-level commands).
COMMANDS: tuple[tuple[str, str, str | None], ...] = (
    ("bencao.retrieval.cli", "graph_app", "graph"),  # graph build|index|add|remove|stats|formats|export|confidence|complete ...
    ("bencao.retrieval.cli_search", "app", None),  # link
    ("bencao.serving.cli", "app", None),  # ask, serve, infer
    ("bencao.evaluation.cli", "app", None),  # eval
    ("bencao.data_gen.cli", "data_app", "data"),  # data extract|cot|pairs|negatives
    ("bencao.training.cli", "train_app", "train"),  # train sft|embedder|plan
    ("bencao.training.cli", "export_app", None),  # export
    ("bencao.cli_recipes", "recipes_app", "recipes"),  # recipes list|show
)


def _mount() -> None:
    import importlib

    for module, attr, group in COMMANDS:
        sub = getattr(importlib.import_module(module), attr)
        if group:
            app.add_typer(sub, name=group)
        else:
            app.add_typer(sub)


_mount()


def main(argv: list[str] | None = None) -> int:
    """Console-script entry point: runs the app and turns user errors into one line."""
    import click

    from bencao.errors import BencaoError

    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    try:
        app(args=argv, prog_name="bencao", standalone_mode=False)
    except BencaoError as exc:
        typer.echo(f"error: {exc}", err=True)
        return getattr(exc, "exit_code", 2)  # 2, or e.g. 128 + signal for a training run stopped by SIGTERM
    except OSError as exc:
        from bencao.errors import is_disk_full

        if not is_disk_full(exc):
            raise
        where = f" while writing {exc.filename}" if exc.filename else ""
        typer.echo(f"error: no space left on device{where}; the command stopped (free some space and run it again)", err=True)
        return 2
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except click.exceptions.Abort:
        typer.echo("aborted", err=True)
        return 130
    except KeyboardInterrupt:
        typer.echo("interrupted; completed work is saved and the step can be resumed", err=True)
        return 130
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())


def run() -> None:  # console script
    sys.exit(main())
