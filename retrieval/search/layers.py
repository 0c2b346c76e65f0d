"""Two-layer knowledge graph (TCM MLKG-RAG): cross-layer links and top-down "therapy retrieval".

``link_layers`` links each entity of one layer (e.g. terminology with explanations) to the entities
of the other layer (e.g. the case terms of clinical records) with the same name or alias, else to
the nearest one when their cosine distance is below ``delta``, stored as graph links (kind ``explains``) under a derived document, so ``graph remove`` of that
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
    """Link ``source_layer`` entities to ``target_layer`` entities: by name first, then by embedding.

    Case records (entities of type ``case``) are never linked: the case layer is linked through the
    terms its records name (:mod:`bencao.retrieval.search.case_terms`). A source entity whose name
    or alias has the matching key (:func:`bencao.text.norm_key`: traditional = simplified) of a
    target entity's name or alias is linked to every such target (score 1.0, ``exact``). Each other
    source entity is linked to its nearest target entity of the same kind (:func:`type_group`:
    symptoms with symptoms and diseases, herbs with foods and substances, dishes with formulas)
    when their cosine distance is below ``delta`` (``dense``), with ``ix`` the embedder: anything with ``can_embed(text)`` and the
    embedding cache of :func:`~bencao.retrieval.search.cases.embed_cached` (the graph's
    :class:`~bencao.retrieval.index.Indexes`, or a :class:`LinkEmbedder`); ``ix=None`` makes the
    exact links only. Entities the embedder cannot read (Chinese under the default English MiniLM)
    are skipped and counted (``*_unreadable``). A second run replaces the first run's links between
    the same two layers (one derived document per layer pair).
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
        if all(n in known for n in missing):  # a case layer of records only: ingested before records were split into terms
            raise BencaoError(f"layer {' and '.join(map(repr, missing))} of {g.dir} holds case records only, no case terms to link: "
                              "remove the cases document and add it again (`bencao graph remove`, `bencao graph add`)")
        raise BencaoError(f"no entity of layer {' or '.join(map(repr, missing))} in {g.dir}; layers here: {', '.join(known)}")
    exact = _exact_pairs(g, source_layer, target_layer)
    report: dict[str, Any] = {"source": len(src_ids), "target": len(tgt_ids), "exact": len(exact), "dense": 0, "source_unreadable": 0,
                              "target_unreadable": 0, "embedder": ix.cfg.embedder.model_name if ix is not None else None,
                              "languages": list(ix.cfg.embedder.languages) if ix is not None else [], "links": 0, "document": None}
    pairs: dict[tuple[str, str], float] = {p: 1.0 for p in exact}
    matched = {s for s, _ in exact}
    if ix is not None:
        items = [it for it in entity_items(g) if (it.id in src_ids and it.id not in matched) or it.id in tgt_ids]
        readable = [it for it in items if ix.can_embed(it.text)]
        src = [it for it in readable if it.id in src_ids]
        tgt = [it for it in readable if it.id in tgt_ids]
        report["source_unreadable"] = len(src_ids) - len(matched) - len(src)
        report["target_unreadable"] = len(tgt_ids) - len(tgt)
        if src and tgt:
            texts = [it.text for it in src + tgt]
            if progress:
                progress("embedding", 0, len(texts))
            vecs = embed_cached(ix, texts)
            if progress:
                progress("embedding", len(texts), len(texts))
            types = {i: type_group(e["type"]) for i, e in g.get_entities(it.id for it in src + tgt).items()}
            for group in sorted({types[t.id] for t in tgt}):  # nearest of the same kind: a herb is no symptom's name
                gs, gt = [i for i, it in enumerate(src) if types[it.id] == group], [j for j, it in enumerate(tgt) if types[it.id] == group]
                if not gs:
                    continue
                hits = DenseIndex.build(vecs[len(src):][gt], [tgt[j].id for j in gt]).search(vecs[gs], 2)
                for i, h in zip(gs, hits):
                    best = next(((tid, cos) for tid, cos in h if tid != src[i].id), None)
                    if best is not None and 1.0 - best[1] < delta:
                        pairs[(src[i].id, best[0])] = round(float(best[1]), 4)
                        report["dense"] += 1
    key = content_hash(source_layer, target_layer, delta, kind, ix.embedder_id if ix is not None else "exact",
                       *sorted(f"{s}>{t}:{v}" for (s, t), v in pairs.items()))
    b = g.builder(source=f"layer-links:{source_layer}->{target_layer}", kind="derived", format="layer-links", content_key=key,
                  title=f"{source_layer} → {target_layer} links (δ={delta})",
                  meta={"source_layer": source_layer, "target_layer": target_layer, "delta": delta, "exact": report["exact"],
                        "dense": report["dense"], "embedder": ix.embedder_id if ix is not None else None, "kind": kind})
    ents = g.get_entities({x for p in pairs for x in p})
    for (sid, tid), score in pairs.items():
        for eid in (sid, tid):
            e = ents[eid]
            b.entity(e["name"], e["type"], id=eid, layer=e["layer"])
        b.link(sid, tid, kind, score)
    report["links"] = len(pairs)
    old = [r[0] for r in g.conn.execute(
        "SELECT id FROM documents WHERE format='layer-links' AND json_extract(meta, '$.source_layer')=? AND json_extract(meta, '$.target_layer')=? "
        "AND id != ?", (source_layer, target_layer, b.document_id))]
    for doc_id in old:
        g.remove_document(doc_id)
    report["replaced"] = old
    if pairs:
        g.commit(b)
        report["document"] = b.document_id
    from bencao.retrieval.index import refresh_indexes

    refresh_indexes(g)
    return report


#: Entity types that name the same kind of thing across layers (a book's symptom, a case's disease ...).
TYPE_GROUPS = {"disease information": ("symptom", "sign", "finding", "disease", "syndrome", "tongue", "coating", "pulse"),
               "materia medica": ("substance", "herb", "food", "supplement_ingredient", "ingredient", "chemical", "nutrient"),
               "prescription": ("dish", "formula", "recipe")}


def type_group(type_: str) -> str:
    """The kind of thing an entity type names (:data:`TYPE_GROUPS`; any other type is its own kind).
    Embedding links join entities of one kind only."""
    return next((g for g, types in TYPE_GROUPS.items() if type_ in types), type_)


def _layer_ids(g: Graph, layer: str) -> set[str]:
    """Entities of ``layer`` that links may join: every one but the case records (type ``case``)."""
    return {r[0] for r in g.conn.execute("SELECT id FROM entities WHERE layer=? AND type != 'case'", (layer,))}


def _exact_pairs(g: Graph, source_layer: str, target_layer: str) -> list[tuple[str, str]]:
    """(source, target) entity pairs sharing a matching key of a name or alias, in a stable order."""
    rows = g.conn.execute(
        "SELECT DISTINCT s.entity_id, t.entity_id FROM aliases t JOIN entities et ON et.id = t.entity_id "
        "JOIN aliases s ON s.norm = t.norm JOIN entities es ON es.id = s.entity_id "
        "WHERE et.layer=? AND et.type != 'case' AND es.layer=? AND es.type != 'case' AND s.entity_id != t.entity_id "
        "ORDER BY es.rowid, et.rowid", (target_layer, source_layer)).fetchall()
    return [(r[0], r[1]) for r in rows]


class LinkEmbedder:
    """An embedder for `graph link-layers` that needs no index of its own (e.g. the static-zh model
    on a graph indexed with MiniLM): the model of an index configuration, its vectors cached in
    ``<graph>/cache/link-embeddings/<embedder-id>/cache.sqlite`` (and the per-user shared cache)."""

    def __init__(self, g: Graph, cfg: Any):
        from bencao.retrieval.index.embedder import embedder_id

        self.cfg = cfg
        self.embedder_id = embedder_id(cfg.embedder)
        self.dense_dir = g.dir / "cache" / "link-embeddings" / self.embedder_id
        self.dense_dir.mkdir(parents=True, exist_ok=True)
        self._embedder = None

    def can_embed(self, text: str) -> bool:
        from bencao.text import lang_of

        return self.cfg.embedder.embeds(lang_of(text))

    def embedder(self) -> Any:
        from bencao.retrieval.index.embedder import get_embedder

        if self._embedder is None:
            self._embedder = get_embedder(self.cfg.embedder)
        return self._embedder


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
    """Terminology entities linked (``explains``, from `graph link-layers`) to a case or to its case terms."""
    ids = [case_id] + [r[0] for r in g.conn.execute("SELECT tail_id FROM triples WHERE head_id=? AND relation IN ('presents', 'diagnosed_as', "
                                                    "'treated_with')", (case_id,))]
    out = []
    linked = [x for x in cross_layer(g, ids) if x["kind"] == "explains"]
    info = g.get_entities([x["id"] for x in linked])
    for x in sorted(linked, key=lambda x: -x["score"]):
        e = info.get(x["id"]) or {}
        if e.get("layer") == "case":
            continue
        out.append({"id": x["id"], "name": e.get("name"), "description": e.get("description"), "score": x["score"], "via": x["from"]})
    return out
