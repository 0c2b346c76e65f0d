"""The store under hostile files (issue 28): files that change while read, remote contexts, resource
bombs, tracebacks, wrong encodings, invisible names, a full disk. Each test fails on the code before."""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path

import pytest

from bencao import faults
from bencao.cli import main
from bencao.errors import InputError
from bencao.retrieval.graph.store import Graph
from bencao.retrieval.ingest.registry import ingest_file


def _terms(n: int, start: int = 0) -> bytes:
    return b"".join((json.dumps({"id": f"FZ:{i}", "label": f"term {i}"}) + "\n").encode() for i in range(start, start + n))


def _one_line_error(capsys) -> str:
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip() and not ln.startswith("WARNING")]
    assert len(err) == 1 and err[0].startswith("error: "), err
    return err[0]


def _count(graph: Path, sql: str, *args: object) -> int:
    with sqlite3.connect(graph / "graph.sqlite") as c:
        return c.execute(sql, args).fetchone()[0]


# --------------------------------------------------------------------------- 1. files that change while read


@pytest.mark.parametrize("moment", ["ingest.hashed", "ingest.reading"])
@pytest.mark.parametrize("change", ["truncate", "append"])
def test_file_changed_while_read_is_refused_and_nothing_lost(tmp_path, capsys, moment, change) -> None:
    """A file cut or grown between hashing and parsing (or during the parse read) is refused; adding the
    complete file afterwards stores every record (it is not 'unchanged')."""
    src = tmp_path / "terms.jsonl"
    full = _terms(2000)
    src.write_bytes(full)
    graph = tmp_path / "g"

    def mutate() -> None:
        if change == "truncate":
            with open(src, "r+b") as fh:
                fh.truncate(len(_terms(1000)))
        else:
            with open(src, "ab") as fh:
                fh.write(_terms(500, start=2000))

    with faults.on(moment, mutate):
        rc = main(["graph", "add", "--create", "--graph", str(graph), "--format", "foodon-jsonl", str(src)])
    assert rc == 2
    line = _one_line_error(capsys)
    assert "while it was read" in line and str(src) in line, line
    assert _count(graph, "SELECT COUNT(*) FROM documents") == 0
    src.write_bytes(full)
    assert main(["graph", "add", "--graph", str(graph), "--format", "foodon-jsonl", str(src)]) == 0
    assert capsys.readouterr().out.startswith("added ")
    assert _count(graph, "SELECT COUNT(*) FROM entities WHERE id LIKE 'FZ:%'") == 2000


def test_book_changed_while_read_is_refused(tmp_path) -> None:
    """The line reader of books (its own gzip/encoding sniffing) is watched too."""
    src = tmp_path / "book.txt"
    body = "".join(f"<篇名>第{i}篇\n内容：味甘平。主五脏邪气。\n" for i in range(3000))
    src.write_text("<篇名>测试书\n书名：测试书\n" + body, encoding="utf-8")
    g = Graph.create(tmp_path / "g")

    def cut() -> None:
        with open(src, "r+b") as fh:
            fh.truncate(src.stat().st_size // 2)

    with faults.on("ingest.hashed", cut), pytest.raises(InputError, match="while it was read"):
        ingest_file(g, "books-txt", src)
    assert g.conn.execute("SELECT COUNT(*) FROM documents").fetchone()[0] == 0
