"""Micro retrieval (TCM-DiffRAG): query triples → nearest graph triples → the snippets they came from.

Without query triples the question itself is the query. Triples incident to the linked entities
join as ``anchored`` (most confident first); those of the relations the question asks for
(``asked_relations``, e.g. has_effect for 功效) join first as ``asked``, so an entity with many
confident facts of other kinds (a catalogue listing, formulas it is in) still shows what was asked. Each triple brings up to ``snippets_per_triple`` source
snippets through ``triple_sources`` (M1: book snippets; M2: reasoning texts).
"""

from __future__ import annotations

from typing import Any

from bencao.deadline import check_deadline
from bencao.retrieval.evidence import SnippetHit, TripleHit
from bencao.retrieval.graph.store import Graph
from bencao.retrieval.search.adjacency import adjacency_for
from bencao.retrieval.search.fusion import rrf


#: How deep a layer-restricted search may look (candidates per query and retriever) before it settles for
#: fewer than k triples of the layer.
MAX_LAYER_DEPTH = 8192


def nearest_triples(g: Graph, ix: Any, queries: list[str], k: int, *, rrf_k: int = 60,
                    layers: list[str] | None = None) -> tuple[list[tuple[str, float]], dict[str, dict[str, Any]]]:
    """The ``k`` nearest triples to the queries (lexical + dense, fused), and their rows.

    With ``layers``, the k nearest *of those layers*: the search goes deeper (×4 a round, up to
    :data:`MAX_LAYER_DEPTH`) until k of them are found or the indexes run out, so a personalized triple
    that ranks below k among all triples is still recalled (TCM-DiffRAG recalls G_style first).
    """
    depth = k * 2
    while True:
        ranked: list[list[tuple[str, float]]] = []
        for q in queries:
            check_deadline("searching the query triples")
            if ix is not None:
                ranked.append(ix.lexical_search("triples", q, depth))
                ranked.append(ix.dense_search("triples", q, depth))
        fused = rrf(ranked, rrf_k)
        if layers is None:
            fused = fused[:k]
            found = g.get_triples([tid for tid, _ in fused])
            return [(tid, s) for tid, s in fused if tid in found], found
        found = g.get_triples([tid for tid, _ in fused])
        kept = [(tid, s) for tid, s in fused if tid in found and found[tid]["layer"] in layers]
        exhausted = all(len(r) < depth for r in ranked)
        if len(kept) >= k or exhausted or depth >= MAX_LAYER_DEPTH:
            return kept[:k], found
        depth = min(depth * 4, MAX_LAYER_DEPTH)


def micro_retrieve(g: Graph, ix: Any, queries: list[str], linked_ids: list[str], *, k_triples: int = 10,
                   anchored_triples: int = 20, snippets_per_triple: int = 2, rrf_k: int = 60,
                   layers: list[str] | None = None, asked_relations: list[str] | tuple[str, ...] = (),
                   asked_triples: int = 0) -> tuple[list[TripleHit], list[SnippetHit]]:
    """Returns ``(triples, snippets)`` as Evidence hits. ``layers`` keeps only triples of those layers;
    ``asked_triples`` of ``asked_relations`` shared among the linked entities (head or tail, most
    confident first), scored above the fused and anchored ones."""
    fused, found = nearest_triples(g, ix, queries, k_triples, rrf_k=rrf_k, layers=layers)
    triples: dict[str, TripleHit] = {}
    for tid, score in fused:
        triples[tid] = TripleHit.from_row(found[tid], score=round(score, 6), via=["micro"])
    if asked_relations and asked_triples > 0 and linked_ids:
        per_asked = max(1, asked_triples // len(linked_ids))
        for eid in linked_ids:
            rows = [t for rel in asked_relations for t in g.triples_of(eid, "both", rel, limit=per_asked if layers is None else None)
                    if layers is None or t["layer"] in layers]
            rows.sort(key=lambda t: -t["confidence"])  # stable: ties keep the asked relations' order (功效: has_effect first)
            for t in rows[:per_asked]:
                score = round((1.0 + t["confidence"]) / (rrf_k + 1), 6)  # a first-rank fused hit scores 1 / (rrf_k + 1) per list
                if t["id"] in triples:
                    triples[t["id"]].via.append("asked")
                    triples[t["id"]].score = max(triples[t["id"]].score or 0.0, score)
                else:
                    triples[t["id"]] = TripleHit.from_row(t, score=score, via=["asked"])
    per_entity = max(1, anchored_triples // max(1, len(linked_ids))) if linked_ids else 0
    # each linked entity's most confident triples, from the cached adjacency (a hub's 10^5 triples
    # are not read to keep a few)
    top = {eid: [e[0] for e in adjacency_for(g).top_edges(eid, per_entity)] for eid in linked_ids} if per_entity else {}
    by_rowid = g.get_triples_by_rowid(r for rows in top.values() for r in rows) if top else {}
    for eid in linked_ids:
        for t in (by_rowid[r] for r in top.get(eid, []) if r in by_rowid):
            if layers is not None and t["layer"] not in layers:
                continue
            if t["id"] in triples:
                if "anchored" not in triples[t["id"]].via:
                    triples[t["id"]].via.append("anchored")
            else:
                triples[t["id"]] = TripleHit.from_row(t, score=round(t["confidence"] / (rrf_k + 1), 6), via=["anchored"])
    snippets: dict[str, SnippetHit] = {}
    for rank, t in enumerate(sorted(triples.values(), key=lambda t: -(t.score or 0.0))):  # asked facts' passages first
        srcs = g.snippets_of_triple(t.id)[:snippets_per_triple]
        t.snippet_ids = [s["id"] for s in srcs]
        for s in srcs:
            hit = SnippetHit.from_row(s, "micro", 1.0 / (rrf_k + rank + 1))
            if s["id"] in snippets:
                snippets[s["id"]].merge(hit)
            else:
                snippets[s["id"]] = hit
    return list(triples.values()), list(snippets.values())
