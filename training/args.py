"""YAML recipe + ``key=value`` overrides → the typed dataclasses a training script takes.

The training scripts use the libraries' own argument dataclasses (trl's ``SFTConfig`` and
``ModelConfig``, sentence-transformers' training arguments) next to a small dataclass of our own,
as trl's scripts do. One flat YAML mapping feeds all of them; every key must belong to one of the
dataclasses, otherwise the file and the key are named in a one-line error.

``bf16: auto`` (the default when the key is absent) resolves to bf16 where the hardware has it
(a CUDA device with bf16 support) and to full precision elsewhere.
"""

from __future__ import annotations

import argparse
import os
import sys
import dataclasses
import enum
import types
import typing
from pathlib import Path
from typing import Any, Callable, Sequence

from bencao.config import apply_overrides, read_yaml
from bencao.errors import BencaoError, ConfigError


def bf16_available() -> bool:
    """True where bf16 training is fast and exact enough: a CUDA device that supports it."""
    import torch

    return bool(torch.cuda.is_available() and torch.cuda.is_bf16_supported())


def _distributed_env() -> bool:
    import os

    return int(os.environ.get("WORLD_SIZE", "1")) > 1 or os.environ.get("LOCAL_RANK") is not None


def _has_accelerator() -> bool:
    import torch

    return torch.cuda.is_available() or (hasattr(torch, "xpu") and torch.xpu.is_available())


def recipe_dict(config: str | Path | None, overrides: Sequence[str] = ()) -> dict[str, Any]:
    """Read the YAML recipe and apply ``key=value`` overrides; ``bf16: auto`` is resolved here."""
    data = read_yaml(config) if config else {}
    data = apply_overrides(data, list(overrides))
    if "use_cpu" not in data and _distributed_env() and not _has_accelerator():
        # Under torchrun on a CPU-only machine accelerate forms a MULTI_CPU (gloo) group only with
        # use_cpu; without it every rank would silently train alone.
        data["use_cpu"] = True
    if str(data.get("bf16", "auto")).lower() == "auto":
        data["bf16"] = bf16_available() and not data.get("fp16", False)
    return data


def parse_recipe(dataclass_types: Sequence[type], data: dict[str, Any], where: str) -> tuple[Any, ...]:
    """Build one instance of each dataclass from the flat mapping ``data``.

    Unknown keys and values the dataclasses refuse become one-line ``ConfigError``s naming ``where``.
    """
    from transformers import HfArgumentParser

    data = check_recipe(dataclass_types, data, where)
    parser = HfArgumentParser(list(dataclass_types))
    try:
        return parser.parse_dict(data)
    except (TypeError, ValueError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConfigError(f"{where}: {first}") from None


def check_recipe(dataclass_types: Sequence[type], data: dict[str, Any], where: str) -> dict[str, Any]:
    """What :func:`parse_recipe` checks before it builds anything: every key known to one of the dataclasses (a
    misspelt key names the closest known ones), every value readable as its field's type. Cheap (no training
    arguments are built, nothing is initialised): a launcher runs it once before starting any rank."""
    import difflib

    known: set[str] = set()
    for tp in dataclass_types:
        known |= {f.name for f in dataclasses.fields(tp) if f.init}
    unknown = sorted(set(data) - known)
    if unknown:
        hints = [f"{k} (did you mean {', '.join(close)}?)" if (close := difflib.get_close_matches(k, known, n=2)) else k for k in unknown]
        raise ConfigError(f"{where}: unknown key(s) {'; '.join(hints)}")
    return {k: _coerce(v, _field_types(dataclass_types).get(k), where, k) for k, v in data.items()}


def _field_types(dataclass_types: Sequence[type]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for tp in dataclass_types:
        hints = typing.get_type_hints(tp)
        for f in dataclasses.fields(tp):
            out.setdefault(f.name, hints.get(f.name))
    return out


def _coerce(value: Any, tp: Any, where: str, key: str) -> Any:
    """Strings → numbers/booleans where the field wants one (YAML reads ``1e-4`` as a string), and
    YAML's ``no`` (read as False) → ``"no"`` for string/enum fields such as ``eval_strategy: no``."""
    if tp is None:
        return value
    args = [a for a in typing.get_args(tp) if a is not type(None)] if typing.get_origin(tp) in (typing.Union, types.UnionType) else [tp]
    if value is False and bool not in args:
        return "no"
    if not isinstance(value, str):
        return value
    if str in args or not args:
        return value
    for a in args:
        try:
            if a is bool and value.lower() in ("true", "false", "yes", "no", "1", "0"):
                return value.lower() in ("true", "yes", "1")
            if a is int:
                return int(value)
            if a is float:
                return float(value)
        except ValueError:
            continue
    if value.lower() in ("none", "null") and type(None) in typing.get_args(tp):
        return None
    if any(a in (int, float, bool) for a in args) and not any(isinstance(a, type) and issubclass(a, enum.Enum) for a in args):
        raise ConfigError(f"{where}: {key}: cannot read {value!r} as {' or '.join(getattr(a, '__name__', str(a)) for a in args)}")
    return value


def split_cli(argv: Sequence[str] | None, prog: str, description: str) -> tuple[str | None, list[str]]:
    """``--config PATH key=value ...`` → (path, overrides); the same shape for every launcher."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("--config", "-c", default=None, help="YAML recipe (one file = one run)")
    parser.add_argument("overrides", nargs="*", help="key=value overrides, e.g. learning_rate=1e-4 max_steps=20")
    ns = parser.parse_args(list(argv) if argv is not None else None)
    return ns.config, list(ns.overrides)


def run_script(argv: Sequence[str] | None, prog: str, description: str,
               parse_args: Callable[..., tuple[Any, ...]], main: Callable[..., Any]) -> int:
    """The ``__main__`` of a training script: parse ``--config`` + overrides, run ``main``, and turn a
    user error into one line and exit code 2 (the same under python -m, torchrun and accelerate)."""
    from bencao.training.stop import Stopped

    config, overrides = split_cli(argv, prog, description)
    try:
        main(*parse_args(config, overrides))
    except Stopped as exc:  # SIGTERM/SIGINT: checkpoint saved, 128 + signal as a killed process would report
        if os.environ.get("RANK", "0") == "0":
            print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    except BencaoError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


def resolve_shipped(path: str | Path, folder: str = "", suffixes: Sequence[str] = ()) -> Path:
    """A path or a shipped recipe name → an existing file.

    Tried in order: the path as given (relative to the working directory), then the shipped recipe
    of that name (``sft/tiny/lora_cpu``, ``configs/deepspeed/ds_z2.json``), then a bare name inside
    ``folder`` so that ``zero2`` finds ``configs/accelerate/zero2.yaml`` (see :mod:`bencao.recipes`,
    which finds them in a checkout and in an installed wheel alike).
    """
    from bencao import recipes

    p = Path(path).expanduser()
    if p.is_file():
        return p.resolve()
    kind = folder[len("configs/"):] if folder.startswith("configs/") else folder
    hit = recipes.find(path) or (recipes.find(f"{kind}/{path}") if kind else None)
    if hit is not None and hit.suffix in (*suffixes, *recipes.SUFFIXES):
        return hit.resolve()
    raise ConfigError(recipes.not_found(str(path), kind).replace("config file not found", "file not found"))
