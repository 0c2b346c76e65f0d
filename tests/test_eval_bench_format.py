"""The benchmark format: valid files load, bad records are named by file and line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bencao.errors import InputError
from bencao.evaluation.bench_format import check_record, load_bench, load_benches

MCQ = {"id": "q1", "task": "mcq", "question": "“割不正不食”观念的提出者是", "options": {"A": "墨子", "B": "孔子"}, "answer": ["B"], "lang": "zh"}


def write(path: Path, lines: list) -> Path:
    path.write_text("".join((x if isinstance(x, str) else json.dumps(x, ensure_ascii=False)) + "\n" for x in lines), encoding="utf-8")
    return path


def test_loads_every_task_and_defaults_source_to_file_stem(tmp_path):
    recs = [
        dict(MCQ),
        {"id": 2, "task": "mcq", "question": "多选", "options": {"A": "a", "B": "b", "C": "c"}, "answer": ["A", "C"], "source": "S"},
    ]
    b = load_bench(write(tmp_path / "cmmlu_x.jsonl", recs))
    assert (b.name, b.task, len(b)) == ("cmmlu_x", "mcq", 2)
    assert b.records[0]["source"] == "cmmlu_x" and b.records[1]["source"] == "S"
    assert b.records[1]["id"] == "2"  # ids are strings
    for rec in (
        {"id": "s", "task": "sd", "question": "q", "options": {"A": "风寒", "B": "风热"}, "answer": ["B"]},
        {"id": "t", "task": "tf", "statement": "生姜性温。", "answer": True},
        {"id": "e", "task": "el", "mention": "almond", "gold_ids": ["FOODON:00003523"]},
        {"id": "r", "task": "rec", "query": "乳腺炎", "candidates": ["红烧肉", "冬瓜排骨汤"], "gold": []},
        {"id": "f", "task": "qa", "question": "生姜的性味？", "answer": "味辛，性微温。"},
    ):
        assert check_record(rec) is None, rec


@pytest.mark.parametrize("rec, problem", [
    ({**MCQ, "answer": ["E"]}, "record 'q1' (mcq): answer 'E' is not one of the options (A, B)"),
    ({**MCQ, "answer": "B"}, "record 'q1' (mcq): 'answer' must be a non-empty list of option letters, e.g. [\"B\"]"),
    ({**MCQ, "options": {"a": "x", "B": "y"}}, "record 'q1' (mcq): option key 'a' is not a capital letter A-Z"),
    ({**MCQ, "question": " "}, "record 'q1' (mcq): 'question' must be a non-empty string"),
    ({**MCQ, "task": "choice"}, "record 'q1': 'task' must be one of mcq, sd, tf, el, rec, qa, got \"choice\""),
    ({"task": "tf", "statement": "x", "answer": True}, "'id' must be a non-empty string"),
    ({"id": "t", "task": "tf", "statement": "x", "answer": "yes"}, "record 't' (tf): 'answer' must be true or false, got \"yes\""),
    ({"id": "e", "task": "el", "mention": "apple", "gold_ids": []}, "record 'e' (el): 'gold_ids' must not be empty"),
    ({"id": "r", "task": "rec", "query": "q", "candidates": ["a", "b"], "gold": ["c"]}, "record 'r' (rec): gold item 'c' is not among the candidates"),
    ({"id": "r", "task": "rec", "query": "q", "candidates": ["a", "a"], "gold": []}, "record 'r' (rec): 'candidates' lists 'a' twice"),
    ([1, 2], "expected a JSON object, got list"),
])
def test_bad_record_problems(rec, problem):
    assert check_record(rec) == problem


def test_error_names_file_first_bad_line_and_counts_the_rest(tmp_path):
    path = write(tmp_path / "b.jsonl", [MCQ, "", "{not json", {**MCQ, "id": "q2", "answer": ["Z"]}, {**MCQ}])
    with pytest.raises(InputError) as err:
        load_bench(path, strict=True)
    assert str(err.value) == (f"{path}:line 3: malformed JSON: Expecting property name enclosed in double quotes (column 2)"
                              " (2 more bad line(s): 4, 5)")
    assert "\n" not in str(err.value)


def test_bad_records_are_skipped_and_counted_unless_strict(tmp_path):
    from bencao.evaluation.bench_format import skipped_summary

    path = write(tmp_path / "b.jsonl", [MCQ, "", "{not json", {**MCQ, "id": "q2", "answer": ["Z"]}, {**MCQ}, {**MCQ, "id": "q3"}])
    b = load_bench(path)
    assert [r["id"] for r in b.records] == ["q1", "q3"]
    assert [n for n, _ in b.skipped] == [3, 4, 5]
    assert "duplicate id 'q1'" in b.skipped[2][1]
    line = skipped_summary(b)
    assert line.startswith(f"{path}: skipped 3 bad record(s) of 5 (line 3: malformed JSON") and "--strict" in line
    only_bad = write(tmp_path / "bad.jsonl", ["{not json", {**MCQ, "answer": ["Z"]}])
    with pytest.raises(InputError, match=r"bad.jsonl:line 1: malformed JSON.*\(1 more bad line\(s\): 2\); no good record left"):
        load_bench(only_bad)


def test_open_rec_gold_evidence_and_el_context():
    assert check_record({"id": "r", "task": "rec", "query": "脾虚", "gold": ["山药", "莲子"]}) is None
    assert check_record({"id": "r", "task": "rec", "query": "脾虚", "gold": "山药"}) == "record 'r' (rec): 'gold' must be a list of non-empty strings"
    assert check_record({**MCQ, "gold_evidence": ["山药，味甘温。"]}) is None
    assert check_record({**MCQ, "gold_evidence": []}) == "record 'q1' (mcq): 'gold_evidence' must not be empty"
    assert check_record({"id": "e", "task": "el", "mention": "apple", "gold_ids": ["X:1"], "context": "apple pie"}) is None
    assert check_record({"id": "e", "task": "el", "mention": "apple", "gold_ids": ["X:1"], "context": 3}) == "record 'e' (el): 'context' must be a string"


def test_duplicate_id_and_mixed_tasks(tmp_path):
    path = write(tmp_path / "d.jsonl", [MCQ, {**MCQ, "question": "again"}])
    with pytest.raises(InputError, match=r"d.jsonl:line 2: duplicate id 'q1' \(first on line 1\)$"):
        load_bench(path, strict=True)
    path = write(tmp_path / "m.jsonl", [MCQ, {"id": "t", "task": "tf", "statement": "x", "answer": False}])
    with pytest.raises(InputError, match=r"m.jsonl:line 2: record 't': task 'tf' differs from the file's task 'mcq'"):
        load_bench(path, strict=True)


def test_empty_missing_and_colliding_files(tmp_path):
    with pytest.raises(InputError, match="empty benchmark: no records"):
        load_bench(write(tmp_path / "e.jsonl", [""]))
    with pytest.raises(InputError, match="file not found"):
        load_bench(tmp_path / "nope.jsonl")
    (tmp_path / "x").mkdir()
    a = write(tmp_path / "same.jsonl", [MCQ])
    b = write(tmp_path / "x" / "same.jsonl", [MCQ])
    with pytest.raises(InputError, match="same benchmark name 'same'"):
        load_benches([a, b])


def test_dev_files_validate_when_present(repo):
    dev = repo.parent / "shared" / "data" / "dev"
    files = sorted(dev.glob("*.jsonl")) if dev.is_dir() else []
    if not files:
        pytest.skip("no shared dev data here")
    benches = load_benches(files)
    assert {b.task for b in benches} >= {"mcq", "sd", "el", "rec"}
    assert all(len(b) > 0 for b in benches)
