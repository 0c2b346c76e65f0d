"""The token/cost ledger of a data-generation run: requests, cache hits, tokens, cost, failures per step.

Totals accumulate across resumed runs (a cache hit costs nothing, so a resumed run adds only
what it really spent). ``MeteredClient`` records every reply of the client it wraps.
"""

from __future__ import annotations

import json
import threading
from collections import defaultdict
from pathlib import Path
from typing import Any

from bencao.io import atomic_write_json
from bencao.llm.base import Completion, LLMClient, LLMError, Message, SyncFacade

_FIELDS = ("requests", "cache_hits", "prompt_tokens", "completion_tokens", "failures", "cost")


class Ledger:
    def __init__(self, path: str | Path, price_prompt_per_mtok: float = 0.0, price_completion_per_mtok: float = 0.0):
        self.path = Path(path)
        self.prices = (price_prompt_per_mtok, price_completion_per_mtok)
        self._lock = threading.Lock()
        self.steps: dict[str, dict[str, float]] = defaultdict(lambda: {k: 0 for k in _FIELDS})
        self.failures_by_kind: dict[str, int] = defaultdict(int)
        self.runs = 0
        if self.path.exists():
            old = json.loads(self.path.read_text(encoding="utf-8"))
            for step, row in old.get("steps", {}).items():
                self.steps[step].update({k: row.get(k, 0) for k in _FIELDS})
            self.failures_by_kind.update(old.get("failures_by_kind", {}))
            self.runs = int(old.get("runs", 0))
        self.runs += 1

    def record(self, step: str, c: Completion | LLMError) -> None:
        with self._lock:
            row = self.steps[step]
            if isinstance(c, LLMError):
                row["failures"] += 1
                self.failures_by_kind[c.kind] += 1
                return
            if c.cached:
                row["cache_hits"] += 1
                return
            row["requests"] += 1
            row["prompt_tokens"] += c.prompt_tokens
            row["completion_tokens"] += c.completion_tokens
            row["cost"] += (c.prompt_tokens * self.prices[0] + c.completion_tokens * self.prices[1]) / 1e6

    def totals(self) -> dict[str, float]:
        with self._lock:
            return {k: sum(r[k] for r in self.steps.values()) for k in _FIELDS}

    def to_dict(self) -> dict[str, Any]:
        return {"runs": self.runs, "totals": self.totals(), "steps": {k: dict(v) for k, v in self.steps.items()},
                "failures_by_kind": dict(self.failures_by_kind),
                "prices_per_mtok": {"prompt": self.prices[0], "completion": self.prices[1]}}

    def save(self) -> None:
        atomic_write_json(self.path, self.to_dict())

    def client(self, inner: LLMClient, step: str) -> "MeteredClient":
        return MeteredClient(inner, self, step)


class MeteredClient(SyncFacade):
    """A client that books each reply (or failure) under ``step`` in the ledger."""

    def __init__(self, inner: LLMClient, ledger: Ledger, step: str):
        self.inner, self.ledger, self.step = inner, ledger, step
        self.model = inner.model

    @property
    def supports_json_schema(self) -> bool:
        """Whether the wrapped client decodes under a request's JSON Schema (llm.json_schema, llama.cpp): a structured
        teacher step then sends its schema, as every other stage does."""
        return bool(getattr(self.inner, "supports_json_schema", False))

    async def acomplete(self, messages: list[Message], **params: Any) -> Completion:
        try:
            c = await self.inner.acomplete(messages, **params)
        except LLMError as exc:
            self.ledger.record(self.step, exc)
            raise
        self.ledger.record(self.step, c)
        return c

    async def acomplete_many(self, batch: list[list[Message]], **params: Any) -> list[Completion | LLMError]:
        out = await self.inner.acomplete_many(batch, **params)
        for c in out:
            self.ledger.record(self.step, c)
        return out
