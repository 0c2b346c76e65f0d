"""Issue 33 item 6: a large catalogue streams into its one transaction in bounded memory.

The catalogue loader calls ``DocumentBuilder.checkpoint`` between batches; past ``SPILL_ITEMS`` entities the
builder writes what it holds into the document's open write transaction and forgets it. Here the threshold is
made tiny so the bundled 106-row catalogue spills many times: what lands in the store must be exactly what
the all-at-once commit writes, a bad row after several spills must leave the graph as it was, and the
builder must hold no more than a spill's worth of rows at any time.
"""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest

from bencao.cli import main
from bencao.retrieval.graph import store

REPO = Path(__file__).resolve().parents[1]
CATALOG = REPO / "data/sample/mfh_catalog/mfh_catalog_106.csv"


def _content(graph: Path) -> dict[str, list]:
    """Every row of every table but the documents' timestamps and the generation counter."""
    out = {}
    with sqlite3.connect(graph / "graph.sqlite") as c:
        for table in ("sections", "snippets", "entities", "entity_sources", "aliases", "relations", "triples", "triple_sources", "links"):
            out[table] = sorted(map(repr, c.execute(f"SELECT * FROM {table}")))
        out["documents"] = sorted(map(repr, c.execute("SELECT id, source, title, kind, format, licence, status, meta FROM documents")))
    return out


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    """A graph holding a small FoodOn subset (the catalogue's entities resolve against something already there)."""
    d = tmp_path_factory.mktemp("stream")
    (d / "r.yaml").write_text(f"name: s\nroot: {REPO}\nindex: false\nsources:\n"
                              "  - format: foodon-jsonl\n    path: data/sample/foodon/foodon_demo_subset.jsonl\n", encoding="utf-8")
    assert main(["graph", "build", "-c", str(d / "r.yaml"), "-g", str(d / "g")]) == 0
    return (d / "g").resolve()


def _add(graph: Path, src: Path) -> int:
    return main(["graph", "add", "--graph", str(graph), "--format", "catalog-csv", str(src)])


def test_a_streamed_catalogue_stores_exactly_what_one_commit_stores(base, tmp_path, monkeypatch, capsys):
    whole = shutil.copytree(base, tmp_path / "whole")
    assert _add(whole, CATALOG) == 0
    said_whole = capsys.readouterr().out
    streamed = shutil.copytree(base, tmp_path / "streamed")
    spills = []
    real = store.Graph._spill
    monkeypatch.setattr(store, "SPILL_ITEMS", 7)
    monkeypatch.setattr(store.Graph, "_spill", lambda self, b: (spills.append(len(b.entities)), real(self, b)))
    monkeypatch.setattr("bencao.retrieval.ingest.catalog._BATCH", 5, raising=False)
    assert _add(streamed, CATALOG) == 0
    said_streamed = capsys.readouterr().out
    assert len(spills) >= 5, spills  # it did stream
    assert _content(streamed) == _content(whole)
    assert said_streamed == said_whole  # the same summary counts


def test_a_bad_row_after_several_spills_leaves_the_graph_as_it_was(base, tmp_path, monkeypatch, capsys):
    graph = shutil.copytree(base, tmp_path / "g")
    before = _content(graph)
    rows = CATALOG.read_text(encoding="utf-8").splitlines()
    bad = tmp_path / "bad.csv"
    bad.write_text("\n".join(rows[:90] + [rows[5].replace(rows[5].split(",")[1], "", 1).replace(rows[5].split(",")[2], "", 1)]
                             + rows[90:]) + "\n", encoding="utf-8")  # row 91: no base name
    spills = []
    real = store.Graph._spill
    monkeypatch.setattr(store, "SPILL_ITEMS", 7)
    monkeypatch.setattr(store.Graph, "_spill", lambda self, b: (spills.append(1), real(self, b)))
    monkeypatch.setattr("bencao.retrieval.ingest.catalog._BATCH", 5, raising=False)
    assert _add(graph, bad) == 2
    err = capsys.readouterr().err
    assert "empty base name" in err and str(bad) in err and err.count("\n") == 1, err
    assert len(spills) >= 5
    assert _content(graph) == before  # all or nothing
    assert _add(graph, CATALOG) == 0  # and the graph takes the good file afterwards (no transaction left open)


def test_a_catalogue_id_given_again_after_a_spill_with_another_name_is_still_refused(base, tmp_path, monkeypatch, capsys):
    graph = shutil.copytree(base, tmp_path / "g")
    rows = CATALOG.read_text(encoding="utf-8").splitlines()
    clash = rows[100].split(",")
    clash[0] = rows[3].split(",")[0]  # row 100 reuses row 3's catalogue id for another substance
    bad = tmp_path / "clash.csv"
    bad.write_text("\n".join(rows[:100] + [",".join(clash)] + rows[101:]) + "\n", encoding="utf-8")
    monkeypatch.setattr(store, "SPILL_ITEMS", 7)
    monkeypatch.setattr("bencao.retrieval.ingest.catalog._BATCH", 5, raising=False)
    before = _content(graph)
    assert _add(graph, bad) == 2
    err = capsys.readouterr().err
    assert f"catalogue id {clash[0]!r} is defined twice with different names" in err and "an earlier row" in err, err
    assert _content(graph) == before


def test_the_builder_holds_at_most_a_spill_of_entities(base, tmp_path, monkeypatch):
    from bencao.retrieval.ingest.registry import ingest_file

    graph = shutil.copytree(base, tmp_path / "g")
    held = []
    real = store.Graph._spill
    monkeypatch.setattr(store, "SPILL_ITEMS", 10)
    monkeypatch.setattr(store.Graph, "_spill", lambda self, b: (held.append(len(b.entities)), real(self, b), held.append(len(b.entities))))
    monkeypatch.setattr("bencao.retrieval.ingest.catalog._BATCH", 5, raising=False)
    with store.Graph.open(graph) as g:
        _doc, added, counts = ingest_file(g, "catalog-csv", CATALOG)
    assert added and counts["entities"] >= 106
    assert max(held) < 10 + 5 * 4 and held[1::2] == [0] * (len(held) // 2)  # a batch's worth at most, nothing after a spill


def _fill(b, rounds: int) -> None:
    """Entities named again in later batches with more attributes, a triple given again with a higher confidence,
    aliases and snippets: what a spill must merge, not duplicate."""
    sec = b.section("书")
    hub = b.entity("目录", "catalog", attributes={"kind": ["list"]})
    for r in range(rounds):
        for i in range(6):
            e = b.entity(f"物{i}", "substance", attributes={"seen": [f"round {r}"], **({"first": r} if r == 0 else {})},
                         aliases=[(f"别名{i}-{r}", "synonym")], description=f"描述{i}" if r == 1 else None)
            snip = b.snippet(sec, f"第{r}轮第{i}条。")
            b.triple(e, "listed_in", hub, confidence=0.5 + r / 10, layer="imported", origin="t", snippet=None)
            b.triple(e, "mentioned_in", hub, confidence=0.3, layer="book", origin="t", snippet=snip)
        b.checkpoint()


def test_entities_and_triples_given_again_after_a_spill_are_merged_like_one_commit(tmp_path, monkeypatch):
    views = {}
    for mode, spill_at in (("whole", 10**9), ("streamed", 3)):
        monkeypatch.setattr(store, "SPILL_ITEMS", spill_at)
        with store.Graph.create(tmp_path / mode) as g:
            b = g.builder(source="s", kind="catalog", content_key="k", format="test")
            _fill(b, 4)
            assert b.spilled == (mode == "streamed")
            assert g.commit(b)
        views[mode] = _content(tmp_path / mode)
    assert views["streamed"] == views["whole"]
    ent = [r for r in views["whole"]["entities"] if "物0" in r][0]
    assert "round 3" in ent and "描述0" in ent and '"first": 0' in ent  # every round's attributes merged, the description kept
