"""Issue 26's oversized requests against ``bencao serve`` on loopback: how long each takes, and how long a normal
question sent right after it waits.

    .venv/bin/python bench/serve_limits.py --graph DIR [--set api.max_candidates=20000 ...] [--out FILE]

Requests (as in the issue): chat with 20,000 ``candidates`` (~289 KB), chat with 2,000 ``options``, ``/v1/retrieve``
with 20,000 ``query_triples``; each is sent, then a normal question (``大枣的性味是什么？``) on a second connection
100 ms later. With the default caps each oversized request is a 400 at once; with the caps raised
(``--set api.max_candidates=100000 ...``) the per-request time budget (``api.request_timeout_s``) bounds them (504).
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from serve_load import serve  # noqa: E402

NORMAL = {"messages": [{"role": "user", "content": "大枣的性味是什么？"}]}


def cases() -> list[tuple[str, str, dict]]:
    user = [{"role": "user", "content": "哪些食物适合脾虚的人？"}]
    return [
        ("chat, 20,000 candidates", "/v1/chat/completions", {"messages": user, "candidates": [f"食物{i:05d}号" for i in range(20000)]}),
        ("chat, 2,000 options", "/v1/chat/completions",
         {"messages": [{"role": "user", "content": "大枣的性味是什么？"}], "options": {f"O{i}": f"选项{i}味甘" for i in range(2000)}}),
        ("retrieve, 20,000 query_triples", "/v1/retrieve",
         {"question": "大枣的性味是什么？", "query_triples": [[f"大枣{i}", "性味", "?"] for i in range(20000)], "use_cot": False}),
    ]


def main() -> int:
    import httpx

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--graph", type=Path, required=True)
    ap.add_argument("--set", dest="sets", action="append", default=[], help="serve --set overrides (repeatable)")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    out: dict = {"sets": args.sets, "cases": []}
    log = Path("/tmp") / f"serve_limits_{int(time.time())}.log"
    with serve(args.graph, None, args.sets, log) as (base, _proc):
        httpx.post(base + "/v1/chat/completions", json=NORMAL, timeout=300)  # warm
        for name, path, body in cases():
            data = json.dumps(body, ensure_ascii=False).encode("utf-8")
            res: dict = {"case": name, "body_kb": round(len(data) / 1024, 1)}

            def normal() -> None:
                time.sleep(0.1)
                t = time.perf_counter()
                r = httpx.post(base + "/v1/chat/completions", json=NORMAL, timeout=600)
                res["normal_after"] = {"status": r.status_code, "s": round(time.perf_counter() - t, 2)}

            th = threading.Thread(target=normal)
            th.start()
            t = time.perf_counter()
            r = httpx.post(base + path, content=data, headers={"Content-Type": "application/json"}, timeout=600)
            res.update(status=r.status_code, s=round(time.perf_counter() - t, 2),
                       message=(r.json().get("error") or {}).get("message") if r.status_code != 200 else None)
            th.join()
            out["cases"].append(res)
            print(json.dumps(res, ensure_ascii=False), flush=True)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(out, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
