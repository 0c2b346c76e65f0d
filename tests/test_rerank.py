"""The cross-encoder reranking stage: a real sentence-transformers CrossEncoder (a tiny BERT built from a config,
with the packaged all-MiniLM-L6-v2 tokenizer) reorders the evidence passages, widens the pool beyond the
channels, keeps the option passages the answerer reads, and is part of what an eval run is keyed by."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from ce_fixtures import tiny_cross_encoder
from retrieval_graphs import build_tcm_graph

from bencao.errors import ConfigError
from bencao.retrieval.search.config import load_retrieval_config
from bencao.retrieval.search.rerank import RerankConfig, load_reranker, passage
from bencao.retrieval.search.retriever import Retriever


@pytest.fixture(scope="module")
def cross_encoder(tmp_path_factory) -> Path:
    return tiny_cross_encoder(tmp_path_factory.mktemp("ce") / "tiny-ce", seed=0)


@pytest.fixture(scope="module")
def tcm(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("rerank") / "g"
    build_tcm_graph(d).close()
    return d


def _retriever(graph: Path, *overrides: str) -> Retriever:
    return Retriever.from_config(graph, None, ["index.dense_kinds=[]", *overrides])


def test_the_stage_orders_the_evidence_by_the_models_scores(tcm, cross_encoder):
    from sentence_transformers import CrossEncoder

    q = "味甘，温，久服有何功效？"  # each of the graph's four snippets shares a word with it
    narrow = ("micro.enabled=false", "macro.k_snippets=1", "macro.k_sections=0", "layers.enabled=false", "paths.enabled=false")
    off = _retriever(tcm, *narrow).retrieve(q)
    assert len(off.snippets) == 1  # the channels find one passage
    on = _retriever(tcm, *narrow, f"rerank.model={cross_encoder}", "rerank.keep=3", "rerank.candidates=4").retrieve(q)
    assert off.snippets and all("rerank" not in s.via for s in off.snippets)
    kept = on.snippets
    assert 0 < len(kept) <= 3 and all("rerank" in s.via for s in kept)
    # scored independently with the library: the evidence is the model's best three, best first, of a pool that
    # holds the channels' passages and the first stage's (every one of the graph's four snippets here)
    model = CrossEncoder(str(cross_encoder))
    every = {s.id: s for s in _retriever(tcm, *narrow, f"rerank.model={cross_encoder}", "rerank.keep=10").retrieve(q).snippets}
    assert set(every) >= {s.id for s in off.snippets} and len(every) == 4
    score = dict(zip(every, (float(x) for x in model.predict([(q, passage(s)) for s in every.values()]))))
    assert [s.id for s in kept] == sorted(score, key=lambda i: -score[i])[:3]
    assert [s.scores["rerank"] for s in kept] == pytest.approx([score[s.id] for s in kept], abs=1e-5)
    assert all("first-stage" in s.via for s in every.values() if s.id != off.snippets[0].id)


def test_option_passages_stay_after_the_kept_ones(tcm, cross_encoder):
    q, options = "下列哪味药性温？", ["山药", "大枣", "干姜"]
    on = _retriever(tcm, f"rerank.model={cross_encoder}", "rerank.keep=1").retrieve(q, options=options)
    first, rest = on.snippets[0], on.snippets[1:]
    assert "rerank" in first.via
    assert rest and all(any(v.startswith("option:") for v in s.via) for s in rest)
    assert len(on.option_support) == 3  # the IR solver's support is untouched by the stage


def test_a_retrained_model_at_the_same_path_is_another_run(tcm, tmp_path, capsys):
    """An eval run is keyed by the reranker's weights: retraining into the same directory does not resume."""
    from bencao.cli import main

    ce = tiny_cross_encoder(tmp_path / "ce", seed=1)
    bench = tmp_path / "b.jsonl"
    bench.write_text(json.dumps({"id": "q0", "task": "mcq", "question": "山药的性味是", "options": {"A": "味甘，温", "B": "味辛，温"},
                                 "answer": ["A"]}, ensure_ascii=False) + "\n", encoding="utf-8")
    args = ["eval", "--graph", str(tcm), "--system", "llm-free", "--bench", str(bench), "--out", str(tmp_path / "out"),
            "--set", "retrieval.index.dense_kinds=[]", "--set", f"retrieval.rerank.model={ce}", "--set", "n_resamples=0"]
    assert main(args) == 0
    run = json.loads((tmp_path / "out" / "run.json").read_text(encoding="utf-8"))
    assert run["config"]["retrieval"]["rerank"]["weights"]
    assert main(args) == 0  # the same weights: resumed
    tiny_cross_encoder(ce, seed=2)
    capsys.readouterr()
    assert main(args) == 2
    assert "rerank" in capsys.readouterr().err


def test_a_model_that_cannot_be_loaded_is_one_line(tcm, tmp_path, monkeypatch, capsys):
    from bencao.cli import main

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ConfigError, match="no such file or directory"):
        load_reranker(RerankConfig(model=str(tmp_path / "missing")))
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match=r"rerank.model .*empty.* cannot be loaded"):
        load_reranker(RerankConfig(model=str(tmp_path / "empty")))
    with pytest.raises(ConfigError, match="not in the local hub cache"):
        load_reranker(RerankConfig(model="BAAI/bge-reranker-v2-m3"))
    code = main(["ask", "--graph", str(tcm), "--set", "retrieval.index.dense_kinds=[]", "--set", "retrieval.rerank.model=BAAI/bge-reranker-v2-m3",
                 "山药的性味是什么？"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "bge-reranker-v2-m3" in err
    for bad in ("rerank.keep=0", "rerank.backend=colbert"):
        with pytest.raises(ConfigError, match=bad.split("=")[0]):
            load_retrieval_config(None, [bad])
