"""A SQLite response cache in front of any client: resumable and replayable runs.

The key is a hash of (model, messages, generation parameters), so the same request made again —
after a crash, or to rebuild a dataset with other post-processing — is answered from disk with
no endpoint at all. The model part is the backend's ``cache_id``: the endpoint's model name, or for
a local model its path plus the SHA-256 fingerprint of its weights, so a model retrained into the
same directory is asked again. ``replay_only`` turns a miss into an :class:`LLMError` (kind
``cache_miss``) instead of a request, which replays a finished run exactly.

At hundreds of requests per second the writes are batched: replies that arrive in the same turn
of the LLM event loop are committed together in one transaction (WAL, ``synchronous=NORMAL``), at
the end of that turn. A killed run loses at most the replies of that one turn (asked again on
resume); the run's own outputs never depend on the cache having them.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import sqlite3
import threading
from pathlib import Path
from typing import Any

from bencao.llm.base import ChoiceScores, Completion, LLMClient, LLMError, Message, SyncFacade

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
    """The request's key; the random nonces of a prompt's fence tags are blanked (the same evidence asked
    again is the same request)."""
    from bencao.prompting import without_nonces

    messages = [{**m, "content": without_nonces(m["content"])} if isinstance(m.get("content"), str) else m for m in messages]
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
        self._pending: dict[str, tuple] = {}
        self._flush_scheduled = False
        self.commits = 0

    def get(self, key: str) -> Completion | None:
        with self._lock:
            row = self._pending.get(key)
            r = (row[1], row[3], row[4], row[5], row[6]) if row else self._conn.execute(
                "SELECT model, text, prompt_tokens, completion_tokens, finish_reason FROM responses WHERE key=?", (key,)).fetchone()
        if r is None:
            return None
        return Completion(text=r[1], model=r[0], prompt_tokens=r[2], completion_tokens=r[3], finish_reason=r[4], cached=True)

    def put(self, key: str, request: dict[str, Any], c: Completion) -> None:
        """Store one reply; inside a running event loop the commit waits for the end of the loop's turn."""
        row = (key, c.model, json.dumps(request, ensure_ascii=False), c.text, c.prompt_tokens, c.completion_tokens, c.finish_reason)
        with self._lock:
            self._pending[key] = row
            schedule = not self._flush_scheduled
            self._flush_scheduled = True
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        if loop is None:
            self.flush()
        elif schedule:
            loop.call_soon(self.flush)

    def flush(self) -> None:
        """Commit every pending reply in one transaction."""
        with self._lock:
            self._flush_scheduled = False
            rows = list(self._pending.values())
            if not rows:
                return
            self._conn.execute("BEGIN")
            try:
                self._conn.executemany(
                    "INSERT OR REPLACE INTO responses(key, model, request, text, prompt_tokens, completion_tokens, finish_reason) "
                    "VALUES (?,?,?,?,?,?,?)", rows)
                self._conn.execute("COMMIT")
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            self._pending.clear()
            self.commits += 1

    def __len__(self) -> int:
        self.flush()
        with self._lock:
            return self._conn.execute("SELECT COUNT(*) FROM responses").fetchone()[0]

    def close(self) -> None:
        self.flush()
        self._conn.close()


class CachedClient(SyncFacade):
    """Wraps a client; hits are returned with ``cached=True`` and cost nothing in the ledger."""

    def __init__(self, inner: LLMClient, cache: ResponseCache | str | Path, *, replay_only: bool = False,
                 default_params: dict[str, Any] | None = None):
        self.inner = inner
        self.model = inner.model
        self.cache_id = getattr(inner, "cache_id", inner.model)
        self.cache = cache if isinstance(cache, ResponseCache) else ResponseCache(cache)
        self.replay_only = replay_only
        self.default_params = dict(default_params if default_params is not None else getattr(inner, "default_params", {}))
        self.hits = 0
        self.misses = 0
        self._lock = threading.Lock()

    def _key(self, messages: list[Message], params: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        p = {**self.default_params, **{k: v for k, v in params.items() if v is not None}}
        return cache_key(self.cache_id, messages, p), p

    def _lookup(self, key: str) -> Completion | None:
        hit = self.cache.get(key)
        with self._lock:
            if hit is not None:
                self.hits += 1
            else:
                self.misses += 1
        return hit

    def _misses(self, out: list[Any]) -> list[int]:
        """The slots with nothing cached, to ask the backend; with ``replay_only`` each becomes a cache-miss error instead."""
        todo = [i for i, o in enumerate(out) if o is None]
        if todo and self.replay_only:
            for i in todo:
                out[i] = self._miss_error()
            return []
        return todo

    def _miss_error(self) -> LLMError:
        return LLMError(f"{self.cache.path}: request not in the cache (replay_only)", kind="cache_miss")

    async def acomplete(self, messages: list[Message], **params: Any) -> Completion:
        key, p = self._key(messages, params)
        hit = self._lookup(key)
        if hit is not None:
            return hit
        if self.replay_only:
            raise self._miss_error()
        c = await self.inner.acomplete(messages, **p)
        self.cache.put(key, {"messages": messages, "params": p}, c)
        return c

    async def acomplete_many(self, batch: list[list[Message]], **params: Any) -> list[Completion | LLMError]:
        """Hits from the cache; the misses go to the backend as one batch (local models generate it together)."""
        keys = [self._key(m, params) for m in batch]
        out: list[Completion | LLMError | None] = [self._lookup(k) for k, _ in keys]
        todo = self._misses(out)
        if todo:
            p = keys[todo[0]][1]
            fresh = await self.inner.acomplete_many([batch[i] for i in todo], **p)
            for i, c in zip(todo, fresh):
                out[i] = c
                if isinstance(c, Completion):
                    self.cache.put(keys[i][0], {"messages": batch[i], "params": p}, c)
        return out  # type: ignore[return-value]

    # -- choice scoring: cached like replies (the scores as the stored text), keyed by prompt, prefix, choices and top_k
    @property
    def supports_scoring(self) -> bool:
        return bool(getattr(self.inner, "supports_scoring", False))

    @property
    def supports_json_schema(self) -> bool:
        return bool(getattr(self.inner, "supports_json_schema", False))

    def _score_key(self, messages: list[Message], choices: list[str], prefix: str, top_k: int) -> tuple[str, dict[str, Any]]:
        p = {"score_choices": list(choices), "prefix": prefix, "top_k": int(top_k)}
        method = getattr(self.inner, "score_method", None)  # how the backend computes scores: a new method is asked again
        if method:
            p["score_method"] = method
        return cache_key(self.cache_id, messages, p), p

    def _score_hit(self, key: str) -> ChoiceScores | None:
        hit = self._lookup(key)
        if hit is None:
            return None
        try:
            return ChoiceScores.from_dict(json.loads(hit.text), cached=True)
        except (ValueError, TypeError, KeyError):
            return None

    async def ascore_choices(self, messages: list[Message], choices: list[str], *, prefix: str = "", top_k: int = 20) -> ChoiceScores:
        return (await self.ascore_choices_many([messages], [choices], prefix=prefix, top_k=top_k))[0]  # type: ignore[return-value]

    async def ascore_choices_many(self, batch: list[list[Message]], choices: list[list[str]], *, prefix: str = "",
                                  top_k: int = 20) -> list[ChoiceScores | LLMError]:
        keys = [self._score_key(m, c, prefix, top_k) for m, c in zip(batch, choices)]
        out: list[ChoiceScores | LLMError | None] = [self._score_hit(k) for k, _ in keys]
        todo = self._misses(out)
        if todo:
            fresh = await self.inner.ascore_choices_many([batch[i] for i in todo], [choices[i] for i in todo], prefix=prefix,
                                                          top_k=top_k)
            for i, r in zip(todo, fresh):
                out[i] = r
                if isinstance(r, ChoiceScores):
                    c = Completion(text=json.dumps(r.to_dict(), ensure_ascii=False), model=r.model, prompt_tokens=r.prompt_tokens)
                    self.cache.put(keys[i][0], {"messages": batch[i], "params": keys[i][1]}, c)
        return out  # type: ignore[return-value]

    def flush(self) -> None:
        self.cache.flush()
