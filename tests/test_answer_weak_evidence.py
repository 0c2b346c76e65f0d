"""The LLM-free answerer admits weak evidence: facts about something else are not passed off as an answer."""

from __future__ import annotations

import pytest

from bencao.retrieval.evidence import Evidence, LinkedEntity, SnippetHit, TripleHit
from bencao.serving.graph_answerer import GraphAnswerer


def _ent(i, name, mention=None):
    return LinkedEntity(id=i, name=name, mention=mention or name, roles=["question"], confidence=0.95, score=0.95)


def _t(h, hn, rel, t, tn, conf=1.0):
    return TripleHit(id=f"T{h}{rel}{t}", head_id=h, head=hn, relation=rel, tail_id=t, tail=tn, confidence=conf, layer="imported")


BLOOD = [_t("B", "blood", "is_a", "F", "bodily fluid"), _t("B", "blood", "is_a", "O", "organism substance")]


@pytest.mark.parametrize("question, entities, triples, not_in_kb", [
    ("Does durian lower blood pressure?", [_ent("B", "blood"), _ent("D", "durian (whole, raw)", "durian")], BLOOD,
     "The knowledge base has nothing on this question."),
    ("榴莲能降血压吗？", [_ent("L", "榴莲"), _ent("X", "血压")], [_t("X", "血压", "is_a", "S", "生理指标")],
     "知识库中没有找到与该问题相关的内容。"),
    ("Can garlic cure cancer?", [_ent("C", "Cancer", "cancer"), _ent("G", "garlic bulb", "garlic")],
     [_t("C", "Cancer", "is_a", "K", "Cancridae")], "The knowledge base has nothing on this question."),
    ("What does honey treat?", [_ent("H", "honey")], [_t("H", "honey", "is_a", "S", "sweetener")],
     "The knowledge base has nothing on this question."),
])
def test_unrelated_or_unasked_facts_are_not_an_answer(question, entities, triples, not_in_kb):
    ev = Evidence(question=question, entities=entities, triples=triples)
    res = GraphAnswerer().answer(question, ev)
    assert res["abstained"] and res["answer"].splitlines()[0] == not_in_kb and res["reason"]
    # what was found is offered as related, under a line saying it is no answer
    assert all(line in res["answer"] for line in res["related"])
    assert not res["related"] or res["answer"].splitlines()[1] in ("Related (not an answer to the question):", "相关内容（并非对该问题的回答）：")


def test_facts_that_answer_still_answer():
    a = GraphAnswerer()
    both = Evidence(question="大枣和生姜的功效", entities=[_ent("Z", "大枣"), _ent("J", "生姜")],
                    triples=[_t("Z", "大枣", "has_effect", "E1", "安中养脾", 0.6), _t("J", "生姜", "has_effect", "E2", "去臭气", 0.6)])
    res = a.answer("大枣和生姜的功效", both)
    assert not res["abstained"] and "大枣的功效：安中养脾" in res["answer"]  # each entity has the asked facts
    related = Evidence(question="Is almond a drupe fruit?", entities=[_ent("A", "almond"), _ent("R", "drupe fruit")],
                       triples=[_t("A", "almond", "is_a", "R", "drupe fruit")])
    res = a.answer("Is almond a drupe fruit?", related)
    assert not res["abstained"] and "almond is a drupe fruit" in res["answer"]
    # a sentence naming the entity and the condition asked relates them even without a triple; one naming the entity
    # and another word of the question (blood, not blood pressure) does not (issue 32: iDISK's rule)
    said = Evidence(question="Does durian lower blood pressure?", entities=[_ent("B", "blood"), _ent("D", "durian")], triples=BLOOD,
                    snippets=[SnippetHit(id="P", text="Durian is said to lower blood pressure.", path=["notes"], score=0.5)])
    res = a.answer("Does durian lower blood pressure?", said)
    assert not res["abstained"] and "Durian is said to lower blood pressure. [1]" in res["answer"]
    other = Evidence(question="Does durian lower blood pressure?", entities=[_ent("B", "blood"), _ent("D", "durian")], triples=BLOOD,
                     snippets=[SnippetHit(id="P", text="Durian is said to raise blood heat.", path=["notes"], score=0.5)])
    assert a.answer("Does durian lower blood pressure?", other)["abstained"]


def test_a_passage_about_the_entity_answers_a_question_whose_relation_has_no_fact():
    ev = Evidence(question="大枣有什么功效？", entities=[_ent("Z", "大枣")],
                  snippets=[SnippetHit(id="P", text="大枣，味甘，平。主心腹邪气，安中养脾。", path=["神农本草经", "大枣"], score=0.5)])
    res = GraphAnswerer().answer("大枣有什么功效？", ev)
    # the sentence of its own entry about the relation asked (功效: 主…), after the entry's name; not the 性味 one
    assert not res["abstained"] and res["answer"].startswith("大枣：主心腹邪气，安中养脾。 [1]") and "味甘" not in res["answer"]


def test_ontology_and_kb_facts_cite_the_document_that_asserts_them(tmp_path, capsys):
    """A fact no passage holds (an ontology's is_a) cites its document; a book's fact keeps its numbered passage."""
    import json

    from bencao.cli import main

    src = tmp_path / "mini_foods.jsonl"
    src.write_text("\n".join(json.dumps(r) for r in [
        {"id": "X:1", "label": "drupe fruit", "parents": []},
        {"id": "X:2", "label": "almond", "parents": ["X:1"], "definition": "A drupe fruit of an almond plant."},
    ]) + "\n", encoding="utf-8")
    g = str(tmp_path / "g")
    assert main(["graph", "add", "--create", "--graph", g, "--format", "foodon-jsonl", src.as_posix(), "--title", "Mini FoodOn"]) == 0
    capsys.readouterr()
    assert main(["ask", "--graph", g, "--json", "What kind of food is almond?"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert "almond is a drupe fruit (confidence 1.00; 1 source: Mini FoodOn) [Mini FoodOn]" in out["answer"], out["answer"]
    fact = next(t for t in out["evidence"]["triples"] if t["relation"] == "is_a")
    assert fact["sources"] == ["Mini FoodOn"] and not fact["snippet_ids"]
