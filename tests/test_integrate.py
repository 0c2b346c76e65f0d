"""iDISK-style integration: one entity per thing across sources, undoable, and removal-safe."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bencao.cli import main
from bencao.errors import BencaoError
from bencao.retrieval.graph.integrate import (COLUMNS, IntegrateConfig, integrate, integration_document, is_noise, quarantined, summary,
                                              undo_integration, xref_key)
from bencao.retrieval.graph.store import Graph
from bencao.retrieval.ingest.registry import ingest_file

REPO = Path(__file__).resolve().parents[1]
DSI_MAP = {"mapping": str(REPO / "configs" / "graph" / "idisk_dsi.yaml")}

ONTOLOGY = [
    {"id": "CHEBI:176783", "label": "vitamin C", "synonyms": [], "parents": ["CHEBI:50523"], "definition": "Any member of a group of vitamers."},
    {"id": "CHEBI:21241", "label": "vitamin C", "synonyms": ["Vitamin C"], "parents": ["CHEBI:50523"]},
    {"id": "CHEBI:50523", "label": "butenolide", "synonyms": []},
    {"id": "CHEBI:29073", "label": "L-ascorbic acid", "synonyms": ["12"], "parents": ["CHEBI:176783", "CHEBI:21241"]},
    {"id": "HANCESTRO:0443", "label": "Lebanese", "synonyms": [], "parents": ["HANCESTRO:0015"]},
    {"id": "hancestro:0443", "label": "Lebanese", "synonyms": ["-"], "parents": ["hancestro:0015"]},
    {"id": "ancestro:0443", "label": "Lebanese", "synonyms": [], "parents": []},
    {"id": "HANCESTRO:0015", "label": "Western Asian", "synonyms": []},
    {"id": "hancestro:0015", "label": "Western Asian", "synonyms": []},
    {"id": "FOODON:1", "label": "7", "synonyms": []},
    {"id": "FOODON:2", "label": "7", "synonyms": []},
]
DSI = ("iDISK_ID,Name,CUI,Source Material,NHP_Name,DSLD_Name\n"
       "DSI000041,Vitamin C,C2349136,,Vitamin C,Vitamin C (unspecified) | Vitamin C\n"
       "DSI000187,Ascorbic acid,C0003968,,,\n")


def _state(g: Graph) -> dict[str, set]:
    return {t: {tuple(r) for r in g.conn.execute(f"SELECT {', '.join(cols)} FROM {t}")} for t, cols in COLUMNS.items()}


@pytest.fixture()
def sources(tmp_path: Path) -> dict[str, Path]:
    onto = tmp_path / "onto.jsonl"
    onto.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in ONTOLOGY), encoding="utf-8")
    dsi = tmp_path / "dsi.csv"
    dsi.write_text(DSI, encoding="utf-8")
    book = tmp_path / "book.md"
    book.write_text("# 本草\n\n## 枣\n\n枣，味甘。\n", encoding="utf-8")
    return {"onto": onto, "dsi": dsi, "book": book}


def _build(path: Path, sources: dict[str, Path], skip: str | None = None) -> tuple[Graph, dict[str, str]]:
    g = Graph.create(path)
    ids = {}
    for name, fmt, opts in (("onto", "foodon-jsonl", {}), ("dsi", "kb-csv", DSI_MAP), ("book", "books-md", {})):
        if name != skip:
            ids[name] = ingest_file(g, fmt, sources[name], opts)[0]
    b = g.builder(source="notes", kind="book", format="notes", content_key="notes")
    b.triple(b.entity("Vitamin C", "supplement_ingredient", id="DSI000041"), "treats", b.entity("scurvy", "disease"),
             confidence=0.8, layer="book", origin="notes")
    b.triple(b.entity("枣", "substance"), "has_flavour", b.entity("甘", "flavour"), confidence=0.6, layer="book", origin="notes")
    g.commit(b)
    return g, ids


def test_integrate_merges_shared_ids_and_names_keeping_every_source_id(tmp_path, sources):
    g, _ = _build(tmp_path / "g", sources)
    report = integrate(g)
    vit = [e for e in g.iter_entities() if e["norm"] == "vitamin c"]
    assert len(vit) == 1 and vit[0]["id"] == "CHEBI:176783"  # ontology ingested first: its term is canonical
    leb = [e for e in g.iter_entities() if e["norm"] == "lebanese"]
    assert [e["id"] for e in leb] == ["HANCESTRO:0443"]  # the live, typed spelling; case-folded xref + name link all three
    for old, now in (("CHEBI:21241", "CHEBI:176783"), ("DSI000041", "CHEBI:176783"), ("hancestro:0443", "HANCESTRO:0443"),
                     ("ancestro:0443", "HANCESTRO:0443")):
        assert [e["id"] for e in g.entities_by_alias(old)] == [now]  # the old id still finds the entity
        assert g.get_entity(old) is None
    kinds = {(a["alias"], a["kind"]) for a in g.aliases_of("CHEBI:176783")}
    assert {("DSI000041", "xref"), ("C2349136", "xref"), ("Vitamin C (unspecified)", "label_name"), ("CHEBI:21241", "xref")} <= kinds
    # provenance per source: the canonical entity is asserted by both documents, each alias by its own
    docs = {r[0] for r in g.conn.execute("SELECT document_id FROM entity_sources WHERE entity_id='CHEBI:176783'")}
    assert len(docs) == 3  # ontology, iDISK, notes
    # triples moved: the iDISK treats edge now hangs on the canonical entity; duplicate is_a edges became one
    treats = g.triples_of("CHEBI:176783", "out", "treats")
    assert [t["tail"] for t in treats] == ["scurvy"]
    parents = [t["tail_id"] for t in g.triples_of("CHEBI:176783", "out", "is_a")]
    assert parents == ["CHEBI:50523"]
    assert [t["tail_id"] for t in g.triples_of("CHEBI:29073", "out", "is_a")] == ["CHEBI:176783"]
    assert report["groups"] >= 3 and report["entities_merged"] >= 5 and report["document"]
    # noise: digit/punctuation aliases removed, entities named only "7" quarantined (not merged), 枣 kept
    assert not [a for a in g.iter_aliases() if a[2] in ("12", "-")]
    assert g.get_entity("FOODON:1") is None and g.get_entity("FOODON:2") is None
    assert g.entities_by_alias("枣")
    assert report["quarantined"] == 2 and report["noise_names_total"] == 0 and report["noise_aliases_removed"] == 2


def test_undo_restores_the_graph_exactly(tmp_path, sources):
    g, _ = _build(tmp_path / "g", sources)
    before = _state(g)
    integrate(g)
    assert _state(g) != before
    doc = integration_document(g)
    assert (doc["kind"], doc["format"]) == ("derived", "integration")
    out = undo_integration(g)
    assert out["undone"] == doc["id"] and _state(g) == before and integration_document(g) is None
    # integrating twice gives the same graph as integrating once
    integrate(g)
    once = _state(g)
    integrate(g)
    assert _state(g) == once and len(g.conn.execute("SELECT id FROM documents WHERE format='integration'").fetchall()) == 1


@pytest.mark.parametrize("source", ["onto", "dsi"])
def test_removing_a_source_after_integration_removes_exactly_what_only_it_supported(tmp_path, sources, source, capsys):
    """integrate, then `graph remove` a source ≡ build without that source, then integrate."""
    g, ids = _build(tmp_path / "after", sources)
    integrate(g)
    g.close()
    assert main(["graph", "remove", ids[source], "--graph", str(tmp_path / "after")]) == 0
    ref, _ = _build(tmp_path / "ref", sources, skip=source)
    integrate(ref)
    with Graph.open(tmp_path / "after") as after:
        assert _state(after) == _state(ref)
    ref.close()


def test_dry_run_cli_and_remove_of_the_integration_document(tmp_path, sources, capsys):
    g, _ = _build(tmp_path / "g", sources)
    before = _state(g)
    dry = integrate(g, IntegrateConfig(dry_run=True))
    assert dry["dry_run"] and dry["entities_merged"] >= 5 and _state(g) == before
    g.close()
    d = str(tmp_path / "g")
    assert main(["graph", "integrate", "--graph", d, "--dry-run", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["document"] is None
    assert main(["graph", "integrate", "--graph", d]) == 0
    out = capsys.readouterr().out
    assert "merged" in out and "vitamin C [CHEBI:176783, chemical] ← " in out
    with Graph.open(d) as g2:
        doc = integration_document(g2)["id"]
        assert main(["graph", "integrate", "--graph", d, "--dry-run"]) == 0  # sees the graph as it would be unintegrated
        assert "would merge" in capsys.readouterr().out and integration_document(g2)["id"] == doc
        assert main(["graph", "integrate", "--graph", d, "--undo", "--dry-run"]) == 0  # says what --undo would undo, undoes nothing
        assert f"would undo integration {doc}" in capsys.readouterr().out and integration_document(g2)["id"] == doc
    assert main(["graph", "remove", doc, "--graph", d]) == 0
    assert "integration undone" in capsys.readouterr().out
    with Graph.open(d) as g3:
        assert _state(g3) == before


def test_adding_a_source_reintegrates(tmp_path, sources, capsys):
    g, _ = _build(tmp_path / "g", sources, skip="dsi")
    integrate(g)
    g.close()
    assert main(["graph", "add", str(sources["dsi"]), "--graph", str(tmp_path / "g"), "--format", "kb-csv",
                 "-O", f"mapping={DSI_MAP['mapping']}"]) == 0
    with Graph.open(tmp_path / "g") as g2:
        assert [e["id"] for e in g2.iter_entities() if e["norm"] == "vitamin c"] == ["CHEBI:176783"]


def test_group_size_guard_and_settings(tmp_path, sources):
    g, _ = _build(tmp_path / "g", sources)
    report = integrate(g, IntegrateConfig(max_group=2, dry_run=True))
    assert any(big["size"] == 3 for big in report["too_large"])  # the three vitamin C / Lebanese ids
    no_groups = integrate(g, IntegrateConfig(type_groups=[], dry_run=True))
    assert not any(x["id"] == "DSI000041" for ex in no_groups["examples"] for x in ex["merged"])
    with pytest.raises(BencaoError, match="max_group"):
        integrate(g, IntegrateConfig(max_group=1))


def _noise_graph(path: Path) -> Graph:
    g = Graph.create(path)
    b = g.builder(source="notes", kind="book", format="notes", content_key="noise")
    eight = b.entity("8", "concept", id="N:8")
    b.triple(eight, "is_a", b.entity("number", "concept", id="N:number"), confidence=0.9, layer="book", origin="notes")
    b.triple(b.entity("sugar", "food", id="N:sugar"), "has_part", b.entity("%", "unit", id="N:pct"), confidence=0.9, layer="book", origin="notes")
    b.entity("X", "concept", id="N:X")
    b.entity("B", "vitamin", id="N:B", aliases=[("vitamin B", "synonym")])  # a noise name and a real one: kept
    g.commit(b)
    return g


def test_noise_only_entities_are_quarantined_counted_listed_and_restored(tmp_path, capsys):
    """iDISK removes entries whose name is noise: '8', '%' and 'X' leave the graph with their triples,
    the report counts them, --quarantined lists them, --undo brings them back."""
    g = _noise_graph(tmp_path / "g")
    before = _state(g)
    dry = integrate(g, IntegrateConfig(dry_run=True))
    assert dry["quarantined"] == 3 and _state(g) == before and "would quarantine 3 entities" in summary(dry)
    report = integrate(g)
    assert report["quarantined"] == 3 and report["quarantined_triples"] == 2 and report["document"]
    assert {q["name"] for q in report["quarantined_entities"]} == {"8", "%", "X"}
    assert all(g.get_entity(e) is None for e in ("N:8", "N:pct", "N:X"))
    assert g.get_entity("N:B") is not None and g.get_entity("N:sugar") is not None and not g.triples_of("N:sugar", "out")
    assert report["noise_names_total"] == 1  # "B" stays: it is also "vitamin B"
    assert "quarantined 3 entities whose every name is noise" in summary(report)
    listed = {e["name"]: e for e in quarantined(g)["entities"]}
    assert set(listed) == {"8", "%", "X"} and listed["%"]["triple_rows"] == [["N:sugar", "has_part", "N:pct"]]
    g.close()
    d = str(tmp_path / "g")
    assert main(["graph", "integrate", "--graph", d, "--quarantined", "--json"]) == 0
    assert {e["id"] for e in json.loads(capsys.readouterr().out)["entities"]} == {"N:8", "N:pct", "N:X"}
    assert main(["graph", "integrate", "--graph", d, "--quarantined"]) == 0
    assert "3 entities quarantined" in capsys.readouterr().out
    assert main(["graph", "integrate", "--graph", d, "--undo"]) == 0
    with Graph.open(d) as g2:
        assert _state(g2) == before
    with Graph.open(d) as g3:
        assert integrate(g3, IntegrateConfig(quarantine_noise=False))["quarantined"] == 0 and g3.get_entity("N:8") is not None


HONEY_OBO = """format-version: 1.2
ontology: uberon

[Term]
id: UBERON:0036016
name: honey
def: "A sweet viscid material elaborated out of the nectar of flowers in the honey sac of various bees." []
xref: UMLS:C0019906
"""


def test_cross_type_duplicates_merge_where_the_sources_say_so(tmp_path, capsys):
    """Honey in FoodOn (food), UBERON (anatomy) and iDISK (supplement ingredient): one CUI in three spellings
    merges them across types; a same-as statement does too; a shared name across types alone does not."""
    foodon = tmp_path / "foodon.jsonl"
    foodon.write_text(json.dumps({"id": "FOODON:03301062", "label": "honey", "xrefs": ["UMLS_CUI:C0019906"]}) + "\n"
                      + json.dumps({"id": "FOODON:00003598", "label": "honeydew melon"}) + "\n", encoding="utf-8")
    obo = tmp_path / "uberon.obo"
    obo.write_text(HONEY_OBO, encoding="utf-8")
    dsi = tmp_path / "dsi.csv"
    dsi.write_text("iDISK_ID,Name,CUI,Source Material,NHP_Name,DSLD_Name\nDSI000339,Honey,C0019906,Apis mellifera - Honey,Honey,Honey Bee | Honey\n"
                   "DSI000400,Honeydew melon,C9999999,,,\n", encoding="utf-8")
    g = Graph.create(tmp_path / "g")
    ingest_file(g, "foodon-jsonl", foodon)
    ingest_file(g, "obo", obo)
    ingest_file(g, "kb-csv", dsi, DSI_MAP)
    b = g.builder(source="notes", kind="book", format="notes", content_key="same-as")
    b.triple(b.entity("lotus seed", "food", id="N:lotus"), "exact_match", b.entity("莲子", "substance", id="N:lianzi"),
             confidence=1.0, layer="book", origin="notes")
    g.commit(b)
    report = integrate(g)
    honey = [e for e in g.iter_entities() if e["norm"] == "honey"]
    assert [e["id"] for e in honey] == ["FOODON:03301062"]  # FoodOn came first
    for old in ("UBERON:0036016", "DSI000339"):
        assert [e["id"] for e in g.entities_by_alias(old)] == ["FOODON:03301062"]
    assert g.get_entity("N:lianzi") is None and [e["id"] for e in g.entities_by_alias("莲子")] == ["N:lotus"]
    # the name alone across types merges nothing: honeydew melon (food) and Honeydew melon (supplement) stay two
    assert len([e for e in g.iter_entities() if e["norm"] == "honeydew melon"]) == 2
    assert report["cross_type"] == 2
    by_canon = {grp["canonical"]: grp for grp in report["cross_type_groups"]}
    assert {m["type"] for m in by_canon["FOODON:03301062"]["members"]} == {"food", "anatomy", "supplement_ingredient"}
    assert any("umls:c0019906" in why for why in by_canon["FOODON:03301062"]["because"])
    assert any("exact_match" in why for why in by_canon["N:lotus"]["because"])
    assert "merged across types" in summary(report)


def test_xref_key_reads_one_identifier_in_its_spellings():
    cui = {xref_key(x) for x in ("C0019906", "UMLS:C0019906", "umls_cui:C0019906", "http://linkedlifedata.com/resource/umls/id/C0019906",
                                 "https://identifiers.org/umls:C0019906")}
    assert cui == {"umls:c0019906"}
    assert {xref_key(x) for x in ("UBERON:0036016", "http://purl.obolibrary.org/obo/UBERON_0036016", "obo:UBERON_0036016")} == {"uberon:0036016"}
    assert xref_key("C001990") != xref_key("C0019906") and xref_key("DSI000339") == "dsi000339"


def test_noise_names():
    assert is_noise("12") and is_noise("-") and is_noise("x") and is_noise("3.5%")
    assert not is_noise("枣") and not is_noise("vitamin C") and not is_noise("B12")


@pytest.mark.slow
def test_sample_graph_has_one_vitamin_c(tmp_path, repo):
    """On the bundled sample: the three "Vitamin C" and the three "Lebanese" ids become one each."""
    from bencao.retrieval.build import build_graph, load_build_config

    cfg, root = load_build_config(repo / "configs" / "graph" / "sample.yaml", ["index=false"])
    build_graph(cfg, root, tmp_path / "s")
    with Graph.open(tmp_path / "s") as g:
        assert len([e for e in g.iter_entities() if e["norm"] == "vitamin c"]) == 3
        integrate(g)
        assert len([e for e in g.iter_entities() if e["norm"] == "vitamin c"]) == 1
        assert len([e for e in g.iter_entities() if e["norm"] == "lebanese"]) == 1
