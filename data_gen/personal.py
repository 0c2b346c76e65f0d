"""The personalized graph layer: a reasoning text becomes a document whose triples cite it (M2)."""

from __future__ import annotations

from typing import Any

from bencao.io import content_hash
from bencao.retrieval.graph.store import DocumentBuilder, Graph
from bencao.text import norm_key


def resolve_entity(b: DocumentBuilder, graph: Graph, name: str, type_: str | None, layer: str) -> str:
    """An entity already in the graph under that name/alias (any type) is reused; else a new one."""
    name = name.strip()
    existing = graph.find_entity_id(norm_key(name))
    if existing:
        if existing in b.entities:
            return existing
        ent = graph.get_entity(existing)
        if ent is not None:
            return b.entity(ent["name"], ent["type"], id=existing, layer=ent["layer"])
    return b.entity(name, (type_ or "concept").strip() or "concept", layer=layer)


def write_reasoning(graph: Graph, *, question_id: str, question: str, reasoning: str, triples: list[dict[str, Any]],
                    model: str, confidence: float, question_key: str | None = None) -> tuple[str, list[str], list[str]]:
    """Store one reasoning text and its triples (layer ``personal``). Returns (document id, triple ids, entity ids).

    Content-addressed: storing the same reasoning again (a resumed run) changes nothing. ``question_key``
    (:func:`bencao.data_gen.leakage.question_key`) lets evaluation recognise the question by its text.
    """
    b = graph.builder(source=f"cot:{question_id}", kind="reasoning", format="cot-reasoning", content_key=content_hash(question_id, model, reasoning),
                      title=question[:60], meta={"question_id": question_id, "model": model, **({"question_key": question_key} if question_key else {})})
    sec = b.section(question[:200] or question_id)
    snip = b.snippet(sec, reasoning)
    tids, eids = [], []
    for t in triples:
        h = resolve_entity(b, graph, str(t["head"]), t.get("head_type"), "personal")
        x = resolve_entity(b, graph, str(t["tail"]), t.get("tail_type"), "personal")
        if h == x:
            continue
        tid = b.triple(h, str(t["relation"]).strip(), x, confidence=confidence, layer="personal", origin=f"cot:{model}", snippet=snip, kind="M2")
        tids.append(tid)
        eids += [h, x]
    graph.commit(b)
    return b.document_id, list(dict.fromkeys(tids)), list(dict.fromkeys(eids))
