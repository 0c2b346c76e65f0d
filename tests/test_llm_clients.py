"""The client protocol: bounded concurrent requests, the response cache, structured replies (retries: test_llm_http)."""

from __future__ import annotations

import threading
import time

import pytest

from bencao.llm import LLMConfig, LLMError, complete_json, complete_json_many, parse_json, validate, with_cache
from bencao.llm.cache import CachedClient
from bencao.llm.structured import StructuredError
from tests.llm_fixtures import ScriptedClient, timeout_error

MSG = [{"role": "user", "content": "人参的功效是什么？"}]
SCHEMA = {"type": "object", "required": ["triples"], "properties": {"triples": {"type": "array", "items": {
    "type": "object", "required": ["head", "relation", "tail"], "properties": {"head": {"type": "string"}}}}}}


def test_a_failure_is_raised_by_complete_and_returned_in_place_by_complete_many():
    c = ScriptedClient([timeout_error(), "好"])
    with pytest.raises(LLMError, match="timed out"):
        c.complete(MSG)
    c2 = ScriptedClient([LLMError("HTTP 400", kind="rejected")])
    out = c2.complete_many([MSG])
    assert isinstance(out[0], LLMError) and out[0].kind == "rejected"


def test_complete_many_keeps_order_bounds_concurrency_and_returns_failures_in_place():
    active, peak = [0], [0]
    lock = threading.Lock()

    def reply(messages):
        with lock:
            active[0] += 1
            peak[0] = max(peak[0], active[0])
        time.sleep(0.02)
        with lock:
            active[0] -= 1
        q = messages[-1]["content"]
        return LLMError("refused", kind="rejected") if q == "bad" else q.upper()

    c = ScriptedClient(reply, max_concurrency=3)
    batch = [[{"role": "user", "content": q}] for q in ["a", "b", "bad", "d", "e", "f", "g"]]
    out = c.complete_many(batch)
    assert [o.text if not isinstance(o, LLMError) else "ERR" for o in out] == ["A", "B", "ERR", "D", "E", "F", "G"]
    assert peak[0] <= 3 and peak[0] >= 2


def test_cache_replays_without_calling_the_endpoint(tmp_path):
    inner = ScriptedClient(lambda m: "答：" + m[-1]["content"])
    c = CachedClient(inner, tmp_path / "cache.sqlite", default_params=LLMConfig(temperature=0.0).params())
    first = c.complete(MSG)
    again = c.complete(MSG)
    assert not first.cached and again.cached and again.text == first.text
    assert len(inner.calls) == 1
    # other parameters are another request
    c.complete(MSG, temperature=0.7)
    assert len(inner.calls) == 2
    # a fresh process (new client over the same file) replays, even with no endpoint at all
    dead = ScriptedClient([])
    replay = with_cache(dead, LLMConfig(cache=str(tmp_path / "cache.sqlite"), replay_only=True, temperature=0.0))
    out = replay.complete_many([MSG, [{"role": "user", "content": "not asked before"}]])
    assert out[0].text == first.text and out[0].cached
    assert isinstance(out[1], LLMError) and out[1].kind == "cache_miss"
    assert dead.calls == []


@pytest.mark.parametrize("text,expected", [
    ('{"a": 1}', {"a": 1}),
    ('好的，结果如下：\n```json\n{"三元组": ["人参"]}\n```\n以上。', {"三元组": ["人参"]}),
    ("<think>先想想 {不是JSON}</think>\n[1, 2]", [1, 2]),
    ('Sure! {"x": "y"} trailing words', {"x": "y"}),
])
def test_parse_json_finds_the_json(text, expected):
    assert parse_json(text) == expected


def test_parse_json_and_validate_report_one_line_reasons():
    with pytest.raises(StructuredError, match="not JSON"):
        parse_json("我不知道")
    with pytest.raises(StructuredError, match="schema violation at triples/0"):
        validate({"triples": [{"head": "人参"}]}, SCHEMA)


def test_one_repair_attempt_then_a_recorded_failure():
    good = '{"triples": [{"head": "人参", "relation": "功效", "tail": "补气"}]}'
    c = ScriptedClient(["抱歉，我无法回答", good])
    res = complete_json(c, MSG, SCHEMA, lang="zh")
    assert res.ok and res.repaired and res.value["triples"][0]["tail"] == "补气"
    assert "无法使用" in c.calls[1][-1]["content"] and c.calls[1][-2] == {"role": "assistant", "content": "抱歉，我无法回答"}

    c2 = ScriptedClient(['{"triples": [{}]}', "still not json"])
    res2 = complete_json(c2, MSG, SCHEMA)
    assert not res2.ok and res2.kind == "not_json" and "after one repair" in res2.error
    assert len(c2.calls) == 2  # exactly one repair

    c3 = ScriptedClient([timeout_error()] * 3, max_retries=1)
    res3 = complete_json(c3, MSG, SCHEMA)
    assert not res3.ok and res3.kind == "llm_error"


def test_complete_json_many_repairs_only_the_bad_ones():
    def reply(messages):
        q = messages[0]["content"]
        if len(messages) > 1:
            return '{"triples": []}'
        return "not json" if q == "b" else '{"triples": []}'

    c = ScriptedClient(reply)
    res = complete_json_many(c, [[{"role": "user", "content": q}] for q in "abc"], SCHEMA)
    assert all(r.ok for r in res)
    assert [r.repaired for r in res] == [False, True, False]
    assert len(c.calls) == 4


def test_metered_client_counts_fresh_replies_apart_from_cached_and_failed_ones():
    from bencao.llm import Completion, LLMError
    from bencao.llm.meter import Metered, UsageMeter

    inner = ScriptedClient(["abc", LLMError("down", kind="server"), "de"])
    meter = UsageMeter()
    client = Metered(inner, meter)
    replies = client.complete_many([[{"role": "user", "content": "xy"}]] * 3)
    assert isinstance(replies[1], LLMError) and client.model == "scripted" and client.calls is inner.calls
    u = meter.snapshot()
    assert (u.requests, u.prompt_tokens, u.completion_tokens, u.cached) == (2, 4, 5, 0)  # the failure costs nothing
    meter.add([Completion(text="cached", model="m", prompt_tokens=9, completion_tokens=9, cached=True)])
    assert meter.snapshot().minus(u).cached == 1 and meter.snapshot().completion_tokens == 5
    client.script = ["again"]  # attributes set on the wrapper reach the client
    assert inner.script == ["again"] and client.complete([{"role": "user", "content": "z"}]).text == "again"
    assert meter.snapshot().requests == 3
