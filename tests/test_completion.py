"""UKGE completion: right types only, no duplicates, one removable derived document."""

from __future__ import annotations

import pytest
from ukge_helpers import FAST, MISSING, build_herb_graph, triple_key

from bencao.cli import main
from bencao.errors import BencaoError
from bencao.retrieval.graph.completion import CompleteConfig, complete_graph, find_candidates, relation_types
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
    report = complete_graph(g, CompleteConfig(threshold=0.8))
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
    report = complete_graph(g, CompleteConfig(threshold=0.0, max_per_head=50))
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
    report = complete_graph(g, CompleteConfig(threshold=0.5))
    assert report["added"] > 0 and g.counts()["triples"] == counts["triples"] + report["added"]
    g.remove_document(report["document"])
    assert g.counts() == counts
    assert g.conn.execute("SELECT * FROM triple_sources ORDER BY rowid").fetchall() == sources


def test_dry_run_writes_nothing_and_errors(trained, tmp_path):
    g = trained
    counts = g.counts()
    report = complete_graph(g, CompleteConfig(dry_run=True, threshold=0.5))
    assert report["kept"] > 0 and report["document"] is None and g.counts() == counts
    with pytest.raises(BencaoError, match="not known to the graph's UKGE model"):
        complete_graph(g, CompleteConfig(relations=["is_a"]))
    with pytest.raises(BencaoError, match="must lie in"):
        complete_graph(g, CompleteConfig(threshold=1.5))
    bare = build_herb_graph(tmp_path / "bare")
    with pytest.raises(BencaoError, match="no UKGE model saved"):
        complete_graph(bare, CompleteConfig())
    bare.close()


def test_cli_complete(trained, repo, capsys):
    d = str(trained.dir)
    assert main(["graph", "complete", "--graph", d, "-c", str(repo / "configs/graph/complete.yaml"), "dry_run=true"]) == 0
    assert "dry run:" in capsys.readouterr().out
    assert main(["graph", "complete", "--graph", d, "-c", str(repo / "configs/graph/complete.yaml")]) == 0
    out = capsys.readouterr().out
    assert "added" in out and "bencao graph remove" in out


def test_curated_only_relations_are_not_completed(trained):
    g = trained
    # the catalogue's has_nature rows are curated, but books also support has_nature: it stays in
    report = complete_graph(g, CompleteConfig(threshold=0.0, dry_run=True))
    assert report["skipped_curated"] == [] and "has_nature" in report["relations"]
    b = g.builder(source="ontology", kind="ontology", format="foodon-jsonl", content_key="herb-ontology")
    for herb in ("人参", "黄芪", "甘草", "大枣", "当归"):
        b.triple(b.entity(herb, "herb"), "is_a", b.entity("补益药", "herb_class"), confidence=1.0, layer="imported", origin="ontology")
    g.commit(b)
    calibrate_graph(g, ConfidenceConfig(model=FAST))
    report = complete_graph(g, CompleteConfig(threshold=0.0, dry_run=True))
    assert report["skipped_curated"] == ["is_a"] and "is_a" not in report["relations"]
    asked = complete_graph(g, CompleteConfig(threshold=0.0, dry_run=True, relations=["is_a"]))
    assert "is_a" in asked["relations"]  # named explicitly: completed anyway
