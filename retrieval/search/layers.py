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
from dataclasses import dataclass, field
from typing import Any, Callable

from bencao.errors import BencaoError
from bencao.io import content_hash
from bencao.retrieval.graph.store import Graph
from bencao.retrieval.evidence import SnippetHit


def link_layers(g: Graph, ix: Any, *, source_layer: str, target_layer: str, delta: float = 0.35, kind: str = "explains",
                progress: Callable[[str, int, int], None] | None = None) -> dict[str, Any]:
    """Link ``source_layer`` entities to their nearest ``target_layer`` entity within cosine distance ``delta``.

    Entity texts (name, aliases, definition: the dense index's own items) are embedded through the
    index's embedding cache, so what `graph index` embedded is not embedded again. Entities the
    embedder cannot read (Chinese under the default English MiniLM, ``index.embedder.languages:
    [en]``) are skipped and counted (``*_unreadable``): use a multilingual embedder
    (``configs/retrieval/multilingual.yaml``) to link them. A second run replaces the first run's
    links between the same two layers (one derived document per layer pair).
    """
    from bencao.retrieval.index.dense import DenseIndex
    from bencao.retrieval.index.items import entity_items
    from bencao.retrieval.search.cases import embed_cached

    if not 0.0 < delta <= 2.0:
        raise BencaoError(f"delta={delta}: a cosine distance threshold must lie in (0, 2]")
    src_ids, tgt_ids = _layer_ids(g, source_layer), _layer_ids(g, target_layer)
    if not src_ids or not tgt_ids:
        known = sorted(r[0] for r in g.conn.execute("SELECT DISTINCT layer FROM entities"))
        missing = [n for n, ids in ((source_layer, src_ids), (target_layer, tgt_ids)) if not ids]
        raise BencaoError(f"no entity of layer {' or '.join(map(repr, missing))} in {g.dir}; layers here: {', '.join(known)}")
    items = [it for it in entity_items(g) if it.id in src_ids or it.id in tgt_ids]
    readable = [it for it in items if ix.can_embed(it.text)]
    src = [it for it in readable if it.id in src_ids]
    tgt = [it for it in readable if it.id in tgt_ids]
    report: dict[str, Any] = {"source": len(src), "target": len(tgt), "source_unreadable": len(src_ids) - len(src),
                              "target_unreadable": len(tgt_ids) - len(tgt), "embedder": ix.cfg.embedder.model,
                              "languages": list(ix.cfg.embedder.languages), "links": 0, "document": None}
    if not src or not tgt:
        return report
    texts = [it.text for it in src + tgt]
    if progress:
        progress("embedding", 0, len(texts))
    vecs = embed_cached(ix, texts)
    if progress:
        progress("embedding", len(texts), len(texts))
    tindex = DenseIndex.build(vecs[len(src):], [t.id for t in tgt])
    hits = tindex.search(vecs[: len(src)], 2)
    key = content_hash(source_layer, target_layer, delta, kind, ix.embedder_id, *(s.id for s in src), *(t.id for t in tgt))
    b = g.builder(source=f"layer-links:{source_layer}->{target_layer}", kind="derived", format="layer-links", content_key=key,
                  title=f"{source_layer} → {target_layer} links (δ={delta})",
                  meta={"source_layer": source_layer, "target_layer": target_layer, "delta": delta, "embedder": ix.embedder_id, "kind": kind})
    n = 0
    best = [next(((tid, cos) for tid, cos in h if tid != s.id), None) for s, h in zip(src, hits)]
    ents = g.get_entities([s.id for s in src] + [x[0] for x in best if x])
    for s, x in zip(src, best):
        if x is None:
            continue
        tid, cos = x
        if 1.0 - cos < delta:
            for eid in (s.id, tid):
                e = ents[eid]
                b.entity(e["name"], e["type"], id=eid, layer=e["layer"])
            b.link(s.id, tid, kind, round(float(cos), 4))
            n += 1
    report["links"] = n
    old = [r[0] for r in g.conn.execute(
        "SELECT id FROM documents WHERE format='layer-links' AND json_extract(meta, '$.source_layer')=? AND json_extract(meta, '$.target_layer')=? "
        "AND id != ?", (source_layer, target_layer, b.document_id))]
    for doc_id in old:
        g.remove_document(doc_id)
    report["replaced"] = old
    if n:
        g.commit(b)
        report["document"] = b.document_id
    from bencao.retrieval.index import refresh_indexes

    refresh_indexes(g)
    return report


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


# --------------------------------------------------------------------------- therapy retrieval over cases


@dataclass
class TherapyResult:
    """What the case descent found: the understood question, the path through the tree, the cases."""

    patient: dict[str, Any] = field(default_factory=dict)
    disease: list[str] = field(default_factory=list)
    path: list[list[dict[str, Any]]] = field(default_factory=list)  # per level: [{id, name, score}]
    cases: list[dict[str, Any]] = field(default_factory=list)
    similarity: str | None = None
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        from dataclasses import asdict

        return asdict(self)

    def snippets(self) -> list[SnippetHit]:
        """The cases as evidence snippets (``via`` therapy-case) with their classification and explanations."""
        out = []
        for c in self.cases:
            if not c.get("snippet"):
                continue
            hit = SnippetHit.from_row(c["snippet"], "therapy-case", c["score"])
            hit.case = {"case_id": c["id"], "classification": [x["name"] for x in c["classification"]], "explanations": c["explanations"],
                        "patient_match": c["patient_match"]}
            out.append(hit)
        return out


def case_therapy(g: Graph, ix: Any, question: str, cfg: Any = None, *, patient: Any = None, understander: Any = None) -> TherapyResult:
    """MLKG-RAG's therapy retrieval: question → disease information → descend the disease tree by Σ
    similarity (level 1, then level 2) → the leaf's cases, filtered by the patient index (the
    question's patient information, or ``patient``), each with the terminology that explains it.

    ``patient`` is a :class:`~bencao.retrieval.search.case_entities.PatientInfo` or a mapping such as
    the question-understanding stage's patient block (``{"age_group": "老年", "sex": "女", "history":
    [...]}``, words the case lexicon knows; an unknown age group or sex is left out); what it gives
    overrides what the rules read in the question.

    ``cfg`` is a :class:`bencao.retrieval.search.cases.CasesConfig`; ``understander`` any object with
    ``understand(text) -> CaseInfo`` (default: the configured one, LLM-free rules).
    """
    from bencao.retrieval.search.case_entities import PatientInfo, get_understander, load_lexicon, patient_info
    from bencao.retrieval.search.cases import CasesConfig, PatientIndex, Similarity, classified_cases, descend, disease_tree

    cfg = cfg or CasesConfig()
    res = TherapyResult()
    leaves_cases = classified_cases(g)
    if not leaves_cases:
        res.notes.append("no classified cases in the graph (add cases and a disease tree, then `bencao graph cases classify`)")
        return res
    found = disease_tree(g, cfg.tree)
    if found is None:
        res.notes.append("no disease tree in the graph")
        return res
    _, roots = found
    lex = load_lexicon(cfg.lexicon)
    und = understander or get_understander(cfg.understander, graph=g, lexicon=lex)
    info = und.understand(question)
    asked = patient_info(patient, lex) if isinstance(patient, dict) else patient if patient is not None else PatientInfo()
    pinfo = PatientInfo(asked.age_group or info.patient.age_group, asked.sex or info.patient.sex, asked.age or info.patient.age,
                        list(asked.history or info.patient.history))
    res.patient = {k: v for k, v in pinfo.__dict__.items() if v not in (None, [])}
    queries = [d.text for d in info.disease] or [question]
    res.disease = [d.text for d in info.disease]
    if not info.disease:
        res.notes.append("no disease information recognised in the question: the whole question is compared with the classes")
    texts = queries + [c.embed_text(deep) for r in roots for c, deep in [(r, True), *((ch, False) for ch in r.children)]]
    sim = Similarity(ix, cfg.similarity, texts)
    res.similarity = sim.mode
    levels = descend(sim, queries, roots, beam=cfg.beam)
    res.path = [[{"id": c.id, "name": c.name, "score": s} for c, s in lvl] for lvl in levels]
    if len(levels) < 2:
        res.notes.append("the question's disease information matches no class of the tree")
        return res
    by_id = {c.id: c for r in roots for c in [r, *r.children]}
    parent = {ch.id: r for r in roots for ch in r.children}
    cand: dict[str, str] = {}
    for leaf, _ in levels[-1]:
        for cid, _conf in leaves_cases.get(leaf.id, []):
            cand.setdefault(cid, leaf.id)
    if not cand:
        res.notes.append(f"no case is filed under {', '.join(c.name for c, _ in levels[-1])}")
        return res
    index = PatientIndex.of(g, lex)
    got = {cid: index.matches(cid, pinfo.age_group, pinfo.sex, pinfo.history) for cid in cand}
    asked = next(iter(got.values()))[1] if got else 0
    best = max((len(m) for m, _ in got.values()), default=0)
    matched = [cid for cid in cand if len(got[cid][0]) == best]
    if asked and best < asked:
        if not cfg.patient_fallback:
            res.notes.append("no case of the leaf matches every patient attribute (patient_fallback is off)")
            return res
        res.notes.append(f"no case of the leaf matches all {asked} patient attribute(s); the closest ({best} matched) are shown")
    from bencao.retrieval.search.cases import _case_disease_names

    names = _case_disease_names(g, matched)
    m = {cid: (sim.matrix(queries, [[n] for n in ns], ns).max(axis=1).sum() if ns else 0.0) for cid, ns in names.items()}
    ranked = sorted(matched, key=lambda c: (-m[c], c))[: cfg.k_cases]
    ents = g.get_entities(ranked)
    for cid in ranked:
        e = ents.get(cid) or {}
        sec = g.conn.execute("SELECT ts.snippet_id FROM triple_sources ts JOIN triples t ON t.id = ts.triple_id "
                             "WHERE t.head_id=? AND ts.snippet_id IS NOT NULL LIMIT 1", (cid,)).fetchone()
        snip = g.get_snippet(sec[0]) if sec else None
        leaf = by_id[cand[cid]]
        res.cases.append({"id": cid, "name": e.get("name"), "score": round(float(m[cid]), 6), "patient": index.cases.get(cid, {}),
                          "patient_match": got[cid][0], "disease": names.get(cid, []), "snippet": snip,
                          "classification": [{"id": parent[leaf.id].id, "name": parent[leaf.id].name}, {"id": leaf.id, "name": leaf.name}],
                          "explanations": explanations(g, cid)})
    return res


def explanations(g: Graph, case_id: str) -> list[dict[str, Any]]:
    """Terminology entities linked (``explains``, from `graph link-layers`) to a case or to its disease entities."""
    ids = [case_id] + [r[0] for r in g.conn.execute("SELECT tail_id FROM triples WHERE head_id=? AND relation IN ('presents', 'diagnosed_as')", (case_id,))]
    out = []
    linked = [x for x in cross_layer(g, ids) if x["kind"] == "explains"]
    info = g.get_entities([x["id"] for x in linked])
    for x in sorted(linked, key=lambda x: -x["score"]):
        e = info.get(x["id"]) or {}
        if e.get("layer") == "case":
            continue
        out.append({"id": x["id"], "name": e.get("name"), "description": e.get("description"), "score": x["score"], "via": x["from"]})
    return out
