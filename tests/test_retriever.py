"""Retriever: question → Evidence through linking, micro, macro, paths, two layers and therapy retrieval."""

from __future__ import annotations

import json

import pytest
from retrieval_graphs import build_tcm_graph

from bencao.errors import BencaoError
from bencao.retrieval.evidence import Evidence
from bencao.retrieval.graph.store import Graph
from bencao.retrieval.index import open_indexes, update_indexes
from bencao.retrieval.search import Retriever
from bencao.retrieval.search.config import RetrievalConfig, load_retrieval_config
from bencao.retrieval.search.layers import link_layers


@pytest.fixture(scope="module")
def tcm(tmp_path_factory):
    g = build_tcm_graph(tmp_path_factory.mktemp("tcm") / "g")
    yield g
    g.close()


def test_chinese_question_in_traditional_script(tcm):
    r = Retriever(tcm)
    ev = r.retrieve("山藥有什麼功效？")  # traditional script; the graph stores simplified
    shanyao = tcm.find_entity_id("山药")
    assert [e.id for e in ev.entities][0] == shanyao
    assert ev.entities[0].mention and ev.entities[0].confidence >= 0.9
    rels = {(t.head, t.relation, t.tail) for t in ev.triples}
    assert ("山药", "has_effect", "补中益气") in rels
    assert all(0.0 <= t.confidence <= 1.0 for t in ev.triples)
    top = ev.snippets[0]
    assert top.path == ["神农本草经", "卷上", "山药"] and "补中益气" in top.text
    assert ev.paths and ev.paths[0].entities[0] == shanyao and ev.paths[0].score > 0
    assert "补中益气" in ev.text()
    refs = ev.references()
    assert refs[0]["n"] == 1 and refs[0]["snippet_id"] == top.id and refs[0]["heading"] == "神农本草经 › 卷上 › 山药"


def test_paths_connect_two_linked_entities(tcm):
    ev = Retriever(tcm).retrieve("山药和大枣有什么共同点？")
    connecting = [p for p in ev.paths if p.connects]
    assert connecting, ev.paths
    assert {"山药", "大枣"} == {connecting[0].names[0], connecting[0].names[-1]}
    assert connecting[0].names[1] == "甘"  # both are sweet
    assert connecting[0].confidence_product == pytest.approx(0.81)


def test_micro_retrieval_with_query_triples(tcm):
    ev = Retriever(tcm).retrieve("哪味药温中？", query_triples=[("干姜", "has_effect", "温中止血")])
    micro = [t for t in ev.triples if "micro" in t.via]
    assert micro[0].tail == "温中止血"
    assert micro[0].snippet_ids and any(s.id in micro[0].snippet_ids for s in ev.snippets)


def test_anchored_triples_are_the_linked_entities_most_confident(tcm):
    cfg = load_retrieval_config(None, ["macro.enabled=false", "paths.enabled=false", "micro.anchored_triples=2"])
    ev = Retriever(tcm, cfg).retrieve("山药")
    shanyao = tcm.find_entity_id("山药")
    anchored = [t for t in ev.triples if "anchored" in t.via]
    best = sorted(tcm.triples_of(shanyao), key=lambda t: -t["confidence"])
    assert [t.id for t in anchored] and {t.id for t in anchored} <= {t["id"] for t in best}
    assert min(t.confidence for t in anchored) >= best[len(anchored) - 1]["confidence"]
    assert tcm.get_triples_by_rowid([]) == {}


def test_the_asked_relations_facts_join_even_when_more_confident_facts_fill_the_anchored_budget(tcm):
    """功效 asks for has_effect: 山药's has_effect fact (0.8) joins although its flavour and nature
    facts (0.9) fill the anchored budget, ranks above them and brings its source passage first."""
    cfg = load_retrieval_config(None, ["macro.enabled=false", "paths.enabled=false", "micro.anchored_triples=2", "micro.k_triples=0"])
    plain = Retriever(tcm, cfg).retrieve("山药的功效")
    assert "has_effect" not in {t.relation for t in plain.triples}
    ev = Retriever(tcm, cfg).retrieve("山药的功效", asked_relations=["has_effect", "treats"])
    assert ev.triples[0].relation == "has_effect" and ev.triples[0].tail == "补中益气" and "asked" in ev.triples[0].via
    assert ev.triples[0].snippet_ids[0] == ev.snippets[0].id and "补中益气" in ev.snippets[0].text
    off = load_retrieval_config(None, ["macro.enabled=false", "paths.enabled=false", "micro.anchored_triples=2", "micro.k_triples=0",
                                       "micro.asked_triples=0"])
    assert "has_effect" not in {t.relation for t in Retriever(tcm, off).retrieve("山药的功效", asked_relations=["has_effect"]).triples}


def test_chinese_question_words_do_not_match_passages_that_ask_something_themselves(tmp_path):
    """'什么', '的', '是' and the bigrams across them (是什, 效是) are phrasing, not content: a passage
    that only shares them with the question is not retrieved; a question of nothing else keeps them."""
    from bencao.retrieval.index.lexical import LexicalIndex, analyze, analyze_query

    texts = ["厥阴有什么含义呢？两阴是什么呢？", "山药，味甘，温。主伤中，补中益气。功效甚大。", "大枣，味甘，平。主心腹邪气。"]
    ix = LexicalIndex.build([analyze(t) for t in texts], ["asks", "answers", "other"])
    assert [d for d, _ in ix.search("山药的功效是什么？", 5)] == ["answers"]
    assert analyze_query("山药的功效是什么？") == ["山药", "功效", "山药", "功效"]
    assert "何首乌" in analyze_query("何首乌的性味如何")  # 何 alone is no question word
    assert [d for d, _ in ix.search("什么", 5)] == ["asks"]


def test_evidence_json_roundtrip_and_budget(tcm):
    ev = Retriever(tcm).retrieve("山药")
    d = json.loads(json.dumps(ev.to_dict(), ensure_ascii=False))
    back = Evidence.from_dict(d)
    assert back.text() == ev.text() and back.references() == ev.references()
    full = Retriever(tcm, load_retrieval_config(None, ["evidence.token_budget=100000"])).retrieve("山药 大枣 干姜")
    small = Retriever(tcm, load_retrieval_config(None, ["evidence.token_budget=60"])).retrieve("山药 大枣 干姜")
    assert small.stats["tokens"] <= 60 < full.stats["tokens"]
    assert len(small.snippets) + len(small.triples) + len(small.paths) < len(full.snippets) + len(full.triples) + len(full.paths)
    assert Evidence().is_empty() and not ev.is_empty()


def test_therapy_retrieval_descends_the_section_tree(tcm):
    cfg = load_retrieval_config(None, ["micro.enabled=false", "macro.enabled=false", "paths.enabled=false"])
    ev = Retriever(tcm, cfg).retrieve("温中止血")
    assert ev.snippets and all("therapy" in s.via for s in ev.snippets)
    assert ev.snippets[0].path == ["神农本草经", "卷中", "干姜"]


def test_bad_questions_are_clear_errors(tcm, tmp_path):
    r = Retriever(tcm)
    with pytest.raises(BencaoError, match="empty"):
        r.retrieve("  ")
    with pytest.raises(BencaoError, match="limit"):
        r.retrieve("山" * 10_000)
    with pytest.raises(BencaoError, match="no graph here"):
        Retriever.from_config(tmp_path / "missing")
    assert Retriever(tcm).retrieve("quantum chromodynamics lattice").is_empty()


def test_two_layers_linked_below_delta(tmp_path):
    g = Graph.create(tmp_path / "two")
    b = g.builder(source="terms", kind="ontology", content_key="t", format="test")
    b.entity("insomnia", "symptom", layer="terminology", description="Difficulty falling asleep or staying asleep.")
    b.entity("fever", "symptom", layer="terminology", description="Body temperature above the normal range.")
    g.commit(b)
    b = g.builder(source="cases", kind="case", content_key="c", format="test")
    b.entity("patient cannot fall asleep at night", "finding", layer="case")
    b.entity("stock market crash", "finding", layer="case")
    g.commit(b)
    update_indexes(g, {"dense_kinds": ["entities"], "shared_cache": False})
    ix = open_indexes(g)
    res = link_layers(g, ix, source_layer="case", target_layer="terminology", delta=0.6)
    assert (res["source"], res["target"], res["links"], res["source_unreadable"]) == (2, 2, 1, 0)
    case = g.find_entity_id("patient cannot fall asleep at night")
    links = g.links_of(case)
    assert links[0]["dst_id"] == g.find_entity_id("insomnia") and 1 - links[0]["score"] < 0.6
    update_indexes(g, None)
    cfg = RetrievalConfig()
    cfg.question.dense_entities = 0
    ev = Retriever(g, cfg).retrieve("patient cannot fall asleep at night")
    names = {e.name: e for e in ev.entities}
    assert "insomnia" in names and "layer-link" in names["insomnia"].via
    g.close()
