"""Kill `bencao infer` and `bencao data cot|pairs|extract` mid-run (really: ``os._exit(137)`` at a named
point, see ``bencao/faults.py``), run again, and compare with an uninterrupted run: no duplicate and no
missing record, the same final files, and for ``data extract`` exactly one document in the graph.

``data extract`` talks to a loopback OpenAI-compatible server (``bencao.llm.local_server``) answering
from a script, so the killed subprocess and the rerun see the same teacher.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bencao.cli import main
from bencao.retrieval.graph.store import Graph
from tests.data_gen_helpers import QUESTIONS, build_graph, write_questions
from tests.llm_fixtures import ScriptedClient

REPO = Path(__file__).resolve().parents[1]


def bencao(*args: str, fault: str | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_DATASETS_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    if fault:
        env["BENCAO_FAULT"] = fault
    return subprocess.run([sys.executable, "-m", "bencao.cli", *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=600)


def lines(path: Path) -> list[dict]:
    """The complete records of a JSONL file: what follows the last newline is a record torn by a kill (cut inside a
    character, by ``jsonl.torn``), not one to count or decode."""
    complete = path.read_bytes().split(b"\n")[:-1]
    return [json.loads(ln.decode("utf-8")) for ln in complete if ln.strip()]


@pytest.fixture(scope="module")
def base_graph(tmp_path_factory) -> Path:
    return build_graph(tmp_path_factory.mktemp("data") / "graph")


@pytest.fixture
def graph(base_graph, tmp_path) -> Path:
    d = tmp_path / "graph"
    shutil.copytree(base_graph, d)
    return d


def _questions(path: Path, n: int) -> Path:
    names = ["大枣", "人参", "山药", "甘草", "枸杞子", "生姜", "薏苡仁", "茯苓", "百合", "莲子"]
    recs = [{"id": f"q{i:02d}", "question": f"{names[i % len(names)]}的性味和功效是什么？（{i}）"} for i in range(n)]
    return write_questions(path, recs)


@pytest.mark.parametrize("fault", ["jsonl.torn@3", pytest.param("jsonl.append@5", marks=pytest.mark.slow)])
def test_killed_infer_resumes_with_no_duplicate_and_no_missing_answer(fault, graph, tmp_path):
    q = _questions(tmp_path / "q.jsonl", 12)
    clean, out = tmp_path / "clean.jsonl", tmp_path / "answers.jsonl"
    assert main(["infer", str(q), "-o", str(clean), "-g", str(graph), "--batch-size", "2"]) == 0
    r = bencao("infer", str(q), "-o", str(out), "-g", str(graph), "--batch-size", "2", fault=fault)
    assert r.returncode == 137, r.stderr
    raw = out.read_bytes()
    if fault.startswith("jsonl.torn"):  # half a record, cut inside a multi-byte character
        with pytest.raises(UnicodeDecodeError):
            raw[raw.rfind(b"\n") + 1 :].decode("utf-8")
    assert 0 < raw.count(b"\n") < 12
    assert main(["infer", str(q), "-o", str(out), "-g", str(graph), "--batch-size", "2"]) == 0
    got, want = lines(out), lines(clean)
    assert [a["id"] for a in got] == [a["id"] for a in want]  # each once, in order
    strip = lambda a: {k: v for k, v in a.items() if k != "timings"}  # noqa: E731
    assert [strip(a) for a in got] == [strip(a) for a in want]


def _dataset(out: Path) -> list[dict]:
    return lines(out / "train.jsonl") + lines(out / "eval.jsonl")


@pytest.mark.parametrize("fault", ["jsonl.append@2", pytest.param("jsonl.torn@3", marks=pytest.mark.slow)])
def test_killed_cot_kg_paths_resumes_to_the_same_dataset(fault, graph, tmp_path):
    q = write_questions(tmp_path / "q.jsonl", [*QUESTIONS, *(dict(r, id=r["id"] + "-b") for r in QUESTIONS)])
    args = ["data", "cot", "--graph", str(graph), "--input", str(q), "--teacher", "kg-paths", "progress=false"]
    assert main([*args, "-o", str(tmp_path / "clean")]) == 0
    r = bencao(*args, "-o", str(tmp_path / "out"), fault=fault)
    assert r.returncode == 137, r.stderr
    assert not (tmp_path / "out" / "train.jsonl").exists()
    assert main([*args, "-o", str(tmp_path / "out")]) == 0
    recs = lines(tmp_path / "out" / "cot.records.jsonl")
    assert len({r["item_id"] for r in recs}) == len(recs)
    assert _dataset(tmp_path / "out") == _dataset(tmp_path / "clean")


def _question_teacher(messages: list[dict]) -> str:
    """A question made from the explanation's first characters (the same for the killed run and the rerun)."""
    user = messages[-1]["content"]
    return json.dumps({"question": "哪一味药：" + re.sub(r"\s+", "", user)[-24:]}, ensure_ascii=False)


def test_killed_llm_pairs_resume_to_the_same_pairs(graph, tmp_path):
    from bencao.llm.local_server import create_app, serve_in_thread

    with serve_in_thread(create_app(ScriptedClient(_question_teacher, max_concurrency=4))) as url:
        args = ["data", "pairs", "--graph", str(graph), "--teacher", "llm", "limit=60", "progress=false", "llm.backend=openai",
                "llm.model=scripted", f"llm.base_url={url}"]
        assert main([*args, "-o", str(tmp_path / "clean")]) == 0
        r = bencao(*args, "-o", str(tmp_path / "out"), fault="jsonl.torn@25")
        assert r.returncode == 137, r.stderr
        assert 0 < len(lines(tmp_path / "out" / "pairs.records.jsonl")) < 60
        assert main([*args, "-o", str(tmp_path / "out")]) == 0
    recs = lines(tmp_path / "out" / "pairs.records.jsonl")
    assert len({r["item_id"] for r in recs}) == len(recs) == 60
    assert _dataset(tmp_path / "out") == _dataset(tmp_path / "clean")


def test_killed_template_pairs_rerun_to_the_same_pairs(graph, tmp_path):
    args = ["data", "pairs", "--graph", str(graph), "--teacher", "template", "limit=300", "progress=false"]
    assert main([*args, "-o", str(tmp_path / "clean")]) == 0
    r = bencao(*args, "-o", str(tmp_path / "out"), fault="dataset.written@1")  # train.jsonl written, eval.jsonl not
    assert r.returncode == 137, r.stderr
    assert (tmp_path / "out" / "train.jsonl").exists() and not (tmp_path / "out" / "eval.jsonl").exists()
    assert main([*args, "-o", str(tmp_path / "out")]) == 0
    assert len(_dataset(tmp_path / "out")) == 300
    assert _dataset(tmp_path / "out") == _dataset(tmp_path / "clean")


def _teacher(messages: list[dict]) -> str:
    """One triple per snippet: (section title, 主治, 测试病)."""
    user = messages[-1]["content"]
    m = re.search(r"出处：([^）)]*)[）)]", user)
    head = m.group(1).split(" / ")[-1].strip() if m else "测试药"
    return json.dumps({"triples": [{"head": head, "relation": "主治", "tail": "测试病", "confidence": 0.9}]}, ensure_ascii=False)


@pytest.fixture(scope="module")
def teacher_url():
    from bencao.llm.local_server import create_app, serve_in_thread

    with serve_in_thread(create_app(ScriptedClient(_teacher, max_concurrency=8))) as base_url:
        yield base_url


def _extract_args(graph: Path, out: Path, url: str, sections: list[str]) -> list[str]:
    return ["data", "extract", "--graph", str(graph), "--document", "神农本草经", *[a for s in sections for a in ("--section", s)],
            "--output", str(out), "--concurrency", "1", "llm.backend=openai", "llm.model=scripted", f"llm.base_url={url}",
            "relations=[主治]", "attributes=false", "require_in_text=false", "progress=false"]


def _derived(graph: Path) -> list[str]:
    with Graph.open(graph) as g:
        return [d["id"] for d in g.documents() if d["kind"] == "derived"]


SECTIONS = ["人参", "大枣", "山药", "甘草", "丹沙"]


@pytest.mark.parametrize("fault", [pytest.param("jsonl.append@3", marks=pytest.mark.slow), "jsonl.torn@2"])
def test_killed_extract_resumes_to_the_same_document(fault, base_graph, tmp_path, teacher_url):
    clean_graph, graph = tmp_path / "clean-graph", tmp_path / "graph"
    shutil.copytree(base_graph, clean_graph)
    shutil.copytree(base_graph, graph)
    assert main(_extract_args(clean_graph, tmp_path / "clean", teacher_url, SECTIONS)) == 0
    r = bencao(*_extract_args(graph, tmp_path / "out", teacher_url, SECTIONS), fault=fault)
    assert r.returncode == 137, r.stderr
    assert _derived(graph) == []  # the graph is written only at the end
    assert main(_extract_args(graph, tmp_path / "out", teacher_url, SECTIONS)) == 0
    recs = lines(tmp_path / "out" / "extract.records.jsonl")
    assert len({r["item_id"] for r in recs}) == len(recs) == len(lines(tmp_path / "clean" / "extract.records.jsonl"))
    assert _derived(graph) == _derived(clean_graph) and len(_derived(graph)) == 1


def test_extract_killed_between_commit_and_cleanup_leaves_one_document_after_the_next_run(graph, tmp_path, teacher_url):
    out = tmp_path / "out"
    assert main(_extract_args(graph, out, teacher_url, SECTIONS[:1])) == 0
    (first,) = _derived(graph)
    r = bencao(*_extract_args(graph, out, teacher_url, SECTIONS[:3]), fault="extract.committed")
    assert r.returncode == 137, r.stderr
    killed = [d for d in _derived(graph) if d != first]
    assert len(killed) == 1  # committed, the previous one not yet removed: nothing lost
    # the next run selects more snippets, so it commits a third document: both older ones must go
    assert main(_extract_args(graph, out, teacher_url, SECTIONS)) == 0
    (last,) = _derived(graph)
    assert last not in (first, *killed)
    assert json.loads((out / "extract.graph.json").read_text(encoding="utf-8"))["document"] == last
