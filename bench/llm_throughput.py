"""Teacher throughput: requests/s of bencao's LLM path against a loopback endpoint with a fixed latency.

    python bench/llm_throughput.py --latency-s 0.5 --in-flight 1 8 64 256 [--snippets 434000 --teacher-latency-s 15]

A loopback OpenAI-compatible server (``python -m bencao.llm.local_server``, its own process) holds
every request ``--latency-s`` seconds and answers with a small valid JSON envelope, like a serving
engine that batches everything it is sent. For each number of requests in flight N the script
times two paths, each with ``--rounds`` × N requests (at least ``--min-requests``), after N warm-up
requests have opened the connections a long run keeps open:

- ``client``: ``make_client(llm)`` (openai backend + response cache) ``complete_many``;
- ``runner``: the data-generation path: ``run_items`` with one ``acomplete_json`` per item through
  the ledger's metered client and the response cache, records appended to a JSONL file
  (``concurrency = 2 × llm.max_concurrency``, as ``data extract`` does).

The ideal is N / latency requests per second; the table gives the measured rate and its ratio to
the ideal, the CPU time one request costs in the client (this process) and in the server (the
loopback process), the machine's load average, and how long the 434 k-snippet TCM-DiffRAG run
would take at N in flight when one request to a 72B teacher takes ``--teacher-latency-s`` seconds
(ratio as measured here). CPU per request hardly depends on what else the machine runs; the rate
does, so read the ratio together with the load average printed beside it.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
REPLY = '{"triples": [], "entities": [], "relations": [], "question": "q"}'


def start_server(latency_s: float) -> tuple[subprocess.Popen, str]:
    from bencao.llm.local_server import free_port

    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "bencao.llm.local_server", "--port", str(port), "--latency-s", str(latency_s),
                             "--model", "bench", "--reply", REPLY], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            urllib.request.urlopen(url + "/stats", timeout=1).read()
            return proc, url
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"loopback server did not start: {proc.stderr.read().decode()[-2000:] if proc.stderr else ''}")
            time.sleep(0.1)


def server_stats(url: str, reset: bool = False) -> dict:
    if reset:
        urllib.request.urlopen(urllib.request.Request(url + "/stats/reset", method="POST"), timeout=5).read()
    return json.loads(urllib.request.urlopen(url + "/stats", timeout=5).read())


def llm_config(url: str, n: int, cache: Path):
    from bencao.llm import LLMConfig

    return LLMConfig(backend="openai", model="bench", base_url=url + "/v1", max_concurrency=n, max_retries=0, temperature=0.0,
                     max_tokens=64, cache=str(cache))


def warm_up(client, n: int) -> None:
    """n requests at once: the connection pool holds n open connections, as in the steady state of a long run."""
    client.complete_many([[{"role": "user", "content": f"warm-up {i}"}] for i in range(n)])


def time_client(url: str, n: int, requests: int, tmp: Path) -> float:
    from bencao.llm import make_client

    client = make_client(llm_config(url, n, tmp / f"client-{n}.sqlite"))
    warm_up(client, n)
    batch = [[{"role": "user", "content": f"snippet {n}-{i}"}] for i in range(requests)]
    t0 = time.perf_counter()
    out = client.complete_many(batch)
    took = time.perf_counter() - t0
    bad = [o for o in out if isinstance(o, Exception)]
    if bad:
        raise RuntimeError(f"{len(bad)} failed requests, e.g. {bad[0]}")
    return took


def time_runner(url: str, n: int, requests: int, tmp: Path) -> float:
    from bencao.data_gen.ledger import Ledger
    from bencao.data_gen.runner import Done, Skip, run_items
    from bencao.llm import acomplete_json, make_client

    cfg = llm_config(url, n, tmp / f"runner-{n}.sqlite")
    ledger = Ledger(tmp / f"ledger-{n}.json")
    client = ledger.client(make_client(cfg), "bench")
    warm_up(client, n)

    async def work(i: int) -> Done | Skip:
        res = await acomplete_json(client, [{"role": "user", "content": f"snippet {n}-{i}"}], {"type": "object"})
        return Done([{"i": i, "triples": res.value["triples"]}]) if res.ok else Skip(res.kind or "error", res.error or "")

    t0 = time.perf_counter()
    summary = run_items([(str(i), i) for i in range(requests)], work, out=tmp / f"out-{n}", name="bench",
                        concurrency=2 * n, progress=False, ledger=ledger)
    took = time.perf_counter() - t0
    if summary.done != requests:
        raise RuntimeError(f"runner: {summary.done} of {requests} done ({summary.skipped_by_reason})")
    return took


def human_days(seconds: float) -> str:
    return f"{seconds / 86400:.1f} d" if seconds >= 86400 else f"{seconds / 3600:.1f} h"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--latency-s", type=float, default=0.5, help="Latency of the loopback endpoint per request.")
    ap.add_argument("--in-flight", type=int, nargs="+", default=[1, 8, 64, 256])
    ap.add_argument("--rounds", type=int, default=8, help="Requests per level = rounds x in-flight (at least --min-requests).")
    ap.add_argument("--min-requests", type=int, default=16)
    ap.add_argument("--snippets", type=int, default=434_000, help="Snippets of the extrapolated run (TCM-DiffRAG: 434 k).")
    ap.add_argument("--requests-per-snippet", type=float, default=1.0, help="Teacher requests per snippet in that run.")
    ap.add_argument("--teacher-latency-s", type=float, default=15.0,
                    help="Seconds one request takes on a 72B vLLM endpoint under load (see bench/RESULTS.md for the assumption).")
    ap.add_argument("--json", type=Path, default=None, help="Also write the rows as JSON here.")
    args = ap.parse_args(argv)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

    import psutil

    proc, url = start_server(args.latency_s)
    server = psutil.Process(proc.pid)
    rows = []
    try:
        with tempfile.TemporaryDirectory() as d:
            tmp = Path(d)
            for n in args.in_flight:
                requests = max(args.min_requests, args.rounds * n)
                row = {"in_flight": n, "requests": requests, "ideal_rps": n / args.latency_s}
                for path, fn in (("client", time_client), ("runner", time_runner)):
                    server_stats(url, reset=True)
                    cpu0, scpu0 = time.process_time(), server.cpu_times()
                    took = fn(url, n, requests, tmp)
                    cpu, scpu = time.process_time() - cpu0, server.cpu_times()
                    st = server_stats(url)
                    rps = requests / took
                    row[path] = {"seconds": round(took, 3), "rps": round(rps, 1), "ratio": round(rps / row["ideal_rps"], 3),
                                 "server_peak_in_flight": st["peak"], "client_cpu_ms_per_request": round(1000 * cpu / requests, 2),
                                 "server_cpu_ms_per_request": round(1000 * (scpu.user + scpu.system - scpu0.user - scpu0.system) / requests, 2),
                                 "load_average_1min": round(os.getloadavg()[0], 1)}
                ratio = row["runner"]["ratio"]
                row["extrapolated_run"] = human_days(args.snippets * args.requests_per_snippet * args.teacher_latency_s / (n * ratio))
                rows.append(row)
                print(json.dumps(row), flush=True)
    finally:
        proc.terminate()
        proc.wait(timeout=10)

    print(f"\nloopback latency {args.latency_s} s; {os.cpu_count()} CPU(s); "
          f"extrapolation: {args.snippets:,} snippets x {args.requests_per_snippet:g} request(s) at {args.teacher_latency_s:g} s each")
    print("| in flight | requests | ideal req/s | client req/s (ratio) | runner req/s (ratio) | runner CPU ms/req: client, server "
          "| load avg | server peak | 434k-snippet run |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        c, u = r["client"], r["runner"]
        print(f"| {r['in_flight']} | {r['requests']} | {r['ideal_rps']:.0f} | {c['rps']:.1f} ({c['ratio']:.0%}) | {u['rps']:.1f} ({u['ratio']:.0%}) "
              f"| {u['client_cpu_ms_per_request']:.2f}, {u['server_cpu_ms_per_request']:.2f} | {u['load_average_1min']} "
              f"| {u['server_peak_in_flight']} | {r['extrapolated_run']} |")
    if args.json:
        args.json.write_text(json.dumps({"latency_s": args.latency_s, "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
