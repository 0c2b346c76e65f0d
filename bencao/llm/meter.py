"""Token counts of everything a set of LLM clients returned: for throughput figures (``bencao infer``).

``Metered(client, meter)`` is the client itself to its callers (attributes read and set go through to it);
each :class:`Completion` that comes back through ``complete``, ``complete_many``, ``acomplete`` or
``acomplete_many`` is added to ``meter``, and each :class:`ChoiceScores` of ``score_choices(_many)`` (a request
that reads its prompt and generates nothing). Replies served from a response cache are counted apart: they
cost no generation time.
"""

from __future__ import annotations

import threading
from dataclasses import asdict, dataclass
from typing import Any

from bencao.llm.base import ChoiceScores, Completion


@dataclass
class Usage:
    """Requests answered and their tokens (fresh replies); cached replies counted apart."""

    requests: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached: int = 0

    def minus(self, other: "Usage") -> "Usage":
        return Usage(**{k: v - getattr(other, k) for k, v in asdict(self).items()})


class UsageMeter:
    """Thread-safe running totals of :class:`Usage`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._usage = Usage()

    def add(self, replies: list[Any]) -> None:
        with self._lock:
            for r in replies:
                if not isinstance(r, (Completion, ChoiceScores)):
                    continue  # a failed request (LLMError in its slot)
                if r.cached:
                    self._usage.cached += 1
                    continue
                self._usage.requests += 1
                self._usage.prompt_tokens += int(r.prompt_tokens or 0)
                self._usage.completion_tokens += int(getattr(r, "completion_tokens", 0) or 0)

    def snapshot(self) -> Usage:
        with self._lock:
            return Usage(**asdict(self._usage))


class Metered:
    """``client``, with every reply it returns counted in ``meter``."""

    def __init__(self, client: Any, meter: UsageMeter):
        object.__setattr__(self, "_client", client)
        object.__setattr__(self, "_meter", meter)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._client, name, value)

    def complete(self, messages: Any, **params: Any) -> Any:
        reply = self._client.complete(messages, **params)
        self._meter.add([reply])
        return reply

    def complete_many(self, batch: Any, **params: Any) -> Any:
        replies = self._client.complete_many(batch, **params)
        self._meter.add(replies)
        return replies

    async def acomplete(self, messages: Any, **params: Any) -> Any:
        reply = await self._client.acomplete(messages, **params)
        self._meter.add([reply])
        return reply

    async def acomplete_many(self, batch: Any, **params: Any) -> Any:
        replies = await self._client.acomplete_many(batch, **params)
        self._meter.add(replies)
        return replies

    def score_choices(self, messages: Any, choices: Any, **kw: Any) -> Any:
        r = self._client.score_choices(messages, choices, **kw)
        self._meter.add([r])
        return r

    def score_choices_many(self, batch: Any, choices: Any, **kw: Any) -> Any:
        res = self._client.score_choices_many(batch, choices, **kw)
        self._meter.add(res)
        return res

    async def ascore_choices(self, messages: Any, choices: Any, **kw: Any) -> Any:
        r = await self._client.ascore_choices(messages, choices, **kw)
        self._meter.add([r])
        return r

    async def ascore_choices_many(self, batch: Any, choices: Any, **kw: Any) -> Any:
        res = await self._client.ascore_choices_many(batch, choices, **kw)
        self._meter.add(res)
        return res
