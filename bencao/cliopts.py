"""The options every ``bencao`` command spells the same way: ``--graph/-g``, ``--config/-c``, ``--set/-s``,
``--out/-o``, ``--input/-i``. Commands take them from here so one flag means one thing everywhere."""

from __future__ import annotations

import typer


def graph(required: bool = True, help: str = "Graph directory (built by `bencao graph build`).") -> object:
    return typer.Option(... if required else None, "--graph", "-g", help=help)


def config(help: str = "Serving recipe YAML (configs/serving/*.yaml: retrieval, LLM stages, answerer); default: built-in values.") -> object:
    return typer.Option(None, "--config", "-c", help=help)


def overrides(help: str = "key=value override of the recipe (repeatable), e.g. -s linking.tau=0.6.") -> object:
    return typer.Option(None, "--set", "-s", help=help)


def out(required: bool = False, help: str = "Output file or directory.") -> object:
    return typer.Option(... if required else None, "--out", "--output", "-o", help=help)


def input_(required: bool = False, help: str = "Input file (JSONL).") -> object:
    return typer.Option(... if required else None, "--input", "-i", help=help)
