"""Connection-level guards of ``bencao serve``: slow and idle clients cannot lock others out, and
every connection a client opens gets an HTTP reply.

uvicorn bounds an idle keep-alive connection (``timeout_keep_alive``) and the size of a request's
headers while they are incomplete (``h11_max_incomplete_event_size``), but not the *time* a client may
take to send them, nor the size of a head that arrives whole: a client trickling one header byte a
second, or opening a socket and sending nothing, holds its connection for as long as it likes, and
enough of them (``limit_concurrency``) turn every request into 503. :func:`guarded_protocol` returns
uvicorn's h11 protocol with these additions:

- a header timeout: from the moment a connection opens, and again after each response, the client has
  ``header_timeout_s`` to deliver a complete request head; past it the connection is closed (with a
  408 when some bytes had arrived). A request whose head arrived is never cut by it (bodies have
  their own timeout, ``api.body_timeout_s``, and answers their time budget);
- a head size limit: a request head over ``max_header_bytes`` gets 431, however it arrived;
- a per-client cap: one client address holds at most ``per_client`` connections. A new one beyond it
  closes that client's oldest connection that was never used and has waited for a request for at least
  :data:`IDLE_GRACE_S` (an idle socket, not one whose request is about to arrive, nor a keep-alive
  connection its client may be reusing at that moment); when there is none,
  the new connection is kept and its request answered at once with 429 and ``Retry-After`` (and the
  connection closed): a client behind a NAT or a proxy gets a reply it can retry on, never a bare
  close. Addresses in ``trusted`` (reverse proxies, ``api.trusted_proxies``) are not capped: their
  connections carry many clients, told apart by ``X-Forwarded-For`` at the request level;
- room for real requests: when the server holds ``max_connections`` connections, a new one closes the
  oldest idle connection (waiting for a request head) instead of pushing every request into 503.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
from typing import Any, Iterable

#: A connection counts as idle (evictable for the per-client cap) once it has waited this long for a request head.
IDLE_GRACE_S = 1.0
_BODY_408 = b'{"error": {"message": "request headers not received in time", "type": "invalid_request_error", "param": null, "code": "request_timeout"}}'
#: What a client that sent part of a request head but not all of it in time gets before the close.
_TIMEOUT_408 = (b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\nconnection: close\r\ncontent-length: "
                + str(len(_BODY_408)).encode() + b"\r\n\r\n" + _BODY_408)


def trusted_networks(addresses: Iterable[str]) -> list[Any]:
    """``api.trusted_proxies`` as networks (a bare address is a /32 or /128); a bad entry is a ValueError naming it."""
    out = []
    for a in addresses:
        try:
            out.append(ipaddress.ip_network(str(a).strip(), strict=False))
        except ValueError:
            raise ValueError(f"{a!r} is not an IP address or network (e.g. 10.0.0.5, 10.0.0.0/8, ::1)") from None
    return out


def is_trusted(host: str | None, networks: list[Any]) -> bool:
    if not host or not networks:
        return False
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return False
    return any(ip in n for n in networks)


async def reply(send: Any, status: int, message: str, code: str, type_: str = "invalid_request_error",
                headers: dict[str, str] | None = None) -> None:
    """An OpenAI-style JSON error reply after which the connection closes (its body, if any, is not read)."""
    body = json.dumps({"error": {"message": message, "type": type_, "param": None, "code": code}}).encode()
    hs = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()), (b"connection", b"close")]
    hs += [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": hs})
    await send({"type": "http.response.body", "body": body})


def head_bytes(scope: dict) -> int:
    """Size of a request head as sent: request line and headers."""
    line = len(scope.get("method", "")) + len(scope.get("raw_path", b"")) + len(scope.get("query_string", b"")) + 12
    return line + sum(len(k) + len(v) + 4 for k, v in scope.get("headers", [])) + 2


def guarded_protocol(header_timeout_s: float, per_client: int, max_connections: int, *, max_header_bytes: int = 16384,
                     trusted: Iterable[str] = ()) -> type[asyncio.Protocol]:
    """uvicorn's H11Protocol with a header timeout, a head size limit, a per-client connection cap that answers
    429, and idle-first eviction."""
    from uvicorn.protocols.http.h11_impl import H11Protocol

    networks = trusted_networks(trusted)

    class GuardedH11Protocol(H11Protocol):
        guard_header_timeout_s = header_timeout_s
        guard_per_client = per_client
        guard_max_connections = max_connections
        guard_max_header_bytes = max_header_bytes

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

        def _guard_idle_for(self, now: float) -> float:
            """How long this connection, never used for a request, has waited for one with nothing of it received (0 when it
            is busy, or a keep-alive connection between requests: its client may be reusing it this very moment, and
            closing it would drop that request without a reply; uvicorn's keep-alive timeout ends those)."""
            if not self._guard_waiting() or self._guard_bytes or self._guard_served:
                return 0.0
            return now - self._guard_since

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

        async def _guard_app(self, scope: dict, receive: Any, send: Any) -> None:
            """The app as this connection's requests see it: over the client's cap → 429; an oversized head → 431."""
            if scope.get("type") == "http":
                if self._guard_over_cap:
                    await reply(send, 429, f"too many connections from {self.client[0] if self.client else 'this address'} "
                                           f"(at most {self.guard_per_client}, all busy); retry shortly", "too_many_connections",
                                "rate_limit_error", {"Retry-After": "1"})
                    return
                size = head_bytes(scope)
                if self.guard_max_header_bytes and size > self.guard_max_header_bytes:
                    await reply(send, 431, f"request head of {size:,} bytes, over the limit of {self.guard_max_header_bytes:,} "
                                           "(api.max_header_bytes)", "request_header_too_large")
                    return
            await self._guard_inner(scope, receive, send)

        # -- uvicorn's hooks
        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._guard_over_cap = False
            self._guard_served = 0
            self._guard_inner, self.app = self.app, self._guard_app
            self._guard_arm()
            peer = self.client[0] if self.client else None
            others = [c for c in list(self.connections) if c is not self]
            now = self.loop.time()
            if peer is not None and self.guard_per_client > 0 and not is_trusted(peer, networks):
                mine = [c for c in others if c.client and c.client[0] == peer]
                if len(mine) + 1 > self.guard_per_client:
                    idle = sorted((c for c in mine if c._guard_idle_for(now) >= IDLE_GRACE_S), key=lambda c: c._guard_since)
                    if idle:
                        idle[0]._guard_close()
                        others.remove(idle[0])
                    else:  # all of this client's connections are busy or about to be: this one's request gets 429
                        self._guard_over_cap = True
            if self.guard_max_connections > 0 and len(others) + 1 >= self.guard_max_connections:
                # never-used sockets idle past the grace first, then other never-used ones, keep-alive connections between
                # requests last (their client may be reusing one this very moment), oldest first within each
                idle = sorted((c for c in others if c._guard_waiting()),
                              key=lambda c: (c._guard_served > 0, c._guard_idle_for(now) < IDLE_GRACE_S, c._guard_since))
                for c in idle[: len(others) + 2 - self.guard_max_connections]:
                    c._guard_close()

        def data_received(self, data: bytes) -> None:
            if getattr(self, "_guard_idle", False):
                self._guard_bytes += len(data)
            super().data_received(data)
            if getattr(self, "_guard_idle", False) and self.cycle is not self._guard_cycle:
                self._guard_disarm()  # a request head arrived: the request's own limits take over

        def on_response_complete(self) -> None:
            self._guard_served += 1
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
    """The ``uvicorn.Config`` of ``bencao serve`` for an :class:`~bencao.serving.api.ApiConfig`. ``X-Forwarded-For``
    is read only from ``api.trusted_proxies`` (uvicorn would otherwise trust it from 127.0.0.1 by default)."""
    import uvicorn

    trusted = [str(n) for n in trusted_networks(api.trusted_proxies)]
    return uvicorn.Config(app, host=host, port=port, log_level=kw.pop("log_level", "warning"), timeout_graceful_shutdown=5,
                          limit_concurrency=api.max_connections, timeout_keep_alive=api.keep_alive_timeout_s,
                          h11_max_incomplete_event_size=api.max_header_bytes,
                          proxy_headers=bool(trusted), forwarded_allow_ips=trusted or None,
                          http=guarded_protocol(api.header_timeout_s, api.max_connections_per_client, api.max_connections,
                                                max_header_bytes=api.max_header_bytes, trusted=api.trusted_proxies), **kw)
