"""The HTTP API (FastAPI): OpenAI-compatible chat completions, evidence retrieval, the web page.

Routes:

- ``POST /v1/chat/completions``: OpenAI-compatible. The last user message is the question; the
  reply's message carries the answer with ``[n]`` citations (and, with ``answer.append_sources``,
  a sources list); the extra top-level fields ``citations``, ``evidence``, ``query_triples`` and
  ``timings`` carry the rest. ``stream: true`` sends server-sent events in OpenAI's chunk format
  (the answer is computed first, then streamed in pieces; the last chunk carries the citations).
- ``POST /v1/retrieve``: ``{"question", "query_triples"?, "use_cot"?, "options"?, "budget_chars"?}`` → Evidence JSON and
  ``context``: the numbered evidence text the generator would read, cut to ``budget_chars``.
- ``GET /v1/models``; ``GET /healthz`` (status only; ``?details=1`` behind the key); ``GET /`` serves the
  web page (``serving/web``); ``/docs`` and ``/openapi.json`` only with ``api.docs``.

Freshness: with a ``reload`` function (``bencao serve`` passes one) the server compares the graph's
store key (``store_key``: the file behind the DIR symlink and its write generation) and the indexes'
record in the manifest before each request; when ``graph add``/``remove``/``build``/``index`` changed
them, the pipeline is rebuilt once, in a worker thread, and swapped in between requests (requests in
flight finish on the old one). A reload that fails (e.g. between a write's commit and its index
refresh) keeps the old pipeline and is retried when the store or the indexes move, or after
``api.reload_retry_s``; meanwhile every answer says it comes from an older generation
(``X-Bencao-Graph-Stale`` and the ``graph`` field; ``/healthz`` says ``stale``).

Limits (docs/serving-reliability.md): a bearer API key on ``/v1/*`` when one is configured, checked
from the request head before any body is read (401 otherwise); bodies over ``max_body_bytes`` get 413;
every list field is capped in items and item length (``max_options`` …, 400); at most
``max_concurrency`` requests are answered at once and ``max_queue`` more wait, beyond which a request
gets 429 at once; a request that waited longer than ``queue_timeout_s`` gets 503, one that ran past
``request_timeout_s`` 504. Connection-level guards (header and keep-alive timeouts, per-client cap):
serving/guard.py. Errors are OpenAI-style ``{"error": {"message", "type", "code"}}``.
"""

# (no `from __future__ import annotations`: FastAPI must see the request types, imported in create_app)

import asyncio
import hmac
import json
import logging
import os
import re
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Optional, Union

from bencao.config import field
from bencao.errors import BencaoError, InvalidValue
from bencao.io import check_text

WEB_DIR = Path(__file__).with_name("web")
#: Response header set when an answer comes from an older graph generation than the store's.
STALE_HEADER = "X-Bencao-Graph-Stale"
log = logging.getLogger(__name__)


@dataclass
class ApiConfig:
    """HTTP server settings and request limits."""

    host: str = field("127.0.0.1", help="Interface to listen on (0.0.0.0 exposes the service to the network).")
    port: int = field(8000, help="TCP port.")
    api_key_env: str = field("BENCAO_API_KEY", help="Environment variable holding the bearer API key; when it is set (or --api-key is given) /v1/* requires it.")
    max_body_bytes: int = field(1_048_576, help="Largest request body accepted; bigger bodies get 413.")
    body_timeout_s: float = field(30.0, help="Longest time to receive a request body; a slower client (e.g. one byte a second) gets 408 and is disconnected.")
    max_connections: int = field(1000, help="Open connections the server holds at once; a new one beyond it closes the oldest idle "
                                            "connection (one waiting for a request), and requests get 503 only when none is idle.")
    max_connections_per_client: int = field(64, help="Open connections one client address may hold; a new one beyond it closes that "
                                                     "client's oldest connection idle for a second or more, or, when there is none, its "
                                                     "request gets 429 with Retry-After. Addresses in trusted_proxies are not capped "
                                                     "(0 = no cap).")
    trusted_proxies: list[str] = field(default_factory=list, help="Reverse proxies in front of the server (addresses or CIDR networks, "
                                                                  "e.g. [10.0.0.5] or [172.16.0.0/12]): their connections are not capped per "
                                                                  "client, and a request's client address is read from the X-Forwarded-For "
                                                                  "they set (max_requests_per_client then applies to it). Empty: no proxy is "
                                                                  "trusted and X-Forwarded-For is ignored.")
    max_requests_per_client: int = field(8, help="Requests of one client address (behind a trusted proxy: the forwarded address) being "
                                                 "answered or waiting at once; more get 429 with Retry-After, so one client cannot take "
                                                 "every answering slot and queue place (0 = no cap).")
    header_timeout_s: float = field(10.0, help="Longest time a client has to send a complete request head, counted from the "
                                               "connection's opening and again after each response; a client trickling header "
                                               "bytes or sending nothing is disconnected (408 when it had started).")
    keep_alive_timeout_s: float = field(5.0, help="An idle keep-alive connection is closed after this many seconds without a new request.")
    max_header_bytes: int = field(16384, help="Largest request head (request line + headers) accepted; bigger ones get 431 "
                                              "(400 when it never arrives whole).")
    max_concurrency: int = field(2, help="Requests answered at the same time.")
    max_queue: int = field(16, help="Requests allowed to wait for a free slot; more get 429 at once.")
    queue_timeout_s: float = field(60.0, help="Longest wait for a free slot before 503.")
    max_messages: int = field(64, help="Most chat messages accepted in one request.")
    max_message_chars: int = field(16000, help="Longest content of any one chat message (system and earlier turns included), in characters.")
    max_content_parts: int = field(16, help="Most content parts (OpenAI's [{type, text}] form) in one message.")
    max_question_chars: int = field(4000, help="Longest question (last user message) accepted, in characters.")
    max_options: int = field(26, help="Most multiple-choice options (chat `options`, /v1/retrieve `options`) in one request.")
    max_option_chars: int = field(500, help="Longest option text, in characters (option letters/keys: at most 8).")
    max_candidates: int = field(100, help="Most recommendation candidates (chat `candidates`) in one request.")
    max_candidate_chars: int = field(200, help="Longest candidate, in characters.")
    max_query_triples: int = field(16, help="Most query triples (/v1/retrieve `query_triples`) in one request.")
    max_budget_chars: int = field(100_000, help="Largest /v1/retrieve `budget_chars` (characters of the returned evidence context).")
    max_triple_part_chars: int = field(200, help="Longest head, relation or tail of a query triple, in characters.")
    request_timeout_s: float = field(60.0, help="Time budget of one request once it holds an answering slot: past it, the "
                                                "pipeline stops at its next check and the request gets 504 (0 = no budget).")
    reload_retry_s: float = field(2.0, help="After a failed reload (e.g. a request between a write's commit and its index "
                                            "refresh), retry at the latest this many seconds later even if nothing on disk moved.")
    stream_chunk_chars: int = field(24, help="Characters per streamed chunk when stream=true.")
    web: bool = field(True, help="Serve the web page at /.")
    docs: bool = field(False, help="Serve the OpenAPI docs (/docs, /openapi.json); off by default, behind the API key when one is set.")

    def validate(self) -> None:
        """Refuse settings that cannot work (a negative size or timeout, a port outside 1–65535, a proxy that is no address)."""
        from bencao.errors import ConfigError
        from bencao.serving.guard import trusted_networks

        if not 1 <= self.port <= 65535:
            raise ConfigError(f"api.port: {self.port} is not a TCP port (1-65535)")
        if not self.host.strip():
            raise ConfigError("api.host: empty; give an interface address such as 127.0.0.1 or 0.0.0.0")
        if not self.api_key_env.strip():
            raise ConfigError("api.api_key_env: empty; name the environment variable that holds the API key")
        positive = ("max_body_bytes", "body_timeout_s", "max_connections", "max_header_bytes", "max_concurrency", "queue_timeout_s",
                    "max_messages", "max_message_chars", "max_content_parts", "max_question_chars", "max_options", "max_option_chars",
                    "max_candidates", "max_candidate_chars", "max_query_triples", "max_triple_part_chars", "stream_chunk_chars",
                    "keep_alive_timeout_s", "reload_retry_s")
        for name in positive:
            if getattr(self, name) <= 0:
                raise ConfigError(f"api.{name}: {getattr(self, name)} must be greater than 0")
        for name in ("max_queue", "max_connections_per_client", "max_requests_per_client", "header_timeout_s", "request_timeout_s"):
            if getattr(self, name) < 0:
                raise ConfigError(f"api.{name}: {getattr(self, name)} must be 0 or more (0 = no limit)")
        if self.max_header_bytes < 1024:
            raise ConfigError(f"api.max_header_bytes: {self.max_header_bytes} is too small for any request head (at least 1024)")
        try:
            trusted_networks(self.trusted_proxies)
        except ValueError as exc:
            raise ConfigError(f"api.trusted_proxies: {exc}") from None


# --------------------------------------------------------------------------- errors


MAX_OPTION_KEY_CHARS = 8


class ApiError(Exception):
    def __init__(self, status: int, message: str, type_: str = "invalid_request_error", code: str | None = None,
                 param: str | None = None, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type_
        self.code = code
        self.param = param
        self.headers = headers or {}


_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")


def _encodable(text: str | None) -> str | None:
    """Text an error reply can carry on one line: lone surrogates (which a client may send as ``"\\ud800"``) become
    ``\\ud800``, control characters (a newline in an echoed key) ``\\n``-style escapes."""
    if text is None:
        return None
    text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return _CONTROL_RE.sub(lambda m: m.group(0).encode("unicode_escape").decode("ascii"), text)


def error_body(message: str, type_: str, code: str | None = None, param: str | None = None) -> dict[str, Any]:
    return {"error": {"message": _encodable(message), "type": type_, "param": _encodable(param), "code": code}}


#: Headers every reply carries: the page may not be framed, sniffed into another type or load anything but its own files.
SECURITY_HEADERS = [
    (b"content-security-policy", b"default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
                                 b"object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"),
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
]


class GateMiddleware:
    """Pure ASGI, outermost: the API key is checked from the request head, before any body is read (a client
    without the key learns nothing of the schema and cannot make the server read a body), and every reply gets
    :data:`SECURITY_HEADERS`. Guarded: ``/v1/*``; the API docs (when ``api.docs`` is on); ``/healthz?details``."""

    def __init__(self, app: Any, api_key: str | None, docs_paths: tuple[str, ...] = ()):
        self.app = app
        self.api_key = api_key
        self.docs_paths = docs_paths

    def _guarded(self, scope: dict) -> bool:
        path = scope.get("path", "")
        if path.startswith("/v1/") or path == "/v1" or any(path == p or path.startswith(p + "/") for p in self.docs_paths):
            return True
        return path == "/healthz" and b"details" in scope.get("query_string", b"")

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_secured(msg: dict) -> None:
            if msg["type"] == "http.response.start":
                names = {k.lower() for k, _ in msg.get("headers", [])}
                msg = {**msg, "headers": [*msg.get("headers", []), *((k, v) for k, v in SECURITY_HEADERS if k not in names)]}
            await send(msg)

        if self.api_key and self._guarded(scope) and scope.get("method") != "OPTIONS":
            auth = ""
            for name, value in scope.get("headers", []):
                if name == b"authorization":
                    auth = value.decode("latin-1")
            scheme, _, token = auth.partition(" ")
            if not auth:
                body = error_body("missing API key: send 'Authorization: Bearer <key>'", "authentication_error", "missing_api_key")
            elif scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode("latin-1", "replace"), self.api_key.encode()):
                body = error_body("incorrect API key", "authentication_error", "invalid_api_key")
            else:
                body = None
            if body is not None:
                data = json.dumps(body).encode("utf-8")
                await send_secured({"type": "http.response.start", "status": 401, "headers": [
                    (b"content-type", b"application/json"), (b"content-length", str(len(data)).encode()), (b"www-authenticate", b"Bearer")]})
                await send_secured({"type": "http.response.body", "body": data})
                return
        await self.app(scope, receive, send_secured)


# --------------------------------------------------------------------------- limits


class SlotLimiter:
    """At most ``slots`` holders; ``queue`` more may wait; anything beyond is refused at once. One client
    (address) holds at most ``per_client`` of the slots and queue places together (0 = no cap)."""

    def __init__(self, slots: int, queue: int, timeout_s: float, per_client: int = 0):
        self.slots = max(1, slots)
        self.queue = max(0, queue)
        self.timeout_s = timeout_s
        self.per_client = max(0, per_client)
        self._sem = asyncio.Semaphore(self.slots)
        self.active = 0
        self.waiting = 0
        self.by_client: dict[str, int] = {}

    async def acquire(self, client: str | None = None) -> None:
        held = self.by_client.get(client, 0) if client is not None else 0
        if self.per_client and client is not None and held >= self.per_client:
            raise ApiError(429, f"too many requests from {client}: {held} being answered or waiting (api.max_requests_per_client); "
                                "retry shortly", "rate_limit_error", "rate_limit_exceeded", headers={"Retry-After": "1"})
        if self.active + self.waiting >= self.slots + self.queue:
            raise ApiError(429, f"too many requests: {self.active} being answered and {self.waiting} waiting; retry shortly",
                           "rate_limit_error", "rate_limit_exceeded", headers={"Retry-After": "1"})
        if client is not None:
            self.by_client[client] = held + 1
        self.waiting += 1
        try:
            await asyncio.wait_for(self._sem.acquire(), timeout=self.timeout_s)
        except BaseException as exc:
            self._forget(client)
            if isinstance(exc, asyncio.TimeoutError):
                raise ApiError(503, f"server busy: no free slot within {self.timeout_s:g}s; retry later", "server_error",
                               "server_overloaded", headers={"Retry-After": "5"}) from None
            raise
        finally:
            self.waiting -= 1
        self.active += 1

    def _forget(self, client: str | None) -> None:
        if client is None:
            return
        n = self.by_client.get(client, 0) - 1
        if n > 0:
            self.by_client[client] = n
        else:
            self.by_client.pop(client, None)

    def release(self, client: str | None = None) -> None:
        self._forget(client)
        self.active -= 1
        self._sem.release()


#: The only requests whose body is read: every other route is answered (404, 405, a page, /healthz) without reading one.
BODY_ROUTES = frozenset({("POST", "/v1/chat/completions"), ("POST", "/v1/retrieve")})


def _declares_body(scope: dict) -> bool:
    for name, value in scope.get("headers", []):
        if name == b"transfer-encoding" or (name == b"content-length" and value.strip() not in (b"", b"0")):
            return True
    return False


class BodyLimitMiddleware:
    """Pure ASGI: refuses bodies over ``limit`` bytes with 413, by Content-Length or by counting, and
    bodies not received within ``timeout_s`` with 408 (a slow-body client cannot hold a connection).

    Only the routes that take a body (:data:`BODY_ROUTES`) read one; any other request (an unknown
    path, a POST to ``/`` or ``/healthz``) is routed at once, unread, and answered (404, 405 …) with
    ``Connection: close`` when it declared a body, so a client without the key cannot hold a
    connection by trickling a body nobody needs."""

    def __init__(self, app: Any, limit: int, timeout_s: float = 30.0):
        self.app = app
        self.limit = limit
        self.timeout_s = timeout_s

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if (scope["method"], scope.get("path", "")) not in BODY_ROUTES:
            if not _declares_body(scope):
                await self.app(scope, receive, send)
                return

            async def send_and_close(msg: dict) -> None:
                if msg["type"] == "http.response.start":
                    msg = {**msg, "headers": [*[(k, v) for k, v in msg.get("headers", []) if k.lower() != b"connection"],
                                              (b"connection", b"close")]}
                await send(msg)

            await self.app(scope, receive, send_and_close)
            return
        for name, value in scope.get("headers", []):
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    await self._reply(send, 400, error_body("invalid Content-Length header", "invalid_request_error"))
                    return
                if declared > self.limit:
                    await self._reply(send, 413, self._too_large(declared))
                    return
        # Read the body (chunked uploads have no Content-Length) up to the limit, then replay it.
        chunks: list[bytes] = []
        size = 0
        deadline = time.monotonic() + self.timeout_s
        while True:
            try:
                msg = await asyncio.wait_for(receive(), timeout=max(0.0, deadline - time.monotonic()))
            except asyncio.TimeoutError:
                await self._reply(send, 408, error_body(f"request body not received within {self.timeout_s:g}s", "invalid_request_error",
                                                        "request_timeout"), close=True)
                return
            if msg["type"] == "http.disconnect":
                return
            body = msg.get("body", b"")
            size += len(body)
            if size > self.limit:
                await self._reply(send, 413, self._too_large(size, at_least=True))
                return
            chunks.append(body)
            if not msg.get("more_body"):
                break
        data = b"".join(chunks)
        sent = False

        async def replay() -> dict:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": data, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    def _too_large(self, size: int, at_least: bool = False) -> dict[str, Any]:
        what = f"at least {size:,}" if at_least else f"{size:,}"
        return error_body(f"request body is {what} bytes, over the limit of {self.limit:,} bytes", "invalid_request_error",
                          "request_too_large")

    @staticmethod
    async def _reply(send: Any, status: int, body: dict[str, Any], close: bool = False) -> None:
        data = json.dumps(body).encode("utf-8")
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]
        if close:
            headers.append((b"connection", b"close"))
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": data})


# --------------------------------------------------------------------------- app


class PipelineHolder:
    """The pipeline requests are answered with; rebuilt between requests when the graph on disk changed.

    What a loaded pipeline reflects is its key: the store key it was loaded at (``store_key``: file,
    inode, write generation) and what the indexes said then (the manifest's ``indexes`` record: the
    store generation each index was built at, the embedder). Before each request the holder compares a
    cheap ``stat`` signature of the store, its WAL and the manifest; when it moved and the key differs
    from the loaded one, it reloads. A reload that fails (most often "the indexes are behind the
    graph": a request arriving between a write's commit and its index refresh) is remembered only with
    that key: it is retried as soon as the store or the indexes move (the refresh rewrites the record),
    and at the latest after ``retry_s`` seconds; it is never final. While the store is ahead of the
    loaded pipeline, :meth:`freshness` says so and every answer carries it (``X-Bencao-Graph-Stale``
    and a ``graph`` field), never silently."""

    def __init__(self, pipeline: Any, reload: Any = None, retry_s: float = 2.0):
        self.pipeline = pipeline
        self.reload = reload
        self.retry_s = retry_s
        self.graph_dir = getattr(pipeline, "graph_dir", None)
        self.signature = self._signature()
        self.key = self._key()
        self.failed: Any = None  # the key a reload last failed at
        self.failed_at = 0.0
        self.reloads = 0
        self.failures = 0
        self.last_error: str | None = None
        self.now: Any = self.key  # the key last read from disk (ahead of self.key while stale)
        self._lock: asyncio.Lock | None = None

    @property
    def watching(self) -> bool:
        return self.reload is not None and self.graph_dir is not None

    def _key(self) -> Any:
        """(store key, the manifest's indexes record), or None when no readable store is there at this instant."""
        if not self.watching:
            return None
        from bencao.retrieval.graph.store import MANIFEST_NAME, store_key

        store = store_key(self.graph_dir)
        if store is None:
            return None
        try:
            manifest = json.loads((Path(self.graph_dir) / MANIFEST_NAME).read_text(encoding="utf-8"))
            indexes = json.dumps(manifest.get("indexes"), sort_keys=True, ensure_ascii=False)
        except (OSError, ValueError):
            indexes = None
        return (store, indexes)

    def _signature(self) -> Any:
        if not self.watching:
            return None
        from bencao.retrieval.graph.store import MANIFEST_NAME, store_signature

        try:
            st = os.stat(os.path.realpath(Path(self.graph_dir) / MANIFEST_NAME))
            manifest = (st.st_ino, st.st_mtime_ns, st.st_size)
        except OSError:
            manifest = None
        return (store_signature(self.graph_dir), manifest)

    def _needs_reload(self, key: Any) -> bool:
        if key is None or key == self.key:
            return False
        if key == self.failed and time.monotonic() - self.failed_at < self.retry_s:
            return False  # nothing moved since the last failure, and it is too soon to try again
        return True

    async def current(self) -> Any:
        """The pipeline for this request: reloaded first when the store or its indexes changed since it was loaded."""
        if not self.watching:
            return self.pipeline
        signature = self._signature()  # a few stat calls; the generation and the manifest are read only when they moved
        if signature == self.signature:
            return self.pipeline
        key = self._key()
        if key is None:  # no readable store at this instant (a rebuild swapping files): try again next request
            return self.pipeline
        self.now = key
        if key == self.key:
            self.signature = signature  # a write that changed neither the generation nor the indexes record
            return self.pipeline
        if not self._needs_reload(key):
            return self.pipeline
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:  # one reload at a time; requests arriving meanwhile wait and get the new one
            signature, key = self._signature(), self._key()
            if key is not None:
                self.now = key
            if self._needs_reload(key):
                from starlette.concurrency import run_in_threadpool

                try:
                    new = await run_in_threadpool(self.reload)
                except Exception as exc:  # noqa: BLE001 - keep serving the old graph, marked stale; try again soon
                    self.failed, self.failed_at = key, time.monotonic()
                    self.failures += 1
                    self.last_error = f"{type(exc).__name__}: {exc}"
                    log.warning("graph changed but reloading it failed (answers come from the previous one, marked stale; "
                                "retried when the store or its indexes move): %s", self.last_error)
                else:
                    self.pipeline, self.key, self.signature = new, key, signature
                    self.reloads, self.last_error, self.failed = self.reloads + 1, None, None
                    log.warning("graph %s changed (generation %s): pipeline reloaded", self.graph_dir, key[0][2])
        return self.pipeline

    @property
    def generation(self) -> int | None:
        """The store generation the loaded pipeline answers from."""
        return self.key[0][2] if self.key else None

    def freshness(self) -> dict[str, Any] | None:
        """None when answers come from what is on disk now (or nothing is watched); else what they come from and why
        (``served_generation``, ``store_generation``, ``reason``)."""
        if not self.watching or self.key is None or self.now is None or self.now == self.key:
            return None
        return {"stale": True, "served_generation": self.key[0][2], "store_generation": self.now[0][2],
                "reason": "the graph changed on disk and reloading it has not succeeded yet; answered from the previous graph"
                          + (f" ({self.last_error.splitlines()[0][:200]})" if self.last_error else "")
                          + "; the reload is retried on the next request"}

    def graph_field(self) -> dict[str, Any]:
        """The ``graph`` field of a reply: the generation it was answered from, and whether that is behind what is on disk."""
        return self.freshness() or {"stale": False, "served_generation": self.generation}


_KEY_CHARS = re.compile(r"[\x21-\x7e]+")


def resolve_api_key(cfg: ApiConfig, explicit: str | None = None) -> str | None:
    """The bearer key (``--api-key``, else ``$<api.api_key_env>``), None when neither is set. A key that no client
    could send (empty, with spaces or control characters, non-ASCII) is a one-line error, not a server that
    refuses every request."""
    where = "--api-key" if explicit is not None else f"${cfg.api_key_env}"
    key = explicit if explicit is not None else os.environ.get(cfg.api_key_env)
    if key is None:
        return None
    if not key.strip():
        raise BencaoError(f"{where} is {'empty' if not key else 'whitespace only'}: give a key, or unset it to serve without one")
    if not _KEY_CHARS.fullmatch(key):
        bad = next(ch for ch in key if not _KEY_CHARS.fullmatch(ch))
        raise BencaoError(f"{where}: the key holds {'a space' if bad.isspace() else f'the character U+{ord(bad):04X}'}; an API key "
                          "must be printable ASCII without spaces (what a client can send in 'Authorization: Bearer <key>')")
    return key


def create_app(pipeline: Any, cfg: ApiConfig | None = None, api_key: str | None = None, reload: Any = None) -> Any:
    """The FastAPI app over a loaded :class:`bencao.serving.pipeline.AnswerPipeline` (or any object
    with ``answer``, ``retrieve_dict``, ``model_name`` and ``info``). ``reload()`` builds a fresh
    pipeline when the graph changes on disk (see :class:`PipelineHolder`)."""
    from fastapi import FastAPI, Request
    from fastapi.encoders import jsonable_encoder
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import FileResponse, JSONResponse, StreamingResponse
    from pydantic import BaseModel, ConfigDict, Field
    from starlette.concurrency import run_in_threadpool
    from starlette.exceptions import HTTPException as StarletteHTTPException

    cfg = cfg or ApiConfig()
    limiter = SlotLimiter(cfg.max_concurrency, cfg.max_queue, cfg.queue_timeout_s, cfg.max_requests_per_client)
    started = time.time()

    class ContentPart(BaseModel):
        model_config = ConfigDict(extra="allow")
        type: str
        text: Optional[str] = None

    class ChatMessage(BaseModel):
        model_config = ConfigDict(extra="allow")
        role: Literal["system", "user", "assistant", "tool", "developer", "function"]
        content: Union[str, list[ContentPart], None] = None

    class ChatRequest(BaseModel):
        model_config = ConfigDict(extra="allow")
        model: Optional[str] = None
        messages: list[ChatMessage] = Field(min_length=1)
        stream: bool = False
        temperature: Optional[float] = Field(None, ge=0, le=2)
        top_p: Optional[float] = Field(None, gt=0, le=1)
        max_tokens: Optional[int] = Field(None, ge=1, le=32768)
        max_completion_tokens: Optional[int] = Field(None, ge=1, le=32768)
        seed: Optional[int] = None
        n: Optional[int] = Field(None, ge=1, le=1)

    class RetrieveRequest(BaseModel):
        model_config = ConfigDict(extra="forbid")
        question: str
        query_triples: Optional[list[Union[list[str], dict[str, str]]]] = None
        use_cot: bool = True
        options: Optional[list[str]] = None
        budget_chars: Optional[int] = None

    app = FastAPI(title="bencao", description="Answers about TCM, foods and dietary supplements with traceable evidence.",
                  version="1", docs_url="/docs" if cfg.docs else None, redoc_url=None,
                  openapi_url="/openapi.json" if cfg.docs else None, redirect_slashes=False)  # no redirect built from the Host header
    holder = PipelineHolder(pipeline, reload, retry_s=cfg.reload_retry_s)
    app.state.holder = holder
    app.state.limiter = limiter

    @app.exception_handler(ApiError)
    async def _api_error(request: Request, exc: ApiError) -> JSONResponse:
        return JSONResponse(error_body(exc.message, exc.type, exc.code, exc.param), status_code=exc.status, headers=exc.headers)

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        errs = exc.errors()
        first = errs[0] if errs else {}
        loc = ".".join(str(p) for p in first.get("loc", ()) if p != "body")
        msg = first.get("msg", "invalid request")
        if first.get("type") == "json_invalid":
            msg = f"request body is not valid JSON ({first.get('ctx', {}).get('error', msg)})"
        elif loc:
            msg = f"{loc}: {msg}"
        more = f" (and {len(errs) - 1} more problem(s))" if len(errs) > 1 else ""
        return JSONResponse(error_body(msg + more, "invalid_request_error", "invalid_request", loc or None), status_code=400)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error on %s", request.url.path)
        return JSONResponse(error_body(f"internal error ({type(exc).__name__}); see the server log", "server_error", "internal_error"),
                            status_code=500)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        type_ = "not_found_error" if exc.status_code == 404 else "invalid_request_error"
        return JSONResponse(error_body(str(exc.detail), type_, str(exc.status_code)), status_code=exc.status_code)

    def check_key(request: Request) -> None:
        if not api_key:
            return
        auth = request.headers.get("authorization", "")
        scheme, _, token = auth.partition(" ")
        if not auth:
            raise ApiError(401, "missing API key: send 'Authorization: Bearer <key>'", "authentication_error", "missing_api_key",
                           headers={"WWW-Authenticate": "Bearer"})
        if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode(), api_key.encode()):
            raise ApiError(401, "incorrect API key", "authentication_error", "invalid_api_key", headers={"WWW-Authenticate": "Bearer"})

    async def run_limited(request: Request, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """``fn`` in a worker thread, holding an answering slot, under the request's time budget: the
        pipeline stops at its next deadline check past the budget (504); should it not reach one within
        a grace second, the reply is 504 all the same and the slot is freed when the worker ends. The
        client (its address, or behind a trusted proxy the forwarded one) holds at most
        ``api.max_requests_per_client`` slots and queue places."""
        client = request.client.host if request.client else None
        await limiter.acquire(client)
        from bencao.deadline import DeadlineExceeded, deadline
        from bencao.serving.pipeline import GeneratorError

        budget = cfg.request_timeout_s if cfg.request_timeout_s and cfg.request_timeout_s > 0 else None

        def call() -> Any:
            with deadline(budget):
                return fn(*args, **kwargs)

        def too_slow(where: str = "") -> ApiError:
            return ApiError(504, f"the request ran past its time budget of {budget:g}s{where}; ask something narrower "
                                 "(fewer options or candidates) or retry later", "server_error", "request_timeout")

        work = asyncio.ensure_future(run_in_threadpool(call))
        deferred = False
        try:
            if budget is None:
                return await work
            try:
                return await asyncio.wait_for(asyncio.shield(work), timeout=budget + 1.0)
            except asyncio.TimeoutError:
                deferred = True
                work.add_done_callback(lambda f: (f.cancelled() or f.exception(), limiter.release(client)))
                raise too_slow() from None
        except DeadlineExceeded:
            raise too_slow() from None
        except GeneratorError as exc:
            raise ApiError(502, str(exc), "server_error", "upstream_model_error") from None
        except BencaoError as exc:
            raise ApiError(400, str(exc)) from None
        finally:
            if not deferred:
                limiter.release(client)

    def capped(items: Any, param: str, max_items: int, setting: str) -> None:
        """At most ``max_items`` items, else a one-line 400 naming the setting that allows more."""
        if len(items) > max_items:
            raise ApiError(400, f"{param}: {len(items):,} items, over the limit of {max_items:,} (api.{setting})", param=param,
                           code="too_many_items")

    def short(text: Any, param: str, max_chars: int, setting: str) -> str:
        """A string that can be encoded back (no lone surrogates, no NUL) and is at most ``max_chars`` long."""
        if not isinstance(text, str):
            raise ApiError(400, f"{param}: expected a string", param=param)
        if len(text) > max_chars:
            raise ApiError(400, f"{param}: {len(text):,} characters, over the limit of {max_chars:,} (api.{setting})", param=param,
                           code="item_too_long")
        return checked(text, param)

    def check_strings(obj: Any, where: str = "body") -> None:
        """Every string of a parsed body, keys included, fields the server ignores too: encodable (no lone surrogates, no NUL)."""
        if isinstance(obj, str):
            checked(obj, where)
        elif isinstance(obj, dict):
            for k, v in obj.items():
                checked(str(k), f"{where} (a key)")
                check_strings(v, f"{where}.{_encodable(str(k))}" if where != "body" else _encodable(str(k)))
        elif isinstance(obj, (list, tuple)):
            for i, v in enumerate(obj):
                check_strings(v, f"{where}[{i}]")

    def check_options(options: Any, as_object: bool) -> None:
        capped(options, "options", cfg.max_options, "max_options")
        items = options.items() if as_object else enumerate(options)
        for k, v in items:
            if as_object:
                short(k, "options (a key)", MAX_OPTION_KEY_CHARS, "max_options")
            short(v, f"options[{k!r}]" if as_object else f"options[{k}]", cfg.max_option_chars, "max_option_chars")

    def check_messages(messages: list[Any]) -> None:
        if len(messages) > cfg.max_messages:
            raise ApiError(400, f"messages: {len(messages)} messages, over the limit of {cfg.max_messages} (api.max_messages)",
                           param="messages", code="too_many_items")
        for i, m in enumerate(messages):
            if isinstance(m.content, str):
                short(m.content, f"messages[{i}].content", cfg.max_message_chars, "max_message_chars")
            elif isinstance(m.content, list):
                capped(m.content, f"messages[{i}].content", cfg.max_content_parts, "max_content_parts")
                for j, part in enumerate(m.content):
                    short(part.type, f"messages[{i}].content[{j}].type", 64, "max_message_chars")
                    if part.text is not None:
                        short(part.text, f"messages[{i}].content[{j}].text", cfg.max_message_chars, "max_message_chars")

    def checked(text: str, param: str) -> str:
        """Text a reply can carry: NUL and lone surrogates (``"\\ud800"``) cannot be encoded back to the client."""
        try:
            return check_text(text, param)
        except InvalidValue as exc:
            raise ApiError(400, str(exc), param=param, code="invalid_text") from None

    def question_of(req: ChatRequest) -> str:
        users = [m for m in req.messages if m.role == "user"]
        if not users:
            raise ApiError(400, "messages: no user message; the last user message is the question", param="messages")
        content = users[-1].content
        if isinstance(content, list):
            content = "\n".join(p.text or "" for p in content if p.type == "text")
        q = checked((content or "").strip(), "messages")
        if not q:
            raise ApiError(400, "the question (last user message) is empty", param="messages", code="empty_question")
        if len(q) > cfg.max_question_chars:
            raise ApiError(400, f"the question is {len(q):,} characters, over the limit of {cfg.max_question_chars:,}",
                           param="messages", code="question_too_long")
        return q

    @app.get("/healthz")
    async def healthz(request: Request, details: bool = False) -> dict[str, Any]:
        """Status only (``ok``, or ``stale`` while the answers come from an older graph generation than the store's);
        ``?details=1`` (with the API key when one is set) adds the graph, the answerer, load and reload state."""
        pipeline = await holder.current()
        status = "stale" if holder.freshness() else "ok"
        if not details:
            return {"status": status}
        check_key(request)
        return {"status": status, **pipeline.info(), "uptime_s": round(time.time() - started, 1),
                "in_flight": limiter.active, "queued": limiter.waiting, "auth": bool(api_key),
                "graph_generation": holder.generation, "reloads": holder.reloads, "graph": holder.graph_field(),
                **({"reload_error": holder.last_error} if holder.last_error else {})}

    @app.get("/v1/models")
    async def models(request: Request) -> dict[str, Any]:
        check_key(request)
        pipeline = holder.pipeline
        return {"object": "list", "data": [{"id": pipeline.model_name, "object": "model", "created": int(started), "owned_by": "bencao"}]}

    def stale_headers(graph: dict[str, Any]) -> dict[str, str]:
        if not graph.get("stale"):
            return {}
        return {STALE_HEADER: f"served-generation={graph['served_generation']}; store-generation={graph['store_generation']}"}

    @app.post("/v1/retrieve")
    async def retrieve(request: Request, body: RetrieveRequest) -> Any:
        check_key(request)
        check_strings(body.model_dump())
        q = checked(body.question.strip(), "question")
        if body.options is not None:
            check_options(body.options, as_object=False)
        if not q:
            raise ApiError(400, "question is empty", param="question", code="empty_question")
        if len(q) > cfg.max_question_chars:
            raise ApiError(400, f"question is {len(q):,} characters, over the limit of {cfg.max_question_chars:,}", param="question")
        triples = None
        if body.query_triples is not None:
            capped(body.query_triples, "query_triples", cfg.max_query_triples, "max_query_triples")
            for i, t in enumerate(body.query_triples):
                if len(t) != 3 or (isinstance(t, dict) and set(t) != {"head", "relation", "tail"}):
                    raise ApiError(400, f"query_triples[{i}]: each triple needs head, relation and tail (3 strings, or an object "
                                        "with those keys)", param="query_triples")
                for part in (t.values() if isinstance(t, dict) else t):
                    short(part, f"query_triples[{i}]", cfg.max_triple_part_chars, "max_triple_part_chars")
            triples = [t if isinstance(t, dict) else dict(zip(("head", "relation", "tail"), t)) for t in body.query_triples]
        if body.budget_chars is not None and not 0 <= body.budget_chars <= cfg.max_budget_chars:
            raise ApiError(400, f"budget_chars must be between 0 (the recipe's budget) and {cfg.max_budget_chars:,}", param="budget_chars")
        pipeline = await holder.current()
        graph = holder.graph_field()
        extra = {"budget_chars": body.budget_chars} if body.budget_chars else {}
        out = await run_limited(request, pipeline.retrieve_dict, q, triples, body.use_cot, body.options, **extra)
        return JSONResponse(jsonable_encoder({**out, "graph": graph}), headers=stale_headers(graph))

    @app.post("/v1/chat/completions")
    async def chat(request: Request, body: ChatRequest) -> Any:
        check_key(request)
        check_messages(body.messages)
        check_strings({**body.model_dump(exclude={"messages"}), **(body.model_extra or {})})
        for i, m in enumerate(body.messages):
            check_strings({**m.model_dump(exclude={"content"}), **(m.model_extra or {})}, f"messages[{i}]")
        q = question_of(body)
        if body.model is not None and body.model.strip() and body.model.strip() != holder.pipeline.model_name:
            raise ApiError(404, f"model {body.model!r} is not served here; this server answers as {holder.pipeline.model_name!r} "
                                "(GET /v1/models); leave `model` out or name that one", "invalid_request_error", "model_not_found",
                           param="model")
        params = {k: v for k, v in (("temperature", body.temperature), ("top_p", body.top_p), ("seed", body.seed),
                                     ("max_tokens", body.max_tokens or body.max_completion_tokens)) if v is not None}
        extra = body.model_extra or {}  # bencao's own fields beside OpenAI's: task, options, candidates
        task, options, candidates = extra.get("task"), extra.get("options"), extra.get("candidates")
        if task is not None and not isinstance(task, str):
            raise ApiError(400, "task: expected a string (qa, mcq, sd, tf, rec)", param="task")
        if task is not None:
            short(task, "task", 16, "max_option_chars")
        if options is not None and not (isinstance(options, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in options.items())):
            raise ApiError(400, "options: expected an object of lettered option texts", param="options")
        if options is not None:
            check_options(options, as_object=True)
        if candidates is not None and not (isinstance(candidates, list) and all(isinstance(c, str) for c in candidates)):
            raise ApiError(400, "candidates: expected a list of strings", param="candidates")
        if candidates is not None:
            capped(candidates, "candidates", cfg.max_candidates, "max_candidates")
            for i, c in enumerate(candidates):
                short(c, f"candidates[{i}]", cfg.max_candidate_chars, "max_candidate_chars")
        if (options or candidates) and task is None:
            task = "mcq" if options else "rec"
        pipeline = await holder.current()
        graph = holder.graph_field()
        res = await run_limited(request, pipeline.answer, q, task=task, options=options, candidates=candidates, **params)
        content = res["answer"]
        if getattr(getattr(pipeline, "cfg", None), "answer", None) is None or pipeline.cfg.answer.append_sources:
            from bencao.serving.answer import sources_block

            block = sources_block(q, res.get("citations") or [], getattr(getattr(pipeline, "cfg", None), "answer", None))
            if block:
                content = f"{content}\n\n{block}"
        cid = "chatcmpl-" + uuid.uuid4().hex[:24]
        created = int(time.time())
        extra = {"citations": res.get("citations", []), "references": res.get("references", []), "evidence": res.get("evidence"), "query_triples": res.get("query_triples"),
                 "abstained": res.get("abstained"), "own_answer": res.get("own_answer"), "answered_by": res.get("answered_by"),
                 "prediction": res.get("prediction"), "timings": res.get("timings"), "graph": graph}
        usage = res.get("usage") or {}
        if not body.stream:
            return JSONResponse(jsonable_encoder({
                "id": cid, "object": "chat.completion", "created": created, "model": pipeline.model_name,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop", "logprobs": None}],
                "usage": {"prompt_tokens": usage.get("prompt_tokens", 0), "completion_tokens": usage.get("completion_tokens", 0),
                          "total_tokens": usage.get("prompt_tokens", 0) + usage.get("completion_tokens", 0)},
                **extra,
            }), headers=stale_headers(graph))

        def chunk(delta: dict[str, Any], finish: str | None = None, **more: Any) -> str:
            obj = {"id": cid, "object": "chat.completion.chunk", "created": created, "model": pipeline.model_name,
                   "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}], **more}
            return f"data: {json.dumps(obj, ensure_ascii=False)}\n\n"

        def events() -> Any:
            yield chunk({"role": "assistant", "content": ""})
            step = max(1, cfg.stream_chunk_chars)
            for i in range(0, len(content), step):
                yield chunk({"content": content[i : i + step]})
            yield chunk({}, "stop", **extra)
            yield "data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream", headers={"Cache-Control": "no-cache", **stale_headers(graph)})

    if cfg.web and WEB_DIR.is_dir():
        from fastapi.staticfiles import StaticFiles

        app.mount("/static", StaticFiles(directory=WEB_DIR), name="static")

        @app.get("/", include_in_schema=False)
        async def index() -> Any:
            return FileResponse(WEB_DIR / "index.html", media_type="text/html")

    app.add_middleware(BodyLimitMiddleware, limit=cfg.max_body_bytes, timeout_s=cfg.body_timeout_s)
    app.add_middleware(GateMiddleware, api_key=api_key, docs_paths=("/docs", "/openapi.json") if cfg.docs else ())  # outermost
    return app
