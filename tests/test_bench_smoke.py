"""Smoke test of the benchmark harness at a tiny scale: inputs in the loaders' formats, a real build,
provenance as documented, the query step and the results file. No timing asserts."""

from __future__ import annotations

import csv
import importlib
import json
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"
SCALE = 0.0005  # ~220 snippets, ~1.7k triples


def _load(name: str):
    """A bench script as a module (bench/ is a folder of scripts, not a package)."""
    if str(BENCH) not in sys.path:
        sys.path.insert(0, str(BENCH))
    return importlib.import_module(name)


@pytest.fixture(scope="module")
def synth_dir(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("synth")
    _load("synth").generate(out, SCALE, seed=3)
    return out


@pytest.fixture(scope="module")
def graph_dir(synth_dir, tmp_path_factory) -> Path:
    from bencao.retrieval.build import build_graph, load_build_config

    cfg, root = load_build_config(synth_dir / "recipe.yaml")
    g = tmp_path_factory.mktemp("g") / "graph"
    build_graph(cfg, root, g)
    return g


def test_synth_is_deterministic_and_in_loader_formats(synth_dir, tmp_path):
    synth = _load("synth")
    meta = json.loads((synth_dir / "synth.json").read_text(encoding="utf-8"))
    again = tmp_path / "again"
    synth.generate(again, SCALE, seed=3)
    for p in sorted(synth_dir.rglob("*.*")):
        rel = p.relative_to(synth_dir)
        if rel.name != "synth.json":
            assert (again / rel).read_bytes() == p.read_bytes(), rel
    with open(synth_dir / "entities" / "entities-000.csv", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == meta["entities"] and len({r["id"] for r in rows}) == len(rows)
    assert len({(r["type"], r["name"]) for r in rows}) == len(rows)  # names resolve uniquely within a type
    assert any("\u4e00" <= r["name"][0] <= "\u9fff" for r in rows) and all(r["english"].isascii() for r in rows)
    first = json.loads((synth_dir / "books" / "book-000.jsonl").read_text(encoding="utf-8").splitlines()[0])
    assert first["path"][0] == first["book"] and first["path"][-1] == first["title"] and first["text"].startswith("味")


def test_build_counts_and_provenance(graph_dir, synth_dir):
    from bencao.retrieval.graph.store import Graph

    meta = json.loads((synth_dir / "synth.json").read_text(encoding="utf-8"))
    with Graph.open(graph_dir) as g:
        c = g.counts()
        assert abs(c["snippets"] - meta["snippets_expected"]) <= 0.02 * meta["snippets_expected"]  # ~4 snippets a section
        assert c["triples"] >= meta["kb_relation_rows"] + meta["sections"] * 5  # the extractor adds several per entry
        # book triples: M1 provenance (a snippet), their substance resolved to the KB entity by name
        m1 = g.conn.execute("SELECT t.head_id, ts.snippet_id FROM triple_sources ts JOIN triples t ON t.id = ts.triple_id "
                            "WHERE ts.kind='M1' LIMIT 1").fetchone()
        assert m1 is not None and m1[0].startswith("SUB") and g.get_snippet(m1[1]) is not None
        sym = g.conn.execute("SELECT COUNT(*) FROM triples WHERE relation='treats' AND layer='book' AND tail_id LIKE 'SYM%'").fetchone()[0]
        assert sym > 0
        # KB rows: record provenance with the source kept
        rec = g.conn.execute("SELECT attributes FROM triple_sources WHERE kind='record' LIMIT 1").fetchone()
        assert json.loads(rec[0])["source"].startswith("synth-")
        # power law: the most connected entity has far more edges than the median one
        deg = sorted(r[0] for r in g.conn.execute(
            "SELECT COUNT(*) FROM (SELECT head_id AS e FROM triples UNION ALL SELECT tail_id FROM triples) GROUP BY e"))
        assert deg[-1] >= 10 * deg[len(deg) // 2]


def test_query_step_and_results_file(graph_dir, synth_dir, tmp_path):
    rb = _load("run_bench")
    idx = rb.step_index(str(graph_dir))
    assert idx["summary"]["dense"]["snippets"]["n"] > 0  # stand-in embedder reads Chinese
    q = rb.step_query(str(graph_dir), str(synth_dir / "queries.jsonl"), 1, limit=20)
    assert q["queries"] == 20 and q["p95_ms"] >= q["p50_ms"] > 0
    assert q["mean_linked"] > 0 and q["pagerank"]["subgraphs"] > 0
    assert q["pagerank"]["max_abs_diff"] < 1e-6  # igraph and networkx agree on the same subgraphs
    results = tmp_path / "RESULTS.md"
    results.write_text("# Benchmark results\n\n## Someone else's section\nkept\n", encoding="utf-8")
    res = {"scale": SCALE, "date": "d", "command": "c", "machine": "m", "load_start": "l", "load_end": "l", "runs": 1, "seconds": 1.0,
           "synth": json.loads((synth_dir / "synth.json").read_text(encoding="utf-8")), "query": q}
    rb.append_markdown(results, res)
    text = results.read_text(encoding="utf-8")
    assert "## Someone else's section\nkept" in text and "query latency, 20 LLM-free queries" in text
