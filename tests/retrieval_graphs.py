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


def build_yaoshi_graph(d: Path, index: dict | None = None) -> Graph:
    """Yaoshi-RAG's diet-therapy shape in miniature: symptoms ← constitution ← foods that suit it, foods with
    nature/flavour attributes, a 古籍 snippet for each fact, and a catalogue hub every food is listed in."""
    from bencao.retrieval.index import update_indexes

    g = Graph.create(d)
    b = g.builder(source="食疗测试.txt", kind="book", format="test-book", content_key="yaoshi-test-1", title="食疗本草测试")
    book = b.section("食疗本草测试")
    s_yin = b.section("阴虚质", parent=book)
    s_foods = b.section("食物", parent=book)
    p_yin = b.snippet(s_yin, "阴虚质者，手足心热，失眠多梦，口燥咽干。宜食百合、银耳，忌辛辣。")
    p_baihe = b.snippet(s_foods, "百合，味甘，微寒。养阴润肺，清心安神，治虚烦惊悸、失眠多梦。")
    p_yiner = b.snippet(s_foods, "银耳，味甘淡，平。滋阴润肺，养胃生津。")
    p_lajiao = b.snippet(s_foods, "辣椒，味辛，热。温中散寒，阴虚火旺者忌食。")
    yin = b.entity("阴虚质", "constitution", description="阴液亏少，以口燥咽干、手足心热等虚热表现为主要特征的体质。")
    s1 = b.entity("手足心热", "symptom")
    s2 = b.entity("失眠多梦", "symptom")
    s3 = b.entity("口燥咽干", "symptom")
    baihe = b.entity("百合", "food", attributes={"nature": "微寒", "flavour": ["甘"], "effects": ["养阴润肺", "清心安神"]})
    yiner = b.entity("银耳", "food", attributes={"nature": "平", "flavour": ["甘", "淡"], "effects": ["滋阴润肺"]})
    lajiao = b.entity("辣椒", "food", attributes={"nature": "热", "flavour": ["辛"], "contraindications": ["阴虚火旺"]})
    catalog = b.entity("食物名录", "catalog")
    for s in (s1, s2, s3):
        b.triple(yin, "has_symptom", s, confidence=0.9, layer="book", origin="test", snippet=p_yin)
    b.triple(baihe, "suits", yin, confidence=0.85, layer="book", origin="test", snippet=p_yin)
    b.triple(yiner, "suits", yin, confidence=0.8, layer="book", origin="test", snippet=p_yin)
    b.triple(baihe, "treats", s2, confidence=0.8, layer="book", origin="test", snippet=p_baihe)
    b.triple(yiner, "has_effect", b.entity("滋阴润肺", "effect"), confidence=0.8, layer="book", origin="test", snippet=p_yiner)
    b.triple(lajiao, "has_effect", b.entity("温中散寒", "effect"), confidence=0.8, layer="book", origin="test", snippet=p_lajiao)
    b.relation("has_symptom", "a constitution shows the symptom", "constitution", "symptom")
    b.relation("suits", "a food suits the constitution", "food", "constitution")
    for food in (baihe, yiner, lajiao):
        b.triple(food, "listed_in", catalog, confidence=1.0, layer="imported", origin="test")
    g.commit(b)
    update_indexes(g, index or LEXICAL_ONLY)
    return g
