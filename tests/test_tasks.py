"""The generator's task templates and the parsers that read answers back from model replies."""

from __future__ import annotations

import pytest

from bencao.retrieval.evidence import Evidence, SnippetHit
from bencao.serving.answer import build_messages
from bencao.serving.tasks import Query, parse_items, parse_letters, parse_tf, read_prediction

OPTS = {"A": "墨子", "B": "孔子", "C": "孟子", "D": "老子"}


@pytest.mark.parametrize("reply, letters", [
    ("答案：B", ["B"]),
    ("“割不正不食”出自《论语》，因此答案为B。其他选项都不对。", ["B"]),
    ("B. 孔子", ["B"]),
    ("B [2]", ["B"]),                                      # a letter with its citation
    ("Ｂ", ["B"]),                                         # full-width letter
    ("<think>答案是A？再想想。</think>答案：C, D", ["C", "D"]),  # reasoning block ignored
    ("Answer: (C) and (A)", ["C", "A"]),
    ("Based on the evidence, the answer is D.", ["D"]),
    ("我认为是孔子。", ["B"]),                              # option text, exactly one match
    ("A balanced diet matters.", []),                       # an English word is not a letter
    ("无法判断", []),
    ("答案：E", []),                                       # not an option
])
def test_parse_letters(reply, letters):
    assert parse_letters(reply, OPTS) == letters


@pytest.mark.parametrize("reply, value", [
    ("答案：错误", False), ("答案：不正确", False), ("答案：正确", True), ("正确。因为生姜性温。", True),
    ("Answer: True", True), ("answer: false", False), ("这是对的", None), ("不好说", None),
])
def test_parse_tf(reply, value):
    assert parse_tf(reply) is value


def test_parse_items_keeps_order_and_longest_names():
    cands = ["排骨", "冬瓜排骨汤", "红烧肉", "酸辣粉"]
    assert parse_items("答案：红烧肉、冬瓜排骨汤", cands) == ["红烧肉", "冬瓜排骨汤"]
    assert parse_items("答案：无", cands) == []


def test_read_prediction_shapes_predictions_for_the_metrics():
    sd = Query.from_record({"id": "1", "task": "sd", "question": "q", "options": OPTS, "answer": ["B"]})
    assert read_prediction(sd, "答案：C, B, A") == {"answer": ["C"], "ranking": ["C", "B", "A"], "abstained": False}
    mcq = Query.from_record({"id": "1", "task": "mcq", "question": "q", "options": OPTS, "answer": ["B"]})
    assert read_prediction(mcq, "不知道")["abstained"] is True
    qa = Query.from_record({"id": "2", "task": "qa", "question": "q", "answer": "a"})
    assert read_prediction(qa, "<think>x</think> 味辛。") == {"text": "味辛。", "abstained": False}
    rec = Query.from_record({"id": "3", "task": "rec", "query": "便秘宜吃", "candidates": ["香蕉", "辣椒", "红薯"], "gold": ["香蕉"]})
    pred = read_prediction(rec, '```json\n{"recommendations": [{"item": "红薯", "reason": "通便 [1]"}, {"item": "香蕉"}]}\n```')
    assert pred["ranking"] == ["红薯", "香蕉"] and pred["recommendation"]["recommendations"][0]["reason"] == "通便 [1]"
    open_rec = Query("我最近手足心热、失眠多梦，请给我推荐一些食材。", task="rec")
    assert read_prediction(open_rec, '{"recommendations": [{"item": "百合"}, {"item": "银耳"}]}')["items"] == ["百合", "银耳"]


def test_prompts_carry_options_evidence_and_answer_format():
    q = Query.from_record({"id": "1", "task": "mcq", "question": "“割不正不食”观念的提出者是", "options": OPTS, "answer": ["B"], "lang": "zh"})
    ev = Evidence(question=q.question, snippets=[SnippetHit(id="S1", text="割不正，不食。", path=["论语", "乡党"])])
    msgs = build_messages(q, ev)
    assert [m["role"] for m in msgs] == ["system", "user"]
    user = msgs[1]["content"]
    assert "参考资料" in user and "[1] 论语 › 乡党：割不正，不食。" in user and "B. 孔子" in user and "答案：B" in user
    closed = build_messages(q, None)[1]["content"]
    assert "参考资料" not in closed
    multi = build_messages(Query.from_record({"id": "1", "task": "mcq", "question": "下列哪些是儒家？", "options": OPTS, "answer": ["A", "B"]}), ev)[1]["content"]
    assert "多个正确选项" in multi
    en = build_messages(Query.from_record({"id": "2", "task": "tf", "statement": "Ginger is warm.", "answer": True, "lang": "en"}), None)
    assert "Answer: true" in en[1]["content"] and en[0]["content"].startswith("You are")
    qa = build_messages(Query("大枣的性味？"), ev)
    assert "NOT_IN_KB" in qa[0]["content"] and "[1] 论语 › 乡党：割不正，不食。" in qa[1]["content"]
