"""The ``vignette`` pair template: symptom vignettes → the formula's or herb's source passage, with guarded hard negatives."""

from __future__ import annotations

import json

import pytest

from bencao.data_gen.pairs import PairsConfig, run_pairs
from bencao.retrieval.graph.store import Graph
from bencao.text import norm_key

# (name, type, aliases, passage, indications); 桂枝汤 twice (a formula and a dish: two entities of one name) and
# 还魂汤 一名 麻黄汤: both share symptoms with the 麻黄汤/桂枝汤 formulas, so both must never be their negatives
ENTRIES = [
    ("桂枝汤", "formula", [], "桂枝汤，治太阳中风，头痛发热，汗出恶风。", ["头痛", "发热", "汗出", "恶风"]),
    ("桂枝汤", "dish", [], "桂枝汤（食疗），汗出恶风，鼻鸣干呕者宜之。", ["汗出", "恶风", "鼻鸣"]),
    ("麻黄汤", "formula", [], "麻黄汤，治太阳伤寒，头痛发热，身疼，无汗而喘。", ["头痛", "发热", "身疼", "无汗"]),
    ("还魂汤", "formula", [("麻黄汤", "synonym")], "还魂汤，一名麻黄汤，治身疼无汗，卒喘。", ["身疼", "无汗", "喘"]),
    ("生姜", "substance", [], "生姜，味辛，微温。主呕吐，头痛，恶风。", ["呕吐", "头痛", "恶风"]),
    ("止咳方", "formula", [], "止咳方，治咳嗽。", ["咳嗽"]),
    ("小青龙汤", "formula", [], "小青龙汤，治伤寒表不解，咳嗽，喘，发热。", ["咳嗽", "喘", "发热"]),
]


@pytest.fixture(scope="module")
def graph_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("vg") / "graph"
    g = Graph.create(d)
    b = g.builder(source="方书测试.txt", kind="book", format="test-book", content_key="vignette-test", title="方书")
    book = b.section("方书")
    vol = b.section("卷一", parent=book)
    for name, type_, aliases, text, symptoms in ENTRIES:
        sec = b.section(f"{name}（{type_}）", parent=vol)
        sn = b.snippet(sec, text)
        eid = b.entity(name, type_, aliases=aliases)
        for s in symptoms:
            b.triple(eid, "treats", b.entity(s, "symptom"), confidence=0.9, layer="book", origin="test", snippet=sn)
    g.commit(b)
    g.close()
    return d


def _rows(out):
    rows = [json.loads(x) for f in ("train.jsonl", "eval.jsonl") for x in (out / f).read_text(encoding="utf-8").splitlines() if x.strip()]
    prov = json.loads((out / "provenance.json").read_text(encoding="utf-8"))["rows"]
    assert [p["anchor"] for p in prov] == [r["anchor"] for r in rows]
    return rows, prov


def test_vignette_pairs_ask_symptoms_for_the_source_passage_with_guarded_hard_negatives(graph_dir, tmp_path):
    assert "vignette" not in PairsConfig().templates  # opt-in: templates=[...,vignette]
    out = tmp_path / "pairs"
    summary = run_pairs(PairsConfig(graph=str(graph_dir), output=str(out), templates=["vignette"], vignette_per_entry=3,
                                    eval_ratio=0.0, progress=False))
    rows, prov = _rows(out)
    assert summary["templates"] == {"vignette": len(rows)} and len(rows) >= 10
    assert summary["negatives"]["hard"] > 0
    g = Graph.open(graph_dir, read_only=True)
    try:
        names = {e["id"]: {norm_key(a["alias"]) for a in g.aliases_of(e["id"])} | {norm_key(e["name"])} for e in g.iter_entities()}
        treats = [t for t in g.iter_triples(relation="treats")]
        own = {}          # entity → its symptom names
        sources = {}      # entity → texts of the snippets its treats triples were read from
        heads_of = {}     # snippet text → entities whose treats triples it sources
        for t in treats:
            own.setdefault(t["head_id"], set()).add(g.get_entity(t["tail_id"])["name"])
            for s in g.snippets_of_triple(t["id"]):
                sources.setdefault(t["head_id"], set()).add(s["text"])
                heads_of.setdefault(s["text"], set()).add(t["head_id"])
        all_symptoms = set().union(*own.values())
        asked = set()
        mixed = 0
        for p, r in zip(prov, rows):
            eid = p["entity_id"]
            asked.add(eid)
            assert p["template"] == "vignette"
            in_question = {s for s in own[eid] if s in r["anchor"]}
            assert len(in_question) >= 2, r["anchor"]  # at least two of the entry's own indications
            mixed += any(s in r["anchor"] for s in all_symptoms - own[eid])
            assert any(text in r["positive"] for text in sources[eid]), r  # a passage its treats triples were read from
            assert eid in p["answers"]
            assert r["negative"] and r["negative"] != r["positive"]
            neg_heads = {h for text, hs in heads_of.items() if text in r["negative"] for h in hs}
            assert neg_heads, r["negative"]  # a hard negative: another entry's passage
            blocked = set().union(*(names[a] for a in p["answers"]))
            for h in neg_heads:  # never the positive entity, an answer, nor an entity named like one (alias or same name)
                assert h != eid and h not in p["answers"] and not names[h] & blocked, (r["anchor"], r["negative"])
        assert mixed > 0  # symptoms of other entries are mixed in
        one_symptom = {e for e, s in own.items() if len(s) < 2}
        assert asked and not asked & one_symptom  # an entry with a single indication is not asked
        assert len(asked) >= 5
    finally:
        g.close()
    # deterministic: the same command gives the same pairs
    again = tmp_path / "again"
    run_pairs(PairsConfig(graph=str(graph_dir), output=str(again), templates=["vignette"], vignette_per_entry=3, eval_ratio=0.0,
                          progress=False))
    assert (again / "train.jsonl").read_bytes() == (out / "train.jsonl").read_bytes()


def test_vignette_knobs_bound_the_symptoms_and_mixed_in_ones(graph_dir, tmp_path):
    out = tmp_path / "pairs"
    run_pairs(PairsConfig(graph=str(graph_dir), output=str(out), templates=["vignette"], vignette_per_entry=2, vignette_symptoms=2,
                          vignette_noise=0, eval_ratio=0.0, progress=False))
    rows, prov = _rows(out)
    g = Graph.open(graph_dir, read_only=True)
    try:
        symptom_names = {e["name"] for e in g.iter_entities("symptom")}
    finally:
        g.close()
    for r in rows:
        body = r["anchor"]
        assert sum(1 for s in symptom_names if s in body) == 2, body  # no symptom name holds another one here
