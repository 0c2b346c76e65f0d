"""Shipped recipes and sample data, found by name in a checkout and in an installed wheel alike.

The repository's ``configs/`` and ``data/`` folders are package data of bencao (``bencao.configs``,
``bencao.data``), so an installed wheel holds them at ``site-packages/bencao/configs`` and
``site-packages/bencao/data``, in the same layout as a checkout. :func:`package_root` is the folder
that holds both: the repository root in a checkout, the ``bencao`` package folder in a wheel.

A recipe is named by its path under ``configs/`` without the suffix — ``graph/sample``,
``sft/qwen2.5-7b-instruct/lora_zero2``, ``accelerate/zero2`` — and every ``--config`` takes a name as
well as a path: a path that exists (relative to the current directory) wins, then the name, then the
old spelling ``configs/graph/sample.yaml``. ``bencao recipes list`` prints them all.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from bencao.errors import ConfigError

SUFFIXES = (".yaml", ".yml", ".json")
#: Files under configs/ that are not recipes (a model architecture a recipe plans with, package markers).
_NOT_RECIPES = ("architecture",)


def package_root() -> Path:
    """The folder holding ``configs/`` and ``data/``: the checkout root, or ``site-packages/bencao``."""
    here = Path(__file__).resolve().parent
    if (here / "configs").is_dir():
        return here
    return here.parent


def recipes_dir() -> Path:
    return package_root() / "configs"


def sample_data_dir() -> Path:
    return package_root() / "data" / "sample"


def find(ref: str | Path) -> Path | None:
    """The shipped file a recipe name (or an old ``configs/...`` path) names; None when there is none."""
    text = str(ref).strip().replace("\\", "/")
    if not text or text.startswith(("/", "~")) or ".." in Path(text).parts:
        return None
    root = package_root()
    rel = text[len("configs/"):] if text.startswith("configs/") else text
    candidates = [recipes_dir() / rel, *(recipes_dir() / f"{rel}{s}" for s in SUFFIXES), root / text]
    for c in candidates:
        if c.is_file():
            return c
    return None


def resolve(ref: str | Path, folder: str = "") -> Path:
    """A path or a recipe name → an existing file. ``folder`` (``accelerate``, ``deepspeed``) lets a bare
    name like ``zero2`` stand for ``accelerate/zero2``. Raises ConfigError naming the close matches."""
    p = Path(ref).expanduser()
    if p.is_file():
        return p
    hit = find(ref) or (find(f"{folder}/{ref}") if folder else None)
    if hit is not None:
        return hit
    raise ConfigError(not_found(str(ref), folder))


def not_found(ref: str, folder: str = "") -> str:
    """The one-line error for a config that is neither a file nor a shipped recipe, with close names."""
    names = [r.name for r in list_recipes()]
    stem = Path(ref).stem.lower()
    close = [n for n in names if stem and stem in n.lower()] or [n for n in names if folder and n.startswith(folder + "/")]
    hint = f"; shipped recipes like it: {', '.join(close[:6])}" if close else "; `bencao recipes list` shows the shipped recipes"
    return f"{ref}: config file not found (no such file, and no shipped recipe of that name{hint})"


@dataclass(frozen=True)
class Recipe:
    name: str  # e.g. graph/sample
    kind: str  # the first folder: graph, retrieval, serving, sft, embed, data_gen, accelerate, deepspeed, cases
    path: Path
    summary: str  # the file's first comment line, or ""


def list_recipes() -> list[Recipe]:
    base = recipes_dir()
    out = []
    for path in sorted(base.rglob("*")):
        if not path.is_file() or path.suffix not in SUFFIXES:
            continue
        rel = path.relative_to(base)
        if any(part in _NOT_RECIPES or part.startswith((".", "_")) for part in rel.parts):
            continue
        name = rel.with_suffix("").as_posix()
        out.append(Recipe(name, rel.parts[0] if len(rel.parts) > 1 else "", path, _summary(path)))
    return out


def _summary(path: Path) -> str:
    try:
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                s = line.strip()
                if s.startswith("#"):
                    s = s.lstrip("#").strip()
                    if s and not s.startswith("bencao "):
                        return s
                    continue
                if s:
                    break
    except (OSError, UnicodeDecodeError):
        return ""
    return ""
