"""Neo4j export: neo4j-admin headers, counts equal to the graph, CSV quoting of hard Chinese text, scripts."""

from __future__ import annotations

import csv
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from bencao.retrieval.graph.export_neo4j import ARRAY_DELIMITER, export_command, export_neo4j, label_for_type, rel_type
from bencao.retrieval.graph.store import Graph
from bencao.retrieval.ingest.registry import ingest_file

HARD_NAME = '枣（大枣, "黑枣"）第二行'  # names may not hold control characters (newlines are tested in text)


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory, sample_dir: Path) -> tuple[Graph, Path, dict[str, int]]:
    root = tmp_path_factory.mktemp("neo4j")
    g = Graph.create(root / "g")
    ingest_file(g, "catalog-csv", sample_dir / "mfh_catalog" / "mfh_catalog_106.csv")
    ingest_file(g, "recipes-jsonl", sample_dir / "tcm_classics" / "shiliaofang_recipes.jsonl")
    b = g.builder(source="hard.txt", kind="book", format="test", content_key="hard")
    book = b.section("测试书")
    snip = b.snippet(b.section("卷一", parent=book), '他说："甘, 平"。\n第二行')
    hard = b.entity(HARD_NAME, "plant_part", description='含 "引号", 逗号\n与换行')
    zao = b.entity("枣", "substance")
    b.triple(hard, "主治", zao, confidence=0.5, layer="book", origin="test", snippet=snip)
    b.link(hard, zao, "same_as", 0.8)
    g.commit(b)
    out = root / "out"
    return g, out, export_neo4j(g, out)


def _read(path: Path) -> list[dict[str, str]]:
    with path.open(encoding="utf-8", newline="") as fh:
        return list(csv.DictReader(fh))


def test_headers_are_neo4j_admin_headers(exported) -> None:
    _, out, _ = exported
    first = lambda name: (out / name).read_text(encoding="utf-8").split("\n", 1)[0]  # noqa: E731
    assert first("entities.csv") == "id:ID(Entity),:LABEL,name,norm,type,layer,description,aliases:string[],attributes"
    assert first("documents.csv") == "id:ID(Document),:LABEL,source,title,kind,format,licence,added_at"
    assert first("sections.csv") == "id:ID(Section),:LABEL,title,level:int,path:string[],ord:int,document_id"
    assert first("snippets.csv") == "id:ID(Snippet),:LABEL,text,n_tokens:int,ord:int,document_id,section_id"
    assert first("document_sections.csv") == ":START_ID(Document),:END_ID(Section),:TYPE"
    assert first("section_sections.csv") == ":START_ID(Section),:END_ID(Section),:TYPE"
    assert first("section_snippets.csv") == ":START_ID(Section),:END_ID(Snippet),:TYPE"
    assert first("triples.csv") == ":START_ID(Entity),:END_ID(Entity),:TYPE,id,relation,confidence:float,layer,origin,attributes"
    assert first("supports.csv") == ":START_ID(Snippet),:END_ID(Entity),:TYPE,triple_id,relation,kind,confidence:float,layer"
    assert first("asserts.csv") == ":START_ID(Document),:END_ID(Entity),:TYPE,triple_id,relation,kind,confidence:float,layer"
    assert first("links.csv") == ":START_ID(Entity),:END_ID(Entity),:TYPE,kind,score:float"


def test_row_counts_equal_graph_counts(exported) -> None:
    g, out, counts = exported
    c = g.counts()
    assert counts["entities.csv"] == len(_read(out / "entities.csv")) == c["entities"]
    assert counts["documents.csv"] == c["documents"]
    assert counts["sections.csv"] == c["sections"] == counts["document_sections.csv"] + counts["section_sections.csv"]
    assert counts["snippets.csv"] == c["snippets"] == counts["section_snippets.csv"]
    assert counts["triples.csv"] == len(_read(out / "triples.csv")) == c["triples"]
    assert counts["supports.csv"] + counts["asserts.csv"] == c["triple_sources"]
    assert counts["asserts.csv"] == 120  # the catalogue's curated rows have no snippet: 113 listed_in + 7 variant_of
    assert counts["links.csv"] == c["links"] == 1


def test_every_relationship_end_is_an_exported_node(exported) -> None:
    _, out, _ = exported
    files = {"Entity": "entities.csv", "Document": "documents.csv", "Section": "sections.csv", "Snippet": "snippets.csv"}
    ids = {group: {r[f"id:ID({group})"] for r in _read(out / name)} for group, name in files.items()}
    for name in ("document_sections", "section_sections", "section_snippets", "triples", "supports", "asserts", "links"):
        for row in _read(out / f"{name}.csv"):
            for col, val in row.items():
                m = re.fullmatch(r":(START|END)_ID\((\w+)\)", col)
                if m:
                    assert val in ids[m.group(2)], (name, col, val)


def test_chinese_commas_quotes_and_newlines_round_trip(exported) -> None:
    g, out, _ = exported
    (row,) = [r for r in _read(out / "entities.csv") if r["name"] == HARD_NAME]
    assert row["description"] == '含 "引号", 逗号\n与换行'
    assert row[":LABEL"].split(ARRAY_DELIMITER) == ["Entity", "PlantPart"]
    assert HARD_NAME in row["aliases:string[]"].split(ARRAY_DELIMITER)
    snippets = {r["text"] for r in _read(out / "snippets.csv")}
    assert '他说："甘, 平"。\n第二行' in snippets
    (t,) = [r for r in _read(out / "triples.csv") if r["relation"] == "主治"]
    assert (t[":TYPE"], t["confidence:float"], t[":START_ID(Entity)"]) == ("主治", "0.5", row["id:ID(Entity)"])
    (sup,) = [r for r in _read(out / "supports.csv") if r["triple_id"] == t["id"]]
    assert sup[":TYPE"] == "SUPPORTS" and sup[":END_ID(Entity)"] == row["id:ID(Entity)"]
    zao = _read(out / "entities.csv")
    assert any(r["name"] == "枣" and r[":LABEL"].split(ARRAY_DELIMITER) == ["Entity", "Substance"] for r in zao)


def test_relationship_types_and_macro_tree(exported) -> None:
    _, out, _ = exported
    types = {r[":TYPE"] for r in _read(out / "triples.csv")}
    assert types == {"LISTED_IN", "VARIANT_OF", "HAS_INGREDIENT", "TREATS", "主治"}
    assert {r[":TYPE"] for r in _read(out / "links.csv")} == {"SAME_AS"}
    roots = {r["title"] for r in _read(out / "sections.csv") if r["level:int"] == "0"}
    assert roots == {"食疗方", "测试书"}
    path = next(r["path:string[]"] for r in _read(out / "sections.csv") if r["title"] == "萝卜粥")
    assert path.split(ARRAY_DELIMITER) == ["食疗方", "第一类·植物类食疗方", "萝卜粥"]


def test_import_script_and_cypher(exported) -> None:
    _, out, _ = exported
    sh = (out / "import.sh").read_text(encoding="utf-8")
    assert 'neo4j-admin database import full "$DB"' in sh
    for flag in ("--multiline-fields=true", "--array-delimiter=U+001F", "--id-type=string", "--overwrite-destination=true"):
        assert flag in sh
    assert sh.count("--nodes=") == 4 and sh.count("--relationships=") == 7
    assert '--nodes="$DIR/entities.csv"' in sh and '--relationships="$DIR/triples.csv"' in sh
    if shutil.which("bash"):
        assert subprocess.run(["bash", "-n", str(out / "import.sh")]).returncode == 0
    cy = (out / "load.cypher").read_text(encoding="utf-8")
    assert "CREATE CONSTRAINT entity_id IF NOT EXISTS FOR (n:Entity) REQUIRE n.id IS UNIQUE;" in cy
    for rt in ("LISTED_IN", "VARIANT_OF", "HAS_INGREDIENT", "TREATS", "主治"):
        assert f"MERGE (h)-[r:`{rt}` {{id: row.id}}]->(t)" in cy
    assert "MATCH (n:Entity {type: 'plant_part'}) SET n:`PlantPart`;" in cy
    # 4 node files, 3 macro-tree files, one per relationship type (5), supports + asserts, links
    assert cy.count("LOAD CSV WITH HEADERS") == 4 + 3 + 5 + 2 + 1


@pytest.mark.parametrize("type_, label", [("substance", "Substance"), ("supplement_ingredient", "SupplementIngredient"),
                                          ("plant_part", "PlantPart"), ("方剂", "方剂"), ("3d", "T3d"), ("", "Concept")])
def test_label_for_type(type_: str, label: str) -> None:
    assert label_for_type(type_) == label


@pytest.mark.parametrize("relation, typ", [("has_ingredient", "HAS_INGREDIENT"), ("is-a", "IS_A"), ("same as", "SAME_AS"),
                                           ("主治", "主治"), ("1to1", "R_1TO1"), ("---", "RELATED_TO")])
def test_rel_type(relation: str, typ: str) -> None:
    assert rel_type(relation) == typ


def test_export_command(exported, tmp_path: Path) -> None:
    g, _, _ = exported
    app = typer.Typer()
    app.command("export")(export_command)
    app.command("noop")(lambda: None)
    out = tmp_path / "cli"
    res = CliRunner().invoke(app, ["export", "--graph", str(g.dir), "--format", "neo4j", "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert (out / "entities.csv").exists() and (out / "load.cypher").exists()
    assert f"entities.csv\t{g.counts()['entities']}" in res.output
    bad = CliRunner().invoke(app, ["export", "--graph", str(g.dir), "--format", "graphml", "--out", str(out)])
    assert bad.exit_code != 0 and "unknown export format 'graphml'" in str(bad.exception)
