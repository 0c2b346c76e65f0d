"""Backends by name. ``make_client(cfg, default_cache=...)`` builds one, with the cache in front.

Register another backend::

    @register_backend("my-endpoint")
    def _make(cfg: LLMConfig) -> LLMClient: ...
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from bencao.errors import ConfigError
from bencao.llm.base import LLMClient, LLMConfig

BACKENDS: dict[str, Callable[[LLMConfig], LLMClient]] = {}


def register_backend(name: str) -> Callable[[Callable[[LLMConfig], LLMClient]], Callable[[LLMConfig], LLMClient]]:
    def deco(fn: Callable[[LLMConfig], LLMClient]) -> Callable[[LLMConfig], LLMClient]:
        BACKENDS[name] = fn
        return fn

    return deco


@register_backend("openai")
def _openai(cfg: LLMConfig) -> LLMClient:
    from bencao.llm.openai_http import OpenAIClient

    return OpenAIClient.from_config(cfg)


@register_backend("local-hf")
def _local_hf(cfg: LLMConfig) -> LLMClient:
    from bencao.llm.local_hf import LocalHFClient

    return LocalHFClient.from_config(cfg)


@register_backend("llama-cpp")
def _llama_cpp(cfg: LLMConfig) -> LLMClient:
    from bencao.llm.llama_cpp import LlamaCppClient  # llama-cpp-python is an optional extra

    return LlamaCppClient.from_config(cfg)


@register_backend("vllm")
def _vllm(cfg: LLMConfig) -> LLMClient:
    from bencao.llm.vllm_backend import VLLMClient  # vLLM itself is imported only here, on a CUDA machine

    return VLLMClient.from_config(cfg)


def make_client(cfg: LLMConfig, default_cache: str | Path | None = None) -> LLMClient:
    """The configured backend, behind the response cache unless ``cache: none``."""
    if cfg.backend not in BACKENDS:
        raise ConfigError(f"llm.backend: unknown backend {cfg.backend!r}; known: {', '.join(sorted(BACKENDS))}")
    inner = BACKENDS[cfg.backend](cfg)
    return with_cache(inner, cfg, default_cache)


def with_cache(inner: LLMClient, cfg: LLMConfig, default_cache: str | Path | None = None) -> LLMClient:
    path = cfg.cache if cfg.cache is not None else default_cache
    if path is None or str(path).lower() == "none":
        if cfg.replay_only:
            raise ConfigError("llm.replay_only needs a cache (llm.cache)")
        return inner
    from bencao.llm.cache import CachedClient

    return CachedClient(inner, path, replay_only=cfg.replay_only, default_params=cfg.params())
