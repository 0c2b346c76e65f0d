"""`bencao ask` and `bencao link`: output shapes, resumable batch linking, one-line errors."""

from __future__ import annotations

import json

import pytest
from retrieval_graphs import build_tcm_graph

from bencao.cli import main


@pytest.fixture(scope="module")
def graph_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("tcm") / "g"
    build_tcm_graph(d).close()
    return d


def test_ask_prints_answer_paths_and_headings(graph_dir, capsys):
    assert main(["ask", "--graph", str(graph_dir), "山药有什么功效"]) == 0
    out = capsys.readouterr().out
    assert "A:" in out and "Paths" in out and "神农本草经 › 卷上 › 山药" in out and "补中益气" in out


def test_ask_json(graph_dir, capsys):
    assert main(["ask", "--graph", str(graph_dir), "--json", "大枣"]) == 0
    obj = json.loads(capsys.readouterr().out)
    assert set(obj) >= {"question", "answer", "evidence"} and obj["question"] == "大枣"
    assert obj["evidence"]["snippets"][0]["path"][0] == "神农本草经"
    assert obj["evidence"]["references"][0]["n"] == 1
    assert {"names", "relations"} <= set(obj["evidence"]["paths"][0])


def test_ask_answers_a_chinese_question_in_chinese(graph_dir, capsys):
    assert main(["ask", "--graph", str(graph_dir), "山药有什么功效？"]) == 0
    out = capsys.readouterr().out
    answer = out.split("A:", 1)[1].split("Entities")[0]
    assert "山药的功效：补中益气" in answer and "has effect" not in answer and "has_effect" not in answer
    assert "山药 —功效→ 补中益气" in out  # paths with Chinese relation labels


def test_ask_multiple_choice(graph_dir, capsys):
    assert main(["ask", "--graph", str(graph_dir), "--json", "山药的功效", "--option", "A=温中止血", "--option", "B=补中益气"]) == 0
    obj = json.loads(capsys.readouterr().out)
    assert obj["answer"] == "B. 补中益气" and obj["prediction"]["answer"] == ["B"] and obj["prediction"]["ranking"][0] == "B"
    assert obj["task"] == "mcq" and obj["answered_by"] == "graph"


def test_user_mistakes_are_one_line(graph_dir, tmp_path, capsys):
    assert main(["ask", "--graph", str(tmp_path / "nope"), "山药"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and len(err.strip().splitlines()) == 1
    assert main(["ask", "--graph", str(graph_dir), "   "]) == 2
    assert "empty" in capsys.readouterr().err
    assert main(["link", "--graph", str(graph_dir), "x" * 10_000]) == 2
    assert "10,000 characters" in capsys.readouterr().err
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": 1, "mention": "山药"}\n{"id": 2}\n', encoding="utf-8")
    assert main(["link", "--graph", str(graph_dir), "--input", str(bad), "--output", str(tmp_path / "o.jsonl")]) == 2
    err = capsys.readouterr().err
    assert "bad.jsonl:line 2" in err and "mention" in err and len(err.strip().splitlines()) == 1
    assert main(["ask", "--graph", str(graph_dir), "--set", "linking.tau=banana", "山药"]) == 2
    assert "linking.tau" in capsys.readouterr().err


def test_link_single_and_batch_resumes_without_duplicates(graph_dir, tmp_path, capsys):
    assert main(["link", "--graph", str(graph_dir), "山藥"]) == 0
    one = json.loads(capsys.readouterr().out)
    assert one["label"] == "山药" and one["confidence"] >= 0.9 and one["abstained"] is False
    inp = tmp_path / "m.jsonl"
    inp.write_text("\n".join(json.dumps({"id": f"m{i}", "mention": m, "extra": i}, ensure_ascii=False)
                             for i, m in enumerate(["山药", "大棗", "qqqzzz", "乾薑"])) + "\n", encoding="utf-8")
    out = tmp_path / "links.jsonl"
    assert main(["link", "--graph", str(graph_dir), "--input", str(inp), "--output", str(out)]) == 0
    rows = [json.loads(x) for x in out.read_text(encoding="utf-8").splitlines()]
    assert [r["id"] for r in rows] == ["m0", "m1", "m2", "m3"]
    assert rows[1]["label"] == "大枣" and rows[1]["extra"] == 1
    assert rows[2]["chosen_id"] is None and rows[2]["abstained"] is True
    assert all({"chosen_id", "label", "confidence", "rationale", "candidates", "retried"} <= set(r) for r in rows)
    # A killed job: the last record was torn mid-write. The rerun finishes it without duplicates.
    lines = out.read_text(encoding="utf-8").splitlines(keepends=True)
    out.write_text("".join(lines[:2]) + lines[2][:10], encoding="utf-8")
    assert main(["link", "--graph", str(graph_dir), "--input", str(inp), "--output", str(out)]) == 0
    again = [json.loads(x) for x in out.read_text(encoding="utf-8").splitlines()]
    assert [r["id"] for r in again] == ["m0", "m1", "m2", "m3"]
