"""OBO and OWL ontologies through pronto: terms, synonyms, xrefs, definitions, is_a; obsolete skipped."""

from __future__ import annotations

from pathlib import Path

import pytest

from bencao.errors import InputError
from bencao.retrieval.graph.store import Graph
from bencao.retrieval.ingest.registry import ingest_file

FIX = Path(__file__).parent / "fixtures" / "ontology"
OBO = FIX / "foodon_garlic_sugar.obo"
OWL = FIX / "foodon_lychee_spices.owl"


@pytest.fixture()
def graph(tmp_path: Path) -> Graph:
    return Graph.create(tmp_path / "g")


def _is_a(g: Graph, curie: str) -> set[str]:
    return {t["tail_id"] for t in g.triples_of(curie, "out", relation="is_a")}


def test_obo_terms_become_entities_with_curie_ids_types_and_descriptions(graph: Graph) -> None:
    doc_id, added, counts = ingest_file(graph, "obo", OBO)
    assert added
    assert counts["entities"] == 43  # 44 terms in the file, one obsolete
    garlic = graph.get_entity("FOODON:00003582")
    assert garlic["name"] == "garlic bulb"
    assert garlic["type"] == "food"
    assert garlic["description"] == "A bulb of a garlic plant (Allium sativum)"
    assert graph.get_entity("NCBITaxon:4682")["type"] == "organism"
    assert graph.get_entity("CHEBI:15377")["type"] == "chemical"
    assert graph.get_entity("PO:0025356")["type"] == "plant_part"
    assert graph.get_document(doc_id)["kind"] == "ontology"


def test_obo_synonyms_and_xrefs_become_aliases(graph: Graph) -> None:
    ingest_file(graph, "obo", OBO)
    kinds = {(a["alias"], a["kind"]) for a in graph.aliases_of("CHEBI:15377")}
    assert {("oxidane", "synonym"), ("CAS:7732-18-5", "xref"), ("KEGG:C00001", "xref"), ("CHEBI:15377", "xref")} <= kinds
    # Broad/narrow synonyms and non-Latin scripts are kept as written.
    bulb = {a["alias"] for a in graph.aliases_of("PO:0025356") if a["kind"] == "synonym"}
    assert bulb == {"bulblet", "bulbo", "diaspore", "球根、鱗茎"}
    assert [e["id"] for e in graph.entities_by_alias("球根、鳞茎")] == ["PO:0025356"]  # traditional 鱗 = simplified 鳞
    # "garlic" is a synonym of both the bulb and the plant: the alias finds both.
    assert {e["id"] for e in graph.entities_by_alias("Garlic")} == {"FOODON:00003582", "NCBITaxon:4682"}


def test_obo_superclasses_are_is_a_triples_with_confidence_one(graph: Graph) -> None:
    ingest_file(graph, "obo", OBO)
    assert _is_a(graph, "FOODON:00003582") == {"PO:0025356", "FOODON:00001895"}
    assert _is_a(graph, "CHEBI:15377") == {"CDNO:0000001", "CHEBI:33693", "CHEBI:37176", "CHEBI:52625"}
    t = graph.triples_of("FOODON:03420156", "out", relation="is_a")[0]
    assert (t["tail"], t["confidence"], t["layer"]) == ("sucrose", 1.0, "imported")


def test_obsolete_terms_are_skipped(graph: Graph) -> None:
    doc_id, _, _ = ingest_file(graph, "obo", OBO)
    assert graph.get_entity("FOODON:00001026") is None
    assert graph.entities_by_alias("obsolete: cane sugar") == []
    assert graph.get_document(doc_id)["meta"]["obsolete_skipped"] == 1


def test_owl_classes_synonyms_xrefs_and_subclass_of(graph: Graph) -> None:
    _, _, counts = ingest_file(graph, "owl", OWL)
    assert counts["entities"] == 10  # 11 classes, one deprecated
    lychee = graph.get_entity("FOODON:00003099")
    assert (lychee["name"], lychee["type"]) == ("lychee", "food")
    assert lychee["description"] == "A drupe fruit of a lychee tree (Litchi chinensis) ."
    # The someValuesFrom restriction is not a superclass; the two named parents are.
    assert _is_a(graph, "FOODON:00003099") == {"FOODON:00002006", "PO:0030103"}
    assert [e["id"] for e in graph.entities_by_alias("荔枝")] == ["FOODON:00003099"]
    assert {("CAS:7732-18-5", "xref"), ("oxidane", "synonym")} <= {(a["alias"], a["kind"]) for a in graph.aliases_of("CHEBI:15377")}
    assert graph.get_entity("FOODON:00001026") is None


def test_reingesting_is_a_noop_and_remove_restores(graph: Graph) -> None:
    doc_id, added, _ = ingest_file(graph, "owl", OWL)
    before = graph.counts()
    again, added_again, _ = ingest_file(graph, "owl", OWL)
    assert (again, added_again) == (doc_id, False)
    assert graph.counts() == before
    graph.remove_document(doc_id)
    assert graph.counts()["entities"] == 0 and graph.counts()["triples"] == 0


def test_malformed_obo_names_file_and_line(graph: Graph, tmp_path: Path) -> None:
    text = OBO.read_text(encoding="utf-8").replace("is_a: CHEBI:33693 ! oxygen hydride", "is_a CHEBI:33693", 1)
    bad = tmp_path / "bad.obo"
    bad.write_text(text, encoding="utf-8")
    line = text.splitlines().index("is_a CHEBI:33693") + 1
    with pytest.raises(InputError) as err:
        ingest_file(graph, "obo", bad)
    assert str(err.value).startswith(f"{bad}:line {line}: malformed OBO")
    assert graph.counts()["entities"] == 0


def test_malformed_owl_names_file_and_line(graph: Graph, tmp_path: Path) -> None:
    ingest_file(graph, "obo", OBO)
    before = graph.counts()
    lines = OWL.read_text(encoding="utf-8").splitlines()
    bad = tmp_path / "bad.owl"
    bad.write_text("\n".join(lines[:40]) + "\n", encoding="utf-8")  # truncated: unclosed elements
    with pytest.raises(InputError) as err:
        ingest_file(graph, "owl", bad)
    assert str(err.value).startswith(f"{bad}:line ")
    assert "malformed OWL" in str(err.value)
    assert graph.counts() == before  # nothing already stored is lost


def test_undeclared_parent_is_refused_with_its_id(graph: Graph, tmp_path: Path) -> None:
    bad = tmp_path / "dangling.obo"
    bad.write_text(OBO.read_text(encoding="utf-8").replace("id: PO:0009006\nname: shoot system\n", "id: PO:0009007\nname: portion of plant tissue\n"),
                   encoding="utf-8")
    with pytest.raises(InputError, match=r"dangling\.obo: term PO:0009006 is referenced"):
        ingest_file(graph, "obo", bad)


def test_not_an_ontology(graph: Graph, tmp_path: Path) -> None:
    junk = tmp_path / "notes.obo"
    junk.write_text("大枣 味甘平\n", encoding="utf-8")
    with pytest.raises(InputError, match="notes.obo: not an OBO file"):
        ingest_file(graph, "obo", junk)
