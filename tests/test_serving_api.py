"""`bencao serve` on loopback: the official openai client, limits, errors, concurrency and memory."""

from __future__ import annotations

import concurrent.futures as cf
import json

import httpx
import pytest

from serving_helpers import bencao_serve, serving_graph

KEY = "sk-test-0123"
QUESTION = "大枣的性味是什么？"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    graph = serving_graph(tmp_path_factory)
    log = tmp_path_factory.mktemp("serve") / "serve.log"
    with bencao_serve(graph, "--set", "api.max_concurrency=2", "--set", "api.max_queue=6", "--set", "api.max_body_bytes=65536",
                      api_key=KEY, log=log) as (base, proc):
        yield base, proc


def _auth() -> dict[str, str]:
    return {"Authorization": f"Bearer {KEY}"}


def test_openai_client_gets_answer_and_citations(server):
    import openai

    base, _ = server
    client = openai.OpenAI(base_url=base + "/v1", api_key=KEY, max_retries=0, timeout=120)
    assert [m.id for m in client.models.list().data] == ["bencao"]
    resp = client.chat.completions.create(model="bencao", messages=[{"role": "system", "content": "简要回答。"},
                                                                   {"role": "user", "content": QUESTION}])
    content = resp.choices[0].message.content
    extra = resp.model_extra
    assert resp.choices[0].finish_reason == "stop"
    assert content and "[1]" in content
    cites = extra["citations"]
    assert cites, "an answer from the graph cites at least one snippet"
    assert all(c["snippet_id"] and c["path"] and c["heading"] == " › ".join(c["path"]) for c in cites)
    assert "来源:" in content and f"[{cites[0]['n']}] {cites[0]['heading']}" in content
    ev = extra["evidence"]
    assert ev["snippets"] and {c["snippet_id"] for c in cites} <= {s["id"] for s in ev["snippets"]}
    assert extra["answered_by"] == "graph" and extra["abstained"] is False
    assert extra["timings"]["total_s"] >= 0

    # streaming through the same client gives the same text, citations in the last chunk
    chunks = list(client.chat.completions.create(model="bencao", messages=[{"role": "user", "content": QUESTION}], stream=True))
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks)
    assert streamed == content
    assert chunks[-1].choices[0].finish_reason == "stop" and chunks[-1].model_extra["citations"] == cites


def test_wrong_key_is_refused_by_the_openai_client(server):
    import openai

    base, _ = server
    client = openai.OpenAI(base_url=base + "/v1", api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError) as exc:
        client.chat.completions.create(model="bencao", messages=[{"role": "user", "content": QUESTION}])
    assert "incorrect API key" in str(exc.value)


def test_retrieve_returns_evidence_json(server):
    base, _ = server
    r = httpx.post(base + "/v1/retrieve", json={"question": QUESTION}, headers=_auth(), timeout=120)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["evidence"]["snippets"] and body["references"][0]["n"] == 1
    assert body["references"][0]["snippet_id"] == body["evidence"]["snippets"][0]["id"]
    r = httpx.post(base + "/v1/retrieve", json={"question": QUESTION, "query_triples": [["大枣", "性味", "?"]], "use_cot": False},
                   headers=_auth(), timeout=120)
    assert r.status_code == 200 and r.json()["query_triples"] == [{"head": "大枣", "relation": "性味", "tail": "?"}]


def test_retrieve_returns_the_context_the_generator_would_read_cut_to_the_budget(server):
    import re

    base, _ = server
    full = httpx.post(base + "/v1/retrieve", json={"question": QUESTION}, headers=_auth(), timeout=120).json()
    assert full["context"] and full["context_chars"] == len(full["context"])
    cites = full["context_citations"]
    # one numbered list: every line is an item, numbered 1..n, facts with the passage they were read from
    lines = full["context"].splitlines()
    assert [int(re.match(r"\[(\d+)\] ", ln).group(1)) for ln in lines] == [c["n"] for c in cites] == list(range(1, len(lines) + 1))
    assert {c["kind"] for c in cites} >= {"passage"} and all(c["snippet_id"] for c in cites if c["kind"] == "passage")
    for budget in (120, 400):
        cut = httpx.post(base + "/v1/retrieve", json={"question": QUESTION, "budget_chars": budget}, headers=_auth(), timeout=120).json()
        assert 0 < cut["context_chars"] <= budget and cut["budget_chars"] == budget
        assert full["context"].startswith(cut["context"].splitlines()[0])
    for bad in (-1, 10**9, "many"):
        r = httpx.post(base + "/v1/retrieve", json={"question": QUESTION, "budget_chars": bad}, headers=_auth(), timeout=120)
        assert r.status_code == 400 and "budget_chars" in r.text


@pytest.mark.parametrize(
    "path, body, headers, status, code, words",
    [
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": QUESTION}]}, {}, 401, "missing_api_key", "missing API key"),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": QUESTION}]}, {"Authorization": "Bearer nope"}, 401,
         "invalid_api_key", "incorrect API key"),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": QUESTION}]}, {"Authorization": f"Basic {KEY}"}, 401,
         "invalid_api_key", "incorrect API key"),
        ("/v1/models", None, {}, 401, "missing_api_key", "missing API key"),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "   "}]}, None, 400, "empty_question", "empty"),
        ("/v1/chat/completions", {"messages": [{"role": "system", "content": "hi"}]}, None, 400, None, "no user message"),
        ("/v1/chat/completions", {"messages": []}, None, 400, "invalid_request", "messages"),
        ("/v1/chat/completions", {"prompt": QUESTION}, None, 400, "invalid_request", "messages: Field required"),
        ("/v1/chat/completions", {"messages": "大枣"}, None, 400, "invalid_request", "messages"),
        ("/v1/chat/completions", {"messages": [{"role": "wizard", "content": "x"}]}, None, 400, "invalid_request", "messages.0.role"),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": QUESTION}], "temperature": 9}, None, 400, "invalid_request",
         "temperature"),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "问" * 5000}]}, None, 400, "question_too_long", "over the limit"),
        ("/v1/retrieve", {"question": ""}, None, 400, "empty_question", "empty"),
        ("/v1/retrieve", {"question": QUESTION, "bogus": 1}, None, 400, "invalid_request", "bogus"),
    ],
)
def test_bad_requests_get_clear_errors(server, path, body, headers, status, code, words):
    base, _ = server
    hdrs = _auth() if headers is None else headers
    r = httpx.get(base + path, headers=hdrs) if body is None else httpx.post(base + path, json=body, headers=hdrs, timeout=60)
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert words in err["message"]
    if code:
        assert err["code"] == code
    if status == 401:
        assert r.headers["www-authenticate"] == "Bearer"


def test_oversized_and_malformed_bodies(server):
    base, _ = server
    big = {"messages": [{"role": "user", "content": "大枣" * 40_000}]}
    r = httpx.post(base + "/v1/chat/completions", json=big, headers=_auth())
    assert r.status_code == 413
    assert "over the limit of 65,536 bytes" in r.json()["error"]["message"] and r.json()["error"]["code"] == "request_too_large"

    def chunked():  # no Content-Length: counted while reading
        for _ in range(20):
            yield b"x" * 8192

    r = httpx.post(base + "/v1/chat/completions", content=chunked(), headers={**_auth(), "Content-Type": "application/json"})
    assert r.status_code == 413 and "at least" in r.json()["error"]["message"]
    r = httpx.post(base + "/v1/chat/completions", content=b'{"messages": [', headers={**_auth(), "Content-Type": "application/json"})
    assert r.status_code == 400 and "not valid JSON" in r.json()["error"]["message"]
    # the server is still healthy after all that
    assert httpx.get(base + "/healthz").json()["status"] == "ok"


def test_fifty_concurrent_requests_succeed_or_get_clean_429_and_memory_stays_bounded(server):
    import psutil

    base, proc = server
    ps = psutil.Process(proc.pid)
    body = {"messages": [{"role": "user", "content": QUESTION}]}

    def one(i: int) -> tuple[int, dict]:
        r = httpx.post(base + "/v1/chat/completions", json=body, headers=_auth(), timeout=180)
        return r.status_code, r.json()

    httpx.post(base + "/v1/chat/completions", json=body, headers=_auth(), timeout=180)  # warm
    rss_before = ps.memory_info().rss
    rss_after = []
    for _burst in range(2):
        with cf.ThreadPoolExecutor(max_workers=50) as pool:
            results = list(pool.map(one, range(50)))
        statuses = [s for s, _ in results]
        assert set(statuses) <= {200, 429, 503}, statuses
        assert statuses.count(200) >= 8  # 2 answering + 6 queued are always admitted
        for s, b in results:
            if s == 200:
                assert b["choices"][0]["message"]["content"] and b["citations"]
            else:
                assert b["error"]["code"] in ("rate_limit_exceeded", "server_overloaded") and "retry" in b["error"]["message"]
        rss_after.append(ps.memory_info().rss)
    health = httpx.get(base + "/healthz?details=1", headers=_auth()).json()
    assert health["in_flight"] == 0 and health["queued"] == 0
    growth_mb = (max(rss_after) - rss_before) / 2**20
    assert growth_mb < 150, f"RSS grew {growth_mb:.0f} MiB over 100 requests"
    assert (rss_after[1] - rss_after[0]) / 2**20 < 50, "memory keeps growing from one burst to the next"


def test_healthz_and_web_page_need_no_key(server):
    base, _ = server
    assert httpx.get(base + "/healthz").json() == {"status": "ok"}  # status only: no path, no errors, to anyone
    assert httpx.get(base + "/healthz?details=1").status_code == 401  # the details are behind the key
    h = httpx.get(base + "/healthz?details=1", headers=_auth()).json()
    assert h["status"] == "ok" and h["auth"] is True and h["answerer"] == "graph"
    page = httpx.get(base + "/")
    assert page.status_code == 200 and 'id="question"' in page.text
    assert httpx.get(base + "/static/app.js").status_code == 200
    assert json.loads(httpx.get(base + "/nope").text)["error"]["type"] == "not_found_error"


def test_slot_limiter_admits_queues_refuses_and_times_out():
    import asyncio

    from bencao.serving.api import ApiError, SlotLimiter

    async def scenario() -> list:
        lim = SlotLimiter(slots=1, queue=1, timeout_s=0.2)
        await lim.acquire()  # the one slot
        waiter = asyncio.create_task(lim.acquire())  # queued
        await asyncio.sleep(0.01)
        with pytest.raises(ApiError) as full:
            await lim.acquire()  # slot taken and queue full: refused at once
        with pytest.raises(ApiError) as late:
            await waiter  # nobody released within the timeout
        await_ok = asyncio.create_task(lim.acquire())
        await asyncio.sleep(0.01)
        lim.release()
        await await_ok  # a release hands the slot to the waiter
        return [full.value.status, full.value.code, late.value.status, late.value.code, lim.active, lim.waiting]

    assert asyncio.run(scenario()) == [429, "rate_limit_exceeded", 503, "server_overloaded", 1, 0]


@pytest.mark.parametrize("path, body", [
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": QUESTION}], "options": {"A": "\ud800", "B": "苦"}}),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": QUESTION}], "options": {"\ud800": "甘", "B": "苦"}}),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": QUESTION}], "candidates": ["\ud800", "山药"]}),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": QUESTION}], "candidates": ["\udfff"], "stream": True}),
    ("/v1/retrieve", {"question": QUESTION, "query_triples": [{"\ud800": "大枣", "relation": "性味", "tail": "?"}]}),
    ("/v1/retrieve", {"question": QUESTION, "options": ["a\ud800"]}),
])
def test_lone_surrogates_anywhere_get_400_not_500(server, path, body):
    """Issue 26's reproductions against the real pipeline: each was an HTTP 500."""
    base, _ = server
    data = json.dumps(body, ensure_ascii=True).encode("ascii")  # the surrogate travels as a \\ud800 escape
    r = httpx.post(base + path, content=data, headers={**_auth(), "Content-Type": "application/json"}, timeout=60)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["type"] == "invalid_request_error"


def test_without_the_key_a_bad_body_gets_401_before_any_schema_error(server):
    base, _ = server
    r = httpx.post(base + "/v1/chat/completions", content=b'{"prompt": 1}', headers={"Content-Type": "application/json"})
    assert r.status_code == 401 and "Field required" not in r.text
    assert httpx.get(base + "/openapi.json").status_code == 404 and httpx.get(base + "/docs").status_code == 404
