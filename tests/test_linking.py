"""Entity linking: exact promotion, normalisation, specificity, traditional/simplified, retry, abstention."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from retrieval_graphs import build_tcm_graph, demo_graph_dir

from bencao.errors import BencaoError
from bencao.retrieval.graph.store import Graph
from bencao.retrieval.index import open_indexes
from bencao.retrieval.linking import EntityLinker, LinkingConfig

DEV_EL = Path(__file__).resolve().parents[2] / "shared" / "data" / "dev" / "cafeteria_fcd_el.jsonl"


@pytest.fixture(scope="module")
def demo():
    g = Graph.open(demo_graph_dir())
    yield g, EntityLinker(g, LinkingConfig(), indexes=open_indexes(g))
    g.close()


@pytest.fixture()
def onions(tmp_path) -> Graph:
    g = Graph.create(tmp_path / "g")
    b = g.builder(source="o", kind="ontology", content_key="o1", format="test")
    veg = b.entity("vegetable", "food", id="X:1")
    onion = b.entity("onion", "food", id="X:2")
    raw = b.entity("onion (whole, raw)", "food", id="X:3", aliases=[("onion", "synonym")])
    b.entity("rum (food product)", "food", id="X:4")
    b.entity("obsolete: rum", "food", id="X:5", aliases=[("rum", "synonym")])
    b.entity("beef (ground)", "food", id="X:6")
    b.entity("ground beef patty with onions and pepper", "food", id="X:7")
    b.entity("dough (frozen)", "food", id="X:8")
    b.entity("dough not further specified", "food", id="X:9")
    leek = b.entity("leek", "food", id="X:10")
    leek2 = b.entity("leek", "food", id="X:11")
    b.entity("allium species", "food", id="X:12", aliases=[("onion", "synonym"), ("leek", "synonym")])
    b.entity("basil (whole or pieces)", "food", id="X:13", aliases=[("basil", "synonym")])
    b.entity("Ocimum basilicum", "organism", id="X:14", aliases=[("basil", "synonym")])
    b.entity("pineapple", "food", id="X:15")
    b.entity("pineapple (canned)", "food", id="X:16", aliases=[("pineapple", "synonym")])
    for child, parent in ((onion, veg), (raw, onion), (leek, veg), (leek2, leek)):
        b.triple(child, "is_a", parent, confidence=1.0, layer="imported", origin="t")
    g.commit(b)
    return g


def test_exact_label_and_plural(demo):
    g, linker = demo
    r = linker.link("apple")
    assert r.chosen_id in {"FOODON:00002473", "FOODON:03310788"} and not r.abstained and r.confidence >= 0.8
    assert linker.link("Apples").chosen_id == r.chosen_id  # case and plural normalised
    d = r.to_dict()
    assert set(d) >= {"chosen_id", "label", "confidence", "rationale", "candidates", "retried", "abstained"}
    assert d["candidates"] and d["candidates"][0]["id"] == r.chosen_id
    json.dumps(d)


def test_specificity_qualifiers_and_token_sets(onions):
    linker = EntityLinker(onions, LinkingConfig())
    # FoodOn's term for the food as bought or eaten ('onion (whole, raw)', synonym 'onion') beats the bare label
    r = linker.link("onion")
    assert r.chosen_id == "X:3" and "bought or eaten" in r.rationale and not r.abstained
    assert linker.link("onions").chosen_id == "X:3"
    # ... but any other synonym match still loses to a label ('allium species', 'pineapple (canned)')
    assert linker.link("pineapple").chosen_id == "X:15"
    # a disjunctive grouping class ('basil (whole or pieces)') gives way to another match of its tier
    r = linker.link("basil")
    assert r.chosen_id == "X:14" and "grouping" in r.rationale
    plain = EntityLinker(onions, LinkingConfig(state_qualifiers=[], grouping_words=[]))
    assert plain.link("onion").chosen_id == "X:2" and plain.link("onion").rationale.startswith("exact label")
    assert plain.link("basil").chosen_id == "X:13"
    r = linker.link("leek")  # two labels: the one descending from the other is more specific
    assert r.chosen_id == "X:11" and "most specific" in r.rationale
    assert linker.link("dough").chosen_id == "X:9"  # a generic qualifier, not a specialisation
    r = linker.link("rum")  # obsolete synonym exact vs live label after removing '(food product)'
    assert r.chosen_id == "X:4"
    assert linker.link("ground beef").chosen_id == "X:6"  # same tokens, order-free


def test_exact_spelling_breaks_a_tie_between_duplicate_labels(tmp_path):
    g = Graph.create(tmp_path / "g")
    b = g.builder(source="o", kind="ontology", content_key="o1", format="test")
    b.entity("Gouda cheese", "food", id="X:20")
    b.entity("gouda cheese", "food", id="X:21")
    g.commit(b)
    linker = EntityLinker(g, LinkingConfig())
    r = linker.link("gouda cheese")
    assert r.chosen_id == "X:21" and r.rationale.startswith("exact label") and "exact spelling" in r.rationale
    assert linker.link("Gouda cheese").chosen_id == "X:20"
    assert linker.link("GOUDA CHEESE").chosen_id in {"X:20", "X:21"}  # neither spelt so: still an exact label match
    g.close()


def test_unspecified_term_and_default_state_within_a_tier(tmp_path):
    g = Graph.create(tmp_path / "g")
    b = g.builder(source="o", kind="ontology", content_key="o1", format="test")
    b.entity("lentil food product", "food", id="X:30", aliases=[("lentil products", "synonym")])
    b.entity("lentil", "food", id="X:31")
    b.entity("lentil (unspecified variety)", "food", id="X:32")
    b.entity("veal (cooked)", "food", id="X:40")
    b.entity("veal (smoked)", "food", id="X:41")
    b.entity("veal (raw)", "food", id="X:42")
    b.entity("veal (sliced, cooked)", "food", id="X:43")
    g.commit(b)
    linker = EntityLinker(g, LinkingConfig())
    # three labels normalise to 'lentil': the one that says nothing more is specified is the term for a bare mention
    r = linker.link("lentils")
    assert r.chosen_id == "X:32" and "nothing more specified" in r.rationale
    assert linker.link("lentil").chosen_id == "X:31"  # an exact label still wins over a normalised one
    plain = EntityLinker(g, LinkingConfig(unspecified_qualifiers=[]))
    assert plain.link("lentils").chosen_id == "X:30"  # otherwise the better-established term (more names)
    # no 'veal' term: among the qualified names the default state (raw) is the food as bought, not 'cooked'
    r = linker.link("veal")
    assert r.chosen_id == "X:42" and "bought or eaten" in r.rationale and not r.abstained
    assert EntityLinker(g, LinkingConfig(state_qualifiers=[])).link("veal").chosen_id != "X:42"
    assert linker.link("cooked veal").chosen_id == "X:40"  # a qualifier in the mention is matched, not overridden
    g.close()


def test_duplicate_names_are_not_told_apart_by_the_index_tie_order(tmp_path):
    g = Graph.create(tmp_path / "g")
    b = g.builder(source="o", kind="ontology", content_key="o1", format="test")
    b.entity("truffle", "food", id="X:70")
    b.entity("truffle", "food", id="X:71")
    g.commit(b)

    class TieOrder:  # the lexical index's answer, with its two equal scores in a given order
        def __init__(self, order):
            self.order = order

        def lexical_search(self, kind, query, k):
            return [(eid, 2.5) for eid in self.order][:k]

        def dense_search(self, kind, query, k):
            return []

        def can_embed(self, text):
            return False

    picks = {EntityLinker(g, LinkingConfig(), indexes=TieOrder(order)).link("truffle").chosen_id for order in (["X:70", "X:71"], ["X:71", "X:70"])}
    assert picks == {"X:70"}
    g.close()


def test_plural_fold_and_head_noun_first_in_the_retry(tmp_path):
    g = Graph.create(tmp_path / "g")
    b = g.builder(source="o", kind="ontology", content_key="o1", format="test")
    b.entity("cookie", "food", id="X:60")
    b.entity("berry", "food", id="X:61")
    b.entity("almond", "food", id="X:62")
    b.entity("sliced", "quality", id="X:63")
    g.commit(b)
    linker = EntityLinker(g, LinkingConfig())
    r = linker.link("cookies")  # '-ies' plural of an '-ie' singular
    assert r.chosen_id == "X:60" and r.rationale.startswith("normalised name")
    assert linker.link("berries").chosen_id == "X:61"  # ... and of a '-y' singular
    # no name covers 'sliced almonds': the retry tries the head noun first, found after folding its plural
    r = linker.link("sliced almonds")
    assert r.retried and r.chosen_id == "X:62" and "'almonds'" in r.rationale
    g.close()


def test_cosine_is_measured_for_candidates_outside_the_dense_top_k(tmp_path):
    from bencao.retrieval.index import update_indexes
    from retrieval_graphs import DEMO_INDEX

    g = Graph.create(tmp_path / "g")
    b = g.builder(source="o", kind="ontology", content_key="o1", format="test")
    b.entity("quince", "food", id="X:50")
    b.entity("quince", "organism", id="X:51", aliases=[("Cydonia oblonga", "synonym"), ("Cydonia vulgaris", "synonym")],
             description="A small deciduous tree of the rose family grown in orchards.")
    b.entity("大枣", "food", id="X:52", aliases=[("大棗", "traditional")])
    g.commit(b)
    update_indexes(g, DEMO_INDEX)
    idx = open_indexes(g, DEMO_INDEX)
    # k_dense=0: neither label comes from the dense search, yet both are ordered by their real cosine
    linker = EntityLinker(g, LinkingConfig(k_dense=0), indexes=idx)
    r = linker.link("quince")
    dense = {c["id"]: c["dense"] for c in r.candidates}
    assert dense["X:50"] > 0.99 and dense["X:51"] is not None and dense["X:51"] < dense["X:50"]
    assert r.chosen_id == "X:50"
    # without vectors a missing cosine decided nothing: the term with more names won
    assert EntityLinker(g, LinkingConfig(k_dense=0)).link("quince").chosen_id == "X:51"
    # a Chinese mention the English embedder cannot read still links through the alias table
    r = linker.link("大棗")
    assert r.chosen_id == "X:52" and r.candidates[0]["dense"] is None
    g.close()


def test_traditional_and_simplified_chinese(tmp_path):
    g = build_tcm_graph(tmp_path / "tcm")
    linker = EntityLinker(g, LinkingConfig(), indexes=open_indexes(g))
    shanyao = g.find_entity_id("山药")
    assert linker.link("山藥").chosen_id == shanyao  # traditional mention
    assert linker.link("薯蓣").chosen_id == shanyao  # synonym
    assert linker.link("乾薑").chosen_id == g.find_entity_id("干姜")
    g.close()


def test_retry_with_sub_phrase_and_abstention(demo):
    g, linker = demo
    r = linker.link("freshly picked crunchy apple")
    assert r.retried and not r.abstained and r.chosen_id is not None
    assert "retry" in r.rationale
    r = linker.link("zqxwv plorb")
    assert r.abstained and r.chosen_id is None and r.label is None and r.retried
    strict = EntityLinker(g, LinkingConfig(tau=0.99, retry=False), indexes=None)
    r = strict.link("apple")
    assert r.abstained and not r.retried and "tau" in r.rationale


def test_bad_mentions_are_one_line_errors(demo):
    _, linker = demo
    with pytest.raises(BencaoError, match="empty"):
        linker.link("   ")
    with pytest.raises(BencaoError, match="10,000 characters"):
        linker.link("a" * 10_000)


@pytest.mark.slow
@pytest.mark.timeout(1800)  # a cold embedding cache: ~32k FoodOn entity texts through MiniLM on 2 cores
def test_cafeteria_dev_acc_at_1_full_foodon(tmp_path):
    """The issue's figure on the CafeteriaFCD dev file (full FoodOn slice, no LLM): measured 0.82 (halves 0.84 / 0.79;
    target 0.85 not reached, see README "Entity linking"). Guards against regressions below the measured level."""
    if not DEV_EL.exists():
        pytest.skip("dev data not present")
    import subprocess
    import sys

    repo = Path(__file__).resolve().parents[1]
    out = subprocess.run([sys.executable, str(repo / "bench" / "el_dev.py"), "--graph", str(tmp_path / "foodon"), "--build-foodon",
                          "--data", str(DEV_EL)], capture_output=True, text=True, env=dict(os.environ), check=True)
    res = json.loads(out.stdout.strip().splitlines()[-1])
    assert res["acc@1"] >= 0.8 and res["abstention"] <= 0.1, res


def test_alias_key_maps_on_disk_link_as_in_memory(tmp_path, monkeypatch):
    """A large graph keeps its alias key maps in a SQLite file under <graph>/cache/ (opened, not
    rebuilt, by the next process); linking through them gives exactly the in-memory results."""
    import shutil

    import bencao.retrieval.linking as linking

    d = tmp_path / "demo"
    shutil.copytree(demo_graph_dir(), d)
    mentions = ["apples", "raw onion", "ground beef", "cheddar cheese", "sliced almonds", "honey", "brown rice", "no such food xyz"]
    g = Graph.open(d)
    mem = EntityLinker(g, LinkingConfig(), indexes=open_indexes(g))
    assert isinstance(mem.tables.base, dict)
    want = [mem.link(m).to_dict() for m in mentions]
    monkeypatch.setattr(linking, "DISK_MIN_ALIASES", 1)
    linking._TABLES.clear()
    disk = EntityLinker(g, LinkingConfig(), indexes=open_indexes(g))
    assert isinstance(disk.tables.base, linking._KeyTable)
    assert [p.name for p in (d / "cache").glob("alias-keys-*.sqlite")]
    assert [disk.link(m).to_dict() for m in mentions] == want
    linking._TABLES.clear()  # a new process: the file is opened, not rebuilt
    before = {p: p.stat().st_mtime_ns for p in (d / "cache").glob("alias-keys-*.sqlite")}
    again = EntityLinker(g, LinkingConfig(), indexes=open_indexes(g))
    assert [again.link(m).to_dict() for m in mentions] == want
    assert {p: p.stat().st_mtime_ns for p in (d / "cache").glob("alias-keys-*.sqlite")} == before
    g.close()
    linking._TABLES.clear()
