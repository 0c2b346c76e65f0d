"""Two-layer knowledge graph (TCM MLKG-RAG): cross-layer links and top-down "therapy retrieval".

``link_layers`` links each entity of one layer (e.g. clinical cases) to the nearest entity of the
other layer (e.g. terminology with explanations) when their cosine distance is below ``delta``,
stored as graph links (kind ``explains``) under a derived document, so ``graph remove`` of that
document undoes them. At query time ``cross_layer`` follows the stored links of linked entities.

``therapy_retrieve`` treats the section tree as a classification tree: from the books (roots) it
descends level by level, keeping the ``beam`` children whose subtree best matches the question
(BM25 + dense scores of sections, a subtree scoring as its best section), until leaves; their
snippets are the result, each with the classification path that reached it.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from typing import Any


from bencao.io import content_hash
from bencao.retrieval.graph.store import Graph
from bencao.retrieval.evidence import SnippetHit


def link_layers(g: Graph, ix: Any, *, source_layer: str, target_layer: str, delta: float = 0.35, kind: str = "explains") -> dict[str, int]:
    """Link ``source_layer`` entities to their nearest ``target_layer`` entity within cosine distance ``delta``."""
    from bencao.retrieval.index.dense import DenseIndex
    from bencao.retrieval.index.items import entity_items

    items = [it for it in entity_items(g) if ix.can_embed(it.text)]
    src = [it for it in items if it.id in _layer_ids(g, source_layer)]
    tgt = [it for it in items if it.id in _layer_ids(g, target_layer)]
    if not src or not tgt:
        return {"source": len(src), "target": len(tgt), "links": 0}
    emb = ix.embedder()
    tindex = DenseIndex.build(emb.encode([t.text for t in tgt]), [t.id for t in tgt])
    hits = tindex.search(emb.encode([s.text for s in src]), 1)
    key = content_hash(source_layer, target_layer, delta, *(s.id for s in src), *(t.id for t in tgt))
    b = g.builder(source=f"layer-links:{source_layer}->{target_layer}", kind="derived", format="layer-links", content_key=key,
                  title=f"{source_layer} → {target_layer} links (δ={delta})")
    n = 0
    ents = g.get_entities([s.id for s in src] + [h[0][0] for h in hits if h])
    for s, h in zip(src, hits):
        if not h:
            continue
        tid, cos = h[0]
        if 1.0 - cos < delta and tid != s.id:
            for eid in (s.id, tid):
                e = ents[eid]
                b.entity(e["name"], e["type"], id=eid, layer=e["layer"])
            b.link(s.id, tid, kind, round(float(cos), 4))
            n += 1
    if n:
        g.commit(b)
    from bencao.retrieval.index import refresh_indexes

    refresh_indexes(g)
    return {"source": len(src), "target": len(tgt), "links": n}


def _layer_ids(g: Graph, layer: str) -> set[str]:
    return {r[0] for r in g.conn.execute("SELECT id FROM entities WHERE layer=?", (layer,))}


def cross_layer(g: Graph, entity_ids: list[str]) -> list[dict[str, Any]]:
    """Entities linked to ``entity_ids`` across layers: ``{id, from, kind, score}``."""
    out: dict[str, dict[str, Any]] = {}
    for eid in entity_ids:
        for link in g.links_of(eid):
            other = link["dst_id"] if link["src_id"] == eid else link["src_id"]
            if other in entity_ids or other in out:
                continue
            out[other] = {"id": other, "from": eid, "kind": link["kind"], "score": float(link["score"])}
    return list(out.values())


_TREES: dict[tuple, tuple[dict, dict]] = {}
_TREES_LOCK = threading.Lock()


def section_tree(g: Graph) -> tuple[dict[str | None, list[str]], dict[str, str | None]]:
    """(children by parent, parent by section) of the whole macro tree, read once per graph state
    (``Graph.state_key``) instead of once per question."""
    key = g.state_key()
    with _TREES_LOCK:
        tree = _TREES.get(key)
        if tree is None:
            children: dict[str | None, list[str]] = defaultdict(list)
            parent: dict[str, str | None] = {}
            for sid, par in g.conn.execute("SELECT id, parent_id FROM sections ORDER BY document_id, ord"):
                children[par].append(sid)
                parent[sid] = par
            for k in [k for k in _TREES if k[0] == key[0]]:
                del _TREES[k]
            tree = _TREES[key] = (children, parent)
        return tree


#: Sections taken from the lexical index for the therapy descent (plus up to 50 dense hits).
THERAPY_LEXICAL_K = 200


def therapy_retrieve(g: Graph, ix: Any, question: str, *, beam: int = 2, n_snippets: int = 3) -> list[SnippetHit]:
    if ix is None:
        return []
    scores: dict[str, float] = {}
    # the best-scoring sections only: the descent follows each subtree's best section, and a
    # common character matches tens of thousands of sections of a large corpus
    hits = ix.lexical_search("sections", question, THERAPY_LEXICAL_K)
    if hits and hits[0][1] > 0:
        top = hits[0][1]
        scores = {sid: sc / top for sid, sc in hits}
    for sid, cos in ix.dense_search("sections", question, 50):
        scores[sid] = scores.get(sid, 0.0) + max(0.0, cos)
    if not scores:
        return []
    children, parent = section_tree(g)
    subtree: dict[str, float] = {}
    for sid, sc in scores.items():  # propagate each section's score to its ancestors (max)
        cur: str | None = sid
        while cur is not None:
            if subtree.get(cur, 0.0) >= sc:
                break
            subtree[cur] = sc
            cur = parent.get(cur)
    level = [c for c in children.get(None, []) if subtree.get(c, 0.0) > 0]
    level = sorted(level, key=lambda c: -subtree[c])[:beam]
    leaves: list[str] = []
    while level:
        nxt: list[str] = []
        for sid in level:
            kids = [c for c in children.get(sid, []) if subtree.get(c, 0.0) > 0]
            if not kids or scores.get(sid, 0.0) >= max(subtree[c] for c in kids):
                leaves.append(sid)
            else:
                nxt.extend(sorted(kids, key=lambda c: -subtree[c])[:beam])
        level = sorted(dict.fromkeys(nxt), key=lambda c: -subtree[c])[:beam]
    out: list[SnippetHit] = []
    for sid in sorted(leaves, key=lambda c: -subtree[c]):
        for s in g.snippets_of_section(sid)[:1]:
            out.append(SnippetHit.from_row(s, "therapy", round(subtree[sid], 4)))
        if len(out) >= n_snippets:
            break
    return out
