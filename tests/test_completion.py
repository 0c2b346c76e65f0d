"""UKGE completion: right types only, no duplicates, one removable derived document."""

from __future__ import annotations

import pytest
from ukge_helpers import FAST, MISSING, build_herb_graph, triple_key

from bencao.cli import main
from bencao.errors import BencaoError
from dataclasses import replace

from bencao.retrieval.graph.completion import (CompleteConfig, complete_graph, evaluate_completion, find_candidates, relation_types,
                                               write_evaluation)
from bencao.retrieval.graph.confidence import UKGE, ConfidenceConfig, calibrate_graph



@pytest.fixture()
def trained(tmp_path):
    g = build_herb_graph(tmp_path / "g")
    calibrate_graph(g, ConfidenceConfig(model=FAST))
    yield g
    g.close()


def _triples(g):
    return {(t["head_id"], t["relation"], t["tail_id"]): t for t in g.iter_triples()}


def test_relation_signatures_are_learnt_per_head_type(trained):
    sig = relation_types(trained, 0.05)
    assert sig["has_nature"] == {"herb": {"nature"}}
    assert sig["treats"] == {"herb": {"symptom"}}


def test_completion_finds_the_missing_triple_and_marks_it(trained):
    g = trained
    before = _triples(g)
    report = complete_graph(g, CompleteConfig(threshold=0.8, min_precision=0))
    after = _triples(g)
    key = triple_key(g, *MISSING)
    assert key not in before and key in after
    added = after[key]
    assert added["layer"] == "completed" and added["origin"] == "ukge-completion"
    assert added["confidence"] >= 0.8 and added["attributes"]["inferred"] is True
    assert "≥ threshold 0.8" in added["attributes"]["reason"]
    wrong = triple_key(g, "桂圆", "has_flavour", "苦")
    assert wrong not in after
    doc = g.get_document(report["document"])
    assert (doc["kind"], doc["format"]) == ("derived", "completion")
    assert [s["kind"] for s in g.triple_sources_of(added["id"])] == ["inferred"]


def test_completion_never_adds_wrong_types_or_duplicates(trained):
    g = trained
    before = _triples(g)
    entities_before = {e["id"]: (e["name"], e["type"]) for e in g.iter_entities()}
    sig = relation_types(g, 0.05)
    # threshold 0 forces every candidate the model can rank
    report = complete_graph(g, CompleteConfig(threshold=0.0, max_per_head=50, min_precision=0))
    after = _triples(g)
    new = [t for k, t in after.items() if k not in before]
    assert len(new) == report["added"] > 0
    for t in new:
        assert t["tail_type"] in sig[t["relation"]][t["head_type"]], t
        assert t["head_id"] != t["tail_id"]
        assert (t["tail_id"], t["relation"], t["head_id"]) not in before  # no inverse of an existing triple
    assert len(after) == len(before) + len(new)  # nothing existing was touched or duplicated
    assert all(after[k]["layer"] == v["layer"] and after[k]["confidence"] == v["confidence"] for k, v in before.items())
    assert {e["id"]: (e["name"], e["type"]) for e in g.iter_entities()} == entities_before
    # a second run proposes nothing that is already there
    model = UKGE.load(g.dir)
    again, _ = find_candidates(g, model, CompleteConfig(threshold=0.0, max_per_head=50))
    assert not {(c.head_id, c.relation, c.tail_id) for c in again} & set(after)


def test_completed_triples_are_removed_as_a_group(trained):
    g = trained
    counts = g.counts()
    sources = g.conn.execute("SELECT * FROM triple_sources ORDER BY rowid").fetchall()
    report = complete_graph(g, CompleteConfig(threshold=0.5, min_precision=0))
    assert report["added"] > 0 and g.counts()["triples"] == counts["triples"] + report["added"]
    g.remove_document(report["document"])
    assert g.counts() == counts
    assert g.conn.execute("SELECT * FROM triple_sources ORDER BY rowid").fetchall() == sources


def test_dry_run_writes_nothing_and_errors(trained, tmp_path):
    g = trained
    counts = g.counts()
    report = complete_graph(g, CompleteConfig(dry_run=True, threshold=0.5, min_precision=0))
    assert report["kept"] > 0 and report["document"] is None and g.counts() == counts
    with pytest.raises(BencaoError, match="not known to the graph's UKGE model"):
        complete_graph(g, CompleteConfig(relations=["is_a"], min_precision=0))
    with pytest.raises(BencaoError, match="must lie in"):
        complete_graph(g, CompleteConfig(threshold=1.5, min_precision=0))
    bare = build_herb_graph(tmp_path / "bare")
    with pytest.raises(BencaoError, match="no UKGE model saved"):
        complete_graph(bare, CompleteConfig())
    bare.close()


def test_cli_complete(trained, repo, capsys):
    d = str(trained.dir)
    assert main(["graph", "complete", "--graph", d, "-c", str(repo / "configs/graph/complete.yaml"), "dry_run=true", "min_precision=0"]) == 0
    assert "dry run:" in capsys.readouterr().out
    assert main(["graph", "complete", "--graph", d, "--dry-run", "-s", "min_precision=0"]) == 0  # --set as the key=value argument
    assert "dry run:" in capsys.readouterr().out
    assert main(["graph", "complete", "--graph", d, "-c", str(repo / "configs/graph/complete.yaml"), "min_precision=0"]) == 0
    out = capsys.readouterr().out
    assert "added" in out and "bencao graph remove" in out


def test_curated_only_relations_are_not_completed(trained):
    g = trained
    # the catalogue's has_nature rows are curated, but books also support has_nature: it stays in
    report = complete_graph(g, CompleteConfig(threshold=0.0, dry_run=True, min_precision=0))
    assert report["closed"] == {} and "has_nature" in report["relations"]
    b = g.builder(source="ontology", kind="ontology", format="foodon-jsonl", content_key="herb-ontology")
    for herb in ("人参", "黄芪", "甘草", "大枣", "当归"):
        b.triple(b.entity(herb, "herb"), "is_a", b.entity("补益药", "herb_class"), confidence=1.0, layer="imported", origin="ontology")
    g.commit(b)
    calibrate_graph(g, ConfidenceConfig(model=FAST))
    report = complete_graph(g, CompleteConfig(threshold=0.0, dry_run=True, min_precision=0))
    assert list(report["closed"]) == ["is_a"] and "is_a" not in report["relations"]
    with pytest.raises(BencaoError, match="closed .*skip_curated_relations=false"):
        complete_graph(g, CompleteConfig(threshold=0.0, dry_run=True, relations=["is_a"], min_precision=0))
    asked = complete_graph(g, CompleteConfig(threshold=0.0, dry_run=True, relations=["is_a"], skip_curated_relations=False, min_precision=0))
    assert "is_a" in asked["relations"]  # the closure switched off explicitly: completed


def _add_recipes(g):
    """A recipe book: dishes with ingredients and indications (closed-world lists)."""
    b = g.builder(source="食疗方", kind="book", format="recipes-jsonl", content_key="herb-recipes")
    root = b.section("食疗方")
    for i, (dish, herbs, cures) in enumerate((("参芪粥", ["人参", "黄芪"], "气虚"), ("连芩汤", ["黄连", "黄芩"], "热证"),
                                              ("参草汤", ["人参", "甘草"], "气虚"), ("龙胆汤", ["龙胆", "栀子"], "热证"),
                                              ("归枣粥", ["当归", "大枣"], "气虚"), ("大黄汤", ["大黄", "知母"], "热证"))):
        snip = b.snippet(b.section(dish, parent=root), f"{dish}：{'、'.join(herbs)}。治{cures}。")
        d = b.entity(dish, "dish")
        for h in herbs:
            b.triple(d, "has_ingredient", b.entity(h, "herb"), confidence=0.9, layer="book", origin="recipes-jsonl", snippet=snip)
        b.triple(d, "treats", b.entity(cures, "symptom"), confidence=0.9, layer="book", origin="recipes-jsonl", snippet=snip)
    g.commit(b)
    calibrate_graph(g, ConfidenceConfig(model=FAST))


def test_closed_world_knowledge_is_never_completed(trained):
    """Recipe ingredients (closed_world) and a recipe dish's indications (a closed source) are lists,
    not incomplete extractions: nothing is ever added to them, even at threshold 0."""
    g = trained
    _add_recipes(g)
    report = complete_graph(g, CompleteConfig(threshold=0.0, max_per_head=50, min_precision=0))
    added = [t for t in g.iter_triples(layer="completed")]
    assert report["added"] == len(added) > 0  # herbs still get completed
    assert not [t for t in added if t["relation"] == "has_ingredient" or t["head_type"] == "dish"]
    assert report["closed"]["has_ingredient"] == "closed-world relation (closed_world)"
    assert "treats (from dish)" in report["closed"] and "treats" in report["relations"]  # herb → symptom stays open
    with pytest.raises(BencaoError, match="closed-world"):
        complete_graph(g, CompleteConfig(relations=["has_ingredient"], min_precision=0))


def test_completion_needs_a_held_out_precision(trained, tmp_path):
    g = trained
    with pytest.raises(BencaoError, match="not been evaluated on held-out triples"):
        complete_graph(g, CompleteConfig(threshold=0.5))
    cfg = CompleteConfig(threshold=0.5, min_precision=0.5, min_evaluated=1)
    ev = evaluate_completion(g, cfg, test_fraction=0.1, seed=0, model_config=FAST)
    assert ev["precision"] >= 0.5  # the herb graph is regular: hidden triples are found again
    assert ev["hidden"] > 0 and ev["proposed"] > 0
    for rel, m in ev["by_relation"].items():
        assert m["correct"] <= m["proposed"] and m["correct"] <= m["hidden"]
        if m["proposed"]:
            assert m["precision"] == round(m["correct"] / m["proposed"], 4)
    assert ev["curve"]["0.5"]["proposed"] >= ev["curve"]["0.9"]["proposed"]
    assert g.counts()["triples"] == len(_triples(g))  # nothing written
    # the evaluation was made with FAST; the saved model has the same settings, so it is valid
    write_evaluation(g, ev)
    report = complete_graph(g, replace(cfg, dry_run=True))
    vouched = {r for r, m in ev["by_relation"].items() if m["proposed"] >= 1 and m["precision"] >= 0.5}
    assert set(report["relations"]) == vouched
    for rel in set(ev["by_relation"]) - vouched:
        assert rel in report["gated"]
    # other settings or other triples: the evaluation no longer applies
    with pytest.raises(BencaoError, match="other completion settings"):
        complete_graph(g, replace(cfg, threshold=0.6))
    b = g.builder(source="more", kind="book", format="books-txt", content_key="more")
    b.triple(b.entity("人参", "herb"), "treats", b.entity("咳嗽", "symptom"), confidence=0.9, layer="book", origin="pattern")
    g.commit(b)
    with pytest.raises(BencaoError, match="graph changed"):
        complete_graph(g, cfg)


def test_cli_complete_evaluate(trained, repo, capsys):
    d = str(trained.dir)
    assert main(["graph", "complete", "--graph", d, "-c", str(repo / "configs/graph/complete.yaml"), "--evaluate", "--dry-run"]) == 0
    assert "dry run: would hide" in capsys.readouterr().out and not (trained.dir / "ukge" / "completion_eval.json").exists()
    assert main(["graph", "complete", "--graph", d, "-c", str(repo / "configs/graph/complete.yaml"), "--evaluate"]) == 0
    out = capsys.readouterr().out
    assert "precision by threshold" in out and (trained.dir / "ukge" / "completion_eval.json").exists()
    assert main(["graph", "complete", "--graph", d, "-c", str(repo / "configs/graph/complete.yaml"), "--dry-run"]) == 0
    assert "dry run:" in capsys.readouterr().out


def test_functional_relations_never_get_contradictory_values(trained):
    """Three natures for one food are a contradiction, not a completion: a head with a value of a functional
    relation (declared: has_nature; inferred: at most one value per head in the data, has_flavour here) gets no
    other, a head without one gets at most one — even at threshold 0 with 50 per head."""
    g = trained
    report = complete_graph(g, CompleteConfig(threshold=0.0, max_per_head=50, min_precision=0, dry_run=True))
    model = UKGE.load(g.dir)
    found, _ = find_candidates(g, model, CompleteConfig(threshold=0.0, max_per_head=50))
    assert report["functional"]["has_nature"] == "declared (functional_relations)"
    assert report["functional"]["has_flavour"].startswith("at most one value per head")
    has_value = {(h, r) for h, r, _ in g.conn.execute("SELECT head_id, relation, tail_id FROM triples")}
    functional = [c for c in found if c.relation in report["functional"]]
    assert not [c for c in functional if (c.head_id, c.relation) in has_value]  # no second nature, no second flavour
    per_head = {}
    for c in functional:
        per_head[(c.head_id, c.relation)] = per_head.get((c.head_id, c.relation), 0) + 1
    assert per_head and set(per_head.values()) == {1}
    assert (triple_key(g, *MISSING)[0], "has_flavour") in per_head  # 桂圆 has no flavour yet: it gets one
    assert report["relations"]["has_nature"]["heads_with_a_value"] == 16 and report["relations"]["has_nature"]["candidates"] == 0
    # with the rule switched off, the model proposes other natures for herbs that have one: what the rule prevents
    off, _ = find_candidates(g, model, CompleteConfig(threshold=0.0, max_per_head=50, functional_relations=[], infer_functional=False))
    assert [c for c in off if c.relation == "has_nature" and (c.head_id, c.relation) in has_value]


def test_complete_help_states_the_measured_precision(capsys):
    assert main(["graph", "complete", "--help"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "held-out precision" in out and "sample graph" in out and "docs/confidence.md" in out
