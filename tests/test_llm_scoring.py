"""Choice scoring (multiple-choice letters, as lm-eval-harness scores them) through every path a role takes:
a local transformers model, the response cache, the OpenAI-compatible local server (``top_logprobs``), and the
answering pipeline's ``answer.mcq_mode: letters``. A tiny real Qwen2 model built from a config."""

from __future__ import annotations

import math

import pytest

from bencao.llm import LLMConfig
from bencao.llm.base import LLMError, can_score
from bencao.llm.cache import CachedClient
from bencao.llm.local_hf import LocalHFClient
from llm_fixtures import ScriptedClient, save_tiny_model

MSGS = [{"role": "system", "content": "你是中医考试助手。"},
        {"role": "user", "content": "山药的功效是？\nA. 温中止血\nB. 补中益气\nC. 清热解毒\n请直接回答选项字母。"}]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return save_tiny_model(tmp_path_factory.mktemp("tiny") / "m")


@pytest.fixture(scope="module")
def client(tiny):
    return LocalHFClient.from_pretrained(tiny, device="cpu", dtype="float32")


def reference_logprobs(client: LocalHFClient, messages, prefix: str):
    import torch

    tok = client.tokenizer
    text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True) + prefix
    ids = tok(text, return_tensors="pt", add_special_tokens=False)["input_ids"]
    with torch.no_grad():
        logits = client.hf_model(input_ids=ids).logits[0, -1].float()
    return torch.log_softmax(logits, -1), tok


def test_local_scores_are_the_next_token_log_probabilities_of_each_letter(client):
    import torch

    r = client.score_choices(MSGS, ["A", "B", "C"], prefix="答案：", top_k=5)
    logp, tok = reference_logprobs(client, MSGS, "答案：")
    for c in "ABC":
        ids = list(dict.fromkeys(tok.encode(v, add_special_tokens=False)[0] for v in (c, " " + c)))
        assert r.scores[c] == pytest.approx(float(torch.logsumexp(logp[ids], 0)), abs=1e-4)
    assert len(r.top) == 5 and r.top[0][1] == pytest.approx(float(logp.max()), abs=1e-4)
    assert r.prompt_tokens > 0 and r.best(1)[0] in "ABC"
    # a batch gives the same scores as one at a time
    many = client.score_choices_many([MSGS, MSGS[:1] + [{"role": "user", "content": "大枣？A 或 B"}]], [["A", "B", "C"], ["A", "B"]],
                                     prefix="答案：")
    assert many[0].scores == pytest.approx(r.scores, abs=1e-4) and set(many[1].scores) == {"A", "B"}
    assert can_score(client, exact=True)


def test_bf16_weights_score_the_choices_with_float32_logits(tiny, tmp_path):
    """bf16 logits move in steps of 1/8 near 20 (the real 0.5B model's letters tied): the choices' logits are recomputed in
    float32 from the LM head's input, so their differences are the float32 product's, and the cache keys the dtype."""
    import torch

    bf = LocalHFClient.from_pretrained(tiny, device="cpu", dtype="bfloat16")
    r = bf.score_choices(MSGS, ["A", "B", "C"], prefix="答案：")
    tok = bf.tokenizer
    text = tok.apply_chat_template(MSGS, tokenize=False, add_generation_prompt=True) + "答案："
    ids = tok(text, return_tensors="pt", add_special_tokens=False)["input_ids"]
    with torch.no_grad():
        out = bf.hf_model(input_ids=ids, output_hidden_states=True)
    hidden = out.hidden_states[-1][0, -1].float()  # the final norm's output: the LM head's input
    w = bf.hf_model.get_output_embeddings().weight.float()
    first = {c: list(dict.fromkeys(tok.encode(v, add_special_tokens=False)[0] for v in (c, " " + c))) for c in "ABC"}
    exact = {c: float(torch.logsumexp(hidden @ w[first[c]].T, 0)) for c in "ABC"}
    rounded = {c: float(torch.logsumexp(out.logits[0, -1, first[c]].float(), 0)) for c in "ABC"}
    for a, b in (("A", "B"), ("B", "C"), ("A", "C")):
        assert r.scores[a] - r.scores[b] == pytest.approx(exact[a] - exact[b], abs=2e-5)
    assert any(abs((rounded[a] - rounded[b]) - (exact[a] - exact[b])) > 2e-5 for a, b in (("A", "B"), ("B", "C"), ("A", "C")))
    fp = LocalHFClient.from_pretrained(tiny, device="cpu", dtype="float32")
    assert bf.cache_id.endswith("#bfloat16") and fp.cache_id.endswith("#float32")
    assert CachedClient(bf, tmp_path / "c.sqlite")._score_key(MSGS, ["A"], "", 5)[1]["score_method"] == "choice-logits-fp32"


def test_scores_are_cached_and_replayed(client, tmp_path):
    cached = CachedClient(client, tmp_path / "c.sqlite")
    first = cached.score_choices(MSGS, ["A", "B", "C"], prefix="答案：")
    again = cached.score_choices(MSGS, ["A", "B", "C"], prefix="答案：")
    assert not first.cached and again.cached and again.scores == pytest.approx(first.scores, abs=1e-4)
    replay = CachedClient(client, tmp_path / "c.sqlite", replay_only=True)
    assert replay.score_choices(MSGS, ["A", "B", "C"], prefix="答案：").cached
    miss = replay.score_choices_many([MSGS], [["A", "B"]], prefix="答案：")[0]  # other choices: another request
    assert isinstance(miss, LLMError) and miss.kind == "cache_miss"
    assert can_score(cached, exact=True)


def test_the_local_server_returns_top_logprobs_and_the_openai_client_scores_from_them(client):
    from bencao.llm.local_server import create_app, serve_in_thread
    from bencao.llm.openai_http import OpenAIClient

    local = client.score_choices(MSGS, ["A", "B", "C"], prefix="答案：", top_k=20)
    with serve_in_thread(create_app(client, "tiny")) as url:
        remote = OpenAIClient("tiny", base_url=url, max_retries=0)
        r = remote.score_choices(MSGS, ["A", "B", "C"], prefix="答案：", top_k=20)
        import httpx

        bad = httpx.post(f"{url}/chat/completions", json={"model": "tiny", "messages": MSGS, "logprobs": True, "max_tokens": 5})
    top_tokens = {t for t, _ in local.top}
    for c in "ABC":
        if c in top_tokens or " " + c in top_tokens:  # seen among the top 20: the same probability as computed locally
            parts = [lp for t, lp in local.top if t.strip() == c]
            assert r.scores[c] == pytest.approx(math.log(sum(math.exp(x) for x in parts)), abs=1e-3)
        else:
            assert r.scores[c] is None  # not among the tokens an endpoint returns
    assert [t for t, _ in r.top] == [t for t, _ in local.top]
    assert bad.status_code == 400 and "max_tokens=1" in bad.text
    assert can_score(remote) and not can_score(remote, exact=True)


def test_an_endpoint_without_logprobs_is_a_clear_error():
    from bencao.llm.local_server import create_app, serve_in_thread
    from bencao.llm.openai_http import OpenAIClient

    scripted = ScriptedClient(lambda m: "B")  # a backend that only generates
    with serve_in_thread(create_app(scripted)) as url:
        r = OpenAIClient("scripted", base_url=url, max_retries=0).score_choices_many([MSGS], [["A", "B"]], prefix="答案：")[0]
    assert isinstance(r, LLMError) and "does not score" in str(r)


def test_the_pipeline_answers_mcq_by_letter_scores_with_a_local_generator(tiny, tmp_path):
    from bencao.serving.pipeline import AnswerPipeline, PipelineConfig
    from bencao.serving.tasks import Query

    cfg = PipelineConfig(generator=LLMConfig(backend="local-hf", model=tiny, device="cpu", dtype="float32", temperature=0.0))
    cfg.answer.closed_book = True
    pipe = AnswerPipeline(None, cfg)
    q = Query("山药的功效是？", task="mcq", options={"A": "温中止血", "B": "补中益气", "C": "清热解毒"})
    sd = Query("患者…", task="sd", options={k: f"证{k}" for k in "ABCDEFGHIJ"})
    a, b = pipe.run([q, sd])
    assert a.prediction["scored_by"] == "letters" and set(a.prediction["scores"]) == {"A", "B", "C"}
    assert a.prediction["answer"] == [max(a.prediction["scores"], key=a.prediction["scores"].get)]
    assert a.answer.startswith(f"{a.prediction['answer'][0]}. ") and a.reply is None
    assert len(b.prediction["ranking"]) == 10 and b.prediction["answer"] == b.prediction["ranking"][:1]
    # generate mode: the same question is answered by a written reply
    cfg.answer.mcq_mode = "generate"
    cfg.generator.max_tokens = 4
    g = AnswerPipeline(None, cfg).run([q])[0]
    assert g.reply is not None and "scores" not in (g.prediction or {})


def test_letters_mode_refuses_a_generator_that_cannot_score():
    from bencao.errors import BencaoError
    from bencao.serving.pipeline import AnswerPipeline, PipelineConfig
    from bencao.serving.tasks import Query

    cfg = PipelineConfig(generator=LLMConfig(backend="openai", model="x"))
    cfg.answer.closed_book = True
    cfg.answer.mcq_mode = "letters"
    pipe = AnswerPipeline(None, cfg, clients={"generator": ScriptedClient(lambda m: "A")})
    with pytest.raises(BencaoError, match="letters needs a generator that scores choices"):
        pipe.run([Query("?", task="mcq", options={"A": "1", "B": "2"})])
