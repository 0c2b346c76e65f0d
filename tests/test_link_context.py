"""A mention's context (FoodOntoRAG's sentence or dish) helps choose between equally exact candidates."""

from __future__ import annotations

import json

import pytest
from retrieval_graphs import DEMO_INDEX

from bencao.cli import main
from bencao.retrieval.graph.store import Graph
from bencao.retrieval.index import open_indexes, update_indexes
from bencao.retrieval.linking import EntityLinker, LinkingConfig


@pytest.fixture(scope="module")
def quinces(tmp_path_factory) -> Graph:
    g = Graph.create(tmp_path_factory.mktemp("quince") / "g")
    b = g.builder(source="o", kind="ontology", content_key="o1", format="test")
    b.entity("quince", "food", id="X:50", description="The fruit, eaten cooked in jams and jellies.")
    b.entity("quince", "organism", id="X:51", description="A small deciduous tree of the rose family grown in orchards.")
    g.commit(b)
    update_indexes(g, DEMO_INDEX)
    yield g
    g.close()


def test_context_reorders_candidates_of_one_tier(quinces):
    g = quinces
    linker = EntityLinker(g, LinkingConfig(), indexes=open_indexes(g, DEMO_INDEX))
    plain = linker.link("quince")
    tree = linker.link("quince", context="a deciduous tree planted in the orchard")
    jam = linker.link("quince", context="jam and jelly cooked with sugar")
    assert tree.chosen_id == "X:51" and jam.chosen_id == "X:50"
    assert {c["id"] for c in tree.candidates} == {c["id"] for c in plain.candidates}  # context only reorders
    assert all("context" in c for c in tree.candidates) and all("context" not in c for c in plain.candidates)
    # without vectors the context changes nothing
    bare = EntityLinker(g, LinkingConfig())
    assert bare.link("quince", context="a tree").chosen_id == bare.link("quince").chosen_id


def test_link_input_reads_the_context_field(quinces, tmp_path, capsys):
    inp = tmp_path / "m.jsonl"
    inp.write_text(json.dumps({"id": 1, "mention": "quince", "context": "a deciduous tree planted in the orchard"}) + "\n"
                   + json.dumps({"id": 2, "mention": "quince", "context": "jam and jelly cooked with sugar"}) + "\n"
                   + json.dumps({"id": 3, "mention": "quince"}) + "\n", encoding="utf-8")
    out = tmp_path / "links.jsonl"
    sets = [x for k, v in DEMO_INDEX.items() for x in ("--set", f"index.{k}={json.dumps(v)}")]
    assert main(["link", "--graph", str(quinces.dir), "--input", str(inp), "--output", str(out), *sets]) == 0
    rows = [json.loads(x) for x in out.read_text(encoding="utf-8").splitlines()]
    assert [r["chosen_id"] for r in rows[:2]] == ["X:51", "X:50"] and rows[0]["context"].startswith("a deciduous")
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"id": 1, "mention": "quince", "context": ["x"]}) + "\n", encoding="utf-8")
    assert main(["link", "--graph", str(quinces.dir), "--input", str(bad), "--output", str(tmp_path / "o2.jsonl")]) == 2
    assert "bad.jsonl:line 1: 'context' must be a string" in capsys.readouterr().err
