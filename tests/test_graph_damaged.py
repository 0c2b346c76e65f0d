"""Issue 33 item 3: graph folders that are read-only or damaged.

A cleanly closed graph on a read-only folder serves (``ask``, ``graph stats``, the pipeline ``serve`` loads)
and refuses writes with one line; each damaged file (manifest, store, index ids, a deleted index folder)
gives one line naming the file and the command that repairs it, and that command does repair it.

The read-only folder is a read-only bind mount where the tests run as root (root ignores permissions) and
the mount is allowed, else the folder's write permissions removed; where neither can make it read-only
the tests skip.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sqlite3
import stat
import subprocess
from pathlib import Path
from typing import Iterator

import pytest

from bencao.cli import main
from bencao.retrieval.graph.store import Graph

REPO = Path(__file__).resolve().parents[1]
QUESTION = "大枣的性味是什么？"


@pytest.fixture(scope="module")
def small_graph(tmp_path_factory) -> Path:
    """The MFH catalogue with lexical indexes (no dense index: no model to load), as a plain folder."""
    d = tmp_path_factory.mktemp("damaged")
    (d / "lexical.yaml").write_text("index:\n  dense_kinds: []\n", encoding="utf-8")
    (d / "recipe.yaml").write_text(f"name: small\nroot: {REPO}\nindex: true\nindex_config: {d / 'lexical.yaml'}\nsources:\n"
                                   "  - format: catalog-csv\n    path: data/sample/mfh_catalog/mfh_catalog_106.csv\n", encoding="utf-8")
    assert main(["graph", "build", "-c", str(d / "recipe.yaml"), "-g", str(d / "built")]) == 0
    return (d / "built").resolve()


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def _run(capsys, *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    try:
        rc = main(list(args))
    except Exception as exc:  # noqa: BLE001 - a traceback is what these tests rule out
        pytest.fail(f"bencao {' '.join(args)} raised {type(exc).__name__}: {exc}")
    out = capsys.readouterr()
    return rc, out.out, out.err


@contextlib.contextmanager
def read_only(folder: Path) -> Iterator[Path]:
    """``folder`` seen read-only: a read-only bind mount (root), or its write permissions removed (anyone else)."""
    if os.geteuid() != 0:
        modes = {p: p.stat().st_mode for p in [folder, *folder.rglob("*")]}
        for p in modes:
            p.chmod(stat.S_IMODE(modes[p]) & ~0o222)
        try:
            yield folder
        finally:
            for p, m in modes.items():
                p.chmod(stat.S_IMODE(m))
        return
    view = folder.parent / (folder.name + "-ro")
    view.mkdir()
    mounted = subprocess.run(["mount", "--bind", str(folder), str(view)], capture_output=True).returncode == 0
    if mounted and subprocess.run(["mount", "-o", "remount,bind,ro", str(view)], capture_output=True).returncode != 0:
        subprocess.run(["umount", str(view)], capture_output=True)
        mounted = False
    if not mounted:
        view.rmdir()
        pytest.skip("running as root and a read-only bind mount is not allowed here: no way to make a folder read-only")
    try:
        yield view
    finally:
        if subprocess.run(["umount", str(view)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(view)], capture_output=True)  # a connection of this process still open
        view.rmdir()


# --------------------------------------------------------------------------- read-only folders


def test_a_cleanly_closed_graph_on_a_read_only_folder_answers_and_refuses_writes(small_graph, tmp_path, capsys):
    from bencao.retrieval.graph.store import store_key
    from bencao.serving.pipeline import AnswerPipeline

    g = _copy(small_graph, tmp_path / "g")
    assert not Path(f"{g}/graph.sqlite-wal").exists()  # closed cleanly
    with read_only(g) as ro:
        assert not os.access(ro, os.W_OK)
        rc, out, err = _run(capsys, "graph", "stats", "--graph", str(ro), "--json")
        assert rc == 0 and json.loads(out)["entities"] > 100, err
        rc, out, err = _run(capsys, "ask", "--graph", str(ro), QUESTION)
        assert rc == 0 and "大枣" in out, err
        pipe = AnswerPipeline(ro)  # what `serve` loads, and the key it watches between requests
        assert pipe.answer(QUESTION)["answer"]
        pipe.retriever.g.close()
        assert store_key(ro) is not None
        rc, _out, err = _run(capsys, "graph", "add", "--graph", str(ro), "-f", "foodon-jsonl", str(REPO / "data/sample/foodon/foodon_demo_subset.jsonl"))
        assert rc == 2 and err.count("\n") == 1 and "read-only" in err and str(ro) in err, err
        rc, _out, err = _run(capsys, "graph", "remove", "--graph", str(ro), next(iter(_documents(g))))
        assert rc == 2 and "read-only" in err, err
        rc, _out, err = _run(capsys, "graph", "index", "--graph", str(ro), "--force")
        assert rc == 2 and err.count("\n") == 1 and "read-only" in err, err
        (tmp_path / "r.yaml").write_text(f"name: r\nroot: {REPO}\nindex: false\nsources:\n  - format: catalog-csv\n"
                                         "    path: data/sample/mfh_catalog/mfh_catalog_106.csv\n", encoding="utf-8")
        rc, _out, err = _run(capsys, "graph", "build", "-c", str(tmp_path / "r.yaml"), "--graph", str(ro / "inner"))
        assert rc == 2 and err.count("\n") == 1 and "read-only" in err, err
    assert _documents(g)  # nothing changed


def _documents(g: Path) -> list[str]:
    with sqlite3.connect(g / "graph.sqlite") as c:
        return [r[0] for r in c.execute("SELECT id FROM documents")]


def test_a_read_only_graph_with_a_pending_wal_is_read_in_full_or_refused_in_one_line(small_graph, tmp_path, capsys):
    """A store not closed cleanly (its -wal still beside it) must not be read as if the WAL were not there."""
    g = _copy(small_graph, tmp_path / "g")
    conn = sqlite3.connect(g / "graph.sqlite", isolation_level=None)
    conn.execute("PRAGMA wal_autocheckpoint=0")
    conn.execute("INSERT INTO meta(key, value) VALUES ('wal_probe', 'in the wal only')")
    shutil.copy(g / "graph.sqlite", tmp_path / "store")  # what a crash leaves: the store and its WAL, no WAL index
    shutil.copy(f"{g}/graph.sqlite-wal", tmp_path / "wal")
    conn.close()
    shutil.copy(tmp_path / "store", g / "graph.sqlite")
    shutil.copy(tmp_path / "wal", f"{g}/graph.sqlite-wal")
    Path(f"{g}/graph.sqlite-shm").unlink(missing_ok=True)
    with read_only(g) as ro:
        rc, out, err = _run(capsys, "graph", "stats", "--graph", str(ro), "--json")
        if rc == 0:
            with Graph.open(ro, read_only=True) as opened:
                assert opened.conn.execute("SELECT value FROM meta WHERE key='wal_probe'").fetchone()[0] == "in the wal only"
        else:
            assert rc == 2 and err.count("\n") == 1 and "graph.sqlite-wal" in err and "writable" in err, err


# --------------------------------------------------------------------------- damaged files


def _trunc(p: Path) -> None:
    p.write_bytes(p.read_bytes()[: len(p.read_bytes()) // 3])


def _zero_pages(p: Path) -> None:
    b = bytearray(p.read_bytes())
    b[4096: len(b) // 2] = bytes(len(b) // 2 - 4096)
    p.write_bytes(bytes(b))


#: (name, what to do to the graph folder, the file the error must name, the repair command it must name)
DAMAGE = [
    ("manifest-truncated", lambda g: _trunc(g / "manifest.json"), "manifest.json", "graph index"),
    ("manifest-a-list", lambda g: (g / "manifest.json").write_text("[1, 2]"), "manifest.json", "graph index"),
    ("manifest-not-utf8", lambda g: (g / "manifest.json").write_bytes(b'{"counts": "\xff\xfe"}'), "manifest.json", "graph index"),
    ("manifest-indexes-a-number", lambda g: (g / "manifest.json").write_text(json.dumps(
        {**json.loads((g / "manifest.json").read_text()), "indexes": 5})), "manifest.json", "graph index"),
    ("store-header-overwritten", lambda g: (g / "graph.sqlite").write_bytes(b"x" * 100 + (g / "graph.sqlite").read_bytes()[100:]),
     "graph.sqlite", "graph build"),
    ("store-truncated", lambda g: _trunc(g / "graph.sqlite"), "graph.sqlite", "graph build"),
    ("store-pages-zeroed", lambda g: _zero_pages(g / "graph.sqlite"), "graph.sqlite", "graph build"),
    ("store-empty", lambda g: (g / "graph.sqlite").write_bytes(b""), "graph.sqlite", "graph build"),
    ("lexical-ids-truncated", lambda g: (g / "lexical" / "snippets" / "ids.json").write_text('["P1", '), "ids.json", "graph index"),
    ("lexical-ids-an-object", lambda g: (g / "lexical" / "entities" / "ids.json").write_text('{"a": 1}'), "ids.json", "graph index"),
    ("lexical-folder-deleted", lambda g: shutil.rmtree(g / "lexical"), "lexical", "graph index"),
]


@pytest.mark.parametrize("name, damage, names_file, repair", DAMAGE, ids=[d[0] for d in DAMAGE])
def test_each_damaged_file_is_one_line_naming_it_and_its_repair_and_the_repair_works(name, damage, names_file, repair, small_graph,
                                                                                     tmp_path, capsys):
    g = _copy(small_graph, tmp_path / "g")
    damage(g)
    rc, out, err = _run(capsys, "ask", "--graph", str(g), "--set", "index.dense_kinds=[]", QUESTION)
    assert rc == 2, (rc, out, err)
    assert err.startswith("error: ") and err.count("\n") == 1, err
    assert names_file in err and f"`bencao {repair}" in err, err
    if repair == "graph index":
        rc, _out, err = _run(capsys, "graph", "index", "--graph", str(g), "--force")
        assert rc == 0, err
        rc, out, err = _run(capsys, "ask", "--graph", str(g), QUESTION)
        assert rc == 0 and "大枣" in out, err


def test_a_damaged_dense_ids_file_is_one_line_naming_it(tmp_path):
    import numpy as np

    from bencao.errors import BencaoError
    from bencao.retrieval.index.dense import DenseIndex, DenseParams

    vecs = np.random.default_rng(0).normal(size=(5, 8)).astype("float32")
    DenseIndex.build(vecs, [f"E{i}" for i in range(5)], DenseParams()).save(tmp_path / "index" / "emb", "entities")
    (tmp_path / "index" / "emb" / "entities.ids.json").write_text("[1", encoding="utf-8")
    with pytest.raises(BencaoError, match=r"entities\.ids\.json: damaged .*`bencao graph index --graph .* --force`"):
        DenseIndex.load(tmp_path / "index" / "emb", "entities")
    (tmp_path / "index" / "emb" / "entities.faiss").write_bytes(b"not faiss")
    with pytest.raises(BencaoError, match=r"entities\.faiss: dense index cannot be read"):
        DenseIndex.load(tmp_path / "index" / "emb", "entities")
