"""The graph store: content-hash ids, idempotent ingestion, reference-counted removal, bad input."""

from __future__ import annotations

import json
import sqlite3

import pytest

from bencao.errors import BencaoError, InputError
from bencao.retrieval.graph import Graph
from bencao.retrieval.ingest import ingest_file

SUBSET = "data/sample/foodon/foodon_demo_subset.jsonl"


@pytest.fixture()
def subset(repo):
    return repo / SUBSET


def _ids(g: Graph, table: str) -> list[str]:
    return [r[0] for r in g.conn.execute(f"SELECT id FROM {table} ORDER BY id")]


def test_store_pragmas_and_manifest(tmp_path):
    g = Graph.create(tmp_path / "g")
    assert g.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert g.conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
    m = json.loads((tmp_path / "g" / "manifest.json").read_text())
    assert m["schema_version"] == 1 and m["counts"]["documents"] == 0


def test_open_missing_graph_is_a_clear_error(tmp_path):
    with pytest.raises(BencaoError, match="no graph here"):
        Graph.open(tmp_path / "nowhere")


def test_two_builds_give_identical_ids(tmp_path, subset):
    graphs = []
    for name in ("a", "b"):
        g = Graph.create(tmp_path / name)
        ingest_file(g, "foodon-jsonl", subset)
        graphs.append(g)
    a, b = graphs
    for table in ("documents", "entities", "triples"):
        assert _ids(a, table) == _ids(b, table)
        assert len(_ids(a, table)) > 0
    assert a.counts() == b.counts()


def test_reingest_is_a_noop(tmp_path, subset):
    g = Graph.create(tmp_path / "g")
    doc, added, _ = ingest_file(g, "foodon-jsonl", subset)
    before = g.counts()
    doc2, added2, _ = ingest_file(g, "foodon-jsonl", subset)
    assert (doc2, added, added2) == (doc, True, False)
    assert g.counts() == before


def test_foodon_terms_become_entities_aliases_and_is_a(tmp_path, subset):
    g = Graph.create(tmp_path / "g")
    ingest_file(g, "foodon-jsonl", subset)
    onion = g.get_entity("FOODON:03316347")
    assert onion["name"] == "onion" and onion["description"].startswith("A bulb of an onion plant")
    aliases = {a["alias"] for a in g.aliases_of("FOODON:03316347")}
    assert {"onion", "bulb onion", "common onion", "FOODON:03316347"} <= aliases
    parents = {t["tail_id"] for t in g.triples_of("FOODON:03316347", "out", relation="is_a")}
    assert "FOODON:00002069" in parents or "PO:0025356" in parents
    t = g.triples_of("FOODON:03316347", "out", relation="is_a")[0]
    assert t["confidence"] == 1.0 and t["layer"] == "imported"


def _write_terms(path, terms):
    path.write_text("".join(json.dumps(t, ensure_ascii=False) + "\n" for t in terms), encoding="utf-8")


def test_remove_keeps_what_another_document_supports(tmp_path):
    g = Graph.create(tmp_path / "g")
    shared = [{"id": "X:1", "label": "jujube", "synonyms": ["大枣"], "parents": ["X:0"]}, {"id": "X:0", "label": "fruit"}]
    a = tmp_path / "a.jsonl"
    b = tmp_path / "b.jsonl"
    _write_terms(a, shared + [{"id": "X:2", "label": "apple", "parents": ["X:0"], "definition": "a pome"}])
    _write_terms(b, shared + [{"id": "X:3", "label": "pear", "parents": ["X:0"]}])
    doc_a, *_ = ingest_file(g, "foodon-jsonl", a)
    only_a = g.counts()
    doc_b, *_ = ingest_file(g, "foodon-jsonl", b)
    assert g.counts()["entities"] == 4 and g.counts()["triples"] == 3
    # the shared triple has two sources
    shared_t = g.triples_of("X:1", "out", relation="is_a")[0]
    assert len(g.triple_sources_of(shared_t["id"])) == 2

    removed = g.remove_document(doc_b)
    assert removed["documents"] == 1 and removed["entities"] == 1 and removed["triples"] == 1
    assert g.counts() == only_a
    assert g.get_entity("X:1") is not None and g.get_entity("X:3") is None
    assert len(g.triple_sources_of(shared_t["id"])) == 1
    assert g.entities_by_alias("大棗")[0]["id"] == "X:1"  # traditional form finds the simplified alias

    g.remove_document(doc_a)
    assert all(v == 0 for v in g.counts().values())


def test_remove_unknown_document_is_a_clear_error(tmp_path):
    g = Graph.create(tmp_path / "g")
    with pytest.raises(BencaoError, match="no document 'Dnope'"):
        g.remove_document("Dnope")


@pytest.mark.parametrize(
    "content, problem",
    [
        ('{"id": "X:1", "label": "a"}\n{"id": "X:2", "label": \n', r"line 2: malformed JSON"),
        ('{"id": "X:1", "label": "a"}\n["not", "an", "object"]\n', r"line 2: expected a JSON object"),
        ('{"id": "X:1", "label": "a"}\n{"id": "X:2"}\n', r"line 2: missing required field\(s\): label"),
        ("", r"empty document"),
        ('{"id": "X:1", "label": "a", "parents": "X:0"}\n', r"line 1: 'parents' must be a list"),
    ],
)
def test_bad_input_names_file_and_line_and_leaves_graph_intact(tmp_path, subset, content, problem):
    g = Graph.create(tmp_path / "g")
    ingest_file(g, "foodon-jsonl", subset)
    before = g.counts()
    bad = tmp_path / "bad.jsonl"
    bad.write_text(content, encoding="utf-8")
    with pytest.raises(InputError, match=problem) as exc:
        ingest_file(g, "foodon-jsonl", bad)
    assert str(exc.value).startswith(str(bad))
    assert "\n" not in str(exc.value)
    assert g.counts() == before


def test_huge_line_and_unknown_encoding_are_refused(tmp_path):
    g = Graph.create(tmp_path / "g")
    huge = tmp_path / "huge.jsonl"
    huge.write_text('{"id": "X:1", "label": "a"}\n{"id": "X:2", "label": "' + "x" * (9 * 1024 * 1024) + '"}\n', encoding="utf-8")
    with pytest.raises(InputError, match=r"huge.jsonl:line 2: line is .* over the"):
        ingest_file(g, "foodon-jsonl", huge)
    latin = tmp_path / "latin.jsonl"
    latin.write_bytes('{"id": "X:1", "label": "crème brûlée"}\n'.encode("utf-16"))
    with pytest.raises(InputError, match="latin.jsonl"):
        ingest_file(g, "foodon-jsonl", latin)
    assert g.counts()["documents"] == 0


def test_gzip_input_gives_the_same_document_as_plain(tmp_path, subset):
    import gzip

    gz = tmp_path / "subset.jsonl.gz"
    gz.write_bytes(gzip.compress(subset.read_bytes()))
    a = Graph.create(tmp_path / "a")
    b = Graph.create(tmp_path / "b")
    assert ingest_file(a, "foodon-jsonl", subset)[0] == ingest_file(b, "foodon-jsonl", gz)[0]
    assert _ids(a, "triples") == _ids(b, "triples")


def test_foreign_keys_protect_referenced_entities(tmp_path, subset):
    g = Graph.create(tmp_path / "g")
    ingest_file(g, "foodon-jsonl", subset)
    with pytest.raises(sqlite3.IntegrityError):
        g.conn.execute("DELETE FROM entities WHERE id='FOODON:03316347'")


def test_every_write_moves_the_state_key_seen_by_other_handles(tmp_path, subset):
    g = Graph.create(tmp_path / "g")
    ingest_file(g, "foodon-jsonl", subset)
    other = Graph.open(tmp_path / "g")  # another reader, e.g. a server process
    before = other.state_key()
    with g.write() as c:
        c.execute("UPDATE triples SET confidence = 0.5 WHERE relation = 'is_a'")
    assert other.state_key() != before  # caches keyed on it are rebuilt
    assert other.conn.execute("SELECT MAX(confidence) FROM triples").fetchone()[0] == 0.5
    with pytest.raises(RuntimeError):
        with g.write() as c:
            c.execute("UPDATE triples SET confidence = 0.1")
            raise RuntimeError("boom")
    assert other.conn.execute("SELECT MAX(confidence) FROM triples").fetchone()[0] == 0.5  # rolled back
