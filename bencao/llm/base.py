"""The one client protocol every LLM use goes through, and the concurrency bound it shares.

Every client is async at heart (``acomplete`` / ``acomplete_many``) and runs on the process's one
LLM event loop (:mod:`bencao.llm.aio`); ``complete`` / ``complete_many`` are the same calls for
synchronous callers. :class:`BaseClient` bounds the requests in flight with one semaphore
(``llm.max_concurrency``, the only knob). A backend implements either ``_acall_once`` (native
async: the openai backend) or ``_call_once`` (blocking: local models, run in a worker thread).
Retries belong to the transport library (the openai client retries timeouts, refused connections,
408/409/429/5xx with exponential back-off and honours ``Retry-After``); a failure that is still
there after them comes back as an :class:`LLMError`. ``complete_many`` never raises for a single
item: a failed request comes back in its slot, so a long run goes on.
"""

from __future__ import annotations

import asyncio
import time
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


@dataclass
class ChoiceScores:
    """Next-token scores after a prompt: how likely each asked choice is to come next, and the likeliest tokens.

    ``scores[c]`` is the log-probability that the reply (after ``prefix``) starts with choice ``c`` — the sum of
    its first-token variants (``"A"``, ``" A"``) — or None when the backend could not see it (an endpoint that
    returns only the top tokens). This is how lm-eval-harness scores a multiple-choice letter.
    """

    scores: dict[str, float | None]
    top: list[tuple[str, float]] = field(default_factory=list)
    model: str = ""
    prompt_tokens: int = 0
    cached: bool = False
    latency_s: float = 0.0

    def best(self, n: int = 1) -> list[str]:
        ranked = sorted((c for c, v in self.scores.items() if v is not None), key=lambda c: -self.scores[c])  # type: ignore[operator]
        return ranked[:n]

    def to_dict(self) -> dict[str, Any]:
        return {"scores": dict(self.scores), "top": [list(t) for t in self.top], "model": self.model, "prompt_tokens": self.prompt_tokens}

    @classmethod
    def from_dict(cls, d: dict[str, Any], *, cached: bool = False) -> "ChoiceScores":
        return cls(scores={k: (None if v is None else float(v)) for k, v in d.get("scores", {}).items()},
                   top=[(str(t[0]), float(t[1])) for t in d.get("top", [])], model=str(d.get("model", "")),
                   prompt_tokens=int(d.get("prompt_tokens", 0)), cached=cached)


def choice_variants(choice: str) -> list[str]:
    """The first-token spellings of a choice a reply may start with: ``A``, `` A``."""
    return list(dict.fromkeys([choice, " " + choice]))


class LLMError(BencaoError):
    """A request that failed (after retries when ``retryable``): refused, timed out, rejected."""

    def __init__(self, message: str, *, retryable: bool = False, kind: str = "error", retry_after_s: float | None = None):
        super().__init__(message)
        self.retryable = retryable
        self.kind = kind  # timeout | connection | rate_limit | server | rejected | cache_miss | error
        self.retry_after_s = retry_after_s  # a rate limit's Retry-After, when the server gave one


@dataclass
class LLMConfig:
    """Which LLM to ask and how. One block of every data-generation recipe."""

    backend: str = cfg_field("openai", help="Backend name: openai (any OpenAI-compatible HTTP endpoint) | local-hf (transformers) | "
                                            "llama-cpp (a GGUF file through llama-cpp-python) | vllm (in-process vLLM, CUDA).")
    model: str = cfg_field("Qwen/Qwen2.5-72B-Instruct", help="Model id sent to the endpoint; for local-hf a local path or an installed "
                                                             "model's name (bencao models list); for llama-cpp that name or a .gguf file.")
    base_url: str | None = cfg_field(None, help="Endpoint base URL, e.g. http://127.0.0.1:8000/v1; default: $BENCAO_LLM_BASE_URL or $OPENAI_BASE_URL.")
    api_key_env: str = cfg_field("OPENAI_API_KEY", help="Environment variable holding the API key ('EMPTY' is sent when unset, as vLLM expects).")
    timeout_s: float = cfg_field(120.0, help="Per-request timeout in seconds.")
    max_retries: int = cfg_field(3, help="Retries of a transient failure (timeout, connection, 408/409/429, 5xx) by the openai client, "
                                         "with exponential back-off (0.5 s doubling to 8 s, jittered) and Retry-After honoured; then the item is skipped.")
    max_concurrency: int = cfg_field(64, help="Requests in flight at once: the one concurrency knob (a vLLM/SGLang server batches "
                                              "hundreds; local-hf models take turns whatever it says).")
    temperature: float = cfg_field(0.2, help="Sampling temperature (0 = greedy).")
    top_p: float = cfg_field(1.0, help="Nucleus sampling mass.")
    max_tokens: int = cfg_field(1024, help="Longest reply in tokens.")
    repetition_penalty: float | None = cfg_field(None, help="Penalty on tokens already in the prompt or reply (1.0 = none; small "
                                                          "models that copy their evidence: ~1.1). local-hf and llama-cpp; "
                                                          "sent to endpoints that take it (vLLM).")
    seed: int | None = cfg_field(None, help="Sampling seed sent to endpoints that honour it.")
    json_schema: bool = cfg_field(False, help="openai: send the expected JSON Schema with structured requests (response_format "
                                             "json_schema; vLLM, SGLang, llama.cpp's server and OpenAI decode under it). llama-cpp "
                                             "always decodes structured replies under their schema.")
    batch_size: int = cfg_field(8, help="local-hf: prompts generated together in one batch.")
    device: str = cfg_field("auto", help="local-hf: cpu | cuda | auto.")
    n_ctx: int = cfg_field(4096, help="llama-cpp: context length in tokens (prompt + reply).")
    n_threads: int | None = cfg_field(None, help="llama-cpp and local-hf on a CPU: threads (default: $BENCAO_LLM_THREADS, else every "
                                                 "core). On a machine busy with other work, fewer threads than cores run faster.")
    dtype: str = cfg_field("auto", help="local-hf: auto | float32 | bfloat16 | float16.")
    cache: str | None = cfg_field(None, help="SQLite response cache file; default <output>/llm_cache.sqlite. 'none' disables it.")
    replay_only: bool = cfg_field(False, help="Answer only from the cache; a miss is a skipped item (replays a run exactly).")
    price_prompt_per_mtok: float = cfg_field(0.0, help="Cost per million prompt tokens, for the ledger.")
    price_completion_per_mtok: float = cfg_field(0.0, help="Cost per million completion tokens, for the ledger.")

    #: Keys that no longer exist → what to set instead: an old recipe gets this one-line error.
    __removed_keys__ = {
        "backoff_s": "retries and back-off are the openai client's (0.5 s doubling to 8 s, Retry-After honoured); set llm.max_retries",
        "backoff_max_s": "retries and back-off are the openai client's (0.5 s doubling to 8 s, Retry-After honoured); set llm.max_retries",
    }

    def params(self) -> dict[str, Any]:
        """Generation parameters that are part of the cache key."""
        p: dict[str, Any] = {"temperature": self.temperature, "top_p": self.top_p, "max_tokens": self.max_tokens}
        if self.repetition_penalty is not None:
            p["repetition_penalty"] = self.repetition_penalty
        if self.seed is not None:
            p["seed"] = self.seed
        return p


@runtime_checkable
class LLMClient(Protocol):
    """What every backend (and the cache in front of one) provides."""

    model: str

    def complete(self, messages: list[Message], **params: Any) -> Completion: ...

    def complete_many(self, batch: list[list[Message]], **params: Any) -> list[Completion | LLMError]: ...

    async def acomplete(self, messages: list[Message], **params: Any) -> Completion: ...

    async def acomplete_many(self, batch: list[list[Message]], **params: Any) -> list[Completion | LLMError]: ...


def can_score(client: Any, exact: bool = False) -> bool:
    """Whether ``client`` scores next-token choices (``ascore_choices``): local models and llama.cpp exactly (every
    choice's log-probability), an OpenAI-compatible endpoint from its ``top_logprobs`` (when it returns them)."""
    inner = getattr(client, "inner", client)
    return bool(getattr(inner, "supports_scoring", False)) and (not exact or bool(getattr(inner, "exact_scoring", False)))


async def gather_completions(one: Any, batch: list[list[Message]], **params: Any) -> list[Completion | LLMError]:
    """``[await one(m) for m in batch]`` concurrently, with each failure returned in its slot."""

    async def guarded(msgs: list[Message]) -> Completion | LLMError:
        try:
            return await one(msgs, **params)
        except LLMError as exc:
            return exc

    return list(await asyncio.gather(*(guarded(m) for m in batch)))


class SyncFacade:
    """``complete`` / ``complete_many`` for synchronous callers, over the async methods."""

    async def acomplete(self, messages: list[Message], **params: Any) -> Completion:
        raise NotImplementedError

    async def acomplete_many(self, batch: list[list[Message]], **params: Any) -> list[Completion | LLMError]:
        return await gather_completions(self.acomplete, batch, **params)

    def complete(self, messages: list[Message], **params: Any) -> Completion:
        """One request; raises :class:`LLMError` when it finally fails."""
        from bencao.llm import aio

        return aio.run(self.acomplete(messages, **params))

    def complete_many(self, batch: list[list[Message]], **params: Any) -> list[Completion | LLMError]:
        """All requests, concurrently (bounded by the backend's ``max_concurrency``); failures in their slot."""
        from bencao.llm import aio

        return aio.run(self.acomplete_many(batch, **params)) if batch else []

    async def ascore_choices(self, messages: list[Message], choices: list[str], *, prefix: str = "", top_k: int = 20) -> ChoiceScores:
        raise LLMError(f"{getattr(self, 'model', type(self).__name__)}: this backend does not score choices", kind="unsupported")

    async def ascore_choices_many(self, batch: list[list[Message]], choices: list[list[str]], *, prefix: str = "",
                                  top_k: int = 20) -> list[ChoiceScores | LLMError]:
        async def one(m: list[Message], c: list[str]) -> ChoiceScores | LLMError:
            try:
                return await self.ascore_choices(m, c, prefix=prefix, top_k=top_k)
            except LLMError as exc:
                return exc

        return list(await asyncio.gather(*(one(m, c) for m, c in zip(batch, choices))))

    def score_choices(self, messages: list[Message], choices: list[str], *, prefix: str = "", top_k: int = 20) -> ChoiceScores:
        """Next-token scores of ``choices`` after the chat prompt (and ``prefix``, the start of the reply)."""
        from bencao.llm import aio

        return aio.run(self.ascore_choices(messages, choices, prefix=prefix, top_k=top_k))

    def score_choices_many(self, batch: list[list[Message]], choices: list[list[str]], *, prefix: str = "",
                           top_k: int = 20) -> list[ChoiceScores | LLMError]:
        from bencao.llm import aio

        return aio.run(self.ascore_choices_many(batch, choices, prefix=prefix, top_k=top_k)) if batch else []


class BaseClient(SyncFacade):
    """At most ``max_concurrency`` requests of this client in flight, on the shared LLM loop."""

    model: str

    def __init__(self, *, max_concurrency: int = 8, max_retries: int = 0, default_params: dict[str, Any] | None = None):
        self.max_concurrency = max(1, int(max_concurrency))
        self.max_retries = max(0, int(max_retries))  # used by backends whose transport retries (openai)
        self.default_params = dict(default_params or {})
        self._sem: asyncio.Semaphore | None = None

    def _call_once(self, messages: list[Message], params: dict[str, Any]) -> Completion:
        """One blocking request (local backends); run in a worker thread by the default ``_acall_once``."""
        raise NotImplementedError(f"{type(self).__name__} implements neither _call_once nor _acall_once")

    async def _acall_once(self, messages: list[Message], params: dict[str, Any]) -> Completion:
        from bencao.llm import aio

        return await aio.to_thread(self._call_once, messages, params)

    def _params(self, params: dict[str, Any]) -> dict[str, Any]:
        return {**self.default_params, **{k: v for k, v in params.items() if v is not None}}

    async def ascore_choices(self, messages: list[Message], choices: list[str], *, prefix: str = "", top_k: int = 20) -> ChoiceScores:
        if self._sem is None:
            self._sem = asyncio.Semaphore(self.max_concurrency)
        async with self._sem:
            t0 = time.monotonic()
            out = await self._ascore_once(messages, list(choices), prefix, int(top_k))
        out.latency_s = time.monotonic() - t0
        return out

    async def _ascore_once(self, messages: list[Message], choices: list[str], prefix: str, top_k: int) -> ChoiceScores:
        from bencao.llm import aio

        return await aio.to_thread(self._score_once, messages, choices, prefix, top_k)

    def _score_once(self, messages: list[Message], choices: list[str], prefix: str, top_k: int) -> ChoiceScores:
        raise LLMError(f"{self.model}: this backend does not score choices", kind="unsupported")

    async def acomplete(self, messages: list[Message], **params: Any) -> Completion:
        p = self._params(params)
        if self._sem is None:
            self._sem = asyncio.Semaphore(self.max_concurrency)  # created on the loop that uses it
        async with self._sem:
            t0 = time.monotonic()
            out = await self._acall_once(messages, p)
        out.latency_s = time.monotonic() - t0
        return out
