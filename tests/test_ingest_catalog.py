"""The medicine-food homology catalogue CSV: one substance per row, aliases, attributes, listed_in."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from bencao.errors import InputError
from bencao.retrieval.graph.store import Graph
from bencao.retrieval.ingest.registry import ingest_file


@pytest.fixture()
def mfh(sample_dir: Path) -> Path:
    return sample_dir / "mfh_catalog" / "mfh_catalog_106.csv"


@pytest.fixture()
def graph(tmp_path: Path) -> Graph:
    return Graph.create(tmp_path / "g")


def _one(g: Graph, alias: str) -> dict:
    found = g.entities_by_alias(alias)
    assert len(found) == 1, (alias, found)
    return found[0]


def test_every_row_is_a_substance_listed_in_the_catalogue(graph: Graph, mfh: Path) -> None:
    doc_id, added, counts = ingest_file(graph, "catalog-csv", mfh)
    assert added
    substances = list(graph.iter_entities("substance"))
    items = [e for e in substances if "variant_of" not in e["attributes"]]
    assert len(items) == 106 and len({e["attributes"]["mfh_id"] for e in items}) == 106
    # 枣（大枣、酸枣、黑枣）, 姜（生姜、干姜）, 杏仁（甜、苦）: 7 listed kinds of their own
    assert sorted(e["name"] for e in substances if "variant_of" in e["attributes"]) == sorted(["大枣", "酸枣", "黑枣", "生姜", "干姜", "甜杏仁", "苦杏仁"])
    catalog = _one(graph, "药食同源目录")
    assert catalog["type"] == "catalog"
    listed = graph.triples_of(catalog["id"], "in", relation="listed_in")
    assert len(listed) == 113
    assert {(t["confidence"], t["layer"]) for t in listed} == {(1.0, "imported")}
    assert graph.get_document(doc_id)["kind"] == "catalog"


def test_names_variants_and_ids_find_the_entity(graph: Graph, mfh: Path) -> None:
    ingest_file(graph, "catalog-csv", mfh)
    zao = _one(graph, "枣")
    assert zao["name"] == "枣" and zao["type"] == "substance"
    aliases = {(a["alias"], a["kind"]) for a in graph.aliases_of(zao["id"])}
    assert {("枣（大枣、酸枣、黑枣）", "synonym"), ("MFH037", "xref")} <= aliases
    # Traditional and simplified forms of a name find the same entity.
    for form in ("棗", "枣（大枣、酸枣、黑枣）", "mfh037"):
        assert _one(graph, form)["id"] == zao["id"]
    # Listed kinds are distinct materia medica: each is its own entity, a variant_of the item.
    kinds = {t["head"] for t in graph.triples_of(zao["id"], "in", relation="variant_of")}
    assert kinds == {"大枣", "酸枣", "黑枣"}
    dazao = _one(graph, "大棗")
    assert dazao["name"] == "大枣" and dazao["id"] != _one(graph, "酸枣")["id"]
    assert {t["tail"] for t in graph.triples_of(dazao["id"], "out")} == {"枣", "药食同源目录"}
    # The catalogue id is an alias, not the entity id: book entities of the same name merge by name.
    assert zao["id"] != "MFH037"
    assert zao["attributes"]["mfh_id"] == "MFH037"
    assert zao["attributes"]["date"] == "2002-02-28"


def test_one_character_variants_qualify_the_base_name(graph: Graph, mfh: Path) -> None:
    ingest_file(graph, "catalog-csv", mfh)
    xingren = _one(graph, "杏仁")
    assert {t["head"] for t in graph.triples_of(xingren["id"], "in", relation="variant_of")} == {"苦杏仁", "甜杏仁"}
    assert graph.entities_by_alias("苦") == []  # a flavour, never an alias of 杏仁
    assert _one(graph, "桂圆")["name"] == "龙眼肉"


def test_restrictions_and_provenance_are_attributes(graph: Graph, mfh: Path) -> None:
    ingest_file(graph, "catalog-csv", mfh)
    danggui = _one(graph, "当归")["attributes"]
    assert danggui["note"].startswith("限作为香辛料和调味品使用")
    assert danggui["batch"] == "2019"
    assert danggui["source_url"].startswith("https://www.nhc.gov.cn/")
    assert "当归等6种" in danggui["announcement"]
    t = graph.triples_of(_one(graph, "当归")["id"], "out", relation="listed_in")[0]
    assert t["attributes"] == {"mfh_id": "MFH088", "batch": "2019", "date": "2019-11-25"}


def test_column_names_are_configurable(graph: Graph, tmp_path: Path) -> None:
    path = tmp_path / "list.csv"
    path.write_text("编号,名称,基名,别名\nX1,姜（生姜、干姜）,姜,生姜/干姜\n", encoding="utf-8")
    cols = {"id": "编号", "name": "名称", "base_name": "基名", "variants": "别名",
            "batch": "", "order": "", "announcement": "", "date": "", "source_url": "", "note": ""}
    ingest_file(graph, "catalog-csv", path, {"columns": cols, "variant_separator": "/", "catalog": "测试目录"})
    jiang = _one(graph, "薑")
    assert jiang["name"] == "姜" and jiang["attributes"] == {"编号": "X1"}
    assert graph.triples_of(jiang["id"], "out")[0]["tail"] == "测试目录"
    ganjiang = _one(graph, "干薑")
    assert ganjiang["name"] == "干姜"
    assert {(t["relation"], t["tail"]) for t in graph.triples_of(ganjiang["id"], "out")} == {("variant_of", "姜"), ("listed_in", "测试目录")}


def test_missing_column_names_file_and_column(graph: Graph, mfh: Path, tmp_path: Path) -> None:
    rows = list(csv.reader(mfh.open(encoding="utf-8")))
    drop = rows[0].index("base_name_zh")
    path = tmp_path / "no_base.csv"
    with path.open("w", encoding="utf-8", newline="") as fh:
        csv.writer(fh).writerows([r[:drop] + r[drop + 1:] for r in rows])
    with pytest.raises(InputError, match=r"no_base\.csv:line 1: missing column 'base_name_zh'"):
        ingest_file(graph, "catalog-csv", path)


def test_wrong_field_count_names_file_and_row(graph: Graph, mfh: Path, tmp_path: Path) -> None:
    ingest_file(graph, "catalog-csv", mfh)
    before = graph.counts()
    lines = mfh.read_text(encoding="utf-8").splitlines()
    lines[5] = lines[5] + ",extra"  # data row 5
    path = tmp_path / "broken.csv"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(InputError) as err:
        ingest_file(graph, "catalog-csv", path)
    assert str(err.value) == f"{path}:row 5 (line 6): expected 10 fields as in the header, got 11"
    assert graph.counts() == before


def test_unknown_option_key_is_refused(graph: Graph, mfh: Path) -> None:
    with pytest.raises(InputError, match="unknown key"):
        ingest_file(graph, "catalog-csv", mfh, {"columns": {"idd": "mfh_id"}})
