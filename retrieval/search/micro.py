"""Micro retrieval (TCM-DiffRAG): query triples → nearest graph triples → the snippets they came from.

Without query triples the question itself is the query. Triples incident to the linked entities
join as ``anchored`` (most confident first). Each triple brings up to ``snippets_per_triple`` source
snippets through ``triple_sources`` (M1: book snippets; M2: reasoning texts).
"""

from __future__ import annotations

from typing import Any

from bencao.retrieval.graph.store import Graph
from bencao.retrieval.search.adjacency import adjacency_for
from bencao.retrieval.search.fusion import rrf


def micro_retrieve(g: Graph, ix: Any, queries: list[str], linked_ids: list[str], *, k_triples: int = 10,
                   anchored_triples: int = 20, snippets_per_triple: int = 2, rrf_k: int = 60) -> tuple[list[dict], list[dict]]:
    """Returns ``(triples, snippets)`` as Evidence dicts."""
    ranked: list[list[tuple[str, float]]] = []
    for q in queries:
        if ix is not None:
            ranked.append(ix.lexical_search("triples", q, k_triples * 2))
            ranked.append(ix.dense_search("triples", q, k_triples * 2))
    fused = rrf(ranked, rrf_k)[:k_triples]
    triples: dict[str, dict[str, Any]] = {}
    found = g.get_triples([tid for tid, _ in fused])
    for tid, score in fused:
        if tid in found:
            triples[tid] = dict(found[tid], score=round(score, 6), via=["micro"])
    per_entity = max(1, anchored_triples // max(1, len(linked_ids))) if linked_ids else 0
    # each linked entity's most confident triples, from the cached adjacency (a hub's 10^5 triples
    # are not read to keep a few)
    top = {eid: [e[0] for e in adjacency_for(g).top_edges(eid, per_entity)] for eid in linked_ids} if per_entity else {}
    by_rowid = g.get_triples_by_rowid(r for rows in top.values() for r in rows) if top else {}
    for eid in linked_ids:
        for t in (by_rowid[r] for r in top.get(eid, []) if r in by_rowid):
            if t["id"] in triples:
                if "anchored" not in triples[t["id"]]["via"]:
                    triples[t["id"]]["via"].append("anchored")
            else:
                triples[t["id"]] = dict(t, score=round(t["confidence"] / (rrf_k + 1), 6), via=["anchored"])
    snippets: dict[str, dict[str, Any]] = {}
    for rank, t in enumerate(triples.values()):
        srcs = g.snippets_of_triple(t["id"])[:snippets_per_triple]
        t["snippet_ids"] = [s["id"] for s in srcs]
        for s in srcs:
            contrib = 1.0 / (rrf_k + rank + 1)
            if s["id"] in snippets:
                snippets[s["id"]]["scores"]["micro"] = max(snippets[s["id"]]["scores"]["micro"], contrib)
            else:
                snippets[s["id"]] = snippet_dict(s, "micro", contrib)
    for t in triples.values():
        t.setdefault("snippet_ids", [])
        t.pop("attributes", None) if not t.get("attributes") else None
    return list(triples.values()), list(snippets.values())


def snippet_dict(s: dict[str, Any], via: str, score: float) -> dict[str, Any]:
    return {"id": s["id"], "text": s["text"], "path": list(s.get("path") or []), "section_id": s.get("section_id"),
            "document": s.get("document_title") or s.get("document_source"), "scores": {via: score}, "via": [via]}
