"""The one ``bencao`` command. Sub-commands live beside the code they drive and are mounted here.

Heavy libraries (torch, transformers, faiss) are imported inside the commands, so ``bencao --help``
and light commands start fast. User mistakes end in a one-line ``error: ...`` and exit code 2,
never a traceback.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import sys

import typer

app = typer.Typer(
    name="bencao",
    help="bencao (本草): build a knowledge graph from TCM books, food ontologies and supplement KBs; "
    "distill data from a teacher LLM; train a CoT model and an embedder; answer with traceable evidence.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # help texts are plain: `key=[a,b]` examples are not rich markup
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
    ("bencao.cli_models", "models_app", "models"),  # models list|install|path|remove
    ("bencao.cli_llm", "llm_app", "llm"),  # llm serve
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


def _click_kinds(exc: BaseException) -> set[str]:
    """The click exception classes ``exc`` is an instance of, by name: Exit, Abort, UsageError, ClickException,
    NoArgsIsHelpError ... Matched by name in whichever module raised it (``click.exceptions``, typer's vendored
    ``typer._click.exceptions``, ``typer.exceptions``), so the handling holds for every click/typer release."""
    return {c.__name__ for c in type(exc).__mro__ if c.__module__.split(".")[0] in ("click", "typer")}


def _one_line(text: str) -> str:
    line = " ".join(part.strip() for part in str(text).splitlines() if part.strip())
    return line[0].lower() + line[1:] if len(line) > 1 and line[0].isupper() and line[1].islower() else line


def _command_path(argv: list[str] | None) -> str:
    """``bencao graph add`` for ``[graph, add, ...]``: the deepest command the arguments name."""
    import typer.main

    cmd = typer.main.get_command(app)
    path = ["bencao"]
    for arg in argv if argv is not None else sys.argv[1:]:
        sub = getattr(cmd, "commands", {}).get(arg) if not arg.startswith("-") else None
        if sub is None:
            if not arg.startswith("-"):
                break
            continue
        cmd = sub
        path.append(arg)
    return " ".join(path)


def usage_error_line(exc: BaseException, argv: list[str] | None = None) -> str:
    """``error: <what is wrong>; try 'bencao CMD --help'``: one line for a click usage error."""
    msg = _one_line(exc.format_message() if hasattr(exc, "format_message") else str(exc)).rstrip(".")
    ctx = getattr(exc, "ctx", None)
    where = ctx.command_path if ctx is not None and getattr(ctx, "command_path", None) else _command_path(argv)
    return f"error: {msg}; try '{where} --help'"


def _damaged_store(exc: BaseException) -> str | None:
    """The one line for a graph store found damaged after it was opened (a malformed page met by a query)."""
    store = sys.modules.get("bencao.retrieval.graph.store")
    return store.damaged_store_message(exc) if store is not None else None


def main(argv: list[str] | None = None) -> int:
    """Console-script entry point: runs the app and turns user errors into one line.

    A usage error (unknown command or option, missing argument, bad value) prints one ``error: ...``
    line on stderr and returns 2; a :class:`BencaoError` prints one line and returns its exit code.
    """
    from bencao.errors import BencaoError

    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    try:
        rc = app(args=argv, prog_name="bencao", standalone_mode=False)
    except BencaoError as exc:
        typer.echo(f"error: {exc}", err=True)
        return getattr(exc, "exit_code", 2)  # 2, or e.g. 128 + signal for a training run stopped by SIGTERM
    except (OSError, sqlite3.Error) as exc:  # a full disk anywhere (index files, caches, a store): one line, not a traceback
        from bencao.errors import is_disk_full

        if not is_disk_full(exc):
            damaged = _damaged_store(exc)
            if damaged is None:
                raise
            typer.echo(f"error: {damaged}", err=True)
            return 2
        where = f" while writing {exc.filename}" if getattr(exc, "filename", None) else ""
        typer.echo(f"error: no space left on device{where}; the command stopped (free some space and run it again)", err=True)
        return 2
    except KeyboardInterrupt:
        rc = 130
    except Exception as exc:  # click's exceptions, whichever copy of click raised them
        kinds = _click_kinds(exc)
        if "Exit" in kinds:
            rc = getattr(exc, "exit_code", 0)
        elif "Abort" in kinds:
            typer.echo("aborted", err=True)
            return 130
        elif "NoArgsIsHelpError" in kinds:  # a group given no command: its help, as a usage error
            if exc.format_message().strip():  # rich help is printed already, plain help comes as the message
                typer.echo(exc.format_message(), err=True)
            return 2
        elif "UsageError" in kinds:
            typer.echo(usage_error_line(exc, argv), err=True)
            return 2
        elif "ClickException" in kinds:
            typer.echo(f"error: {_one_line(exc.format_message())}", err=True)
            return getattr(exc, "exit_code", 1)
        else:
            raise
    if rc == 130:  # typer turns Ctrl-C into Exit(130)
        typer.echo("interrupted; completed work is saved and the step can be resumed", err=True)
    return rc if isinstance(rc, int) else 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())


def run() -> None:  # console script
    sys.exit(main())
