"""Cold start and serving memory of a graph: a fresh `bencao ask` process from start to its first
LLM-free answer, and one process answering a question set (as `bencao serve` does).

    python bench/cold_start.py --graph out/corpus/graph --runs 3 \\
        --question "山药的功效是什么？" --questions out/bench/synth-1/queries.jsonl

Each `ask` run is a new interpreter (imports included) timed from spawn to exit; its peak RSS is
the child's ``ru_maxrss``. The serving figure opens the graph once (read-only, as `ask` does),
answers up to ``--serve-n`` questions and reports wall time per question and RSS: anonymous
(the process's own memory) and file-backed (memory-mapped index files, shared with the page cache).
The page cache is warm (not dropped: the machine is shared), which is the state a server restarted
on its own graph finds.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _rss() -> dict[str, float]:
    out = {}
    for line in open("/proc/self/status", encoding="ascii"):
        if line.startswith(("RssAnon", "RssFile", "VmHWM")):
            k, v = line.split(":")
            out[k] = int(v.split()[0]) / 1024
    return out


REGISTER: list[str] = []  # bench modules imported first (e.g. standin: the 'hashing' embedder backend)


def ask_once(graph: str, question: str) -> dict[str, float]:
    t = time.perf_counter()
    code = (f"import sys; sys.path.insert(0, {str(REPO / 'bench')!r}); " + "".join(f"import {m}; " for m in REGISTER)
            + "from bencao.cli import main; sys.exit(main(sys.argv[1:]))")
    p = subprocess.Popen([sys.executable, "-c", code, "ask", "--graph", graph, "--json", question],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    out, err = p.communicate()
    wall = time.perf_counter() - t
    if p.returncode != 0:
        raise SystemExit(f"ask failed ({p.returncode}): {err.decode()[-2000:]}")
    ans = json.loads(out)
    return {"seconds": round(wall, 2), "answer": str(ans.get("answer", ""))[:80]}


def ask_runs(graph: str, question: str, runs: int) -> dict:
    import resource

    res = []
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        r = ask_once(graph, question)
        r["peak_rss_mib_at_least"] = round(max(before, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss) / 1024)
        res.append(r)
    return {"runs": res, "median_s": sorted(x["seconds"] for x in res)[len(res) // 2]}


def serve(graph: str, questions: list[str]) -> dict:
    from bencao.retrieval.graph.store import Graph
    from bencao.retrieval.search.retriever import Retriever
    from bencao.serving.graph_answerer import GraphAnswerer

    t0 = time.perf_counter()
    g = Graph.open(graph, read_only=True)
    ans = GraphAnswerer(Retriever(g))
    opened = time.perf_counter() - t0
    times = []
    for q in questions:
        t = time.perf_counter()
        ans.answer(q)
        times.append(time.perf_counter() - t)
    times.sort()
    rss = _rss()
    return {"open_s": round(opened, 2), "questions": len(questions), "first_s": round(times[0] if len(times) == 1 else 0, 3),
            "p50_ms": round(1000 * times[len(times) // 2], 1), "p95_ms": round(1000 * times[int(len(times) * 0.95)], 1),
            "rss_anon_mib": round(rss["RssAnon"]), "rss_file_mib": round(rss["RssFile"]), "peak_rss_mib": round(rss["VmHWM"])}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--graph", required=True)
    ap.add_argument("--question", default="山药的功效是什么？")
    ap.add_argument("--questions", help="JSONL with a 'question' field per line (the serving figure)")
    ap.add_argument("--serve-n", type=int, default=200)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--register", nargs="*", default=[], help="bench modules to import first (standin: the hashing embedder)")
    args = ap.parse_args()
    REGISTER.extend(args.register)
    sys.path.insert(0, str(REPO / "bench"))
    for m in args.register:
        __import__(m)
    out = {"graph": args.graph, "ask": ask_runs(args.graph, args.question, args.runs)}
    if args.questions:
        qs = [json.loads(x)["question"] for x in open(args.questions, encoding="utf-8") if x.strip()][: args.serve_n]
        out["serve"] = serve(args.graph, qs)
    print(json.dumps(out, ensure_ascii=False, indent=1))


if __name__ == "__main__":
    main()
