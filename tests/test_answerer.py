"""LLM-free answers from the evidence: multiple choice, true/false, ranking, 'not in the knowledge base'."""

from __future__ import annotations

import pytest
from retrieval_graphs import build_tcm_graph

from bencao.errors import BencaoError
from bencao.retrieval.search import Retriever
from bencao.serving.graph_answerer import NOT_IN_KB, GraphAnswerer


@pytest.fixture(scope="module")
def answerer(tmp_path_factory):
    g = build_tcm_graph(tmp_path_factory.mktemp("tcm") / "g")
    yield GraphAnswerer(Retriever(g))
    g.close()


def test_mcq_picks_the_option_the_graph_supports(answerer):
    res = answerer.answer_mcq("山药的功效是什么？", {"A": "温中止血", "B": "补中益气", "C": "安中养脾", "D": "清热解毒"})
    assert res["answer"] == ["B"] and res["ranking"][0] == "B" and not res["abstained"]
    assert res["scores"]["B"] > res["scores"]["D"]
    assert res["evidence"].entities


def test_mcq_abstains_without_support(answerer):
    res = answerer.answer_mcq("Which planet is largest?", {"A": "Jupiter", "B": "Mars"})
    assert res["abstained"] and res["answer"] == []
    with pytest.raises(BencaoError):
        answerer.answer_mcq("山药", {})


def test_true_false(answerer):
    assert answerer.answer_tf("干姜味辛，温。")["answer"] is True
    res = answerer.answer_tf("干姜不温。")
    assert res["answer"] is not True
    assert answerer.answer_tf("The moon is made of cheese")["abstained"]


def test_rank_candidates(answerer):
    res = answerer.rank_candidates("味甘的药物", ["干姜", "大枣", "山药"])
    assert set(res["ranking"][:2]) == {"大枣", "山药"}
    assert "干姜" not in res["selected"] or res["scores"]["干姜"] < res["scores"]["大枣"]


def test_free_answer_cites_or_says_not_in_kb(answerer):
    res = answerer.answer("大枣有什么作用？")
    assert not res["abstained"] and "安中养脾" in res["answer"] and "[1]" in res["answer"]
    res = answerer.answer("How do black holes evaporate?")
    assert res["abstained"] and res["answer"] == NOT_IN_KB


def _first_fact(answer: str) -> str:
    return next(line for line in answer.splitlines() if "(confidence" in line)


@pytest.mark.parametrize("question, relation", [
    ("山药有什么功效？", "has effect"),     # 功效 → has_effect before the more confident flavour/nature facts
    ("山药的性味", "has flavour"),
    ("乾薑的性", "has nature"),             # traditional characters fold to simplified, in the mention and the keyword
    ("What are the effects of 山药?", "has effect"),
    ("What does 山药 treat?", "has effect"),  # no treats triple here: has_effect is the table's second choice
    ("What is the nature of 干姜?", "has nature"),
])
def test_free_answer_lists_the_asked_relation_first(answerer, question, relation):
    res = answerer.answer(question)
    assert not res["abstained"] and f" {relation} " in _first_fact(res["answer"]), res["answer"]


def test_free_answer_without_intent_orders_by_confidence_and_table_is_configurable(answerer):
    assert answerer.intent_relations("山药") == []
    assert "has flavour" in _first_fact(answerer.answer("山药")["answer"])  # 0.9 before has_effect 0.8
    assert answerer.intent_relations("大枣的性味") == ["has_flavour", "has_nature"]
    from bencao.retrieval.search.config import load_retrieval_config

    cfg = load_retrieval_config(None, ["answer.intents={用途: [has_effect]}"])
    assert cfg.answer.intents == {"用途": ["has_effect"]}
    custom = GraphAnswerer(Retriever(answerer.retriever.g, cfg))
    assert custom.cfg is cfg.answer and custom.intent_relations("山药的性味") == []
    assert " has effect " in _first_fact(custom.answer("山药的用途")["answer"])
