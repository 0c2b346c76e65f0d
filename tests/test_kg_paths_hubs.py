"""The kg-paths teacher reasons through specific facts, never through hubs (a catalogue, shared flavour values)."""

from __future__ import annotations

from bencao.data_gen.kg_teacher import KGPathTeacher, PathSettings, link_and_find_paths
from bencao.data_gen.linking import AliasLinker
from bencao.data_gen.qa_input import QAItem
from bencao.data_gen.runner import Done, Skip
from bencao.retrieval.graph.store import Graph


def _graph(tmp_path):
    """150 listed herbs (a catalogue hub), a flavour shared by 30 herbs (a hub relation's value), and one real chain:
    头眩 ←treats— 半夏 —has_effect→ 燥湿化痰 ←has_effect— 天南星."""
    g = Graph.create(tmp_path / "g")
    b = g.builder(source="t", kind="book", content_key="t", format="test")
    cat = b.entity("药食同源目录", "catalog")
    xin = b.entity("辛", "flavour")
    herbs = [b.entity(f"药{i:03d}", "substance") for i in range(150)]
    banxia, nanxing = b.entity("半夏", "substance"), b.entity("天南星", "substance")
    for h in [*herbs, banxia, nanxing]:
        b.triple(h, "listed_in", cat, confidence=1.0, layer="imported", origin="t")
    for h in [*herbs[:30], banxia, nanxing]:
        b.triple(h, "has_flavour", xin, confidence=0.9, layer="book", origin="t")
    b.triple(banxia, "treats", b.entity("头眩", "symptom"), confidence=0.6, layer="book", origin="t")
    effect = b.entity("燥湿化痰", "effect")
    b.triple(banxia, "has_effect", effect, confidence=0.6, layer="book", origin="t")
    b.triple(nanxing, "has_effect", effect, confidence=0.6, layer="book", origin="t")
    b.triple(herbs[0], "treats", b.entity("腹痛", "symptom"), confidence=0.6, layer="book", origin="t")
    g.commit(b)
    return g


def _item(question, answer):
    return QAItem(id="q", question=question, options={"A": answer, "B": "无"}, answer_keys=["A"], answer_text=[answer])


def test_paths_skip_hub_middles_and_prefer_real_chains(tmp_path):
    g = _graph(tmp_path)
    linker = AliasLinker(g)
    on, off = PathSettings(), PathSettings(hub_degree=0, hub_relation_fanin=0)
    f_on, f_off = on.finder(g), off.finder(g)
    assert f_on.hub_relations == {"has_flavour", "listed_in"}
    assert f_on.is_hub(next(iter(g.entities_by_alias("药食同源目录")))["id"]) and f_on.is_hub(g.entities_by_alias("辛")[0]["id"])
    item = _item("哪味药与头眩有关？", "天南星")
    names = lambda lp: [[g.get_entity(s.tail_id if s.forward else s.head_id)["name"] for s in p[:-1]] for p in lp.paths]  # noqa: E731
    # allowed hubs: the shortest "paths" go 头眩 ← 半夏 → 药食同源目录/辛 ← 天南星
    assert any({"药食同源目录", "辛"} & set(m) for m in names(link_and_find_paths(item, linker, f_off, off)))
    lp = link_and_find_paths(item, linker, f_on, on)
    assert names(lp) == [["半夏", "燥湿化痰"]]
    # a question whose only link to the answer is the catalogue gets no path at all
    assert isinstance(link_and_find_paths(_item("哪味药治腹痛？", "天南星"), linker, f_on, on), Skip)
    # a hub may end a path: the answer "辛" itself is reachable
    lp2 = link_and_find_paths(_item("半夏的味是什么？", "辛"), linker, f_on, on)
    assert [(s.relation, s.forward) for s in lp2.paths[0]] == [("has_flavour", True)]
    done = KGPathTeacher(g, on)(item)
    assert isinstance(done, Done) and "药食同源目录" not in done.records[0]["messages"][-1]["content"]
    g.close()
