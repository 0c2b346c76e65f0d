"""`bencao infer`: plain and benchmark questions, one-line input errors, resume after a real kill."""

from __future__ import annotations

import csv
import json
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from bencao.cli import main
from serving_helpers import BENCAO, REPO, env, serving_graph


def _names(n: int) -> list[str]:
    with open(REPO / "data/sample/mfh_catalog/mfh_catalog_106.csv", encoding="utf-8") as fh:
        return [r["name_zh"] for r in csv.DictReader(fh)][:n]


def _write(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
    return path


def _read(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


@pytest.fixture(scope="module")
def graph(tmp_path_factory):
    return serving_graph(tmp_path_factory)


def test_plain_and_benchmark_questions_get_answers_evidence_and_timings(graph, tmp_path, capsys):
    q = _write(tmp_path / "q.jsonl", [
        {"id": "p1", "question": "大枣的性味是什么？"},
        {"id": "m1", "task": "mcq", "question": "大枣的味是？", "options": {"A": "甘", "B": "苦", "C": "咸"}, "answer": ["A"], "lang": "zh"},
        {"id": "t1", "task": "tf", "statement": "大枣味甘。", "answer": True},
        {"id": "r1", "task": "rec", "query": "安中养脾的食物", "candidates": ["大枣", "丁香"], "gold": ["大枣"]},
        {"id": "e1", "question": "What is quinoa?"},
    ])
    out = tmp_path / "a.jsonl"
    assert main(["infer", str(q), "--output", str(out), "--graph", str(graph), "--batch-size", "2"]) == 0
    assert "answered 5 of 5 questions (0 already in" in capsys.readouterr().out
    recs = {r["id"]: r for r in _read(out)}
    assert list(recs) == ["p1", "m1", "t1", "r1", "e1"]
    p1 = recs["p1"]
    assert p1["answer"] and p1["citations"] and p1["evidence"]["snippets"] and p1["abstained"] is False
    assert p1["timings"]["retrieve_s"] >= 0 and p1["timings"]["batch_size"] == 2
    assert recs["m1"]["task"] == "mcq" and recs["m1"]["lang"] == "zh"
    assert recs["m1"]["question"] == "大枣的味是？"
    assert set(recs["m1"]["prediction"]["ranking"]) == {"A", "B", "C"}
    assert isinstance(recs["t1"]["prediction"]["answer"], (bool, type(None)))
    assert set(recs["r1"]["prediction"]["ranking"]) == {"大枣", "丁香"}
    assert recs["e1"]["abstained"] is True and recs["e1"]["citations"] == []
    # a second run is a no-op
    assert main(["infer", str(q), "--output", str(out), "--graph", str(graph)]) == 0
    assert "answered 0 of 5 questions (5 already in" in capsys.readouterr().out
    assert len(_read(out)) == 5


@pytest.mark.parametrize(
    "lines, problem",
    [
        (['{"id": "a", "question": "大枣？"}', '{"id": "a", "question": "生姜？"}'], "q.jsonl:line 2: id 'a' repeats line 1"),
        (['{"id": "a", "question": "大枣？"}', '{"id": "b"}'], "q.jsonl:line 2: record 'b': 'question' must be a non-empty string"),
        (['{"id": "a", "question": "大枣？"}', '{"id": "b", "question": "x"'], "q.jsonl:line 2: malformed JSON"),
        (['{"question": "大枣？"}'], "q.jsonl:line 1: 'id' must be a non-empty string"),
        (['{"id": "a", "task": "essay", "question": "大枣？"}'], "q.jsonl:line 1: record 'a': 'task' must be one of"),
        (['{"id": "a", "task": "mcq", "question": "大枣？"}'], "q.jsonl:line 1: record 'a': 'options' must be"),
    ],
)
def test_bad_input_is_one_line_naming_file_and_line_and_keeps_earlier_answers(graph, tmp_path, capsys, lines, problem):
    q = tmp_path / "q.jsonl"
    q.write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = tmp_path / "a.jsonl"
    out.write_text('{"id": "old", "answer": "kept"}\n', encoding="utf-8")
    assert main(["infer", str(q), "--output", str(out), "--graph", str(graph)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and problem in err and len(err.splitlines()) == 1
    assert out.read_text(encoding="utf-8") == '{"id": "old", "answer": "kept"}\n'


def test_a_local_model_answers_a_dev_format_file_with_its_throughput(graph, tmp_path, capsys):
    """`bencao infer --llm MODEL --cot MODEL` over benchmark records (the dev files' format) with a tiny local
    transformers model in both LLM stages: every record answered, and the summary says questions/s and the
    prompt and generated tokens/s of the two stages together; a second run answers nothing and says so."""
    from llm_fixtures import save_tiny_model

    model = save_tiny_model(tmp_path / "tiny")
    q = _write(tmp_path / "dev.jsonl", [
        {"id": "d1", "task": "mcq", "question": "大枣的味是？", "options": {"A": "甘", "B": "苦", "C": "咸"}, "answer": ["A"],
         "lang": "zh", "source": "sample"},
        {"id": "d2", "task": "sd", "question": "患者心腹邪气，脾虚，宜用何药？", "options": {"A": "大枣", "B": "丁香"}, "answer": ["A"],
         "lang": "zh", "source": "sample"},
        {"id": "d3", "task": "mcq", "question": "Which is a fruit?", "options": {"A": "jujube", "B": "salt"}, "answer": ["A"],
         "lang": "en", "source": "sample"},
    ])
    out = tmp_path / "a.jsonl"
    args = ["infer", str(q), "--output", str(out), "--graph", str(graph), "--llm", model, "--cot", model,
            "-s", "generator.max_tokens=6", "-s", "generator.temperature=0", "-s", "cot.llm.max_tokens=6", "-s", "cot.llm.temperature=0"]
    assert main(args) == 0
    printed = capsys.readouterr().out
    recs = _read(out)
    assert [r["id"] for r in recs] == ["d1", "d2", "d3"]
    assert all(r["answered_by"] == f"generator:{model}" and set(r["prediction"]) >= {"answer"} for r in recs)
    line = next(x for x in printed.splitlines() if x.startswith("throughput: "))
    m = re.search(r"3 questions in ([\d.]+) s \(([\d.e+-]+) questions/s\); LLM: (\d+) requests \(0 cached\), ([\d,]+) prompt tokens "
                  r"\(([\d,.]+)/s\), ([\d,]+) generated \(([\d,.]+)/s\)", line)
    assert m, line
    assert int(m.group(3)) == 6  # a CoT request and a generator request (the option letters scored) per question
    prompt, generated = int(m.group(4).replace(",", "")), int(m.group(6).replace(",", ""))
    assert prompt > 6 * 10 and 0 < generated <= 3 * 6  # max_tokens=6 for the CoT model; scoring letters generates nothing
    assert float(m.group(7).replace(",", "")) == pytest.approx(generated / float(m.group(1)), rel=0.1)
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert "answered 0 of 3 questions (3 already in" in printed and "throughput: 0 questions in" in printed and "LLM:" not in printed
    assert len(_read(out)) == 3


def test_missing_graph_is_a_one_line_error(tmp_path, capsys):
    q = _write(tmp_path / "q.jsonl", [{"id": "a", "question": "大枣？"}])
    assert main(["infer", str(q), "--output", str(tmp_path / "a.jsonl"), "--graph", str(tmp_path / "none")]) == 2
    assert "no graph here" in capsys.readouterr().err


def test_an_llm_endpoint_that_is_down_is_a_failed_run_not_answered_0_of_3(graph, tmp_path, capsys):
    """Issue 33 item 7: `infer` said "answered 0 of 3" and exited 0 when its generator could not be reached."""
    from serving_helpers import free_port

    q = _write(tmp_path / "q.jsonl", [{"id": f"q{i}", "question": f"{n}的性味是什么？"} for i, n in enumerate(_names(3))])
    out = tmp_path / "a.jsonl"
    down = f"qwen@http://127.0.0.1:{free_port()}/v1"  # nothing listens there
    rc = main(["infer", str(q), "--output", str(out), "--graph", str(graph), "--llm", down, "--set", "generator.max_retries=0",
               "--set", "generator.cache=none"])
    cap = capsys.readouterr()
    assert rc != 0, cap.out
    assert "answered 0 of 3" in cap.out
    err = cap.err.strip().splitlines()[-1]
    assert err.startswith("error: 3 of 3 questions got no answer") and "asks them again" in err, cap.err
    assert not out.exists() or out.read_text(encoding="utf-8") == ""  # nothing half-written: the rerun asks all three


def test_killed_batch_inference_resumes_without_duplicates(graph, tmp_path):
    names = _names(40)
    q = _write(tmp_path / "q.jsonl", [{"id": f"q{i:02d}", "question": f"{n}的性味和功效是什么？"} for i, n in enumerate(names)])
    out = tmp_path / "a.jsonl"
    cmd = [*BENCAO, "infer", str(q), "--output", str(out), "--graph", str(graph), "--batch-size", "1"]
    proc = subprocess.Popen(cmd, cwd=REPO, env=env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 300
    while True:
        n = out.read_bytes().count(b"\n") if out.exists() else 0  # complete lines only
        if n >= 3:
            break
        assert proc.poll() is None, proc.stdout.read().decode()
        assert time.monotonic() < deadline, "no answers written in time"
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    first = out.read_text(encoding="utf-8").splitlines(keepends=True)
    complete = [line for line in first if line.endswith("\n")]
    assert 3 <= len(complete) < 40, "the kill must land mid-run"

    res = subprocess.run(cmd, cwd=REPO, env=env(), capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    done_before = len(complete)
    assert f"answered {40 - done_before} of 40 questions ({done_before} already in" in res.stdout
    lines = out.read_text(encoding="utf-8").splitlines(keepends=True)
    ids = [json.loads(line)["id"] for line in lines]
    assert sorted(ids) == [f"q{i:02d}" for i in range(40)], "every question answered exactly once"
    assert lines[:done_before] == complete, "answers written before the kill are kept as they were"


def test_a_generator_answer_line_says_which_cited_numbers_name_no_evidence(graph, tmp_path):
    """A generator that cites [1] (a reference it was given) and [99] (none): the line keeps [1] as a citation
    and reports 99 under `invalid_citations`, as `ask --json` and the API do."""
    from llm_loopback import scripted_endpoint

    q = _write(tmp_path / "q.jsonl", [{"id": "p1", "question": "大枣的性味是什么？"}])
    out = tmp_path / "a.jsonl"
    with scripted_endpoint(lambda messages: "大枣味甘，性平[1]；又见[99]。") as ep:
        assert main(["infer", str(q), "--output", str(out), "--graph", str(graph), "--llm", f"scripted@{ep.base_url}",
                     "-s", "generator.cache=none"]) == 0
    rec = _read(out)[0]
    assert [c["n"] for c in rec["citations"]] == [1] and rec["invalid_citations"] == [99]
