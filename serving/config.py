"""The serving recipe: one YAML for ``bencao serve`` and ``bencao infer`` (see configs/serving/)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from bencao.config import field, load_config
from bencao.serving.api import ApiConfig
from bencao.serving.infer import InferConfig
from bencao.serving.pipeline import PipelineConfig


@dataclass
class ServeConfig(PipelineConfig):
    """Pipeline (retrieval, CoT model, generator, prompt) + HTTP API + batch inference settings."""

    api: ApiConfig = field(default_factory=ApiConfig, help="HTTP server and request limits.")
    infer: InferConfig = field(default_factory=InferConfig, help="Batch inference.")


def load_serve_config(path: str | Path | None, overrides: list[str] | tuple[str, ...] = ()) -> ServeConfig:
    """Read a serving recipe; relative paths in it (retrieval_config, model paths) stay relative to the working directory."""
    return load_config(ServeConfig, path, list(overrides))
