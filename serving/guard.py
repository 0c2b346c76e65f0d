"""Connection-level guards of ``bencao serve``: slow and idle clients cannot lock others out.

uvicorn bounds an idle keep-alive connection (``timeout_keep_alive``) and the size of a request's
headers (``h11_max_incomplete_event_size``), but not the *time* a client may take to send them: a
client trickling one header byte a second, or opening a socket and sending nothing, holds its
connection for as long as it likes, and enough of them (``limit_concurrency``) turn every request
into 503. :func:`guarded_protocol` returns uvicorn's h11 protocol with three additions:

- a header timeout: from the moment a connection opens, and again after each response, the client has
  ``header_timeout_s`` to deliver a complete request head; past it the connection is closed (with a
  408 when some bytes had arrived). A request whose head arrived is never cut by it (bodies have
  their own timeout, ``api.body_timeout_s``, and answers their time budget);
- a per-client cap: one client address holds at most ``per_client`` connections; a new one beyond it
  closes that client's oldest connection still waiting for a request (or, when all of them are busy,
  the new one);
- room for real requests: when the server holds ``max_connections`` connections, a new one closes the
  oldest idle connection (waiting for a request head) instead of pushing every request into 503.

Behind a reverse proxy every client has the proxy's address: the per-client cap then bounds the
proxy's connections (docs/serving-reliability.md).
"""

from __future__ import annotations

import asyncio
from typing import Any

_BODY_408 = b'{"error": {"message": "request headers not received in time", "type": "invalid_request_error", "param": null, "code": "request_timeout"}}'
#: What a client that sent part of a request head but not all of it in time gets before the close.
_TIMEOUT_408 = (b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\nconnection: close\r\ncontent-length: "
                + str(len(_BODY_408)).encode() + b"\r\n\r\n" + _BODY_408)


def guarded_protocol(header_timeout_s: float, per_client: int, max_connections: int) -> type[asyncio.Protocol]:
    """uvicorn's H11Protocol with a header timeout, a per-client connection cap and idle-first eviction."""
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class GuardedH11Protocol(H11Protocol):
        guard_header_timeout_s = header_timeout_s
        guard_per_client = per_client
        guard_max_connections = max_connections

        # -- state: a connection is "idle" while its header timer runs (waiting for a request head)
        def _guard_arm(self) -> None:
            self._guard_disarm()
            self._guard_cycle = self.cycle
            self._guard_since = self.loop.time()
            self._guard_bytes = 0
            if self.guard_header_timeout_s and self.guard_header_timeout_s > 0:
                self._guard_timer = self.loop.call_later(self.guard_header_timeout_s, self._guard_expired)
            else:
                self._guard_timer = None
            self._guard_idle = True

        def _guard_disarm(self) -> None:
            timer = getattr(self, "_guard_timer", None)
            if timer is not None:
                timer.cancel()
            self._guard_timer = None
            self._guard_idle = False

        def _guard_waiting(self) -> bool:
            """Still waiting for a request head since the timer was armed (no request started)."""
            return getattr(self, "_guard_idle", False) and self.cycle is self._guard_cycle

        def _guard_expired(self) -> None:
            self._guard_timer = None
            if not self._guard_waiting() or self.transport.is_closing():
                return
            if self._guard_bytes:
                try:
                    self.transport.write(_TIMEOUT_408)
                except Exception:  # noqa: BLE001 - the client may be gone already
                    pass
            self._guard_close()

        def _guard_close(self) -> None:
            self._guard_disarm()
            self.connections.discard(self)  # room at once: uvicorn's own count drops only in connection_lost
            self.transport.close()

        # -- uvicorn's hooks
        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._guard_arm()
            peer = self.client[0] if self.client else None
            others = [c for c in list(self.connections) if c is not self]
            if peer is not None and self.guard_per_client > 0:
                mine = [c for c in others if c.client and c.client[0] == peer]
                if len(mine) + 1 > self.guard_per_client:
                    idle = sorted((c for c in mine if c._guard_waiting()), key=lambda c: c._guard_since)
                    if idle:
                        idle[0]._guard_close()
                        others.remove(idle[0])
                    else:  # all of this client's connections are answering: this one waits its turn elsewhere
                        self._guard_close()
                        return
            if self.guard_max_connections > 0 and len(others) + 1 >= self.guard_max_connections:
                idle = sorted((c for c in others if c._guard_waiting()), key=lambda c: c._guard_since)
                for c in idle[: len(others) + 2 - self.guard_max_connections]:
                    c._guard_close()

        def data_received(self, data: bytes) -> None:
            if getattr(self, "_guard_idle", False):
                self._guard_bytes += len(data)
            super().data_received(data)
            if getattr(self, "_guard_idle", False) and self.cycle is not self._guard_cycle:
                self._guard_disarm()  # a request head arrived: the request's own limits take over

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if self.transport.is_closing():
                self._guard_disarm()
                return
            if self.cycle is not None and not self.cycle.response_complete:
                return  # a pipelined request started at once
            self._guard_arm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._guard_disarm()
            super().connection_lost(exc)

    return GuardedH11Protocol


def uvicorn_config(app: Any, api: Any, host: str, port: int, **kw: Any) -> Any:
    """The ``uvicorn.Config`` of ``bencao serve`` for an :class:`~bencao.serving.api.ApiConfig`."""
    import uvicorn

    return uvicorn.Config(app, host=host, port=port, log_level=kw.pop("log_level", "warning"), timeout_graceful_shutdown=5,
                          limit_concurrency=api.max_connections, timeout_keep_alive=api.keep_alive_timeout_s,
                          h11_max_incomplete_event_size=api.max_header_bytes,
                          http=guarded_protocol(api.header_timeout_s, api.max_connections_per_client, api.max_connections), **kw)
