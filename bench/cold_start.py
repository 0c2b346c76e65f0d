"""Cold start and serving memory of a graph: a fresh `bencao ask` process from start to its first
LLM-free answer, and a `bencao serve` process after it answered a question set over HTTP.

    python bench/cold_start.py --graph graphs/classics --runs 3 \\
        --question "山药的功效是什么？" --questions data/dev/tcmbench_mcq.jsonl --serve-n 50

Each `ask` run is a new interpreter (imports included) timed from spawn to exit; its peak RSS is the
child's ``ru_maxrss``. ``--mcq`` also asks the first record of ``--questions`` with its options
(``--option A=...``: one retrieval per option, as `bencao eval` runs a multiple-choice record).

The serving figure starts ``bencao serve --graph G`` (LLM-free, the default serving recipe) on a
free local port, waits for ``/healthz``, posts the first ``--serve-n`` records of ``--questions`` to
``/v1/chat/completions`` one after another (with their ``options`` when they have them, as a client
of a multiple-choice service does) and reads the server's ``/proc/<pid>/status``: RSS (VmRSS), its
anonymous part (the process's own memory) and its file-backed part (memory-mapped index files,
shared with the page cache), and the peak (VmHWM). The page cache is warm (not dropped: the machine
is shared), which is the state a server restarted on its own graph finds. The load average is
recorded: other engineers share the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
REGISTER: list[str] = []  # bench modules imported first (e.g. standin: the 'hashing' embedder backend)


def _code(command: list[str]) -> list[str]:
    """A `bencao` command line run by this interpreter, with the ``--register`` bench modules imported first."""
    code = (f"import sys; sys.path.insert(0, {str(REPO / 'bench')!r}); " + "".join(f"import {m}; " for m in REGISTER)
            + "from bencao.cli import main; sys.exit(main(sys.argv[1:]))")
    return [sys.executable, "-c", code, *command]


def _env() -> dict[str, str]:
    return {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}


def ask_once(graph: str, question: str, options: dict[str, str] | None = None) -> dict[str, float]:
    t = time.perf_counter()
    opts = [a for k, v in (options or {}).items() for a in ("--option", f"{k}={v}")]
    p = subprocess.Popen(_code(["ask", "--graph", graph, "--json", *opts, question]), stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, env=_env())
    out, err = p.communicate()
    wall = time.perf_counter() - t
    if p.returncode != 0:
        raise SystemExit(f"ask failed ({p.returncode}): {err.decode()[-2000:]}")
    ans = json.loads(out)
    return {"seconds": round(wall, 2), "answer": str(ans.get("answer", ""))[:80]}


def ask_runs(graph: str, question: str, runs: int, options: dict[str, str] | None = None) -> dict:
    import resource

    res = []
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        r = ask_once(graph, question, options)
        r["peak_rss_mib_at_least"] = round(max(before, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss) / 1024)
        res.append(r)
    return {"question": question, "options": len(options or {}), "runs": res,
            "median_s": sorted(x["seconds"] for x in res)[len(res) // 2]}


def _status(pid: int) -> dict[str, float]:
    out = {}
    for line in open(f"/proc/{pid}/status", encoding="ascii"):
        if line.startswith(("VmRSS", "RssAnon", "RssFile", "RssShmem", "VmHWM")):
            k, v = line.split(":")
            out[k] = round(int(v.split()[0]) / 1024)
    return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _post(url: str, body: dict, timeout: float = 300) -> dict:
    req = urllib.request.Request(url, data=json.dumps(body, ensure_ascii=False).encode("utf-8"),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:  # noqa: S310 - a local server this script started
        return json.loads(r.read())


def serve(graph: str, records: list[dict], startup_timeout: float = 300) -> dict:
    """`bencao serve` answering ``records`` one after another; its memory after the last one."""
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    env = _env()
    env.pop("BENCAO_API_KEY", None)
    t0 = time.perf_counter()
    p = subprocess.Popen(_code(["serve", "--graph", graph, "--port", str(port)]), stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, env=env)
    try:
        while True:
            if p.poll() is not None:
                raise SystemExit(f"serve exited ({p.returncode}): {p.stderr.read().decode()[-2000:]}")
            try:
                with urllib.request.urlopen(f"{base}/healthz", timeout=2):  # noqa: S310
                    break
            except OSError:
                if time.perf_counter() - t0 > startup_timeout:
                    raise SystemExit(f"serve did not answer /healthz within {startup_timeout:.0f} s") from None
                time.sleep(0.2)
        ready = time.perf_counter() - t0
        after_open = _status(p.pid)
        times, first = [], None
        for r in records:
            body = {"model": "bencao", "messages": [{"role": "user", "content": r["question"]}]}
            if r.get("options"):
                body.update(task=r.get("task", "mcq"), options=r["options"])
            t = time.perf_counter()
            _post(f"{base}/v1/chat/completions", body)
            times.append(time.perf_counter() - t)
            first = time.perf_counter() - t0 if first is None else first
        st = _status(p.pid)
    finally:
        p.terminate()
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
    srt = sorted(times)
    return {"questions": len(times), "ready_s": round(ready, 2), "first_answer_s": round(first or 0, 2),
            "p50_ms": round(1000 * srt[len(srt) // 2], 1), "p95_ms": round(1000 * srt[min(len(srt) - 1, int(len(srt) * 0.95))], 1),
            "rss_after_open_mib": after_open.get("VmRSS"), "rss_mib": st.get("VmRSS"), "rss_anon_mib": st.get("RssAnon"),
            "rss_file_mib": st.get("RssFile"), "peak_rss_mib": st.get("VmHWM")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--graph", required=True)
    ap.add_argument("--question", default="山药的功效是什么？")
    ap.add_argument("--questions", help="JSONL with a 'question' (and optional 'options') per line: the serving figure")
    ap.add_argument("--serve-n", type=int, default=50, help="questions the server answers before its memory is read")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--mcq", action="store_true", help="also time `ask` on the first record of --questions with its options")
    ap.add_argument("--register", nargs="*", default=[], help="bench modules to import first (standin: the hashing embedder)")
    args = ap.parse_args()
    REGISTER.extend(args.register)
    records = [json.loads(x) for x in open(args.questions, encoding="utf-8") if x.strip()] if args.questions else []
    out: dict = {"graph": args.graph, "load_at_start": open("/proc/loadavg").read().split()[:3],
                 "ask": ask_runs(args.graph, args.question, args.runs)}
    if args.mcq and records:
        out["ask_mcq"] = ask_runs(args.graph, records[0]["question"], args.runs, records[0].get("options"))
    if records:
        out["serve"] = serve(args.graph, records[: args.serve_n])
    out["load_at_end"] = open("/proc/loadavg").read().split()[:3]
    print(json.dumps(out, ensure_ascii=False, indent=1))


if __name__ == "__main__":
    main()
