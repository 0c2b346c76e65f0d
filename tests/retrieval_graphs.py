"""Graphs shared by the retrieval tests: the FoodOn demo subset (with MiniLM indexes) and a small
hand-built TCM graph (book → volume → section → snippets, triples with confidences)."""

from __future__ import annotations

import functools
import os
import tempfile
from pathlib import Path

from bencao.retrieval.graph.store import Graph

REPO = Path(__file__).resolve().parents[1]
DEMO = REPO / "data" / "sample" / "foodon" / "foodon_demo_subset.jsonl"
_TMP = Path(tempfile.mkdtemp(prefix="bencao-retrieval-tests-"))
os.environ.setdefault("BENCAO_CACHE_DIR", str(_TMP / "cache"))

# Lexical + English entity vectors only: what the demo needs, quick to embed (757 names).
DEMO_INDEX = {"kinds": ["entities", "triples", "snippets", "sections"], "dense_kinds": ["entities"], "shared_cache": False}
LEXICAL_ONLY = {"kinds": ["entities", "triples", "snippets", "sections"], "dense_kinds": [], "shared_cache": False}


@functools.lru_cache(maxsize=1)
def demo_graph_dir() -> Path:
    """The 757-term FoodOn demo subset with lexical indexes and MiniLM entity vectors (built once per session)."""
    from bencao.retrieval.index import update_indexes
    from bencao.retrieval.ingest.registry import ingest_file

    d = _TMP / "demo"
    g = Graph.create(d)
    ingest_file(g, "foodon-jsonl", DEMO)
    update_indexes(g, DEMO_INDEX)
    g.close()
    return d


def build_tcm_graph(d: Path, index: dict | None = None) -> Graph:
    """A small Chinese materia-medica graph, traditional aliases included, indexed lexically."""
    from bencao.retrieval.index import update_indexes

    g = Graph.create(d)
    b = g.builder(source="本草測試.txt", kind="book", format="test-book", content_key="tcm-test-1", title="神农本草经")
    book = b.section("神农本草经")
    vol = b.section("卷上", parent=book)
    s1 = b.section("山药", parent=vol)
    s2 = b.section("大枣", parent=vol)
    vol2 = b.section("卷中", parent=book)
    s3 = b.section("干姜", parent=vol2)
    p1 = b.snippet(s1, "山药，味甘，温。主伤中，补虚羸，除寒热邪气，补中益气力，长肌肉。久服耳目聪明。")
    p2 = b.snippet(s2, "大枣，味甘，平。主心腹邪气，安中养脾，助十二经，平胃气，通九窍。")
    p3 = b.snippet(s3, "干姜，味辛，温。主胸满咳逆上气，温中止血，出汗，逐风湿痹。")
    b.snippet(s3, "生者尤良，久服去臭气，通神明。")
    shanyao = b.entity("山药", "herb", aliases=[("薯蓣", "synonym"), ("山藥", "traditional")], description="薯蓣的块茎，药食同源。",
                       attributes={"flavour": ["甘"], "nature": "温"})
    dazao = b.entity("大枣", "herb", aliases=[("红枣", "synonym"), ("大棗", "traditional")])
    ganjiang = b.entity("干姜", "herb", aliases=[("乾薑", "traditional")])
    gan = b.entity("甘", "flavour")
    xin = b.entity("辛", "flavour")
    wen = b.entity("温", "nature")
    buzhong = b.entity("补中益气", "effect")
    yangpi = b.entity("安中养脾", "effect")
    wenzhong = b.entity("温中止血", "effect")
    pi = b.entity("脾", "organ")
    b.triple(shanyao, "has_flavour", gan, confidence=0.9, layer="book", origin="test", snippet=p1)
    b.triple(shanyao, "has_nature", wen, confidence=0.9, layer="book", origin="test", snippet=p1)
    b.triple(shanyao, "has_effect", buzhong, confidence=0.8, layer="book", origin="test", snippet=p1)
    b.triple(dazao, "has_flavour", gan, confidence=0.9, layer="book", origin="test", snippet=p2)
    b.triple(dazao, "has_effect", yangpi, confidence=0.7, layer="book", origin="test", snippet=p2)
    b.triple(yangpi, "acts_on", pi, confidence=0.6, layer="book", origin="test", snippet=p2)
    b.triple(ganjiang, "has_flavour", xin, confidence=0.9, layer="book", origin="test", snippet=p3)
    b.triple(ganjiang, "has_nature", wen, confidence=0.9, layer="book", origin="test", snippet=p3)
    b.triple(ganjiang, "has_effect", wenzhong, confidence=0.85, layer="book", origin="test", snippet=p3)
    g.commit(b)
    update_indexes(g, index or LEXICAL_ONLY)
    return g
