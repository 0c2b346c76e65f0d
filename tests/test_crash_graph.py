"""Kill `graph build` and `graph add` at every named moment; run two writers at once; serve while writing.

Kills are real: the command runs in a subprocess with ``BENCAO_FAULT=<point>`` and dies with
``os._exit(137)`` there (no cleanup, as ``kill -9``). After each kill the invariants are checked:
the graph directory opens and holds either the old graph (byte-identical SQL dump and files) or the
new one (the content of a clean build), never neither or a mix; the next command cleans the
leftovers and says so; a rerun completes.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bencao.cli import main
from bencao.retrieval.graph.store import Graph

REPO = Path(__file__).resolve().parents[1]
CATALOG = "data/sample/mfh_catalog/mfh_catalog_106.csv"
SUBSET = "data/sample/foodon/foodon_demo_subset.jsonl"
RECIPES = "data/sample/tcm_classics/shiliaofang_recipes.jsonl"


def _env(**extra: str) -> dict[str, str]:
    e = dict(os.environ)
    e.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_DATASETS_OFFLINE="1", TOKENIZERS_PARALLELISM="false", **extra)
    return e


def bencao(*args: str, fault: str | None = None, timeout: float = 300, **env: str) -> subprocess.CompletedProcess:
    extra = {"BENCAO_FAULT": fault} if fault else {}
    return subprocess.run([sys.executable, "-m", "bencao.cli", *args], cwd=REPO, env=_env(**extra, **env), capture_output=True, text=True,
                          timeout=timeout)


def recipe(path: Path, sources: list[str], index: bool = False) -> Path:
    fmt = {"csv": "catalog-csv", "jsonl": "foodon-jsonl"}
    lines = [f"name: crash\nroot: {REPO}\nindex: {'true' if index else 'false'}\n"]
    if index:
        idx = path.parent / "lexical-only.yaml"
        idx.write_text("index:\n  dense_kinds: []\n", encoding="utf-8")
        lines.append(f"index_config: {idx}\n")
    lines.append("sources:\n")
    for s in sources:
        f = "recipes-jsonl" if s == RECIPES else fmt[s.rsplit(".", 1)[1]]
        lines.append(f"  - format: {f}\n    path: {s}\n")
    path.write_text("".join(lines), encoding="utf-8")
    return path


def dump(graph: Path) -> list[str]:
    with sqlite3.connect(Path(graph) / "graph.sqlite") as c:
        return list(c.iterdump())


def content(graph: Path) -> dict:
    """What a graph holds, without timestamps: documents and row counts."""
    with Graph.open(graph, read_only=True) as g:
        return {"documents": sorted(d["id"] for d in g.documents()), **g.counts()}


def files(version: Path) -> dict[str, str]:
    return {str(p.relative_to(version)): hashlib.sha1(p.read_bytes()).hexdigest() for p in sorted(version.rglob("*")) if p.is_file()}


def leftovers(graph: Path) -> list[str]:
    """Everything beside DIR that is not DIR's current version or the lock file."""
    cur = os.readlink(graph) if graph.is_symlink() else None
    return sorted(p.name for p in graph.parent.glob(f".{graph.name}.*") if p.name not in (cur, f".{graph.name}.lock"))


@pytest.fixture(scope="module")
def new_content(tmp_path_factory) -> dict:
    """The content a clean build of the new recipe gives (ids are content hashes: every build agrees)."""
    d = tmp_path_factory.mktemp("clean")
    assert main(["graph", "build", "-c", str(recipe(d / "new.yaml", [CATALOG, SUBSET])), "-g", str(d / "g")]) == 0
    return content(d / "g")


def _old_graph(tmp_path: Path, index: bool = False) -> tuple[Path, Path]:
    graph = tmp_path / "g"
    assert main(["graph", "build", "-c", str(recipe(tmp_path / "old.yaml", [CATALOG], index)), "-g", str(graph)]) == 0
    return graph, recipe(tmp_path / "new.yaml", [CATALOG, SUBSET], index)


# point -> which graph a kill there must leave
BUILD_POINTS = {"ingest.parsed@2": "old", "ingest.committed@2": "old", "build.ingested": "old", "build.versioned": "old",
                "build.linked": "old", "build.swapped": "new"}


@pytest.mark.parametrize("point", list(BUILD_POINTS))
def test_killed_build_leaves_the_old_or_the_new_graph_and_the_next_run_cleans_up(point, tmp_path, new_content, caplog):
    graph, new = _old_graph(tmp_path)
    before, old_version = dump(graph), graph.parent / os.readlink(graph)
    old_files = files(old_version)
    old_content = content(graph)

    r = bencao("graph", "build", "-c", str(new), "-g", str(graph), fault=point)
    assert r.returncode == 137, r.stderr
    assert leftovers(graph), "the kill must leave something behind to clean"

    with caplog.at_level(logging.WARNING):
        got = content(graph)  # opening recovers and cleans
    assert got == (old_content if BUILD_POINTS[point] == "old" else new_content)
    if BUILD_POINTS[point] == "old":
        assert dump(graph) == before and files(old_version) == old_files  # not a byte of the old graph changed
    assert leftovers(graph) == []
    assert any("left by an interrupted build" in m for m in caplog.messages), caplog.messages

    assert main(["graph", "build", "-c", str(new), "-g", str(graph)]) == 0  # a rerun completes
    assert content(graph) == new_content and leftovers(graph) == []


@pytest.mark.parametrize("point, expect", [("build.versioned", "old"), ("build.migrating", "new")])
def test_killed_build_over_a_plain_directory_graph(point, expect, tmp_path, new_content, caplog):
    """A graph made by `graph add --create` (a plain directory) becomes a version on its first build."""
    graph = tmp_path / "g"
    assert main(["graph", "add", "--create", "-g", str(graph), "-f", "catalog-csv", str(REPO / CATALOG)]) == 0
    old = content(graph)
    new = recipe(tmp_path / "new.yaml", [CATALOG, SUBSET])
    assert bencao("graph", "build", "-c", str(new), "-g", str(graph), fault=point).returncode == 137
    if point == "build.migrating":
        assert not graph.exists()  # the one window without DIR; the recovery rule closes it
    with caplog.at_level(logging.WARNING):
        assert content(graph) == (old if expect == "old" else new_content)
    assert leftovers(graph) == []
    if point == "build.migrating":
        assert any("newest complete version" in m for m in caplog.messages), caplog.messages


@pytest.mark.parametrize("point", [pytest.param("build.indexed", marks=pytest.mark.slow), "build.linked",
                                   pytest.param("build.swapped", marks=pytest.mark.slow)])
def test_killed_indexed_build_never_touches_the_old_indexes(point, tmp_path):
    graph, new = _old_graph(tmp_path, index=True)
    old_version = graph.parent / os.readlink(graph)
    old_files = files(old_version)
    assert any(f.startswith("lexical/") for f in old_files)
    assert bencao("graph", "build", "-c", str(new), "-g", str(graph), fault=point).returncode == 137
    if point == "build.swapped":
        assert (graph / "lexical" / "entities" / "ids.json").exists()  # the new version, with its own indexes
        content(graph)
        assert not old_version.exists()
    else:
        assert files(old_version) == old_files
    content(graph)
    assert leftovers(graph) == []


def test_rebuilds_keep_one_version_and_every_command_works_through_the_link(tmp_path, new_content):
    graph, new = _old_graph(tmp_path)
    for _ in range(3):
        assert main(["graph", "build", "-c", str(new), "-g", str(graph)]) == 0
    versions = sorted(p.name for p in tmp_path.glob(".g.v-*"))
    assert graph.is_symlink() and versions == [os.readlink(graph)]
    extra = tmp_path / "extra.jsonl"
    extra.write_text(json.dumps({"id": "X:1", "label": "crash berry"}) + "\n", encoding="utf-8")
    assert main(["graph", "add", "-g", str(graph), "-f", "foodon-jsonl", str(extra)]) == 0
    assert main(["graph", "stats", "-g", str(graph), "--json"]) == 0
    assert main(["graph", "export", "-g", str(graph), "-o", str(tmp_path / "neo4j")]) == 0
    assert "crash berry" in (tmp_path / "neo4j" / "entities.csv").read_text(encoding="utf-8")
    with Graph.open(graph) as g:
        (added,) = [d["id"] for d in g.documents() if d["source"] == "extra.jsonl"]
    assert main(["graph", "remove", "-g", str(graph), added]) == 0
    assert content(graph) == new_content
    assert sorted(p.name for p in tmp_path.glob(".g.v-*")) == versions  # add and remove work in place


ADD_POINTS = {"ingest.parsed": False, "ingest.committed": True, "add.manifest": True}


@pytest.mark.parametrize("point", list(ADD_POINTS))
def test_killed_add_leaves_the_store_unchanged_or_with_the_document_once(point, tmp_path):
    graph, _ = _old_graph(tmp_path)
    before = dump(graph)
    src = REPO / SUBSET
    r = bencao("graph", "add", "-g", str(graph), "-f", "foodon-jsonl", str(src), fault=point)
    assert r.returncode == 137, r.stderr
    if ADD_POINTS[point]:
        with Graph.open(graph) as g:
            assert [d["source"] for d in g.documents()].count(src.name) == 1
    else:
        assert dump(graph) == before  # nothing was written
    assert main(["graph", "add", "-g", str(graph), "-f", "foodon-jsonl", str(src)]) == 0  # the rerun
    with Graph.open(graph) as g:
        assert [d["source"] for d in g.documents()].count(src.name) == 1


#: Where a `graph remove` may die (issue 33 item 5): after its commit, after the manifest, in the index refresh.
REMOVE_POINTS = ["remove.committed", "remove.manifest", "index.lexical@1", "index.lexical@3", "index.written", "refresh_indexes"]


@pytest.fixture(scope="module")
def indexed_two_documents(tmp_path_factory) -> tuple[Path, dict]:
    """A lexical-indexed graph of the catalogue and the FoodOn subset, and what a clean build of the catalogue alone holds."""
    d = tmp_path_factory.mktemp("remove")
    assert main(["graph", "build", "-c", str(recipe(d / "two.yaml", [CATALOG, SUBSET], index=True)), "-g", str(d / "two")]) == 0
    assert main(["graph", "build", "-c", str(recipe(d / "one.yaml", [CATALOG], index=True)), "-g", str(d / "one")]) == 0
    return d / "two", content(d / "one")


@pytest.mark.parametrize("point", REMOVE_POINTS)
def test_a_killed_remove_heals_when_run_again(point, tmp_path, indexed_two_documents, capsys):
    import shutil

    from bencao.retrieval.index import open_indexes

    src, expected = indexed_two_documents
    graph = tmp_path / "g"
    shutil.copytree(src.resolve(), graph)
    with Graph.open(graph, read_only=True) as g:
        doc = next(d["id"] for d in g.documents() if d["source"] == Path(SUBSET).name)
    r = bencao("graph", "remove", doc, "-g", str(graph), fault=point)
    assert r.returncode != 0, r.stdout
    with Graph.open(graph, read_only=True) as g:
        assert not g.has_document(doc)  # every point is past the commit
    assert main(["graph", "remove", doc, "-g", str(graph)]) == 0  # the rerun finishes the work instead of "no document"
    out = capsys.readouterr().out
    assert doc in out
    assert content(graph) == expected
    with Graph.open(graph, read_only=True) as g:  # what `ask` and `serve` open: no "indexes are behind"
        open_indexes(g)
        assert g.read_manifest()["counts"] == g.counts()
    capsys.readouterr()
    assert main(["graph", "remove", doc, "-g", str(graph)]) != 0  # now there is nothing left to finish: the one-line error
    assert f"no document {doc!r}" in capsys.readouterr().err


def test_two_concurrent_adds_are_serialised(tmp_path):
    graph, _ = _old_graph(tmp_path)
    env = _env()
    procs = [subprocess.Popen([sys.executable, "-m", "bencao.cli", "graph", "add", "-g", str(graph), "-f", fmt, str(REPO / src)],
                              cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for fmt, src in (("foodon-jsonl", SUBSET), ("recipes-jsonl", RECIPES))]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    assert not any("locked" in err or "Traceback" in err for _, err in outs), outs
    with Graph.open(graph) as g:
        assert {d["source"] for d in g.documents()} >= {Path(SUBSET).name, Path(RECIPES).name}
    history = [h["op"] for h in json.loads((graph / "manifest.json").read_text(encoding="utf-8"))["history"]]
    assert history.count("add") == 2  # neither manifest update was lost


def test_a_writer_waits_for_the_lock_or_fails_fast_with_one_line(tmp_path):
    from bencao.retrieval.graph.versions import writer_lock

    graph, _ = _old_graph(tmp_path)
    cmd = [sys.executable, "-m", "bencao.cli", "graph", "add", "-g", str(graph), "-f", "foodon-jsonl", str(REPO / SUBSET)]
    with writer_lock(graph):  # another bencao command is writing
        r = subprocess.run(cmd, cwd=REPO, env=_env(BENCAO_LOCK_TIMEOUT="1"), capture_output=True, text=True, timeout=120)
        assert r.returncode == 2
        err = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
        assert len(err) == 1 and "is writing this graph" in err[0] and "Traceback" not in r.stderr
        waiting = subprocess.Popen(cmd, cwd=REPO, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(3)
        assert waiting.poll() is None  # it waits ...
    out, err = waiting.communicate(timeout=300)  # ... and goes on once the lock is free
    assert waiting.returncode == 0 and out.startswith("added ") and "waiting for another bencao command" in err


def test_serve_sees_an_added_document_and_a_rebuild_at_its_next_request(tmp_path):
    import httpx

    from serving_helpers import bencao_serve

    graph, new = _old_graph(tmp_path)
    berry = tmp_path / "berry.jsonl"
    berry.write_text(json.dumps({"id": "X:9", "label": "枸杞莓", "definition": "a test berry"}, ensure_ascii=False) + "\n", encoding="utf-8")
    ask = {"question": "枸杞莓是什么？"}

    def linked(base: str) -> list[str]:
        ev = httpx.post(base + "/v1/retrieve", json=ask, timeout=120).json()["evidence"]
        return [e.get("name") for e in ev.get("entities", [])]

    with bencao_serve(graph, log=tmp_path / "serve.log") as (base, _):
        assert "枸杞莓" not in linked(base)
        assert main(["graph", "add", "-g", str(graph), "-f", "foodon-jsonl", str(berry)]) == 0
        assert "枸杞莓" in linked(base)  # the very next request
        h = httpx.get(base + "/healthz?details=1").json()
        assert h["reloads"] == 1 and h["graph_generation"] >= 2
        assert main(["graph", "build", "-c", str(new), "-g", str(graph)]) == 0  # the rebuilt graph has no berry
        assert "枸杞莓" not in linked(base)
        assert httpx.get(base + "/healthz?details=1").json()["reloads"] == 2
