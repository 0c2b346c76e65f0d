"""MLKG-RAG's case layer as case terms: records split into the terms they name (rules at ingestion,
an LLM on demand), linked to the other layers by name, never whole records (docs/cases.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from llm_loopback import scripted_endpoint

from bencao.cli import main
from bencao.retrieval.graph.store import Graph
from bencao.retrieval.ingest.registry import ingest_file
from bencao.retrieval.search.case_terms import llm_terms, term_id
from bencao.retrieval.search.layers import link_layers

RECORDS = [
    {"case_id": "a1", "sex": "男", "age": 60, "text": "患者，男，60岁。自述口燥、消渴，舌焦。", "treatment": "萝卜粥：萝卜、粳米煮粥。"},
    {"case_id": "a2", "sex": "女", "age": 45, "text": "患者，女，45岁。口乾，消渴。"},  # 口乾: traditional 口干
]


def _graph(tmp_path: Path) -> Graph:
    g = Graph.create(tmp_path / "g")
    b = g.builder(source="本草", kind="book", format="books-txt", content_key="k")
    snip = b.snippet(b.section("本草"), "萝卜，主消渴。")
    b.triple(b.entity("萝卜粥", "dish"), "treats", b.entity("消渴", "symptom"), confidence=0.9, layer="book", origin="t", snippet=snip)
    b.entity("口干", "symptom", aliases=[("口燥", "synonym")])
    b.entity("萝卜", "substance", layer="terminology")
    g.commit(b)
    f = tmp_path / "cases.jsonl"
    f.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in RECORDS), encoding="utf-8")
    ingest_file(g, "cases-jsonl", f)
    return g


def _names(g: Graph, case_id: str, relation: str) -> dict[str, dict]:
    case = g.conn.execute("SELECT id FROM entities WHERE type='case' AND json_extract(attributes, '$.case_id')=?", (case_id,)).fetchone()[0]
    tails = g.get_entities(t["tail_id"] for t in g.triples_of(case, "out", relation))
    return {e["name"]: e for e in tails.values()}


def test_records_become_case_terms_linked_by_name_never_as_records(tmp_path):
    g = _graph(tmp_path)
    a1 = _names(g, "a1", "presents")
    assert set(a1) == {"口燥", "消渴"} and all(e["layer"] == "case" and e["id"].startswith("CT") for e in a1.values())
    assert {n: e["type"] for n, e in _names(g, "a1", "treated_with").items()} == {"萝卜粥": "dish", "萝卜": "substance"}
    # one entity per term, whatever record names it; 口乾 and 口干 are the same key
    assert _names(g, "a2", "presents")["消渴"]["id"] == a1["消渴"]["id"] == term_id("消渴", "symptom")
    assert term_id("口乾", "symptom") == term_id("口干", "symptom")
    # no embedder: the name links only, book entity → the case term of its name or alias (口干 ← 口燥, 口乾)
    report = link_layers(g, None, source_layer="book", target_layer="case")
    links = {(g.get_entity(s)["name"], g.get_entity(d)["name"]) for s, d in g.conn.execute("SELECT src_id, dst_id FROM links")}
    assert links == {("消渴", "消渴"), ("口干", "口燥"), ("口干", "口乾"), ("萝卜粥", "萝卜粥")}
    assert (report["exact"], report["dense"], report["embedder"]) == (4, 0, None)
    ends = g.get_entities(x for row in g.conn.execute("SELECT src_id, dst_id FROM links") for x in row)
    assert not any(e["type"] == "case" for e in ends.values())  # no patient record is a link end
    assert link_layers(g, None, source_layer="terminology", target_layer="case")["links"] == 1  # 萝卜 → the treatment's 萝卜
    g.close()


def test_llm_terms_keep_only_what_the_record_writes():
    reply = '```json\n{"symptoms": ["舌焦", "胸痛彻背"], "herbs": ["萝卜"], "diseases": "消渴", "syndromes": [{"x": 1}]}\n```'
    terms = llm_terms(lambda prompt: reply, "自述口燥、消渴，舌焦。治疗：萝卜粥")
    assert [(t.name, t.type, t.relation) for t in terms] == [("舌焦", "symptom", "presents"), ("消渴", "disease", "presents"),
                                                             ("萝卜", "herb", "treated_with")]
    assert llm_terms(lambda prompt: "I cannot tell.", "口燥") is None
    assert llm_terms(lambda prompt: '{"answer": 1}', "口燥") is None


def test_cli_llm_case_terms_through_the_loopback_server(tmp_path, capsys):
    g = _graph(tmp_path)
    g.close()
    d = str(tmp_path / "g")

    def route(messages):
        record = messages[-1]["content"]
        assert "病例术语" in record
        if "a1" in record:
            return '{"symptoms": ["舌焦", "口燥", "胸痛彻背"], "formulas": ["萝卜粥"]}'
        return "sorry"

    assert main(["graph", "cases", "terms", "--graph", d]) == 2
    assert "needs an llm block" in capsys.readouterr().err
    with scripted_endpoint(route) as ep:
        assert main(["graph", "cases", "terms", "--graph", d, *ep.overrides("llm")]) == 0
        assert len(ep.calls) == 2
    out = capsys.readouterr().out
    assert "3 case terms from 1 of 2 records (2 not found by the rules)" in out and "病例 a2" in out
    with Graph.open(tmp_path / "g", read_only=True) as g:
        a1 = _names(g, "a1", "presents")
        assert {"舌焦", "口燥", "消渴"} <= set(a1) and "胸痛彻背" not in a1  # the rules' terms stay; an unwritten term is dropped
        case = g.conn.execute("SELECT id FROM entities WHERE name='病例 a1'").fetchone()[0]
        treated = {(t["tail"], g.get_entity(t["tail_id"])["type"]) for t in g.triples_of(case, "out", "treated_with")}
        assert ("萝卜粥", "formula") in treated and ("萝卜粥", "dish") in treated  # the LLM's formula beside the rules' dish
        origins = {r[0] for r in g.conn.execute("SELECT t.origin FROM triples t JOIN entities e ON e.id = t.tail_id WHERE e.name='舌焦'")}
        assert origins == {"llm:case-terms"}


@pytest.mark.parametrize("bad", ["0", "2.5"])
def test_link_layers_refuses_a_bad_delta(tmp_path, bad):
    g = _graph(tmp_path)
    with pytest.raises(Exception, match="cosine distance threshold"):
        link_layers(g, None, source_layer="book", target_layer="case", delta=float(bad))
    g.close()


def test_a_book_added_after_the_cases_never_resolves_to_a_case_term(tmp_path):
    """Names resolve inside their layer class: a later book's 口燥 is a book entity, not the case term 口燥."""
    g = _graph(tmp_path)
    case_term = term_id("口燥", "symptom")
    assert g.get_entity(case_term)["layer"] == "case"
    b = g.builder(source="食疗", kind="book", format="books-txt", content_key="k2")
    snip = b.snippet(b.section("食疗"), "梨，主口燥。")
    b.prefetch_names("symptom", ["口燥"])  # the batched lookup large loaders use skips the case layer too
    tid = b.triple(b.entity("梨", "substance"), "treats", b.entity("口燥", "symptom"), confidence=0.9, layer="book", origin="t", snippet=snip)
    g.commit(b)
    tail = g.get_entity(g.get_triples([tid])[tid]["tail_id"])
    assert tail["layer"] != "case" and tail["id"] != case_term
    # the book already knew 口燥 as an alias of 口干 (not a case entity): the book's 口燥 is that entity
    assert tail["name"] == "口干"
    g.close()
