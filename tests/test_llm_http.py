"""Real request/response paths: a tiny local transformers model, served over loopback HTTP to the openai client;
the openai client's own retries (Retry-After honoured) and many requests in flight on one event loop."""

from __future__ import annotations

import threading
import time

import pytest

from bencao.llm import LLMConfig, LLMError, make_client
from bencao.llm.local_hf import LocalHFClient
from bencao.llm.local_server import FixedReplyClient, ServerStats, create_app, free_port, serve_in_thread
from bencao.llm.openai_http import OpenAIClient
from tests.llm_fixtures import ScriptedClient, save_tiny_model, timeout_error, tiny_model, tiny_tokenizer

MSGS = [{"role": "system", "content": "你是中医药专家。"}, {"role": "user", "content": "人参的功效？"}]


@pytest.fixture(scope="module")
def local_client():
    tok = tiny_tokenizer()
    return LocalHFClient(tiny_model(tok), tok, name="tiny-qwen2", batch_size=2)


def test_local_generation_uses_the_chat_template_and_batches(local_client):
    tok = local_client.tokenizer
    prompt = tok.apply_chat_template(MSGS, tokenize=False, add_generation_prompt=True)
    assert prompt.endswith("<|im_start|>assistant\n")
    batch = [MSGS, [{"role": "user", "content": "Ginger?"}], [{"role": "user", "content": "枸杞子补肾益精，养肝明目。" * 3}]]
    out = local_client.complete_many(batch, max_tokens=8, temperature=0.0)
    assert len(out) == 3
    for c, msgs in zip(out, batch):
        assert 1 <= c.completion_tokens <= 8
        assert c.prompt_tokens == len(tok.apply_chat_template(msgs, tokenize=True, add_generation_prompt=True, return_dict=True)["input_ids"])
    # greedy and left-padded: a prompt generates the same text alone as in a padded batch
    alone = local_client.complete(batch[1], max_tokens=8, temperature=0.0)
    assert alone.text == out[1].text


def test_openai_client_against_a_loopback_server_backed_by_a_real_model(local_client, tmp_path):
    with serve_in_thread(create_app(local_client)) as base_url:
        cfg = LLMConfig(backend="openai", model="tiny-qwen2", base_url=base_url, max_tokens=6, temperature=0.0, max_concurrency=2)
        client = make_client(cfg, default_cache=tmp_path / "cache.sqlite")
        direct = local_client.complete(MSGS, max_tokens=6, temperature=0.0)
        got = client.complete(MSGS)
        assert got.text == direct.text and got.model == "tiny-qwen2"
        assert got.prompt_tokens == direct.prompt_tokens and 1 <= got.completion_tokens <= 6
        many = client.complete_many([MSGS, [{"role": "user", "content": "山药"}]])
        assert many[0].cached and not many[1].cached and many[1].completion_tokens >= 1
        # an unknown model is refused (HTTP 404): not retried, reported as rejected
        wrong = OpenAIClient("no-such-model", base_url=base_url, max_retries=3)
        with pytest.raises(LLMError) as exc:
            wrong.complete(MSGS)
        assert exc.value.kind == "rejected" and "404" in str(exc.value)


def test_refused_connection_is_retried_then_reported():
    client = OpenAIClient("m", base_url=f"http://127.0.0.1:{free_port()}/v1", max_retries=1, timeout_s=2)
    out = client.complete_many([MSGS])
    assert isinstance(out[0], LLMError) and out[0].kind == "connection" and "gave up after 2 attempts" in str(out[0])


def test_local_hf_backend_loads_a_saved_model_by_path_and_caches_by_its_weights(tmp_path, monkeypatch):
    monkeypatch.setenv("BENCAO_CACHE_DIR", str(tmp_path / "bencao-cache"))
    path = save_tiny_model(tmp_path / "tiny")
    cfg = LLMConfig(backend="local-hf", model=path, max_tokens=4, temperature=0.0, cache=str(tmp_path / "cache.sqlite"))
    client = make_client(cfg)
    assert isinstance(client.inner, LocalHFClient)
    first = client.complete(MSGS)
    assert first.completion_tokens >= 1 and not first.cached
    assert make_client(cfg).complete(MSGS).cached  # the same weights: answered from the cache
    save_tiny_model(tmp_path / "tiny", seed=1)  # "retrained" into the same directory
    again = make_client(cfg).complete(MSGS)
    assert not again.cached  # new weights are asked, never answered from the old model's cache


def test_retries_are_the_openai_clients_and_honour_retry_after():
    busy = LLMError("busy", retryable=True, kind="rate_limit", retry_after_s=1.0)
    scripted = ScriptedClient([busy, "好"], model="m")
    with serve_in_thread(create_app(scripted)) as base_url:
        assert OpenAIClient("m", base_url=base_url, max_retries=2).complete(MSGS).text == "好"
        assert len(scripted.calls) == 2
        # the server asked for 1 s; the client's own first back-off would have been 0.375-0.5 s
        assert scripted.times[1] - scripted.times[0] >= 0.95

        down = ScriptedClient([timeout_error()] * 5, model="m")
        with serve_in_thread(create_app(down)) as url2:
            out = OpenAIClient("m", base_url=url2, max_retries=1).complete_many([MSGS])
        assert isinstance(out[0], LLMError) and out[0].kind == "server" and "gave up after 2 attempts" in str(out[0])
        assert len(down.calls) == 2

        refused = ScriptedClient([LLMError("bad request", kind="rejected"), "never"], model="m")
        with serve_in_thread(create_app(refused)) as url3, pytest.raises(LLMError) as exc:
            OpenAIClient("m", base_url=url3, max_retries=3).complete(MSGS)
        assert exc.value.kind == "rejected" and len(refused.calls) == 1


def test_many_requests_in_flight_cost_no_thread_each():
    stats = ServerStats()
    app = create_app(FixedReplyClient("ok", model="m"), latency_s=1.0, stats=stats)
    with serve_in_thread(app) as base_url:
        client = OpenAIClient("m", base_url=base_url, max_concurrency=128, max_retries=0)
        client.complete(MSGS)  # start the loop and the connection pool
        stats.reset()
        before, most, stop = threading.active_count(), [0], threading.Event()

        def watch() -> None:
            while not stop.is_set():
                most[0] = max(most[0], threading.active_count())
                time.sleep(0.05)

        watcher = threading.Thread(target=watch)
        watcher.start()
        out = client.complete_many([[{"role": "user", "content": f"q{i}"}] for i in range(256)])
        stop.set()
        watcher.join()
    assert [o.text for o in out] == ["ok"] * 256
    assert stats.peak == 128 and stats.total == 256  # the bound is reached and never passed
    assert most[0] <= before + 2  # the watcher itself, and nothing per request
