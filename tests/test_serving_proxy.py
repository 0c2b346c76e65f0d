"""Issue 33 items 1, 2 and 7 (the API's part): serving behind a proxy or a NAT, answers before bodies, settings checked.

- Load from one address is never dropped: a connection over the per-client cap gets 429 with Retry-After
  (then a close), a connection that has not yet sent its request is not evicted for the cap, and many
  clients from one address each get an HTTP reply for every request.
- Behind a trusted proxy the proxy is not capped per connection, and the forwarded client address is what
  ``api.max_requests_per_client`` counts; without one, ``X-Forwarded-For`` is ignored.
- Routes that take no body are answered without reading one (a client without the key cannot hold
  connections by trickling bodies to ``/`` or ``/healthz``).
- A request head over ``api.max_header_bytes`` gets 431 even when it arrives whole; impossible settings,
  API keys and model names are one-line errors.
"""

from __future__ import annotations

import asyncio
import re
import socket
import time

import pytest

from test_serving_reliability import FakePipeline, _closed, _uvicorn

QUESTION = {"messages": [{"role": "user", "content": "大枣的性味是什么？"}]}


def _head(path: str = "/healthz", method: str = "GET", extra: str = "") -> bytes:
    return f"{method} {path} HTTP/1.1\r\nHost: x\r\n{extra}\r\n".encode()


def _status(reply: bytes) -> int:
    return int(reply.split(b" ", 2)[1]) if reply.startswith(b"HTTP/1.1 ") else 0


# --------------------------------------------------------------------------- item 1: one address, many clients


def test_a_connection_over_the_per_client_cap_gets_429_with_retry_after_never_a_bare_close():
    from bencao.serving.api import ApiConfig

    api = ApiConfig(max_connections_per_client=4, body_timeout_s=10.0)
    with _uvicorn(api) as (_base, port, _server):
        busy = []
        for _ in range(4):  # four requests under way (their bodies still arriving): the client's cap is used up
            s = socket.create_connection(("127.0.0.1", port))
            s.sendall(_head("/v1/chat/completions", "POST", "Content-Type: application/json\r\nContent-Length: 100\r\n") + b'{"mess')
            busy.append(s)
        time.sleep(0.3)
        extra = socket.create_connection(("127.0.0.1", port))
        extra.sendall(_head())
        done, got = _closed(extra, 3.0)
        assert _status(got) == 429 and b"retry-after: 1" in got.lower() and b"too_many_connections" in got, got
        assert done  # and then closed: the client retries on a new connection
        for s in busy:
            assert not _closed(s, 0.0)[0]  # the busy ones were not touched
            s.close()
        extra.close()


def test_fresh_connections_of_one_address_are_not_evicted_before_their_request_arrives():
    """A client (or a NAT) opening many connections at once: each is answered, none closed before its request."""
    from bencao.serving.api import ApiConfig

    api = ApiConfig(max_connections_per_client=4)
    with _uvicorn(api) as (_base, port, _server):
        socks = [socket.create_connection(("127.0.0.1", port)) for _ in range(12)]
        time.sleep(0.05)
        for s in socks:
            s.sendall(_head(extra="Connection: close\r\n"))
        statuses = [_status(_closed(s, 3.0)[1]) for s in socks]
        assert all(st in (200, 429) for st in statuses), statuses  # 0 would be a close without a reply
        assert statuses.count(200) >= 4, statuses
        for s in socks:
            s.close()


def test_a_keep_alive_connection_between_requests_is_never_evicted_for_the_cap():
    """Its client may be sending the next request at that very moment: closing it would drop that request unanswered."""
    from bencao.serving.api import ApiConfig
    from bencao.serving.guard import IDLE_GRACE_S

    api = ApiConfig(max_connections_per_client=1, keep_alive_timeout_s=30.0, header_timeout_s=30.0)
    with _uvicorn(api) as (_base, port, _server):
        kept = socket.create_connection(("127.0.0.1", port))
        kept.sendall(_head())
        assert _status(_closed(kept, 0.5)[1]) == 200
        time.sleep(IDLE_GRACE_S + 0.3)  # idle between requests, past the grace
        newer = socket.create_connection(("127.0.0.1", port))
        newer.sendall(_head())
        assert _status(_closed(newer, 3.0)[1]) == 429  # the newcomer waits its turn ...
        kept.sendall(_head())
        done, got = _closed(kept, 1.0)
        assert not done and _status(got) == 200  # ... the reused connection is answered
        kept.close()
        newer.close()


def test_at_the_connection_limit_fresh_idle_sockets_go_before_a_keep_alive_connection():
    from bencao.serving.api import ApiConfig

    api = ApiConfig(max_connections=10, max_connections_per_client=0, keep_alive_timeout_s=30.0, header_timeout_s=30.0)
    with _uvicorn(api) as (_base, port, _server):
        kept = socket.create_connection(("127.0.0.1", port))
        kept.sendall(_head())
        assert _status(_closed(kept, 0.5)[1]) == 200
        flood = [socket.create_connection(("127.0.0.1", port)) for _ in range(30)]  # 3x the limit, opened after it
        time.sleep(0.2)
        kept.sendall(_head())
        done, got = _closed(kept, 1.0)
        assert not done and _status(got) == 200, got  # the keep-alive connection survived the flood and is answered
        assert sum(_closed(s, 0.0)[0] for s in flood) >= 30 - 10
        for s in [kept, *flood]:
            s.close()


def test_many_clients_from_one_address_get_a_reply_for_every_request():
    import httpx

    from bencao.serving.api import ApiConfig

    api = ApiConfig(max_connections_per_client=8, max_concurrency=2, max_queue=4)
    with _uvicorn(api, FakePipeline(delay_s=0.02)) as (base, _port, _server):
        async def client(i: int, out: list) -> None:
            async with httpx.AsyncClient(timeout=30, limits=httpx.Limits(max_connections=1)) as http:
                for _ in range(3):
                    try:
                        r = await http.post(base + "/v1/chat/completions", json=QUESTION)
                        out.append(r.status_code)
                        if r.status_code == 429:
                            assert r.headers["retry-after"] == "1"
                    except httpx.HTTPError as exc:
                        out.append(type(exc).__name__)

        async def run() -> list:
            out: list = []
            await asyncio.gather(*(client(i, out) for i in range(60)))
            return out

        statuses = asyncio.run(run())
    assert len(statuses) == 180 and set(statuses) <= {200, 429}, sorted(map(str, set(statuses)))
    assert statuses.count(200) >= 6


# --------------------------------------------------------------------------- behind a proxy


def _forwarded(base: str, clients: list[str]) -> list[int]:
    """One chat request per entry of ``clients`` (an X-Forwarded-For value), all at once, each on its own connection."""
    import httpx

    async def one(xff: str) -> int:
        async with httpx.AsyncClient(timeout=30) as http:
            r = await http.post(base + "/v1/chat/completions", json=QUESTION, headers={"X-Forwarded-For": xff})
            return r.status_code

    async def run() -> list[int]:
        return list(await asyncio.gather(*(one(x) for x in clients)))

    return asyncio.run(run())


def test_behind_a_trusted_proxy_the_forwarded_address_is_the_client():
    from bencao.serving.api import ApiConfig

    api = ApiConfig(trusted_proxies=["127.0.0.0/8"], max_connections_per_client=2, max_requests_per_client=1, max_concurrency=1,
                    max_queue=8)
    with _uvicorn(api, FakePipeline(delay_s=0.3)) as (base, _port, _server):
        statuses = _forwarded(base, ["10.0.0.1", "10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4"])
    # 5 connections from the proxy, over its per-client cap of 2: none refused for it; 10.0.0.1's second request is
    # over that client's one request at a time; the others are answered
    assert sorted(statuses) == [200, 200, 200, 200, 429], statuses
    assert statuses[2:] == [200, 200, 200]


def test_without_a_trusted_proxy_x_forwarded_for_is_ignored():
    from bencao.serving.api import ApiConfig

    api = ApiConfig(max_requests_per_client=1, max_concurrency=1, max_queue=8)
    with _uvicorn(api, FakePipeline(delay_s=0.3)) as (base, _port, _server):
        statuses = _forwarded(base, ["10.0.0.1", "10.0.0.2", "10.0.0.3"])  # spoofed: all are 127.0.0.1
    assert sorted(statuses) == [200, 429, 429], statuses


# --------------------------------------------------------------------------- item 2: no body read where none is needed


@pytest.mark.parametrize("method, path, status", [("POST", "/", 405), ("POST", "/healthz", 405), ("POST", "/nowhere", 404),
                                                  ("PUT", "/static/app.js", 405), ("DELETE", "/v1/models", 405)])
def test_a_route_that_takes_no_body_is_answered_without_waiting_for_one(method, path, status):
    from bencao.serving.api import ApiConfig

    api = ApiConfig(body_timeout_s=20.0)
    with _uvicorn(api) as (_base, port, _server):
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(_head(path, method, "Content-Type: application/json\r\nContent-Length: 5000\r\n") + b"x")  # a body that trickles
        t0 = time.monotonic()
        done, got = _closed(s, 3.0)
        assert _status(got) == status and done, got  # at once, then closed: the body is never waited for
        assert time.monotonic() - t0 < 3.0
        s.close()


def test_body_tricklers_on_bodiless_routes_do_not_lock_out_health_checks_or_keyed_chats():
    import httpx

    from bencao.serving.api import ApiConfig

    api = ApiConfig(max_connections=40, max_connections_per_client=0, body_timeout_s=30.0)
    with _uvicorn(api) as (base, port, _server):
        tricklers = []
        for i in range(60):  # more than the server holds, each a POST with a body that never comes
            s = socket.create_connection(("127.0.0.1", port))
            s.sendall(_head("/healthz" if i % 2 else "/", "POST", "Content-Length: 100000\r\n") + b"x")
            tricklers.append(s)
        time.sleep(0.3)
        statuses = [httpx.get(base + "/healthz", timeout=5).status_code for _ in range(10)]
        statuses.append(httpx.post(base + "/v1/chat/completions", json=QUESTION, timeout=10).status_code)
        assert statuses == [200] * 11, statuses
        for s in tricklers:
            s.close()


# --------------------------------------------------------------------------- item 7: limits and settings


def test_a_request_head_over_the_limit_gets_431_even_when_it_arrives_whole():
    from bencao.serving.api import ApiConfig

    api = ApiConfig(max_header_bytes=16384)
    with _uvicorn(api) as (_base, port, _server):
        for size, want in ((15000, 200), (17000, 431), (60000, 431)):
            s = socket.create_connection(("127.0.0.1", port))
            s.sendall(_head(extra=f"X-Big: {'a' * size}\r\nConnection: close\r\n"))
            got = _closed(s, 3.0)[1]
            assert _status(got) == want, (size, got[:200])
            s.close()


@pytest.mark.parametrize("override, words", [
    ("api.max_body_bytes=-1", "api.max_body_bytes: -1 must be greater than 0"),
    ("api.body_timeout_s=-5", "api.body_timeout_s"), ("api.header_timeout_s=-1", "api.header_timeout_s"),
    ("api.queue_timeout_s=0", "api.queue_timeout_s"), ("api.request_timeout_s=-1", "api.request_timeout_s"),
    ("api.port=99999", "api.port: 99999 is not a TCP port"), ("api.port=0", "api.port"),
    ("api.max_header_bytes=10", "api.max_header_bytes"), ("api.trusted_proxies=[10.0.0.300]", "api.trusted_proxies"),
    ("api.max_requests_per_client=-2", "api.max_requests_per_client"),
])
def test_impossible_serve_settings_are_one_line_errors(override, words):
    from bencao.errors import ConfigError
    from bencao.serving.config import load_serve_config

    with pytest.raises(ConfigError) as info:
        load_serve_config(None, [override])
    assert words in str(info.value) and "\n" not in str(info.value)


def test_serve_port_out_of_range_is_a_usage_error_not_a_traceback(capsys):
    from bencao.cli import main

    assert main(["serve", "--graph", "/nonexistent", "--port", "99999"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and "--port" in err and "65535" in err and err.count("\n") == 1, err


@pytest.mark.parametrize("key, words", [("", "empty"), ("   ", "whitespace only"), ("sk key", "a space"), ("ключ", "U+043A"),
                                        ("sk-\x07", "U+0007")])
def test_an_api_key_no_client_could_send_is_refused_at_start(key, words, monkeypatch):
    from bencao.errors import BencaoError
    from bencao.serving.api import ApiConfig, resolve_api_key

    with pytest.raises(BencaoError, match=re.escape(words)):
        resolve_api_key(ApiConfig(), key)
    monkeypatch.setenv("BENCAO_API_KEY", key)
    with pytest.raises(BencaoError, match=r"\$BENCAO_API_KEY"):
        resolve_api_key(ApiConfig())
    monkeypatch.setenv("BENCAO_API_KEY", "sk-good_key.1")
    assert resolve_api_key(ApiConfig()) == "sk-good_key.1"
    monkeypatch.delenv("BENCAO_API_KEY")
    assert resolve_api_key(ApiConfig()) is None


def test_a_model_not_served_is_refused_and_replies_name_the_model_that_answered():
    from fastapi.testclient import TestClient

    from bencao.serving.api import create_app

    client = TestClient(create_app(FakePipeline()))
    r = client.post("/v1/chat/completions", json={"model": "gpt-4o", **QUESTION})
    assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found" and "'bencao'" in r.json()["error"]["message"]
    for body in ({"model": "bencao", **QUESTION}, QUESTION):
        r = client.post("/v1/chat/completions", json=body)
        assert r.status_code == 200 and r.json()["model"] == "bencao" and r.json()["answered_by"] == "graph"
    assert [m["id"] for m in client.get("/v1/models").json()["data"]] == ["bencao"]
