"""Load and abuse ``bencao serve`` on loopback, with the API key off and on.

    .venv/bin/python bench/serve_load.py [--graph DIR] [--clients 200] [--duration 60] [--out bench/results/serve_load.json]

Without ``--graph`` the small serving graph of the tests (MFH catalogue + 神农本草经, default index)
is built into a temporary directory. For each auth mode the script starts ``bencao serve`` in a
subprocess and runs:

1. load: ``--clients`` concurrent httpx async clients for ``--duration`` seconds, each looping over
   chat completions (a mix of Chinese and English questions) and ``/v1/retrieve``; a 429/503 makes that
   client wait its ``Retry-After`` (what the openai client does). p50/p95/max latency per status code,
   status counts, throughput, and the server's RSS before and after.
2. abuse, while a trickle of normal requests measures that the server still answers:
   - 40 streaming clients that disconnect after the first chunk;
   - 20 slow-body clients (a declared 2 KB body sent 1 byte per second): the server must close them
     (408) within ``api.body_timeout_s`` instead of holding the connection forever;
   - oversized bodies (declared, and chunked without Content-Length) -> 413;
   - deeply nested JSON (100 000 levels) and other malformed JSON -> 400, never 500;
   - path traversal on ``/``, ``/static`` and ``/v1`` (``..``, ``%2e%2e``, ``%2f``, backslashes, NUL,
     absolute paths, symlink-style names) -> never a 200 with a file from outside ``serving/web``;
   - with the key on: no key / wrong key -> 401, ``/healthz`` and ``/`` open.
3. slow and idle clients (issue 26), each with a probe client asking ``/healthz`` and ``/v1/retrieve``
   every half second throughout, whose statuses and latencies are recorded:
   - slow clients: ``--tricklers`` connections (default 100) sending a request head one byte a second,
     never finishing it: the server must cut every one within ``api.header_timeout_s`` (+5 s);
   - idle flood: ``--idle-flood`` connections (default 1000, the default ``api.max_connections``)
     opened at once and left silent: requests must still be answered while they are open, and none
     may be left open past ``api.header_timeout_s`` (+5 s).
4. after: ``/healthz`` shows nothing in flight or queued; RSS after the abuse.

``--only-clients`` runs step 3 alone (no load, no other abuse): a quick check of the connection guards.

Burst (issue 33): ``--burst 200x5`` makes 200 clients, each its own connection pool, send 5 requests one
after another, all clients at once: from ONE source address (what a reverse proxy or a NAT looks like) and
from MANY (each client bound to its own 127.0.0.x address). A 429/503 is retried after its
``Retry-After`` up to ``--burst-retries`` times (the openai client's default is 2). Recorded: every
attempt's status, each request's final status, the requests that got no HTTP reply at all (a connection
closed or reset: the failure this scenario exists to catch), p50/p95 of the answered requests (from the
first attempt, retries included) and the server's RSS. ``--baseline-ref REF`` runs the same burst against
the serving package of git revision REF (over the rest of this tree) first, in the same run.
``--only-burst`` runs the burst alone.

The script exits non-zero when an invariant fails (a 5xx, a traversal that returned a file, a slow
body that was not cut, a slot not released), so it doubles as a soak test.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
KEY = "sk-bench-serve-load"
QUESTIONS = ["大枣的性味是什么？", "人参主治什么？", "山药有什么功效？", "枸杞子可以食用吗？", "What is ginseng used for?",
             "生姜和干姜有什么区别？", "哪些物质是药食同源的？", "甘草的性味归经？"]
RECIPE = """name: serve-load
root: {root}
index: true
sources:
  - format: catalog-csv
    path: data/sample/mfh_catalog/mfh_catalog_106.csv
  - format: books-txt
    path: data/sample/tcm_classics/txt/000-神农本草经.txt
    options: {{materia_medica: true}}
"""


def _env() -> dict[str, str]:
    e = dict(os.environ)
    e.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_DATASETS_OFFLINE="1", TOKENIZERS_PARALLELISM="false", PYTHONUNBUFFERED="1")
    return e


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def build_graph(where: Path) -> Path:
    recipe = where / "recipe.yaml"
    recipe.write_text(RECIPE.format(root=REPO), encoding="utf-8")
    graph = where / "graph"
    subprocess.run([sys.executable, "-m", "bencao.cli", "graph", "build", "-c", str(recipe), "-g", str(graph)], check=True, env=_env(), cwd=REPO)
    return graph


#: Runs ``bencao`` with the serving package taken from another folder (a baseline revision's ``serving/``).
_OVERLAY = ("import sys; import bencao.serving as s; s.__path__[:] = [sys.argv[1]]; from bencao.cli import main; "
            "sys.exit(main(sys.argv[2:]))")


def baseline_serving(ref: str, where: Path) -> Path:
    """The ``serving/`` package of git revision ``ref``, extracted under ``where``."""
    out = where / f"serving-{ref[:12]}"
    if not out.exists():
        out.mkdir(parents=True)
        archive = subprocess.run(["git", "-C", str(REPO), "archive", ref, "serving"], check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(out)], input=archive, check=True)
    return out / "serving"


@contextlib.contextmanager
def serve(graph: Path, key: str | None, sets: list[str], log: Path, serving_dir: Path | None = None):
    import httpx

    port = _free_port()
    head = [sys.executable, "-c", _OVERLAY, str(serving_dir)] if serving_dir else [sys.executable, "-m", "bencao.cli"]
    cmd = [*head, "serve", "--graph", str(graph), "--port", str(port)]
    for s in sets:
        cmd += ["--set", s]
    if key:
        cmd += ["--api-key", key]
    with open(log, "ab") as fh:
        proc = subprocess.Popen(cmd, cwd=REPO, env=_env(), stdout=fh, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"bencao serve exited with {proc.returncode}; see {log}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(base + "/healthz", timeout=2).status_code == 200:
                    break
            if time.monotonic() > deadline:
                raise RuntimeError("bencao serve did not start")
            time.sleep(0.3)
        yield base, proc
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _pct(xs: list[float], p: float) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def _summary(records: list[tuple[str, int, float]]) -> dict[str, Any]:
    by: dict[int, list[float]] = defaultdict(list)
    for _, status, lat in records:
        by[status].append(lat)
    return {str(s): {"n": len(v), "p50_ms": round(_pct(v, 50) * 1000, 1), "p95_ms": round(_pct(v, 95) * 1000, 1),
                     "max_ms": round(max(v) * 1000, 1)} for s, v in sorted(by.items())}


async def load(base: str, key: str | None, clients: int, duration: float) -> dict[str, Any]:
    import httpx

    headers = {"Authorization": f"Bearer {key}"} if key else {}
    records: list[tuple[str, int, float]] = []
    errors: Counter[str] = Counter()
    stop = time.monotonic() + duration

    async def client(i: int, http: httpx.AsyncClient) -> None:
        n = i
        while time.monotonic() < stop:
            q = QUESTIONS[n % len(QUESTIONS)]
            n += 1
            if n % 4 == 0:
                kind, path, body = "retrieve", "/v1/retrieve", {"question": q}
            else:
                kind, path, body = "chat", "/v1/chat/completions", {"model": "bencao", "messages": [{"role": "user", "content": q}]}
            t = time.perf_counter()
            try:
                r = await http.post(base + path, json=body, headers=headers)
            except httpx.HTTPError as exc:
                errors[type(exc).__name__] += 1
                await asyncio.sleep(1)
                continue
            records.append((kind, r.status_code, time.perf_counter() - t))
            if r.status_code in (429, 503):
                await asyncio.sleep(float(r.headers.get("retry-after", "1")))

    # idle connections expire before uvicorn closes them (timeout_keep_alive 5 s): no reuse race on a closed socket
    limits = httpx.Limits(max_connections=clients + 10, max_keepalive_connections=clients + 10, keepalive_expiry=3.0)
    async with httpx.AsyncClient(limits=limits, timeout=httpx.Timeout(180.0)) as http:
        t0 = time.perf_counter()
        await asyncio.gather(*(client(i, http) for i in range(clients)))
        wall = time.perf_counter() - t0
    statuses = Counter(s for _, s, _ in records)
    return {"clients": clients, "duration_s": round(wall, 1), "requests": len(records), "statuses": dict(sorted(statuses.items())),
            "answered_per_s": round(statuses.get(200, 0) / wall, 2), "latency": _summary(records),
            "latency_chat_200": _summary([r for r in records if r[0] == "chat" and r[1] == 200]).get("200"),
            "client_errors": dict(errors)}


async def _stream_disconnects(base: str, headers: dict[str, str], n: int) -> dict[str, Any]:
    import httpx

    got = Counter()
    async with httpx.AsyncClient(timeout=120) as http:
        async def one(i: int) -> None:
            body = {"messages": [{"role": "user", "content": QUESTIONS[i % len(QUESTIONS)]}], "stream": True}
            async with http.stream("POST", base + "/v1/chat/completions", json=body, headers=headers) as r:
                got[r.status_code] += 1
                if r.status_code == 200:
                    async for _chunk in r.aiter_bytes():
                        break  # disconnect after the first chunk
        await asyncio.gather(*(one(i) for i in range(n)), return_exceptions=True)
    return {"clients": n, "statuses": dict(got)}


async def _slow_body(host: str, port: int, path: str, headers: dict[str, str], n: int, hold_s: float) -> dict[str, Any]:
    """Declare a 2 KB body and send it one byte per second; record what the server does and when."""
    async def one() -> tuple[str, float]:
        t = time.monotonic()
        reader, writer = await asyncio.open_connection(host, port)
        head = f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\nContent-Length: 2048\r\n"
        head += "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
        writer.write(head.encode())
        await writer.drain()
        status = "held open"
        try:
            while time.monotonic() - t < hold_s:
                writer.write(b" ")
                await writer.drain()
                try:
                    line = await asyncio.wait_for(reader.readline(), timeout=1.0)
                except asyncio.TimeoutError:
                    continue
                status = line.decode(errors="replace").strip() or "closed"
                break
        except (ConnectionError, OSError):
            status = "closed"
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()
        return status, round(time.monotonic() - t, 1)

    res = await asyncio.gather(*(one() for _ in range(n)))
    return {"clients": n, "outcomes": dict(Counter(s for s, _ in res)), "max_s": max(d for _, d in res)}


async def _raw_get(host: str, port: int, path: str) -> tuple[int, bytes]:
    """GET with the path sent byte for byte (httpx would normalise ``..`` away before sending)."""
    reader, writer = await asyncio.open_connection(host, port)
    writer.write(f"GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode("latin-1"))
    await writer.drain()
    data = await asyncio.wait_for(reader.read(), timeout=30)
    writer.close()
    head, _, body = data.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1]) if head.startswith(b"HTTP/") else 0
    return status, body


TRAVERSALS = ["/static/../../pyproject.toml", "/static/..%2f..%2fpyproject.toml", "/static/%2e%2e/%2e%2e/pyproject.toml",
              "/static/%2e%2e%2f%2e%2e%2fpyproject.toml", "/static/..\\..\\pyproject.toml", "/static/..%5c..%5cpyproject.toml",
              "/static//etc/passwd", "/static/%2fetc%2fpasswd", "/static/....//....//etc/passwd", "/static/app.js%00.txt",
              "/static/%c0%ae%c0%ae/%c0%ae%c0%ae/pyproject.toml", "/../../../../etc/passwd", "/%2e%2e/%2e%2e/etc/passwd",
              "/v1/../../etc/passwd", "/static/../api.py", "/static/..%2fapi.py", "//etc/passwd", "/static/%2e%2e/cli.py",
              "/static/../../../../../../../../etc/passwd", "/static/.%2e/.%2e/pyproject.toml", "/static/%252e%252e/pyproject.toml",
              "/static/../web/../api.py", "/static/index.html/../../api.py"]


async def abuse(base: str, key: str | None, body_timeout_s: float) -> dict[str, Any]:
    import httpx

    headers = {"Authorization": f"Bearer {key}"} if key else {}
    host, port = base.split("//")[1].split(":")
    out: dict[str, Any] = {}
    probe_lat: list[float] = []
    probe_status: Counter[int] = Counter()

    async def probe(stop: asyncio.Event) -> None:  # a normal client, once a second, during the abuse
        async with httpx.AsyncClient(timeout=120) as http:
            while not stop.is_set():
                t = time.perf_counter()
                r = await http.post(base + "/v1/retrieve", json={"question": "大枣的性味是什么？"}, headers=headers)
                probe_status[r.status_code] += 1
                probe_lat.append(time.perf_counter() - t)
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(stop.wait(), 1.0)

    stop = asyncio.Event()
    prober = asyncio.create_task(probe(stop))
    out["stream_disconnect"] = await _stream_disconnects(base, headers, 40)
    out["slow_body"] = await _slow_body(host, int(port), "/v1/chat/completions", headers, 20, hold_s=body_timeout_s + 20)
    stop.set()
    await prober
    out["normal_requests_during_abuse"] = {"statuses": dict(probe_status), "p50_ms": round(_pct(probe_lat, 50) * 1000, 1),
                                           "max_ms": round(max(probe_lat, default=float("nan")) * 1000, 1)}

    async with httpx.AsyncClient(timeout=60) as http:
        big = {"messages": [{"role": "user", "content": "枣" * 400_000}]}
        r1 = await http.post(base + "/v1/chat/completions", json=big, headers=headers)

        async def chunks():
            for _ in range(200):
                yield b"x" * 8192

        r2 = await http.post(base + "/v1/chat/completions", content=chunks(), headers={**headers, "Content-Type": "application/json"})
        out["oversized"] = {"declared": r1.status_code, "chunked": r2.status_code}
        nested = {
            "deep_list": b'{"messages": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
            "deep_object": b'{"messages": [{"role": "user", "content": "x", "extra": ' + b'{"a": ' * 50_000 + b"1" + b"}" * 50_000 + b"}]}",
            "deep_retrieve": b'{"question": "q", "query_triples": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
            "truncated": b'{"messages": [',
            "not_utf8": b'{"messages": [{"role": "user", "content": "caf\xe9"}]}',
            "nul": b'{"messages": [{"role": "user", "content": "a\\u0000b"}]}',
            "surrogate": b'{"messages": [{"role": "user", "content": "a\\ud800b"}]}',
            "huge_int": b'{"messages": [{"role": "user", "content": "x"}], "max_tokens": ' + b"9" * 5000 + b"}",
        }
        out["malformed_json"] = {}
        for name, data in nested.items():
            path = "/v1/retrieve" if name == "deep_retrieve" else "/v1/chat/completions"
            try:
                r = await http.post(base + path, content=data, headers={**headers, "Content-Type": "application/json"})
                out["malformed_json"][name] = r.status_code
            except httpx.HTTPError as exc:
                out["malformed_json"][name] = f"connection dropped ({type(exc).__name__})"
        trav = {}
        for p in TRAVERSALS:
            try:
                status, content = await _raw_get(host, int(port), p)
            except (OSError, asyncio.TimeoutError) as exc:
                trav[p] = f"connection dropped ({type(exc).__name__})"
                continue
            leaked = status == 200 and (b"[project]" in content or b"root:" in content or b"import " in content)
            trav[p] = f"{status}{' LEAK' if leaked else ''}"
        out["path_traversal"] = trav
        if key:
            out["auth"] = {
                "no_key": (await http.post(base + "/v1/retrieve", json={"question": "q"})).status_code,
                "wrong_key": (await http.post(base + "/v1/retrieve", json={"question": "q"}, headers={"Authorization": "Bearer nope"})).status_code,
                "right_key": (await http.post(base + "/v1/retrieve", json={"question": "大枣"}, headers=headers)).status_code,
                "healthz_no_key": (await http.get(base + "/healthz")).status_code,
                "web_no_key": (await http.get(base + "/")).status_code,
            }
        await asyncio.sleep(1)
        out["health_after"] = (await http.get(base + "/healthz?details=1", headers=headers)).json()
    return out


async def _probed(base: str, headers: dict[str, str], work: Any) -> dict[str, Any]:
    """Run ``work`` (a coroutine) while a normal client asks /healthz and /v1/retrieve every half second, from another
    source address than the abusive connections (127.0.0.2: another user, not the abuser's own retries)."""
    import httpx

    lat: dict[str, list[float]] = defaultdict(list)
    statuses: dict[str, Counter] = defaultdict(Counter)
    stop = asyncio.Event()

    async def probe() -> None:
        async with httpx.AsyncClient(timeout=60, transport=httpx.AsyncHTTPTransport(local_address="127.0.0.2")) as http:
            while not stop.is_set():
                for name, call in (("healthz", lambda: http.get(base + "/healthz")),
                                   ("retrieve", lambda: http.post(base + "/v1/retrieve", json={"question": "大枣的性味是什么？"}, headers=headers))):
                    t = time.perf_counter()
                    try:
                        r = await call()
                        statuses[name][r.status_code] += 1
                    except httpx.HTTPError as exc:
                        statuses[name][type(exc).__name__] += 1
                    lat[name].append(time.perf_counter() - t)
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(stop.wait(), 0.5)

    prober = asyncio.create_task(probe())
    await asyncio.sleep(0.2)
    try:
        out = await work
    finally:
        stop.set()
        await prober
    out["requests_during"] = {name: {"statuses": dict(statuses[name]), "p50_ms": round(_pct(lat[name], 50) * 1000, 1),
                                     "max_ms": round(max(lat[name], default=float("nan")) * 1000, 1)} for name in statuses}
    return out


async def _header_tricklers(host: str, port: int, n: int, hold_s: float) -> dict[str, Any]:
    """``n`` connections sending a request head one byte a second, never its end; what the server does and when."""
    async def one() -> tuple[str, float]:
        t = time.monotonic()
        try:
            reader, writer = await asyncio.open_connection(host, port)
        except OSError as exc:
            return f"refused ({type(exc).__name__})", 0.0
        status = "held open"
        try:
            writer.write(f"GET /healthz HTTP/1.1\r\nHost: {host}\r\nX-Trickle: ".encode())
            while time.monotonic() - t < hold_s:
                writer.write(b"x")
                await writer.drain()
                try:
                    line = await asyncio.wait_for(reader.readline(), timeout=1.0)
                except asyncio.TimeoutError:
                    continue
                status = line.decode(errors="replace").strip() or "closed"
                break
        except (ConnectionError, OSError):
            status = "closed"
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()
        return status, round(time.monotonic() - t, 1)

    res = await asyncio.gather(*(one() for _ in range(n)))
    return {"clients": n, "outcomes": dict(Counter(s for s, _ in res)), "max_s": max(d for _, d in res),
            "p50_s": _pct([d for _, d in res], 50)}


async def _idle_flood(host: str, port: int, n: int, hold_s: float) -> dict[str, Any]:
    """Open ``n`` connections at once and send nothing; count how many the server keeps open over time."""
    conns: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
    refused: Counter[str] = Counter()
    t = time.monotonic()
    for _ in range(n):
        try:
            conns.append(await asyncio.open_connection(host, port))
        except OSError as exc:
            refused[type(exc).__name__] += 1
    opened_s = round(time.monotonic() - t, 2)
    timeline: list[tuple[float, int]] = []
    while time.monotonic() - t < hold_s:
        await asyncio.sleep(0.5)
        open_now = sum(not r.at_eof() for r, _ in conns)
        timeline.append((round(time.monotonic() - t, 1), open_now))
        if open_now == 0:
            break
    for _, w in conns:
        w.close()
    return {"connections": n, "opened": len(conns), "refused": dict(refused), "opened_in_s": opened_s,
            "open_after_s": [list(x) for x in timeline if x is timeline[0] or x is timeline[-1] or x[1] != 0][:3] + [list(timeline[-1])],
            "all_closed_after_s": next((x[0] for x in timeline if x[1] == 0), None)}


async def clients_phase(base: str, key: str | None, header_timeout_s: float, tricklers: int, idle: int) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    host, port = base.split("//")[1].split(":")
    hold = header_timeout_s + 20
    return {"header_timeout_s": header_timeout_s,
            "slow_clients": await _probed(base, headers, _header_tricklers(host, int(port), tricklers, hold)),
            "idle_flood": await _probed(base, headers, _idle_flood(host, int(port), idle, hold))}


def check_clients(c: dict[str, Any]) -> list[str]:
    bad = []
    limit = c["header_timeout_s"] + 5
    sc, fl = c["slow_clients"], c["idle_flood"]
    if sc["outcomes"].get("held open") or sc["max_s"] > limit:
        bad.append(f"slow clients were not cut within {limit:g}s: {sc['outcomes']}, max {sc['max_s']}s")
    if fl["all_closed_after_s"] is None or fl["all_closed_after_s"] > limit:
        bad.append(f"idle connections left open: {fl['open_after_s']}")
    for name, scen in (("slow clients", sc), ("idle flood", fl)):
        for what, r in scen["requests_during"].items():
            if set(r["statuses"]) != {200}:
                bad.append(f"{what} during the {name}: {r['statuses']}")
    return bad


def check(mode: dict[str, Any], body_timeout_s: float) -> list[str]:
    """The invariants; returns what failed."""
    bad = []
    for s in mode["load"]["statuses"]:
        if int(s) >= 500 and int(s) != 503:
            bad.append(f"load: status {s}")
    if mode["load"]["statuses"].get(200, 0) == 0:
        bad.append("load: nothing answered")
    a = mode["abuse"]
    if any(k >= 500 for k in a["normal_requests_during_abuse"]["statuses"]):
        bad.append("normal requests failed during the abuse")
    if a["slow_body"]["outcomes"].get("held open") or a["slow_body"]["max_s"] > body_timeout_s + 5:
        bad.append(f"slow bodies were not cut: {a['slow_body']}")
    if set(a["oversized"].values()) != {413}:
        bad.append(f"oversized: {a['oversized']}")
    bad += [f"malformed JSON {k}: {v}" for k, v in a["malformed_json"].items() if v != 400]
    bad += [f"traversal {p}: {v}" for p, v in a["path_traversal"].items() if "LEAK" in v or v.startswith("5")]
    if "auth" in a and (a["auth"]["no_key"], a["auth"]["wrong_key"], a["auth"]["right_key"], a["auth"]["healthz_no_key"]) != (401, 401, 200, 200):
        bad.append(f"auth: {a['auth']}")
    h = a["health_after"]
    if h["in_flight"] or h["queued"]:
        bad.append(f"slots not released after the abuse: {h['in_flight']} in flight, {h['queued']} queued")
    return bad


async def burst(base: str, key: str | None, clients: int, per_client: int, many: bool, retries: int) -> dict[str, Any]:
    """``clients`` clients at once, each sending ``per_client`` requests in turn on its own connection pool, from
    one source address or each from its own (127.0.0.2, 127.0.0.3, ...)."""
    import httpx

    headers = {"Authorization": f"Bearer {key}"} if key else {}
    attempts: Counter[str] = Counter()
    finals: Counter[str] = Counter()
    no_reply: Counter[str] = Counter()
    answered_s: list[float] = []
    port = base.rsplit(":", 1)[1]

    async def client(i: int) -> None:
        addr = f"127.0.{(i + 2) // 250}.{(i + 2) % 250 + 1}" if many else "127.0.0.1"
        target = f"http://127.0.0.1:{port}"
        transport = httpx.AsyncHTTPTransport(local_address=addr, retries=0)
        async with httpx.AsyncClient(transport=transport, timeout=httpx.Timeout(300.0), limits=httpx.Limits(max_connections=1)) as http:
            for j in range(per_client):
                q = QUESTIONS[(i + j) % len(QUESTIONS)]
                path, body = (("/v1/retrieve", {"question": q}) if (i + j) % 4 == 0 else
                              ("/v1/chat/completions", {"model": "bencao", "messages": [{"role": "user", "content": q}]}))
                t0 = time.perf_counter()
                final = "none"
                for attempt in range(retries + 1):
                    try:
                        r = await http.post(target + path, json=body, headers=headers)
                    except httpx.HTTPError as exc:  # no HTTP reply: closed, reset or refused
                        final = type(exc).__name__
                        no_reply[final] += 1
                        attempts[final] += 1
                        break
                    final = str(r.status_code)
                    attempts[final] += 1
                    if r.status_code in (429, 503) and attempt < retries:
                        await asyncio.sleep(float(r.headers.get("retry-after", "1")))
                        continue
                    break
                finals[final] += 1
                if final == "200":
                    answered_s.append(time.perf_counter() - t0)

    t = time.perf_counter()
    await asyncio.gather(*(client(i) for i in range(clients)))
    wall = time.perf_counter() - t
    return {"clients": clients, "requests_per_client": per_client, "source_addresses": clients if many else 1, "retries": retries,
            "wall_s": round(wall, 1), "attempts": dict(sorted(attempts.items())), "final": dict(sorted(finals.items())),
            "no_reply": sum(no_reply.values()), "no_reply_kinds": dict(no_reply),
            "answered_p50_s": round(_pct(answered_s, 50), 2), "answered_p95_s": round(_pct(answered_s, 95), 2)}


def run_bursts(graph: Path, key: str | None, sets: list[str], log: Path, spec: str, retries: int, serving_dir: Path | None) -> dict[str, Any]:
    clients, per_client = (int(x) for x in spec.lower().split("x"))
    out: dict[str, Any] = {}
    for many in (False, True):
        with serve(graph, key, sets, log, serving_dir) as (base, proc):
            import httpx

            warm = {"Authorization": f"Bearer {key}"} if key else {}
            httpx.post(base + "/v1/chat/completions", json={"messages": [{"role": "user", "content": QUESTIONS[0]}]}, headers=warm, timeout=300)
            rss0 = _rss_mib(proc.pid)
            res = asyncio.run(burst(base, key, clients, per_client, many, retries))
            res["rss_mib_before"], res["rss_mib_after"] = round(rss0, 1), round(_rss_mib(proc.pid), 1)
            res["load_avg_after"] = round(os.getloadavg()[0], 1)
        out["many_addresses" if many else "one_address"] = res
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--graph", type=Path, help="graph directory (default: build the small serving graph)")
    ap.add_argument("--clients", type=int, default=200)
    ap.add_argument("--duration", type=float, default=60.0)
    ap.add_argument("--modes", default="off,on", help="API key modes to run: off,on")
    ap.add_argument("--set", dest="sets", action="append", default=[], help="serve --set overrides (repeatable)")
    ap.add_argument("--body-timeout", type=float, default=10.0, help="api.body_timeout_s given to the server")
    ap.add_argument("--header-timeout", type=float, default=10.0, help="api.header_timeout_s given to the server")
    ap.add_argument("--tricklers", type=int, default=100, help="slow clients trickling a request head")
    ap.add_argument("--idle-flood", type=int, default=1000, help="idle connections opened at once")
    ap.add_argument("--only-clients", action="store_true", help="run the slow-client and idle-flood scenarios only")
    ap.add_argument("--burst", default="", help="CLIENTSxREQUESTS, e.g. 200x5: the burst scenario from one and from many addresses")
    ap.add_argument("--burst-retries", type=int, default=2, help="retries of a 429/503 after its Retry-After in the burst")
    ap.add_argument("--baseline-ref", default="", help="git revision whose serving package the burst also runs against, first")
    ap.add_argument("--only-burst", action="store_true", help="run the burst scenario only")
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "serve_load.json")
    args = ap.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="serve-load-"))
    graph = args.graph or build_graph(tmp)
    sets = [f"api.body_timeout_s={args.body_timeout}", f"api.header_timeout_s={args.header_timeout}", *args.sets]
    result: dict[str, Any] = {"graph": str(graph), "clients": args.clients, "duration_s": args.duration, "serve_sets": sets,
                              "cpus": os.cpu_count(), "load_avg_before": os.getloadavg()[0], "modes": {}}
    failures: list[str] = []
    if args.burst:
        result["burst"] = {}
        if args.baseline_ref:
            ref = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", args.baseline_ref], check=True, capture_output=True,
                                 text=True).stdout.strip()
            result["burst"][f"baseline {ref}"] = run_bursts(graph, None, sets, tmp / "serve.log", args.burst, args.burst_retries,
                                                            baseline_serving(ref, tmp))
        head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "serving"], capture_output=True, text=True).stdout.strip()
        this = f"this tree {head}{' (modified)' if dirty else ''}"
        result["burst"][this] = run_bursts(graph, None, sets, tmp / "serve.log", args.burst, args.burst_retries, None)
        for scen, res in result["burst"][this].items():
            if res["no_reply"]:
                failures.append(f"burst {scen}: {res['no_reply']} requests got no HTTP reply ({res['no_reply_kinds']})")
        for name, by in result["burst"].items():
            for scen, res in by.items():
                print(f"burst {args.burst} {scen} [{name}]: attempts {res['attempts']}; final {res['final']}; no reply {res['no_reply']}; "
                      f"answered p50 {res['answered_p50_s']} s p95 {res['answered_p95_s']} s; wall {res['wall_s']} s; "
                      f"RSS {res['rss_mib_before']} -> {res['rss_mib_after']} MiB")
    if args.only_burst:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
        print("FAILURES:\n" + "\n".join(failures) if failures else "all invariants held")
        return 1 if failures else 0
    for mode in args.modes.split(","):
        key = KEY if mode == "on" else None
        with serve(graph, key, sets, tmp / "serve.log") as (base, proc):
            import httpx
            import psutil

            warm = {"Authorization": f"Bearer {key}"} if key else {}
            for q in QUESTIONS[:3]:
                httpx.post(base + "/v1/chat/completions", json={"messages": [{"role": "user", "content": q}]}, headers=warm, timeout=300)
            rss0 = _rss_mib(proc.pid)
            res: dict[str, Any] = {"rss_mib_before": round(rss0, 1)}
            if args.only_clients:
                res["clients"] = asyncio.run(clients_phase(base, key, args.header_timeout, args.tricklers, args.idle_flood))
                res["rss_mib_after_clients"] = round(_rss_mib(proc.pid), 1)
                res["failures"] = check_clients(res["clients"])
                failures += [f"key {mode}: {f}" for f in res["failures"]]
                result["modes"][mode] = res
                continue
            cpu = lambda pid: sum(psutil.Process(pid).cpu_times()[:2])  # noqa: E731
            s0, c0 = cpu(proc.pid), cpu(os.getpid())
            res["load"] = asyncio.run(load(base, key, args.clients, args.duration))
            # where the time goes: on a small shared machine the load generator itself is often the bottleneck
            res["load"]["server_cpu_s"] = round(cpu(proc.pid) - s0, 1)
            res["load"]["client_cpu_s"] = round(cpu(os.getpid()) - c0, 1)
            res["load"]["load_avg_after"] = round(os.getloadavg()[0], 1)
            res["rss_mib_after_load"] = round(_rss_mib(proc.pid), 1)
            res["abuse"] = asyncio.run(abuse(base, key, args.body_timeout))
            res["rss_mib_after_abuse"] = round(_rss_mib(proc.pid), 1)
            res["clients"] = asyncio.run(clients_phase(base, key, args.header_timeout, args.tricklers, args.idle_flood))
            res["rss_mib_after_clients"] = round(_rss_mib(proc.pid), 1)
            res["failures"] = check(res, args.body_timeout) + check_clients(res["clients"])
            failures += [f"key {mode}: {f}" for f in res["failures"]]
            result["modes"][mode] = res
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
    for mode, res in result["modes"].items():
        print(f"key {mode}: slow clients and idle flood: " + json.dumps(res["clients"], ensure_ascii=False))
        if "load" not in res:
            continue
        ld = res["load"]
        lat = ld["latency"]
        print(f"key {mode}: {ld['requests']} requests in {ld['duration_s']} s from {ld['clients']} clients; statuses {ld['statuses']}; "
              f"answered {ld['answered_per_s']}/s; 200 p50 {lat.get('200', {}).get('p50_ms')} ms p95 {lat.get('200', {}).get('p95_ms')} ms; "
              f"429 p50 {lat.get('429', {}).get('p50_ms')} ms p95 {lat.get('429', {}).get('p95_ms')} ms; "
              f"RSS {res['rss_mib_before']} -> {res['rss_mib_after_load']} -> {res['rss_mib_after_abuse']} MiB; "
              f"CPU server {ld['server_cpu_s']} s, load generator {ld['client_cpu_s']} s")
    print(json.dumps({m: r["abuse"] for m, r in result["modes"].items() if "abuse" in r}, ensure_ascii=False, indent=1))
    print("FAILURES:\n" + "\n".join(failures) if failures else "all invariants held")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
