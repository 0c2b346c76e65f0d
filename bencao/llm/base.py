"""The one client protocol every LLM use goes through, and the retry/concurrency it shares.

A backend implements ``_call_once(messages, params) -> Completion``; :class:`BaseClient` adds
retries with exponential back-off on transient failures (timeouts, refused connections, 429,
5xx) and ``complete_many`` with bounded parallelism. ``complete_many`` never raises for a single
item: a failed request comes back as an :class:`LLMError` in its slot, so a long run goes on.
"""

from __future__ import annotations

import abc

import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from bencao.config import field as cfg_field
from bencao.errors import BencaoError

Message = dict[str, str]


@dataclass
class Completion:
    """One reply: its text and what it cost."""

    text: str
    model: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    finish_reason: str | None = None
    cached: bool = False
    latency_s: float = 0.0
    raw: dict[str, Any] = field(default_factory=dict)


class LLMError(BencaoError):
    """A request that failed (after retries when ``retryable``): refused, timed out, rejected."""

    def __init__(self, message: str, *, retryable: bool = False, kind: str = "error"):
        super().__init__(message)
        self.retryable = retryable
        self.kind = kind  # timeout | connection | rate_limit | server | rejected | cache_miss | error


@dataclass
class LLMConfig:
    """Which LLM to ask and how. One block of every data-generation recipe."""

    backend: str = cfg_field("openai", help="Backend name: openai (any OpenAI-compatible HTTP endpoint) | local-hf (transformers) | vllm (in-process vLLM, CUDA).")
    model: str = cfg_field("Qwen/Qwen2.5-72B-Instruct", help="Model id sent to the endpoint, or a local path for local-hf.")
    base_url: str | None = cfg_field(None, help="Endpoint base URL, e.g. http://127.0.0.1:8000/v1; default: $BENCAO_LLM_BASE_URL or $OPENAI_BASE_URL.")
    api_key_env: str = cfg_field("OPENAI_API_KEY", help="Environment variable holding the API key ('EMPTY' is sent when unset, as vLLM expects).")
    timeout_s: float = cfg_field(120.0, help="Per-request timeout in seconds.")
    max_retries: int = cfg_field(3, help="Retries of a transient failure (timeout, connection, 429, 5xx) before the item is skipped.")
    backoff_s: float = cfg_field(1.0, help="First back-off delay; doubles per retry, with jitter.")
    backoff_max_s: float = cfg_field(30.0, help="Longest back-off delay.")
    max_concurrency: int = cfg_field(8, help="Requests in flight at once.")
    temperature: float = cfg_field(0.2, help="Sampling temperature (0 = greedy).")
    top_p: float = cfg_field(1.0, help="Nucleus sampling mass.")
    max_tokens: int = cfg_field(1024, help="Longest reply in tokens.")
    seed: int | None = cfg_field(None, help="Sampling seed sent to endpoints that honour it.")
    batch_size: int = cfg_field(8, help="local-hf: prompts generated together in one batch.")
    device: str = cfg_field("auto", help="local-hf: cpu | cuda | auto.")
    dtype: str = cfg_field("auto", help="local-hf: auto | float32 | bfloat16 | float16.")
    cache: str | None = cfg_field(None, help="SQLite response cache file; default <output>/llm_cache.sqlite. 'none' disables it.")
    replay_only: bool = cfg_field(False, help="Answer only from the cache; a miss is a skipped item (replays a run exactly).")
    price_prompt_per_mtok: float = cfg_field(0.0, help="Cost per million prompt tokens, for the ledger.")
    price_completion_per_mtok: float = cfg_field(0.0, help="Cost per million completion tokens, for the ledger.")

    def params(self) -> dict[str, Any]:
        """Generation parameters that are part of the cache key."""
        p: dict[str, Any] = {"temperature": self.temperature, "top_p": self.top_p, "max_tokens": self.max_tokens}
        if self.seed is not None:
            p["seed"] = self.seed
        return p


@runtime_checkable
class LLMClient(Protocol):
    """What every backend (and the cache in front of one) provides."""

    model: str

    def complete(self, messages: list[Message], **params: Any) -> Completion: ...

    def complete_many(self, batch: list[list[Message]], **params: Any) -> list[Completion | LLMError]: ...


class BaseClient(abc.ABC):
    """Retries and bounded parallelism over a backend's ``_call_once``."""

    model: str

    def __init__(self, *, max_retries: int = 3, backoff_s: float = 1.0, backoff_max_s: float = 30.0, max_concurrency: int = 8,
                 default_params: dict[str, Any] | None = None):
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        self.backoff_max_s = backoff_max_s
        self.max_concurrency = max(1, max_concurrency)
        self.default_params = dict(default_params or {})
        self._sem = threading.BoundedSemaphore(self.max_concurrency)

    @abc.abstractmethod
    def _call_once(self, messages: list[Message], params: dict[str, Any]) -> Completion:
        """One request to the backend, without retries."""

    def _params(self, params: dict[str, Any]) -> dict[str, Any]:
        return {**self.default_params, **{k: v for k, v in params.items() if v is not None}}

    def complete(self, messages: list[Message], **params: Any) -> Completion:
        """One request with retries; raises :class:`LLMError` when it finally fails."""
        p = self._params(params)
        attempt = 0
        while True:
            try:
                with self._sem:
                    t0 = time.monotonic()
                    out = self._call_once(messages, p)
                    out.latency_s = time.monotonic() - t0
                    return out
            except LLMError as exc:
                if not exc.retryable or attempt >= self.max_retries:
                    if exc.retryable:
                        raise LLMError(f"{exc} (gave up after {attempt + 1} attempts)", retryable=True, kind=exc.kind) from None
                    raise
            delay = min(self.backoff_max_s, self.backoff_s * (2 ** attempt)) * (0.5 + random.random() / 2)
            time.sleep(delay)
            attempt += 1

    def complete_many(self, batch: list[list[Message]], **params: Any) -> list[Completion | LLMError]:
        """All requests, at most ``max_concurrency`` in flight; failures come back in their slot."""

        def one(msgs: list[Message]) -> Completion | LLMError:
            try:
                return self.complete(msgs, **params)
            except LLMError as exc:
                return exc

        if len(batch) <= 1 or self.max_concurrency == 1:
            return [one(m) for m in batch]
        with ThreadPoolExecutor(max_workers=min(self.max_concurrency, len(batch))) as pool:
            return list(pool.map(one, batch))
