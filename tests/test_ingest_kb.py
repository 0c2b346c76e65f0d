"""Typed KB CSVs through mapping YAML files: iDISK entity and relation tables."""

from __future__ import annotations

from pathlib import Path

import pytest

from bencao.errors import BencaoError, ConfigError, InputError
from bencao.retrieval.graph.store import Graph
from bencao.retrieval.ingest.registry import ingest_file

REPO = Path(__file__).resolve().parents[1]
CONFIGS = REPO / "configs" / "graph"
FIX = Path(__file__).parent / "fixtures" / "kb"
DSI_MAP = {"mapping": str(CONFIGS / "idisk_dsi.yaml")}
DIS_MAP = {"mapping": str(CONFIGS / "idisk_disease.yaml")}
REL_MAP = {"mapping": str(CONFIGS / "idisk_relations.yaml")}


@pytest.fixture()
def graph(tmp_path: Path) -> Graph:
    return Graph.create(tmp_path / "g")


@pytest.fixture()
def dsi(sample_dir: Path) -> Path:
    return sample_dir / "idisk" / "DSI_names_400.csv"


def _with_entities(g: Graph, dsi: Path) -> None:
    ingest_file(g, "kb-csv", dsi, DSI_MAP)
    ingest_file(g, "kb-csv", FIX / "disease_sample.csv", DIS_MAP)


def test_dsi_entities_keep_kb_ids_aliases_and_attributes(graph: Graph, dsi: Path) -> None:
    _, added, counts = ingest_file(graph, "kb-csv", dsi, DSI_MAP)
    assert added and counts["entities"] == 400
    assert {e["type"] for e in graph.iter_entities()} == {"supplement_ingredient"}
    zea = graph.get_entity("DSI000001")
    assert zea["name"] == "Zea mays"
    assert zea["attributes"] == {"cui": "C0010028", "source_material": ["Zea mays - Seed", "Pollen extract"]}
    aliases = {(a["alias"], a["kind"]) for a in graph.aliases_of("DSI000001")}
    assert {("C0010028", "xref"), ("Maize", "synonym"), ("Corn Silk", "label_name"), ("Corn", "label_name"), ("DSI000001", "xref")} <= aliases
    assert [e["id"] for e in graph.entities_by_alias("saw palmetto")] == ["DSI000000"]
    assert [e["id"] for e in graph.entities_by_alias("C4082853")] == ["DSI000000"]
    # A row with an empty CUI simply has no CUI alias/attribute.
    assert "cui" not in graph.get_entity("DSI000003")["attributes"]


def test_relations_with_source_rating_and_confidence(graph: Graph, dsi: Path) -> None:
    _with_entities(graph, dsi)
    _, added, counts = ingest_file(graph, "kb-csv", FIX / "dsi_dis_sample.csv", REL_MAP)
    assert added and counts["triples"] == 5
    rel = {r["name"]: r for r in graph.relations()}["is_effective_for"]
    assert (rel["head_type"], rel["tail_type"]) == ("supplement_ingredient", "disease")
    got = {(t["head_id"], t["tail_id"]): t for t in graph.iter_triples(relation="is_effective_for")}
    assert set(got) == {("DSI000007", "DIS000101"), ("DSI000008", "DIS000101"), ("DSI000009", "DIS000102"),
                        ("DSI000006", "DIS000103"), ("DSI000000", "DIS000104")}
    oa = got[("DSI000007", "DIS000101")]
    assert (oa["confidence"], oa["layer"], oa["attributes"]) == (0.75, "imported", {"source": "NMCD", "rating": "Possibly Effective"})
    assert got[("DSI000000", "DIS000104")]["confidence"] == 0.9  # "likely effective" matches case-insensitively
    assert got[("DSI000006", "DIS000103")]["confidence"] == 0.4
    # Quoted multi-line cell with commas and doubled quotes survives.
    assert got[("DSI000008", "DIS000101")]["attributes"]["source"] == 'NMCD\n(Natural Medicines, monograph "Chondroitin sulfate")'
    assert [e["name"] for e in graph.entities_by_alias("失眠")] == ["Insomnia"]


def test_relation_to_unknown_entity_names_file_and_row(graph: Graph, dsi: Path, tmp_path: Path) -> None:
    ingest_file(graph, "kb-csv", dsi, DSI_MAP)  # diseases not ingested
    before = graph.counts()
    with pytest.raises(InputError) as err:
        ingest_file(graph, "kb-csv", FIX / "dsi_dis_sample.csv", REL_MAP)
    assert str(err.value).startswith(f"{FIX / 'dsi_dis_sample.csv'}:row 1 (line 2): not an entity in the graph: DIS_ID 'DIS000101'")
    assert graph.counts() == before


def test_on_missing_skip_counts_skipped_rows(graph: Graph, dsi: Path, tmp_path: Path) -> None:
    _with_entities(graph, dsi)
    mapping = tmp_path / "skip.yaml"
    mapping.write_text((CONFIGS / "idisk_relations.yaml").read_text(encoding="utf-8").replace("on_missing: error", "on_missing: skip"),
                       encoding="utf-8")
    rel = tmp_path / "rel.csv"
    rel.write_text("DSI_ID,DIS_ID,Source,Rating\nDSI000007,DIS000101,NMCD,Effective\nDSI999999,DIS000101,NMCD,Effective\n"
                   "DSI000009,DIS000999,NMCD,Effective\n", encoding="utf-8")
    doc_id, _, counts = ingest_file(graph, "kb-csv", rel, {"mapping": str(mapping)})
    assert counts["triples"] == 1
    assert graph.get_document(doc_id)["meta"]["rows_skipped_missing_entity"] == 2


def test_unknown_rating_without_default_is_an_error(graph: Graph, dsi: Path, tmp_path: Path) -> None:
    _with_entities(graph, dsi)
    rel = tmp_path / "rel.csv"
    rel.write_text("DSI_ID,DIS_ID,Source,Rating\nDSI000007,DIS000101,NMCD,Effective\nDSI000009,DIS000102,NMCD,Possibly Ineffective\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"rel\.csv:row 2 \(line 3\): rating 'Possibly Ineffective'"):
        ingest_file(graph, "kb-csv", rel, REL_MAP)


def test_edited_mapping_reingests(graph: Graph, dsi: Path, tmp_path: Path) -> None:
    mapping = tmp_path / "m.yaml"
    mapping.write_text((CONFIGS / "idisk_disease.yaml").read_text(encoding="utf-8"), encoding="utf-8")
    first, added, _ = ingest_file(graph, "kb-csv", FIX / "disease_sample.csv", {"mapping": str(mapping)})
    same, added_again, _ = ingest_file(graph, "kb-csv", FIX / "disease_sample.csv", {"mapping": str(mapping)})
    assert added and not added_again and same == first
    mapping.write_text(mapping.read_text(encoding="utf-8").replace("kind: synonym", "kind: label_name"), encoding="utf-8")
    second, added2, _ = ingest_file(graph, "kb-csv", FIX / "disease_sample.csv", {"mapping": str(mapping)})
    assert added2 and second != first
    graph.remove_document(first)
    assert {(a["alias"], a["kind"]) for a in graph.aliases_of("DIS000102")} == {
        ("Insomnia", "name"), ("DIS000102", "xref"), ("Sleeplessness", "label_name"), ("失眠", "label_name")}


def test_type_column_and_confidence_column(graph: Graph, tmp_path: Path) -> None:
    ents = tmp_path / "e.csv"
    ents.write_text('id,name,kind\nK1,"Ginkgo biloba",herb\nK2,"Memory, impaired",symptom\n', encoding="utf-8")
    em = tmp_path / "e.yaml"
    em.write_text("entities:\n  id_column: id\n  name_column: name\n  type_column: kind\n", encoding="utf-8")
    rels = tmp_path / "r.csv"
    rels.write_text("h,t,rel,conf\nK1,K2,treats,0.6\n", encoding="utf-8")
    rm = tmp_path / "r.yaml"
    rm.write_text("relations:\n  head_column: h\n  tail_column: t\n  relation_column: rel\n  confidence_column: conf\n", encoding="utf-8")
    ingest_file(graph, "kb-csv", ents, {"mapping": str(em)})
    ingest_file(graph, "kb-csv", rels, {"mapping": str(rm)})
    assert graph.get_entity("K2")["type"] == "symptom"
    (t,) = graph.triples_of("K1", "out")
    assert (t["relation"], t["tail"], t["confidence"]) == ("treats", "Memory, impaired", 0.6)


def test_mapping_errors_are_one_line(graph: Graph, dsi: Path, tmp_path: Path) -> None:
    with pytest.raises(InputError, match="needs the option mapping="):
        ingest_file(graph, "kb-csv", dsi, {})
    with pytest.raises(ConfigError, match="mapping file not found"):
        ingest_file(graph, "kb-csv", dsi, {"mapping": str(tmp_path / "nope.yaml")})
    both = tmp_path / "both.yaml"
    both.write_text("entities:\n  id_column: iDISK_ID\n  name_column: Name\n  type: x\n  type_column: y\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="exactly one of 'type' or 'type_column'"):
        ingest_file(graph, "kb-csv", dsi, {"mapping": str(both)})
    typo = tmp_path / "typo.yaml"
    typo.write_text("entities:\n  id_column: iDISK_ID\n  name_colum: Name\n  type: x\n", encoding="utf-8")
    with pytest.raises(BencaoError, match="unknown key"):
        ingest_file(graph, "kb-csv", dsi, {"mapping": str(typo)})
    wrong_col = tmp_path / "wrong.yaml"
    wrong_col.write_text("entities:\n  id_column: iDISK_ID\n  name_column: Label\n  type: x\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"DSI_names_400\.csv:line 1: missing column 'Label' \(name_column\)"):
        ingest_file(graph, "kb-csv", dsi, {"mapping": str(wrong_col)})
