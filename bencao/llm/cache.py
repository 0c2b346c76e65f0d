"""A SQLite response cache in front of any client: resumable and replayable runs.

The key is a hash of (model, messages, generation parameters), so the same request made again —
after a crash, or to rebuild a dataset with other post-processing — is answered from disk with
no endpoint at all. ``replay_only`` turns a miss into an :class:`LLMError` (kind ``cache_miss``)
instead of a request, which replays a finished run exactly.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
from pathlib import Path
from typing import Any

from bencao.llm.base import Completion, LLMClient, LLMError, Message

_SCHEMA = """
CREATE TABLE IF NOT EXISTS responses (
    key               TEXT PRIMARY KEY,
    model             TEXT NOT NULL,
    request           TEXT NOT NULL,
    text              TEXT NOT NULL,
    prompt_tokens     INTEGER NOT NULL,
    completion_tokens INTEGER NOT NULL,
    finish_reason     TEXT,
    created_at        TEXT NOT NULL DEFAULT (datetime('now'))
);
"""


def cache_key(model: str, messages: list[Message], params: dict[str, Any]) -> str:
    blob = json.dumps({"model": model, "messages": messages, "params": params}, ensure_ascii=False, sort_keys=True)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


class ResponseCache:
    """The table itself; thread-safe, WAL mode, one row per distinct request."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._conn = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute("PRAGMA synchronous=NORMAL")
        self._conn.executescript(_SCHEMA)
        self._lock = threading.Lock()

    def get(self, key: str) -> Completion | None:
        with self._lock:
            r = self._conn.execute("SELECT model, text, prompt_tokens, completion_tokens, finish_reason FROM responses WHERE key=?", (key,)).fetchone()
        if r is None:
            return None
        return Completion(text=r[1], model=r[0], prompt_tokens=r[2], completion_tokens=r[3], finish_reason=r[4], cached=True)

    def put(self, key: str, request: dict[str, Any], c: Completion) -> None:
        with self._lock:
            self._conn.execute(
                "INSERT OR REPLACE INTO responses(key, model, request, text, prompt_tokens, completion_tokens, finish_reason) VALUES (?,?,?,?,?,?,?)",
                (key, c.model, json.dumps(request, ensure_ascii=False), c.text, c.prompt_tokens, c.completion_tokens, c.finish_reason))

    def __len__(self) -> int:
        with self._lock:
            return self._conn.execute("SELECT COUNT(*) FROM responses").fetchone()[0]

    def close(self) -> None:
        self._conn.close()


class CachedClient:
    """Wraps a client; hits are returned with ``cached=True`` and cost nothing in the ledger."""

    def __init__(self, inner: LLMClient, cache: ResponseCache | str | Path, *, replay_only: bool = False,
                 default_params: dict[str, Any] | None = None):
        self.inner = inner
        self.model = inner.model
        self.cache = cache if isinstance(cache, ResponseCache) else ResponseCache(cache)
        self.replay_only = replay_only
        self.default_params = dict(default_params if default_params is not None else getattr(inner, "default_params", {}))
        self.hits = 0
        self.misses = 0
        self._lock = threading.Lock()

    def _key(self, messages: list[Message], params: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        p = {**self.default_params, **{k: v for k, v in params.items() if v is not None}}
        return cache_key(self.model, messages, p), p

    def _count(self, hit: bool) -> None:
        with self._lock:
            if hit:
                self.hits += 1
            else:
                self.misses += 1

    def _miss_error(self) -> LLMError:
        return LLMError(f"{self.cache.path}: request not in the cache (replay_only)", kind="cache_miss")

    def complete(self, messages: list[Message], **params: Any) -> Completion:
        key, p = self._key(messages, params)
        hit = self.cache.get(key)
        self._count(hit is not None)
        if hit is not None:
            return hit
        if self.replay_only:
            raise self._miss_error()
        c = self.inner.complete(messages, **p)
        self.cache.put(key, {"messages": messages, "params": p}, c)
        return c

    def complete_many(self, batch: list[list[Message]], **params: Any) -> list[Completion | LLMError]:
        keys = [self._key(m, params) for m in batch]
        out: list[Completion | LLMError | None] = []
        todo: list[int] = []
        for i, (key, _) in enumerate(keys):
            hit = self.cache.get(key)
            self._count(hit is not None)
            out.append(hit)
            if hit is None:
                todo.append(i)
        if todo and self.replay_only:
            for i in todo:
                out[i] = self._miss_error()
            todo = []
        if todo:
            p = keys[todo[0]][1]
            fresh = self.inner.complete_many([batch[i] for i in todo], **p)
            for i, c in zip(todo, fresh):
                out[i] = c
                if isinstance(c, Completion):
                    self.cache.put(keys[i][0], {"messages": batch[i], "params": p}, c)
        return out  # type: ignore[return-value]
