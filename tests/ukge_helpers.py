"""A hand-made herb graph for the UKGE confidence and completion tests (two clear groups)."""

from __future__ import annotations

from pathlib import Path

from bencao.retrieval.graph.confidence import UKGEConfig
from bencao.retrieval.graph.store import Graph

WARM = ["人参", "黄芪", "甘草", "大枣", "当归", "桂圆", "山药", "白术"]
COLD = ["黄连", "黄芩", "苦参", "栀子", "龙胆", "大黄", "知母", "石膏"]
#: Small, regularised and seeded: on this 22-entity graph a low rank generalises (to MISSING).
FAST = UKGEConfig(dim=4, epochs=100, batch_size=64, lr=0.05, negatives=2, negative_weight=0.3, l2=1e-3, corrupt="typed", seed=0)
#: Left out of the graph on purpose: completion should find it.
MISSING = ("桂圆", "has_flavour", "甘")
#: A low-confidence extraction that contradicts the pattern of its group.
DOUBTFUL = ("人参", "has_nature", "寒")


def build_herb_graph(directory: Path) -> Graph:
    """Books (pattern extraction, 0.9), a curated catalogue (1.0) and an LLM run (0.3, one doubtful triple)."""
    g = Graph.create(directory)
    book = g.builder(source="本草.txt", kind="book", format="books-txt", content_key="herb-book")
    root = book.section("本草")
    ents: dict[str, str] = {}

    def ent(b, name: str, typ: str) -> str:
        return b.entity(name, typ)

    for group, nature, flavour, treats in ((WARM, "温", "甘", "气虚"), (COLD, "寒", "苦", "热证")):
        for herb in group:
            sec = book.section(herb, parent=root)
            snip = book.snippet(sec, f"{herb}，味{flavour}，性{nature}。主{treats}。")
            h = ents[herb] = ent(book, herb, "herb")
            for rel, tail, typ in (("has_nature", nature, "nature"), ("has_flavour", flavour, "flavour"), ("treats", treats, "symptom")):
                if (herb, rel, tail) == MISSING:
                    continue
                book.triple(h, rel, ent(book, tail, typ), confidence=0.9, layer="book", origin="pattern", snippet=snip)
    g.commit(book)

    cat = g.builder(source="catalogue.csv", kind="catalog", format="catalog-csv", content_key="herb-catalogue")
    for herb in WARM[:4]:
        cat.triple(cat.entity(herb, "herb"), "has_nature", cat.entity("温", "nature"), confidence=1.0, layer="imported", origin="catalog")
    g.commit(cat)

    llm = g.builder(source="llm-run", kind="reasoning", format="llm-triples", content_key="herb-llm")
    sec = llm.section("推理")
    snip = llm.snippet(sec, "人参性寒？")
    llm.triple(llm.entity(DOUBTFUL[0], "herb"), DOUBTFUL[1], llm.entity(DOUBTFUL[2], "nature"), confidence=0.3, layer="personal",
               origin="llm", snippet=snip, kind="M2")
    g.commit(llm)
    return g


def triple_key(g: Graph, head: str, rel: str, tail: str) -> tuple[str, str, str]:
    """(head_id, relation, tail_id) by entity names."""
    return (g.entities_by_alias(head)[0]["id"], rel, g.entities_by_alias(tail)[0]["id"])
