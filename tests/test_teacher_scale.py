"""Teacher data at a real run's scale: `bencao data extract` with the shipped recipe keeps 64 requests in flight
against a slow endpoint, and a run killed (SIGKILL) at 64 in flight resumes with no duplicate and no loss.

The endpoint is bencao's loopback server (`bencao.llm.local_server`) holding every request 0.5 s and counting the
requests in flight server-side; the CLI runs in a subprocess exactly as a user types it.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from bencao.llm.base import BaseClient, Completion, Message
from bencao.llm.local_server import ServerStats, create_app, serve_in_thread
from tests.data_gen_helpers import build_graph

REPO = Path(__file__).resolve().parents[1]
EMPTY = '{"triples": [], "entities": [], "relations": []}'


class SnippetTeacher(BaseClient):
    """Replies valid JSON envelopes; a triples request gets one triple made of the snippet's first CJK characters."""

    def __init__(self) -> None:
        super().__init__(max_concurrency=1 << 20)
        self.model = "Qwen/Qwen2.5-72B-Instruct"  # the recipe's model name

    async def _acall_once(self, messages: list[Message], params: dict[str, Any]) -> Completion:
        text = messages[-1]["content"]
        reply = EMPTY
        body = re.search(r"文本（出处：.*?）：\n(.*?)\n\n输出格式", text, re.S)
        rel = re.search(r"^- ([^：\[\n]+)", text, re.M)
        if body and rel:
            han = re.findall(r"[\u4e00-\u9fff]{4}", body.group(1))
            if han:
                reply = json.dumps({"triples": [{"head": han[0][:2], "relation": rel.group(1).strip(), "tail": han[0][2:]}]},
                                   ensure_ascii=False)
        return Completion(text=reply, model=self.model, prompt_tokens=len(text), completion_tokens=len(reply))


@pytest.fixture(scope="module")
def graph_dir(tmp_path_factory) -> Path:
    return build_graph(tmp_path_factory.mktemp("scale") / "graph")


@pytest.fixture(scope="module")
def slow_endpoint():
    stats = ServerStats()
    with serve_in_thread(create_app(SnippetTeacher(), latency_s=0.5, stats=stats)) as url:
        yield url, stats


def _extract(graph: Path, out: Path, url: str, **popen: Any) -> subprocess.Popen:
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    cmd = [sys.executable, "-m", "bencao.cli", "data", "extract", "-c", str(REPO / "configs" / "data_gen" / "extract.yaml"),
           "--graph", str(graph), "--limit", "400", "--output", str(out), "write_graph=false", f"llm.base_url={url}"]
    return subprocess.Popen(cmd, env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen)


def _finish(proc: subprocess.Popen) -> dict:
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-3000:]
    return json.loads(out)


def _records(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "extract.records.jsonl").read_text(encoding="utf-8").splitlines()]


def test_extract_keeps_64_requests_in_flight_and_a_killed_run_resumes_exactly(graph_dir, slow_endpoint, tmp_path):
    url, stats = slow_endpoint
    stats.reset()
    whole = _finish(_extract(graph_dir, tmp_path / "whole", url))
    assert whole["total"] == whole["done"] == 400
    assert stats.peak == 64  # the recipe's llm.max_concurrency, reached and never passed
    assert whole["throughput"]["requests"] >= 400 and whole["triples"] > 0

    # Killed with SIGKILL mid-run, 64 requests in flight, then the same command again.
    out = tmp_path / "killed"
    proc = _extract(graph_dir, out, url)
    deadline = time.monotonic() + 120
    while True:  # kill once 100 records are out and the run is mid-flight (on a busy machine the two need not coincide at once)
        n = len((out / "extract.records.jsonl").read_text(encoding="utf-8").splitlines()) if (out / "extract.records.jsonl").exists() else 0
        if (n >= 100 and stats.in_flight >= 32) or proc.poll() is not None or time.monotonic() > deadline:
            break
        time.sleep(0.01)
    assert stats.in_flight >= 32 and proc.poll() is None, "the run should be mid-flight when it is killed"
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    kept = _records(out)
    assert 100 <= len(kept) < 400
    again = _finish(_extract(graph_dir, out, url))
    assert again["done_before"] == len(kept) and again["done_before"] + again["done"] == 400

    resumed = _records(out)
    ids = [r["item_id"] for r in resumed]
    assert len(ids) == len(set(ids)) == 400  # no duplicate, no loss
    want = {r["item_id"]: r["records"] for r in _records(tmp_path / "whole")}
    assert {r["item_id"]: r["records"] for r in resumed} == want  # and the same records as the uninterrupted run


def test_an_old_recipe_with_the_second_knob_gets_a_one_line_error(tmp_path, capsys):
    from bencao.cli import main

    old = tmp_path / "old.yaml"
    old.write_text((REPO / "configs" / "data_gen" / "extract.yaml").read_text(encoding="utf-8") + "concurrency: 8\n", encoding="utf-8")
    assert main(["data", "extract", "-c", str(old), "--graph", str(tmp_path / "g")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "concurrency: this key was removed" in err and "llm.max_concurrency" in err
    assert main(["data", "cot", "-c", str(REPO / "configs" / "data_gen" / "cot_llm.yaml"), "llm.backoff_s=2"]) == 2
    assert "llm.backoff_s: this key was removed" in capsys.readouterr().err
