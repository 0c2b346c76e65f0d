"""Formats users bring: FoodOntoRAG's ontology JSON dump and SKOS concept schemes."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from bencao.cli import main
from bencao.errors import InputError
from bencao.retrieval.graph.store import Graph
from bencao.retrieval.ingest.registry import formats, ingest_file
from bencao.retrieval.linking import EntityLinker

FIX = Path(__file__).parent / "fixtures" / "ontology"


@pytest.fixture()
def graph(tmp_path: Path) -> Graph:
    return Graph.create(tmp_path / "g")


def _parents(g: Graph, eid: str, rel: str = "is_a") -> list[str]:
    return sorted(t["tail_id"] for t in g.triples_of(eid, "out", rel))


def test_ontology_json_dump(graph: Graph) -> None:
    assert {"ontology-json", "skos"} <= set(formats())
    doc, added, counts = ingest_file(graph, "ontology-json", FIX / "foodontorag_dump.json")
    assert added and counts["entities"] == 4
    lychee = graph.get_entity("FOODON:03301704")
    assert (lychee["name"], lychee["type"], lychee["layer"]) == ("lychee", "food", "terminology")
    assert lychee["description"] == "The fruit of Litchi chinensis."
    assert {(a["alias"], a["kind"]) for a in graph.aliases_of("FOODON:03301704")} >= {("litchi", "synonym"), ("荔枝", "synonym"),
                                                                                       ("FOODON:03301704", "xref")}
    assert _parents(graph, "FOODON:03301704") == ["FOODON:03411564"]
    assert _parents(graph, "FOODON:03301704", "derives_from") == ["NCBITaxon:151069"]
    assert graph.get_entity("NCBITaxon:151069")["type"] == "organism"
    assert graph.get_document(doc)["meta"]["targets_not_in_file"] == 1  # NCBITaxon:9999999
    # the linker finds it by a synonym in either language
    linker = EntityLinker(graph)
    assert linker.link("litchi").chosen_id == "FOODON:03301704"
    assert linker.link("荔枝").chosen_id == "FOODON:03301704"


def test_ontology_json_containers_and_errors(tmp_path: Path, graph: Graph) -> None:
    concepts = json.loads((FIX / "foodontorag_dump.json").read_text(encoding="utf-8"))
    keyed = tmp_path / "keyed.json"
    keyed.write_text(json.dumps({c.pop("curie"): c for c in json.loads(json.dumps(concepts))}), encoding="utf-8")
    wrapped = tmp_path / "wrapped.json"
    wrapped.write_text(json.dumps({"version": "1", "concepts": concepts}), encoding="utf-8")
    lines = tmp_path / "dump.jsonl.gz"
    lines.write_bytes(gzip.compress("".join(json.dumps(c) + "\n" for c in concepts).encode()))
    for i, path in enumerate((keyed, wrapped, lines)):
        g = Graph.create(tmp_path / f"g{i}")
        ingest_file(g, "ontology-json", path)
        assert _parents(g, "FOODON:03301704") == ["FOODON:03411564"], path
        g.close()
    bad = tmp_path / "bad.json"
    bad.write_text('[{"curie": "X:1", "label": "a"},\n{"curie": "X:2"}]', encoding="utf-8")
    with pytest.raises(InputError, match=r"bad.json:concept 1: concept X:2: missing 'label'"):
        ingest_file(graph, "ontology-json", bad)
    broken = tmp_path / "broken.json"
    broken.write_text('[{"curie": "X:1",\n "label": }]', encoding="utf-8")
    with pytest.raises(InputError, match=r"broken.json:line 2: malformed JSON"):
        ingest_file(graph, "ontology-json", broken)
    binary = tmp_path / "binary.json"
    binary.write_bytes(b"\x00\x01\x02[]")
    with pytest.raises(InputError, match="binary"):
        ingest_file(graph, "ontology-json", binary)
    assert graph.counts()["entities"] == 0  # nothing half-written


def test_skos_concepts(graph: Graph) -> None:
    doc, added, counts = ingest_file(graph, "skos", FIX / "foods_skos.ttl")
    assert added and counts["entities"] == 3
    lychee = graph.get_entity("food:lychee")
    assert lychee["name"] == "lychee"  # English preferred by default
    kinds = {(a["alias"], a["kind"]) for a in graph.aliases_of("food:lychee")}
    assert {("荔枝", "synonym"), ("litchi", "synonym"), ("離支", "synonym"), ("lichee", "variant"), ("F-0042", "xref"),
            ("FOODON:03301704", "xref"), ("food:lychee", "xref"), ("http://example.org/food/lychee", "xref")} <= kinds
    assert lychee["attributes"]["close_match"] == ["http://example.org/other/longan"]
    assert lychee["attributes"]["scheme"] == ["food:scheme"]
    assert _parents(graph, "food:lychee") == ["food:fruit"]  # skos:narrower of fruit, inverted
    assert _parents(graph, "food:longan") == ["food:fruit"]
    assert _parents(graph, "food:lychee", "related_to") == ["food:longan"]
    assert graph.get_entity("food:fruit")["description"] == "The edible ripened ovary of a plant."
    assert graph.get_document(doc)["meta"]["targets_not_in_file"] == 1
    assert EntityLinker(graph).link("離支").chosen_id == "food:lychee"  # traditional form → simplified key


def test_skos_options_and_errors(tmp_path: Path, graph: Graph) -> None:
    ingest_file(graph, "skos", FIX / "foods_skos.ttl", {"lang": "zh", "entity_type": "food", "broader_relation": "broader"})
    lychee = graph.get_entity("food:lychee")
    assert (lychee["name"], lychee["type"]) == ("荔枝", "food")
    assert _parents(graph, "food:longan", "broader") == ["food:fruit"]
    bad = tmp_path / "bad.ttl"
    bad.write_text("@prefix skos: <http://www.w3.org/2004/02/skos/core#> .\n<a> skos:prefLabel \"x\" \n<b> .", encoding="utf-8")
    with pytest.raises(InputError, match="bad.ttl.*malformed turtle"):
        ingest_file(graph, "skos", bad)
    empty = tmp_path / "none.ttl"
    empty.write_text("<http://x/a> <http://x/p> <http://x/b> .\n", encoding="utf-8")
    with pytest.raises(InputError, match="no SKOS concept"):
        ingest_file(graph, "skos", empty)
    odd = tmp_path / "concepts.dat"
    odd.write_text("x", encoding="utf-8")
    with pytest.raises(InputError, match="rdf_format"):
        ingest_file(graph, "skos", odd)
    latin = tmp_path / "latin.ttl"
    latin.write_bytes("<http://x/a> <http://www.w3.org/2004/02/skos/core#prefLabel> \"caf\xe9\" .".encode("latin-1"))
    with pytest.raises(InputError, match="not valid UTF-8"):
        ingest_file(graph, "skos", latin)


def test_cli_add_formats(tmp_path: Path, capsys) -> None:
    d = str(tmp_path / "g")
    assert main(["graph", "add", str(FIX / "foods_skos.ttl"), "--graph", d, "--create", "--format", "skos", "-O", "lang=zh"]) == 0
    assert main(["graph", "add", str(FIX / "foodontorag_dump.json"), "--graph", d, "--format", "ontology-json"]) == 0
    out = capsys.readouterr().out
    assert out.count("added") == 2
    assert main(["graph", "formats"]) == 0
    listing = capsys.readouterr().out
    assert "ontology-json" in listing and "skos" in listing and "rdf_format" in listing
