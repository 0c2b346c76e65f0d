"""The answer pipeline with a generator and a CoT model: a tiny local transformers model (real
generation, noise text) for the plumbing; a scripted endpoint where exact replies are needed."""

from __future__ import annotations

from typing import Any

import pytest

from bencao.llm import LLMConfig
from bencao.serving.answer import not_in_kb
from bencao.serving.pipeline import AnswerPipeline, PipelineConfig
from llm_fixtures import ScriptedClient, save_tiny_model
from serving_helpers import serving_graph

ZH = "大枣的性味是什么？"
NOTHING = "What is quinoa?"  # this graph holds no English text: empty evidence


class Recording:
    """Delegates to a real object and records the calls of one method."""

    def __init__(self, inner: Any, method: str):
        self.inner = inner
        self.calls: list[tuple[tuple, dict]] = []
        setattr(self, method, self._record(getattr(inner, method)))

    def _record(self, fn):
        def wrapper(*args, **kwargs):
            self.calls.append((args, kwargs))
            return fn(*args, **kwargs)
        return wrapper

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


@pytest.fixture(scope="module")
def graph(tmp_path_factory):
    return serving_graph(tmp_path_factory)


@pytest.fixture(scope="module")
def retriever(graph):
    from bencao.retrieval.search import Retriever

    return Retriever.from_config(graph)


@pytest.fixture(scope="module")
def tiny_path(tmp_path_factory):
    return save_tiny_model(tmp_path_factory.mktemp("tiny-qwen"))


def test_local_transformers_generator_gets_numbered_evidence_and_abstains_on_empty(graph, retriever, tiny_path):
    cfg = PipelineConfig(generator=LLMConfig(backend="local-hf", model=tiny_path, max_tokens=8, temperature=0.0, device="cpu"))
    pipe = AnswerPipeline(graph, cfg, retriever=retriever)
    pipe.generator = gen = Recording(pipe.generator, "complete_many")
    res, empty = pipe.answer_many([ZH, NOTHING])

    assert len(gen.calls) == 1  # one batch, and nothing sent for the question without evidence
    (batch,), _ = gen.calls[0]
    assert len(batch) == 1
    prompt = batch[0][1]["content"]
    ev = res["evidence"]
    refs = res["references"]  # the numbered list the generator read: facts, passages, paths, attributes
    first = ev["snippets"][0]
    n_first = next(r["n"] for r in refs if r.get("kind") == "passage" and r["snippet_id"] == first["id"])
    assert f"[{n_first}] {' › '.join(first['path'])}：" in prompt and ZH in prompt
    assert [r["n"] for r in refs] == list(range(1, len(refs) + 1)) and all(f"[{r['n']}] " in prompt for r in refs)
    assert {r["snippet_id"] for r in refs if r.get("kind") == "passage"} == {s["id"] for s in ev["snippets"]}
    assert res["answered_by"] == f"generator:{tiny_path}" and res["abstained"] is False
    assert isinstance(res["answer"], str) and res["timings"]["answer_s"] >= 0

    assert empty["abstained"] is True and empty["answer"] == not_in_kb(NOTHING) and empty["citations"] == []
    assert empty["own_answer"] is None


def test_own_answer_is_added_only_when_configured_and_marked(graph, retriever, tiny_path):
    cfg = PipelineConfig(generator=LLMConfig(backend="local-hf", model=tiny_path, max_tokens=6, temperature=0.0, device="cpu"))
    cfg.answer.own_answer = True
    pipe = AnswerPipeline(graph, cfg, retriever=retriever)
    res = pipe.answer(NOTHING)
    assert res["abstained"] is True and res["own_answer"] is not None
    assert res["answer"].startswith(not_in_kb(NOTHING) + "\n\n[The model's own answer, not from the knowledge base")


def test_citations_are_parsed_from_the_generator_reply(graph, retriever):
    scripted = ScriptedClient(lambda msgs: "大枣味甘，性平[2]；又见[1][99]。")
    cfg = PipelineConfig()
    pipe = AnswerPipeline(graph, cfg, retriever=retriever, clients={'generator': scripted})
    res = pipe.answer(ZH)
    by_n = {r["n"]: r for r in res["references"]}
    assert [c["n"] for c in res["citations"]] == [2, 1]
    assert [c.get("snippet_id") for c in res["citations"]] == [by_n[2].get("snippet_id"), by_n[1].get("snippet_id")]
    assert res["citations"][0]["heading"] == by_n[2]["heading"] and res["invalid_citations"] == [99]
    assert res["usage"]["completion_tokens"] > 0


def test_a_citation_whose_text_does_not_state_the_claim_is_flagged(graph, retriever):
    """A claim copied from the cited passage is supported; one the passage does not state is listed in
    ``unsupported_citations`` and marked in the sources block (the 0.5B model cited a 甜瓜 passage for 丁香's effects)."""
    import re

    from bencao.serving.answer import sources_block

    first = AnswerPipeline(graph, PipelineConfig(), retriever=retriever, clients={"generator": ScriptedClient(lambda m: "见[1]。")}).answer(ZH)
    runs = {r["n"]: re.findall(r"[\u4e00-\u9fff]{6,}", r["text"]) for r in first["references"]}
    a = next(n for n, found in runs.items() if found)
    b = next(n for n in runs if n != a)
    reply = f"{runs[a][0][:8]}[{a}]；大枣能飞天遁地，长生不老[{b}]。"
    res = AnswerPipeline(graph, PipelineConfig(), retriever=retriever, clients={"generator": ScriptedClient(lambda m: reply)}).answer(ZH)
    assert res["unsupported_citations"] == [b] and res["invalid_citations"] == []
    assert [(c["n"], c["supported"]) for c in res["citations"]] == [(a, True), (b, False)]
    block = sources_block(ZH, res["citations"])
    assert block.splitlines()[2].endswith("（此处原文未见该说法）") and "未见" not in block.splitlines()[1]


def test_citation_support_clauses_and_languages():
    from bencao.serving.answer import citation_support

    zh = [{"n": 1, "text": "大枣，味甘，平。主心腹邪气，安中养脾。"}, {"n": 4, "text": "瓜蒂七枚，丁香七枚，捣为末，吹鼻中。"}]
    assert citation_support("丁香的功效是退虚热[4]。", zh, "丁香有什么功效？") == [4]
    assert zh[1]["supported"] is False and "supported" not in zh[0]  # a reference not cited is not judged
    assert citation_support("大枣味甘。[1] 主心腹邪气[1]。", zh, "大枣的性味是什么？") == [] and zh[0]["supported"] is True
    assert citation_support("大枣味甘[1][4]。", zh, "大枣的性味是什么？") == [4]  # "[1][4]": both cite the same claim
    en = [{"n": 1, "text": "Ginger relieves nausea and warms the stomach."}]
    assert citation_support("Ginger relieves nausea [1].", en, "What does ginger do?") == []
    assert citation_support("Ginger relieves nausea [1]. It cures cancer [1].", en, "What does ginger do?") == [1]
    assert citation_support("没有引用。", [], "问题") == []


def test_cot_endpoint_triples_drive_retrieval(graph, retriever):
    """The CoT model behind an OpenAI-compatible endpoint (loopback) decomposes the question."""
    from bencao.llm.local_server import create_app, serve_in_thread

    cot_model = ScriptedClient(lambda msgs: "大枣是果部上品。\n（大枣，性味，甘）\n（大枣，功效，安中养脾）", model="cot-7b")
    with serve_in_thread(create_app(cot_model)) as base_url:
        cfg = PipelineConfig()
        cfg.cot.llm = LLMConfig(backend="openai", model="cot-7b", base_url=base_url, max_retries=0, timeout_s=30)
        pipe = AnswerPipeline(graph, cfg, retriever=Recording(retriever, "retrieve"))
        res = pipe.answer(ZH)
        ret = pipe.retrieve_dict(ZH)
    assert res["query_triples"] == [{"head": "大枣", "relation": "性味", "tail": "甘"},
                                    {"head": "大枣", "relation": "功效", "tail": "安中养脾"}]
    assert ret["query_triples"] == res["query_triples"]
    for args, kwargs in pipe.retriever.calls:
        assert kwargs["query_triples"] == [("大枣", "性味", "甘"), ("大枣", "功效", "安中养脾")]
    assert "大枣的性味是什么？" in cot_model.calls[0][1]["content"]
    assert res["timings"]["cot_s"] > 0 and res["answered_by"] == "graph"


def test_without_cot_model_retrieval_starts_from_the_question(graph, retriever):
    pipe = AnswerPipeline(graph, PipelineConfig(), retriever=Recording(retriever, "retrieve"))
    res = pipe.answer(ZH)
    assert res["query_triples"] is None
    assert pipe.retriever.calls and pipe.retriever.calls[0][1].get("query_triples") is None


def test_local_cot_model_runs_in_the_loop(graph, retriever, tiny_path):
    cfg = PipelineConfig()
    cfg.cot.llm = LLMConfig(backend="local-hf", model=tiny_path, max_tokens=8, temperature=0.0, device="cpu")
    pipe = AnswerPipeline(graph, cfg, retriever=retriever)
    out = pipe.cot.decompose_many([ZH, "生姜有什么功效？"])
    assert len(out) == 2 and all(isinstance(o["triples"], list) and o["error"] is None for o in out)
    assert isinstance(out[0]["reasoning"], str)


def test_vllm_backend_without_vllm_is_a_clear_error(graph, retriever):
    pytest.importorskip("torch")
    try:
        import vllm  # noqa: F401
        pytest.skip("vllm is installed here")
    except ImportError:
        pass
    from bencao.errors import BencaoError

    cfg = PipelineConfig(generator=LLMConfig(backend="vllm", model="models/any"))
    with pytest.raises(BencaoError, match=r"needs the vllm package: pip install \"bencao\[vllm\]\""):
        AnswerPipeline(graph, cfg, retriever=retriever)


@pytest.mark.gpu
def test_vllm_batched_generation_through_the_pipeline(graph, retriever, tmp_path):
    pytest.importorskip("vllm")
    from tiny_models import build_tiny_qwen

    path = build_tiny_qwen(tmp_path / "tiny", hidden=128)
    cfg = PipelineConfig(generator=LLMConfig(backend="vllm", model=str(path), max_tokens=8, temperature=0.0))
    pipe = AnswerPipeline(graph, cfg, retriever=retriever)
    res = pipe.answer_many([ZH, ZH, NOTHING])
    assert [r["abstained"] for r in res] == [False, False, True]
    assert res[0]["answered_by"] == f"generator:{path}" and res[0]["usage"]["prompt_tokens"] > 0


def test_api_maps_generator_failure_to_502_and_keeps_serving(graph, retriever):
    from fastapi.testclient import TestClient

    from bencao.llm import LLMError
    from bencao.serving.api import ApiConfig, create_app

    replies = [LLMError("endpoint refused: model overloaded", kind="rejected"), "大枣味甘[1]。"]
    pipe = AnswerPipeline(graph, PipelineConfig(), retriever=retriever, clients={'generator': ScriptedClient(replies, max_retries=0)})
    client = TestClient(create_app(pipe, ApiConfig()), raise_server_exceptions=False)
    body = {"messages": [{"role": "user", "content": ZH}]}
    r = client.post("/v1/chat/completions", json=body)
    assert r.status_code == 502 and r.json()["error"]["code"] == "upstream_model_error"
    assert "model overloaded" in r.json()["error"]["message"]
    r = client.post("/v1/chat/completions", json=body)
    assert r.status_code == 200 and r.json()["citations"][0]["n"] == 1
    assert client.get("/healthz?details=1").json()["in_flight"] == 0


def test_batch_inference_with_a_generator_shows_options_and_links_them(graph, retriever, tmp_path):
    import json

    from bencao.serving.infer import InferConfig, run_inference

    q = tmp_path / "q.jsonl"
    q.write_text(json.dumps({"id": "m1", "task": "mcq", "question": "大枣的味是？", "options": {"A": "甘", "B": "苦"}, "answer": ["A"]},
                            ensure_ascii=False) + "\n" + json.dumps({"id": "p1", "question": ZH}, ensure_ascii=False) + "\n", encoding="utf-8")
    gen = ScriptedClient(lambda msgs: "A [1]")
    pipe = AnswerPipeline(graph, PipelineConfig(), retriever=Recording(retriever, "retrieve"), clients={'generator': gen})
    out = tmp_path / "a.jsonl"
    res = run_inference(pipe, q, out, InferConfig(batch_size=2))
    assert {k: res[k] for k in ("total", "skipped", "answered", "failed", "error")} == {"total": 2, "skipped": 0, "answered": 2,
                                                                                      "failed": 0, "error": None}
    # throughput from the replies: the scripted client counts characters as tokens
    prompts = sum(len(m["content"]) for msgs in gen.calls for m in msgs)
    assert res["llm_requests"] == len(gen.calls) == 2 and res["prompt_tokens"] == prompts and res["generated_tokens"] == 2 * len("A [1]")
    assert res["questions_per_s"] > 0 and res["generated_tokens_per_s"] == pytest.approx(10 / res["seconds"], rel=0.05)
    assert [kw.get("options") for _, kw in pipe.retriever.calls] == [["甘", "苦"], []]
    assert sum("大枣的味是？\nA. 甘\nB. 苦" in c[1]["content"] for c in gen.calls) == 1
    recs = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert [r["answer"] for r in recs] == ["A [1]", "A [1]"] and recs[0]["citations"][0]["n"] == 1
    assert recs[0]["prediction"]["answer"] == ["A"] and recs[0]["answered_by"] == "generator:scripted"  # read from the reply
    assert recs[0]["timings"]["answer_s"] >= 0 and recs[0]["timings"]["batch_size"] == 2
