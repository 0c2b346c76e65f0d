"""Yaoshi-RAG's front end: what the question-understanding LLM extracts reaches retrieval (issue 27, item 2).

Keywords → their top candidate entities (BM25 + dense) → the LLM selector; a mention the question
does not spell out (脾虚证 for 脾胃虚弱) is linked like any other; the patient block filters the case
layer's therapy retrieval. Each through the one pipeline, its LLM stages behind the loopback server.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from llm_loopback import scripted_endpoint, stage_of
from retrieval_graphs import LEXICAL_ONLY, build_yaoshi_graph

from bencao.retrieval.graph.store import Graph
from bencao.serving.config import load_serve_config
from bencao.serving.pipeline import AnswerPipeline
from bencao.serving.tasks import Query

REPO = Path(__file__).resolve().parents[1]
CASES = REPO / "data" / "sample" / "cases"
#: twelve entities whose names hold 阴虚: more than the ten candidates a keyword shows the selector
YIN_XU = ["阴虚火旺", "肺阴虚", "肾阴虚", "胃阴虚", "心阴虚", "肝阴虚", "脾阴虚", "阴虚发热", "阴虚内热", "阴虚阳亢", "阴虚血燥"]


@pytest.fixture(scope="module")
def graph(tmp_path_factory):
    """The Yaoshi example graph plus a spleen-deficiency syndrome (脾虚证) that 山药 suits, and the 阴虚 family."""
    from bencao.retrieval.index import update_indexes

    d = tmp_path_factory.mktemp("front") / "g"
    g = build_yaoshi_graph(d)
    b = g.builder(source="脾虚.txt", kind="book", format="test-book", content_key="front-end-1", title="脾虚食疗测试")
    sec = b.section("脾虚证")
    p = b.snippet(sec, "脾虚证者，食少便溏，神疲乏力。宜食山药、莲子，健脾益气。")
    pixu = b.entity("脾虚证", "syndrome", description="脾气虚弱，运化失职所致的证候。")
    shanyao = b.entity("山药", "food", attributes={"nature": "平", "flavour": ["甘"], "effects": ["补脾养胃"]})
    b.triple(shanyao, "suits", pixu, confidence=0.85, layer="book", origin="test", snippet=p)
    for name in YIN_XU:
        b.entity(name, "syndrome")
    g.commit(b)
    update_indexes(g, LEXICAL_ONLY)
    g.close()
    return d


def _label_choice(messages, pick: dict[str, str] | None = None) -> str:
    """The selector: the candidate whose label is ``pick[mention]`` (else the mention itself), or -1."""
    user = messages[-1]["content"]
    mention = re.search(r"(?:提及|Mention)[：:]\s*(.+)", user).group(1).strip()
    want = (pick or {}).get(mention, mention)
    labels = re.findall(r"^(\d+)\. ([^（(；\n]+)", user, re.M)
    idx = next((int(i) for i, label in labels if label.strip() == want), -1)
    return json.dumps({"choice": idx, "confidence": 0.9 if idx >= 0 else 0.0, "rationale": f"选 {want}" if idx >= 0 else "没有合适的"},
                      ensure_ascii=False)


def _pipeline(tmp_path: Path, graph_dir: Path, ep, **recipe) -> AnswerPipeline:
    cfg = tmp_path / "front.yaml"
    cfg.write_text(yaml.safe_dump({"understand": {"llm": ep.llm()}, "answerer": "none", **recipe}, allow_unicode=True), encoding="utf-8")
    return AnswerPipeline(graph_dir, load_serve_config(cfg))


def test_keywords_reach_their_top_ten_candidates_and_the_llm_selector(graph, tmp_path):
    """"阴虚" is a keyword, not a mention the dictionary finds: its ten best candidates go to the LLM selector,
    which picks 阴虚质 — the constitution whose symptoms the question describes."""

    def route(messages):
        stage = stage_of(messages)
        if stage == "understand":
            return json.dumps({"entities": [{"mention": "手足心热", "type": "symptom", "role": "disease"}],
                               "keywords": ["阴虚", "食材", "手足心热"], "patient": {}}, ensure_ascii=False)
        if stage == "select":
            return _label_choice(messages, {"阴虚": "阴虚质"})
        if stage == "synonyms":
            return '{"synonyms": []}'
        raise AssertionError(stage)

    with scripted_endpoint(route) as ep:
        p = _pipeline(tmp_path, graph, ep, retrieval={"linking": {"selector": "llm", "llm": ep.llm()}, "index": {"dense_kinds": []}})
        a = p.run([Query("我最近手足心热、失眠多梦，请给我推荐一些食材。", task="rec")], answer=False)[0]
        selects = {re.search(r"提及：(.+)", c[-1]["content"]).group(1): c[-1]["content"] for c in ep.calls_of("实体选择")}
    assert a.understanding["keywords"] == ["阴虚", "食材", "手足心热"]
    linked = {e.name: e for e in a.evidence.entities}
    assert "阴虚质" in linked and linked["阴虚质"].via == ["keyword"] and linked["阴虚质"].mention == "阴虚"
    assert linked["阴虚质"].link["selector_rationale"] == "选 阴虚质"
    # the selector saw the keyword's ten best candidates (twelve names hold 阴虚), 阴虚质 among them
    shown = re.findall(r"^\d+\. ([^（(；\n]+)", selects["阴虚"], re.M)
    assert len(shown) == 10 and "阴虚质" in shown
    # a keyword that names nothing is dropped (no candidate: no request); one that repeats a mention is not linked twice
    assert "食材" not in selects and not any(e.mention == "食材" for e in a.evidence.entities)
    assert linked["手足心热"].via == ["understanding"] and list(selects).count("手足心热") == 1


def test_a_mention_not_written_in_the_question_is_linked(graph, tmp_path):
    """脾胃虚弱 is what the question says, 脾虚证 the term the graph knows: the LLM's mention is linked,
    marked not verbatim, and the path from it reaches the food that suits it."""

    def route(messages):
        stage = stage_of(messages)
        if stage == "understand":
            return json.dumps({"entities": [{"mention": "脾虚证", "type": "syndrome", "role": "disease"}], "keywords": [],
                               "patient": {}}, ensure_ascii=False)
        if stage == "select":
            return _label_choice(messages)
        raise AssertionError(stage)

    with scripted_endpoint(route) as ep:
        p = _pipeline(tmp_path, graph, ep, retrieval={"linking": {"selector": "llm", "llm": ep.llm()}, "index": {"dense_kinds": []}})
        a = p.run([Query("我脾胃虚弱，吃什么好？", task="rec")], answer=False)[0]
    assert a.understanding["mentions"] == [{"text": "脾虚证", "type": "syndrome", "role": "disease", "verbatim": False}]
    linked = {e.name: e for e in a.evidence.entities}
    assert linked["脾虚证"].via == ["understanding"] and linked["脾虚证"].roles == ["disease"]
    assert linked["脾虚证"].link["verbatim"] is False and linked["脾虚证"].link["mention_type"] == "syndrome"
    assert any(x.names[0] == "脾虚证" and x.names[-1] == "山药" for x in a.evidence.paths)


def test_keywords_with_the_rules_selector_keep_only_confident_links(graph):
    """Without the selector LLM a keyword's candidates go to the rules: an exact name links, a mere BM25 hit does not."""
    from bencao.retrieval.search.retriever import Retriever

    g = Graph.open(graph, read_only=True)
    try:
        ents = Retriever(g).link_entities("请给我推荐一些食材。", [], keywords=["百合", "阴虚", "the"], dictionary=False)
    finally:
        g.close()
    assert [(e.name, e.via) for e in ents] == [("百合", ["keyword"])]


def test_keyword_candidates_fuse_bm25_and_dense(tmp_path):
    """With a dense index that reads Chinese, a keyword's candidates come from both searches."""
    import importlib
    import sys

    from bencao.retrieval.search.keywords import link_keyword
    from bencao.retrieval.search.retriever import Retriever

    sys.path.insert(0, str(REPO / "bench"))
    importlib.import_module("standin")  # the character-n-gram hashing embedder: reads Chinese, offline
    g = build_yaoshi_graph(tmp_path / "g", index={"kinds": ["entities"], "dense_kinds": ["entities"], "shared_cache": False,
                                                   "embedder": {"backend": "hashing", "model": "char-ngram-hash-384", "languages": ["*"]}})
    try:
        r = Retriever(g)
        res = link_keyword(r.linker, "阴虚", "手足心热、失眠多梦", k=10)
    finally:
        g.close()
    via = {v for c in res.candidates for v in c["via"]}
    assert {"bm25", "dense"} <= via and len(res.candidates) <= 10
    assert res.candidates[0]["label"] == "阴虚质"


@pytest.fixture()
def case_graph(tmp_path):
    from bencao.retrieval.ingest.registry import ingest_file
    from bencao.retrieval.search.cases import classify_cases

    g = Graph.create(tmp_path / "cases")
    b = g.builder(source="本草", kind="book", format="books-txt", content_key="k")
    snip = b.snippet(b.section("本草"), "萝卜，主消渴。")
    b.triple(b.entity("萝卜粥", "dish"), "treats", b.entity("消渴", "symptom"), confidence=0.9, layer="book", origin="t", snippet=snip)
    b.entity("口干", "symptom", aliases=[("口燥", "synonym")])
    g.commit(b)
    ingest_file(g, "disease-tree", CASES / "disease_tree_example.yaml")
    ingest_file(g, "cases-jsonl", CASES / "cases_example.jsonl")
    classify_cases(g, None)
    g.close()
    return tmp_path / "cases"


def test_the_patient_block_reaches_the_case_layer(case_graph, tmp_path):
    """The question says nothing of the patient; the understanding stage's patient block (the consultation's
    other turns, say) makes the case layer keep middle-aged men with diabetes."""

    def route(messages):
        assert stage_of(messages) == "understand"
        return json.dumps({"entities": [], "keywords": [], "patient": {"age_group": "中年", "sex": "男", "history": ["糖尿病"]}},
                          ensure_ascii=False)

    with scripted_endpoint(route) as ep:
        p = _pipeline(tmp_path, case_graph, ep)
        a = p.run([Query("口干，小便频数，怎么食疗？")], answer=False)[0]
    assert a.understanding["patient"] == {"age_group": "中年", "sex": "男", "history": ["糖尿病"]}
    cases = [s for s in a.evidence.snippets if "therapy-case" in s.via]
    assert cases and all(set(s.case["patient_match"]) == {"age_group", "sex", "history:糖尿病"} for s in cases)
    assert a.evidence.stats["case_patient"] == {"age_group": "middle_aged", "sex": "male", "history": ["糖尿病"]}


def test_patient_block_words_read_through_the_case_lexicon():
    from bencao.retrieval.search.case_entities import PatientInfo, patient_info

    assert patient_info({"age_group": "老年", "sex": "女", "history": ["糖尿病", "无"]}) == PatientInfo("elderly", "female", None, ["糖尿病"])
    assert patient_info({"age_group": "68岁", "sex": "male"}) == PatientInfo("elderly", "male", 68, [])
    # what the lexicon does not know is left out, never an error that stops retrieval
    assert patient_info({"age_group": "不详", "sex": "未知", "history": "高血压"}) == PatientInfo(None, None, None, ["高血压"])
    assert patient_info(None).is_empty()


def test_a_rejected_keyword_link_keeps_the_scorers_alternatives():
    """The scorer's alternatives (FoodOntoRAG) reach the keyword's LinkResult as they reach a mention's."""
    from types import SimpleNamespace

    from bencao.retrieval.search.keywords import link_keyword

    alts = [{"id": "E2", "label": "阴虚质", "explanation": "the constitution, not the symptom"}]

    class Linker:
        cfg = SimpleNamespace(tau=0.5)
        g = None

        def _candidates(self, keyword, context=None):
            return [{"id": "E1", "label": "阴虚火旺"}, {"id": "E2", "label": "阴虚质"}]

        def _choose(self, keyword, context, cands):
            return {"id": "E1", "confidence": 0.2, "rationale": "a syndrome, not what was asked", "alternatives": alts}

        def _report(self, c):
            return dict(c)

    res = link_keyword(Linker(), "阴虚")
    assert res.abstained and res.alternatives == alts
