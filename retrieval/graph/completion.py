"""Knowledge-graph completion with the graph's UKGE model (Yaoshi-RAG: add candidates above 0.85).

For each chosen relation, every (head, relation) pair is scored against every candidate tail of a
type the relation takes; candidates scoring at least ``threshold`` become triples of layer
``completed`` (origin ``ukge-completion``, source kind ``inferred``) with the score and a reason in
their attributes. All of one run's triples form ONE derived document (kind ``derived``, format
``completion``), so ``bencao graph remove <document id>`` takes them out as a group.

Guarantees: only entities already in the graph are used (by their existing id, name and type);
a candidate's tail type is one the relation already takes from heads of the same type in the
observed graph (or the pair the ``relations`` table declares); an existing triple, in any layer, is never added again; no
self-loops.

Functional relations are never given contradictory values: a relation declared in
``functional_relations`` (``has_nature``: a food has one nature) or, with ``infer_functional``, one
with at most one value per head among the observed triples gets no proposal for a head that already
has a value (in any layer) and at most one for a head without.

Closed-world knowledge is never completed: a recipe lists all its ingredients and indications, a
catalogue all its members, an ontology all a term's parents, so a triple they do not state is false,
not missing. ``closed_world`` names relations that are closed everywhere (``has_ingredient``,
``listed_in``, ``variant_of``); a (relation, head type) whose every observed triple comes from a
curated row (``curated_kinds``) or a closed-world document format (``closed_formats``: recipes,
catalogues, ontologies) is closed too (``is_a`` from an ontology, ``treats`` from a recipe's dish).

Completion is measured before it is trusted: :func:`evaluate_completion` hides a seeded share of
the open triples, trains UKGE on the rest and counts how many of the triples completion then
proposes at the threshold are hidden true ones (precision, a lower bound: an unstated true triple
counts as wrong) and how many hidden ones it finds (recall). ``bencao graph complete --evaluate``
writes that report to ``<graph>/ukge/completion_eval.json``; with ``min_precision`` > 0 (the
default) completion adds only relations whose measured precision reaches it, and refuses to run
on a graph whose observed triples, model settings or threshold differ from the evaluated ones.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Callable, Literal

import numpy as np


from bencao.config import field
from bencao.errors import BencaoError
from bencao.io import atomic_write_json, content_hash
from bencao.retrieval.graph.confidence import MODEL_DIR, OBSERVED_LAYERS, UKGE, TripleData, UKGEConfig, load_triples, train_ukge

ORIGIN = "ukge-completion"


@dataclass
class CompleteConfig:
    relations: list[str] = field(default_factory=list, help="Relations to complete; empty = every relation with at least min_relation_triples observed triples.")
    exclude_relations: list[str] = field(default_factory=list, help="Relations never completed (e.g. ones whose tails are free text).")
    closed_world: list[str] = field(default_factory=lambda: ["has_ingredient", "listed_in", "variant_of"],
                                    help="Closed-world relations: their sources list them completely (a recipe's ingredients, a catalogue's members), so an absent triple is false. Never completed; naming one in `relations` is an error.")
    skip_curated_relations: bool = field(True, help="Skip each (relation, head type) whose every observed triple comes from curated rows (curated_kinds) or closed-world formats (closed_formats): ontology is_a, a recipe dish's treats. Those lists are authoritative, not incomplete extractions.")
    curated_kinds: list[str] = field(default_factory=lambda: ["record"], help="triple_sources.kind values that count as curated.")
    closed_formats: list[str] = field(default_factory=lambda: ["recipes-jsonl", "catalog-csv", "foodon-jsonl", "ontology-json", "obo", "owl", "skos",
                                                             "cases-jsonl", "cases-csv", "disease-tree", "case-classification"],
                                      help="Document formats whose records state a head's facts completely (recipes, catalogues, ontologies).")
    min_precision: float = field(0.5, help="Complete only relations whose held-out precision at `threshold` (from `bencao graph complete --evaluate`) reaches this; 0 = complete without an evaluation.")
    min_evaluated: int = field(5, help="A relation's held-out precision counts only when the evaluation proposed at least this many of its triples.")
    min_relation_triples: int = field(5, help="With relations empty: skip relations with fewer observed triples (too little to learn from).")
    threshold: float = field(0.85, help="Minimum UKGE score for a candidate to be added (Yaoshi-RAG uses 0.85; measured held-out "
                                        "precision at 0.85 on the sample graph: 0/11, see docs/confidence.md).")
    heads: Literal["typed", "existing"] = field("typed", help="typed: every modelled entity of a head type the relation takes; existing: only heads that already have the relation.")
    max_per_head: int = field(3, help="At most this many new tails per (head, relation), best first.")
    max_total: int = field(5000, help="At most this many triples in one run, best first.")
    min_type_share: float = field(0.05, help="A tail (head) type is allowed when it makes up at least this share of the relation's observed tails (heads).")
    skip_inverse: bool = field(True, help="Do not propose (h, r, t) when (t, r, h) exists or is proposed: DistMult scores both directions alike.")
    functional_relations: list[str] = field(default_factory=lambda: ["has_nature"],
                                            help="Relations with at most one value per head (a food has one nature): a head that has a value, in any "
                                                 "layer, gets no proposal, and one without gets at most one. Added to the inferred ones (infer_functional).")
    infer_functional: bool = field(True, help="Also treat as functional every relation with at most one value per head in the graph's observed triples.")
    batch_size: int = field(1024, help="Heads scored per matrix product.")
    reason_neighbours: int = field(3, help="Existing heads with the same (relation, tail) most similar to the head, quoted in the reason.")
    dry_run: bool = field(False, help="Score and report the candidates without writing them to the graph.")


@dataclass
class Candidate:
    head_id: str
    relation: str
    tail_id: str
    score: float
    reason: str
    similar_heads: list[str]


def relation_types(g: Any, min_share: float) -> dict[str, dict[str, set[str]]]:
    """relation → {head type → allowed tail types}, learnt from the observed triples.

    Polymorphic relations (``is_a`` over foods, chemicals and organisms) are constrained per head
    type: a tail type is allowed for heads of type H when it holds at least ``min_share`` of the
    tails of the relation's observed triples whose head has type H. A (head_type, tail_type)
    declared in the ``relations`` table is always allowed.
    """
    q = ",".join("?" * len(OBSERVED_LAYERS))
    pairs: dict[str, dict[str, Counter[str]]] = defaultdict(lambda: defaultdict(Counter))
    for rel, ht, tt, n in g.conn.execute(
            f"SELECT t.relation, h.type, x.type, COUNT(*) FROM triples t JOIN entities h ON h.id = t.head_id "
            f"JOIN entities x ON x.id = t.tail_id WHERE t.layer IN ({q}) GROUP BY 1, 2, 3", OBSERVED_LAYERS):
        pairs[rel][ht][tt] += n
    out: dict[str, dict[str, set[str]]] = {}
    for rel, by_head in pairs.items():
        out[rel] = {}
        for ht, tails in by_head.items():
            total = sum(tails.values())
            out[rel][ht] = {tt for tt, n in tails.items() if n / total >= min_share}
    for r in g.relations():
        if r["head_type"] and r["tail_type"]:
            out.setdefault(r["name"], {}).setdefault(r["head_type"], set()).add(r["tail_type"])
    return out


def closed_signatures(g: Any, curated_kinds: list[str], closed_formats: list[str]) -> dict[str, set[str]]:
    """relation → head types whose observed triples all come from curated rows or closed-world formats.

    A triple is open when one of its sources is neither of kind ``curated_kinds`` nor from a document
    of a format in ``closed_formats``; a (relation, head type) with no open triple is closed.
    """
    kinds, fmts = list(curated_kinds) or [""], list(closed_formats) or [""]
    qk, qf, ql = ",".join("?" * len(kinds)), ",".join("?" * len(fmts)), ",".join("?" * len(OBSERVED_LAYERS))
    out: dict[str, set[str]] = defaultdict(set)
    for rel, head_type, n_open in g.conn.execute(
            f"SELECT t.relation, h.type, SUM(EXISTS (SELECT 1 FROM triple_sources ts JOIN documents d ON d.id = ts.document_id "
            f"WHERE ts.triple_id = t.id AND ts.kind NOT IN ({qk}) AND COALESCE(d.format, '') NOT IN ({qf}))) "
            f"FROM triples t JOIN entities h ON h.id = t.head_id WHERE t.layer IN ({ql}) GROUP BY 1, 2",
            [*kinds, *fmts, *OBSERVED_LAYERS]):
        if not n_open:
            out[rel].add(head_type)
    return dict(out)


def functional_relations(g: Any, cfg: CompleteConfig) -> dict[str, str]:
    """relation → why it is functional (at most one value per head): declared in ``functional_relations``,
    or, with ``infer_functional``, no head has two values for it among the observed triples."""
    out = {r: "declared (functional_relations)" for r in cfg.functional_relations}
    if cfg.infer_functional:
        q = ",".join("?" * len(OBSERVED_LAYERS))
        for rel, most in g.conn.execute(
                f"SELECT relation, MAX(n) FROM (SELECT relation, head_id, COUNT(*) AS n FROM triples WHERE layer IN ({q}) "
                f"GROUP BY relation, head_id) GROUP BY relation", OBSERVED_LAYERS):
            if most <= 1:
                out.setdefault(rel, "at most one value per head in the graph's observed triples")
    return out


def observed_key(g: Any) -> str:
    """Content key of the observed triples (ids are content hashes): what an evaluation is valid for."""
    import hashlib

    h = hashlib.sha1()
    q = ",".join("?" * len(OBSERVED_LAYERS))
    for (tid,) in g.conn.execute(f"SELECT id FROM triples WHERE layer IN ({q}) ORDER BY id", OBSERVED_LAYERS):
        h.update(tid.encode())
    return h.hexdigest()


ProgressFn = Callable[[str, int, int], None]


def completable_relations(g: Any, model: UKGE, cfg: CompleteConfig, types: dict[str, dict[str, set[str]]]) -> tuple[list[str], dict[str, str]]:
    """The relations to complete, and why each other one is not (relation → reason).

    Closed (relation, head type) signatures are removed from ``types`` in place, so no head of a
    closed type is ever scored.
    """
    closed_rel = set(cfg.closed_world)
    if cfg.relations:
        unknown = [r for r in cfg.relations if r not in model.relation_index]
        if unknown:
            raise BencaoError(f"relations {', '.join(unknown)}: not known to the graph's UKGE model (known: {', '.join(model.relations)})")
        asked_closed = [r for r in cfg.relations if r in closed_rel]
        if asked_closed:
            raise BencaoError(f"relations {', '.join(asked_closed)}: closed-world (closed_world): their sources list them completely, so "
                              "completing them would fabricate facts; remove them from closed_world to complete them anyway")
        relations = list(cfg.relations)
    else:
        observed_counts = Counter(r for (r,) in g.conn.execute(
            f"SELECT relation FROM triples WHERE layer IN ({','.join('?' * len(OBSERVED_LAYERS))})", OBSERVED_LAYERS))
        relations = [r for r in model.relations if observed_counts[r] >= cfg.min_relation_triples]
    why: dict[str, str] = {r: "closed-world relation (closed_world)" for r in relations if r in closed_rel}
    relations = [r for r in relations if r not in closed_rel]
    if cfg.skip_curated_relations:
        for rel, head_types in closed_signatures(g, cfg.curated_kinds, cfg.closed_formats).items():
            sig = types.get(rel)
            if rel not in relations or not sig:
                continue
            shut = sorted(ht for ht in sig if ht in head_types)
            for ht in shut:
                del sig[ht]
            if not sig:
                why[rel] = "every source is curated or closed-world (" + ", ".join(shut) + " heads)"
            elif shut:
                why[f"{rel} (from {', '.join(shut)})"] = "every source is curated or closed-world"
        relations = [r for r in relations if r not in why]
        if cfg.relations and not relations:
            raise BencaoError(f"relations {', '.join(cfg.relations)}: closed ({'; '.join(f'{k}: {v}' for k, v in why.items())}); "
                              "set skip_curated_relations=false to complete them anyway")
    return [r for r in relations if r not in set(cfg.exclude_relations)], why


def find_candidates(g: Any, model: UKGE, cfg: CompleteConfig, progress: ProgressFn | None = None,
                    hidden: set[tuple[str, str, str]] | None = None) -> tuple[list[Candidate], dict[str, Any]]:
    """Score candidate tails and return those at or above the threshold, best first, with a report.

    ``hidden`` triples (an evaluation's held-out part) are treated as absent from the graph.
    """
    import torch

    if not 0.0 <= cfg.threshold <= 1.0:
        raise BencaoError(f"threshold={cfg.threshold} must lie in [0, 1]")
    types = relation_types(g, cfg.min_type_share)
    relations, closed = completable_relations(g, model, cfg, types)

    # Every triple of the graph, any layer: never add one again (except those an evaluation hides).
    existing: dict[str, set[tuple[str, str]]] = defaultdict(set)
    for h, r, t in g.conn.execute("SELECT head_id, relation, tail_id FROM triples"):
        if hidden is None or (h, r, t) not in hidden:
            existing[r].add((h, t))
    # Types as the graph has them now (the model's copy may predate a type change).
    ent_types = {eid: typ for eid, typ in g.conn.execute("SELECT id, type FROM entities")}
    vocab = [(i, e) for i, e in enumerate(model.entities) if e in ent_types]
    emb = model.module.ent.weight.detach()
    emb_n = torch.nn.functional.normalize(emb, dim=-1)

    functional = functional_relations(g, cfg)
    found: list[Candidate] = []
    report: dict[str, Any] = {"relations": {}, "closed": closed, "functional": {r: w for r, w in functional.items() if r in relations}}
    for k, rel in enumerate(relations):
        if progress:
            progress(rel, k, len(relations))
        signature = types.get(rel, {})
        pairs = existing[rel]
        if cfg.heads == "existing":
            all_heads = sorted({h for h, _ in pairs if h in model.entity_index}, key=model.entity_index.__getitem__)
        else:
            all_heads = [e for _, e in vocab]
        rep = {"heads": 0, "signature": {ht: sorted(tt) for ht, tt in sorted(signature.items())}, "candidates": 0}
        is_functional = rel in functional
        per_head = 1 if is_functional else cfg.max_per_head
        if is_functional:
            rep["functional"] = functional[rel]
            rep["heads_with_a_value"] = 0
        report["relations"][rel] = rep
        r_idx = model.relation_index[rel]
        tails_by_head: dict[str, set[str]] = defaultdict(set)
        heads_by_tail: dict[str, list[str]] = defaultdict(list)
        for h, t in pairs:
            tails_by_head[h].add(t)
            heads_by_tail[t].append(h)
        proposed: set[tuple[str, str]] = set()
        for head_type, tail_types in sorted(signature.items()):
            head_ids = [h for h in all_heads if ent_types.get(h) == head_type]
            cand = [(i, e) for i, e in vocab if ent_types[e] in tail_types]
            rep["heads"] += len(head_ids)
            if not head_ids or not cand:
                continue
            cand_idx = torch.tensor([i for i, _ in cand], dtype=torch.long)
            cand_ids = [e for _, e in cand]
            if is_functional:  # a head that has a value already: another would contradict it
                rep["heads_with_a_value"] += sum(1 for h in head_ids if tails_by_head[h])
                head_ids = [h for h in head_ids if not tails_by_head[h]]
                if not head_ids:
                    continue
            for start in range(0, len(head_ids), cfg.batch_size):
                chunk = head_ids[start:start + cfg.batch_size]
                h_idx = torch.tensor([model.entity_index[h] for h in chunk], dtype=torch.long)
                with torch.no_grad():
                    scores = model.module.score_tails(h_idx, torch.full_like(h_idx, r_idx), cand_idx)
                # Enough of the best to find max_per_head new ones past existing tails and inverses.
                k = min(len(cand_ids), per_head + 1 + max(len(tails_by_head[h]) + len(heads_by_tail.get(h, ())) for h in chunk))
                top_v, top_i = torch.topk(scores, k, dim=1)
                for row, h in enumerate(chunk):
                    added = 0
                    order, vals = top_i[row].tolist(), top_v[row].tolist()
                    pos = 0
                    while added < per_head:
                        if pos == len(order):
                            if len(order) == len(cand_ids):
                                break
                            full = torch.argsort(scores[row], descending=True, stable=True)  # rare: many inverses proposed
                            order, vals = full.tolist(), scores[row][full].tolist()
                            continue
                        j, v = order[pos], vals[pos]
                        pos += 1
                        if v < cfg.threshold:
                            break
                        t = cand_ids[j]
                        if t == h or t in tails_by_head[h] or (cfg.skip_inverse and h in tails_by_head.get(t, ())):
                            continue
                        if cfg.skip_inverse and (t, h) in proposed or (h, t) in proposed:
                            continue
                        proposed.add((h, t))
                        sim = _similar_heads(h, heads_by_tail.get(t, []), model, emb_n, cfg.reason_neighbours)
                        reason = _reason(model, rel, v, cfg.threshold, head_type, ent_types[t], tail_types, sim)
                        found.append(Candidate(h, rel, t, v, reason, [x for x, _ in sim]))
                        added += 1
        rep["candidates"] = sum(1 for c in found if c.relation == rel)
    if progress:
        progress("done", len(relations), len(relations))
    found.sort(key=lambda c: (-c.score, c.relation, c.head_id, c.tail_id))
    report["candidates"] = len(found)
    found = found[:cfg.max_total]
    report["kept"] = len(found)
    return found, report


def _similar_heads(h: str, others: list[str], model: UKGE, emb_n: Any, k: int) -> list[tuple[str, float]]:
    if not others or k <= 0:
        return []
    keep = [o for o in others if o in model.entity_index and o != h]
    if not keep:
        return []
    sims = (emb_n[[model.entity_index[o] for o in keep]] @ emb_n[model.entity_index[h]]).tolist()
    ranked = sorted(zip(keep, sims), key=lambda x: -x[1])
    return [(o, round(s, 3)) for o, s in ranked[:k]]


def _reason(model: UKGE, rel: str, score: float, threshold: float, head_type: str, tail_type: str, tail_types: set[str],
            sim: list[tuple[str, float]]) -> str:
    text = (f"UKGE ({model.config.score}) scores this {score:.3f} ≥ threshold {threshold}; "
            f"{rel!r} from a {head_type!r} takes tails of type {', '.join(sorted(tail_types))} (this one: {tail_type!r})")
    if sim:
        text += "; heads with this same tail whose embeddings are closest: " + ", ".join(f"{e} (cos {s})" for e, s in sim)
    return text


def complete_graph(g: Any, cfg: CompleteConfig, progress: ProgressFn | None = None) -> dict[str, Any]:
    """Find candidates with the graph's saved model and add them as one derived document."""
    model = UKGE.load(g.dir)
    model_hash = UKGE.model_hash(g.dir)
    gated: dict[str, str] = {}
    if cfg.min_precision > 0:
        gated = precision_gate(g, model, cfg)
        cfg = replace(cfg, exclude_relations=[*cfg.exclude_relations, *gated])
    found, report = find_candidates(g, model, cfg, progress)
    report.update({"model_hash": model_hash, "threshold": cfg.threshold, "document": None, "added": 0, "gated": gated,
                   "measured": measured_precision(g, model, cfg)})
    if cfg.dry_run or not found:
        report["examples"] = [asdict(c) for c in found[:20]]
        return report
    key = content_hash(model_hash, json.dumps(asdict(cfg), sort_keys=True), json.dumps([(c.head_id, c.relation, c.tail_id) for c in found]))
    b = g.builder(source=f"UKGE completion {model_hash[:12]}", kind="derived", format="completion", content_key=key,
                  title=f"UKGE completion: {len(found)} inferred triples (score ≥ {cfg.threshold})",
                  meta={"config": asdict(cfg), "model_hash": model_hash, "relations": report["relations"]})
    ents = g.get_entities({c.head_id for c in found} | {c.tail_id for c in found})
    refs: dict[str, str] = {}
    for eid, e in ents.items():
        refs[eid] = b.entity(e["name"], e["type"], id=eid, layer=e["layer"])
    for c in found:
        b.triple(refs[c.head_id], c.relation, refs[c.tail_id], confidence=round(c.score, 6), layer="completed", origin=ORIGIN,
                 kind="inferred", attributes={"inferred": True, "score": round(c.score, 6), "reason": c.reason,
                                              "similar_heads": c.similar_heads, "model_hash": model_hash})
    added = g.commit(b)
    report["document"] = b.document_id
    report["added"] = len(found) if added else 0
    report["examples"] = [asdict(c) for c in found[:20]]
    g.write_manifest("complete", {"document": b.document_id, "added": report["added"], "threshold": cfg.threshold, "model_hash": model_hash})
    return report


# --------------------------------------------------------------------------- held-out evaluation

EVAL_FILE = "completion_eval.json"
#: Settings that change what completion proposes: an evaluation is valid only for the same values.
_EVAL_SETTINGS = ("threshold", "heads", "max_per_head", "min_type_share", "skip_inverse", "closed_world", "skip_curated_relations",
                  "curated_kinds", "closed_formats", "min_relation_triples", "functional_relations", "infer_functional")


def _settings(cfg: CompleteConfig) -> dict[str, Any]:
    return {k: getattr(cfg, k) for k in _EVAL_SETTINGS}


def _reindex(data: TripleData, rows: np.ndarray) -> TripleData:
    """The ``rows`` of ``data`` with a vocabulary of only the entities and relations they use, so a
    model trained on them has no untrained (random) embedding to propose."""
    sub = data.triples[rows]
    ents = np.unique(np.concatenate([sub[:, 0], sub[:, 2]]))
    rels = np.unique(sub[:, 1])
    e_map = np.full(len(data.entities), -1, dtype=np.int64)
    e_map[ents] = np.arange(len(ents))
    r_map = np.full(len(data.relations), -1, dtype=np.int64)
    r_map[rels] = np.arange(len(rels))
    arr = np.stack([e_map[sub[:, 0]], r_map[sub[:, 1]], e_map[sub[:, 2]]], axis=1)
    return TripleData([data.entities[i] for i in ents], [data.entity_types[i] for i in ents], [data.relations[i] for i in rels],
                      arr, data.targets[rows], [data.triple_ids[i] for i in rows])


def evaluate_completion(g: Any, cfg: CompleteConfig, *, test_fraction: float = 0.1, seed: int = 0,
                        thresholds: tuple[float, ...] = (0.5, 0.6, 0.7, 0.8, 0.85, 0.9, 0.95),
                        model_config: UKGEConfig | None = None, progress: Any = None) -> dict[str, Any]:
    """Precision and recall of completion on held-out triples (see the module docstring).

    A seeded ``test_fraction`` of the triples completion could propose (open relations and head
    types) is hidden; UKGE is trained on the other observed triples with the graph's saved model
    settings (or ``model_config``); completion then runs with the hidden triples treated as absent.
    A proposal is correct when it is a hidden triple. Nothing is written to the graph.
    """
    if not 0.0 < test_fraction < 1.0:
        raise BencaoError(f"test_fraction={test_fraction} must lie strictly between 0 and 1")
    saved = UKGE.load(g.dir)
    mcfg = model_config or saved.config
    types = relation_types(g, cfg.min_type_share)
    relations, closed = completable_relations(g, saved, cfg, types)
    data = load_triples(g, OBSERVED_LAYERS)
    rel_of = np.array([data.relations[r] for r in data.triples[:, 1]], dtype=object)
    head_type = np.array([data.entity_types[h] for h in data.triples[:, 0]], dtype=object)
    open_rows = np.array([i for i in range(len(data)) if rel_of[i] in relations and head_type[i] in types.get(rel_of[i], {})], dtype=np.int64)
    perm = np.random.default_rng(seed).permutation(open_rows)
    test = perm[: int(round(test_fraction * len(perm)))]
    train_mask = np.ones(len(data), dtype=bool)
    train_mask[test] = False
    seen = np.zeros(len(data.entities), dtype=bool)
    seen[data.triples[train_mask][:, [0, 2]].ravel()] = True
    usable = test[seen[data.triples[test, 0]] & seen[data.triples[test, 2]]]
    train = _reindex(data, np.flatnonzero(train_mask))
    model = train_ukge(train, mcfg, progress)
    hidden = {(data.entities[h], data.relations[r], data.entities[t]) for h, r, t in data.triples[usable]}
    low = min((*thresholds, cfg.threshold))
    found, _ = find_candidates(g, model, replace(cfg, threshold=low, max_total=10 ** 9, dry_run=True), hidden=hidden)
    held_by_rel = Counter(r for _, r, _ in hidden)

    def measure(t: float) -> dict[str, Any]:
        by: dict[str, dict[str, Any]] = {}
        for rel in relations:
            prop = [c for c in found if c.relation == rel and c.score >= t]
            hit = sum((c.head_id, c.relation, c.tail_id) in hidden for c in prop)
            by[rel] = {"proposed": len(prop), "correct": hit, "precision": round(hit / len(prop), 4) if prop else None,
                       "hidden": held_by_rel[rel], "recall": round(hit / held_by_rel[rel], 4) if held_by_rel[rel] else None}
        n_prop = sum(v["proposed"] for v in by.values())
        n_hit = sum(v["correct"] for v in by.values())
        return {"proposed": n_prop, "correct": n_hit, "precision": round(n_hit / n_prop, 4) if n_prop else None,
                "recall": round(n_hit / len(hidden), 4) if hidden else None, "by_relation": by}

    at = measure(cfg.threshold)
    ents = g.get_entities({x for c in found[:10] for x in (c.head_id, c.tail_id)})
    name = lambda e: ents.get(e, {}).get("name", e)  # noqa: E731
    return {
        "observed_key": observed_key(g), "model": asdict(mcfg), "settings": _settings(cfg), "threshold": cfg.threshold,
        "test_fraction": test_fraction, "seed": seed, "relations": relations, "closed": closed,
        "open_triples": int(len(open_rows)), "hidden": len(hidden), "hidden_unscorable": int(len(test) - len(usable)),
        "train": len(train), **{k: at[k] for k in ("proposed", "correct", "precision", "recall")}, "by_relation": at["by_relation"],
        "curve": {str(t): {k: v for k, v in measure(t).items() if k != "by_relation"} for t in sorted(set(thresholds))},
        "top_proposals": [{"head": name(c.head_id), "relation": c.relation, "tail": name(c.tail_id), "score": round(c.score, 4),
                           "hidden": (c.head_id, c.relation, c.tail_id) in hidden} for c in found[:10]],
    }


def write_evaluation(g: Any, report: dict[str, Any]) -> Path:
    path = Path(g.dir) / MODEL_DIR / EVAL_FILE
    atomic_write_json(path, report)
    return path


def measured_precision(g: Any, model: UKGE, cfg: CompleteConfig) -> dict[str, dict[str, Any]]:
    """relation → {proposed, correct, precision} at ``cfg.threshold`` from the graph's held-out
    evaluation, when one exists for these triples, model and settings (else empty)."""
    path = Path(g.dir) / MODEL_DIR / EVAL_FILE
    if not path.exists():
        return {}
    ev = json.loads(path.read_text(encoding="utf-8"))
    if (ev.get("observed_key") != observed_key(g) or ev.get("model") != asdict(model.config)
            or ev.get("settings") != json.loads(json.dumps(_settings(cfg)))):
        return {}
    return {rel: {k: m.get(k) for k in ("proposed", "correct", "precision")} for rel, m in (ev.get("by_relation") or {}).items()}


def precision_gate(g: Any, model: UKGE, cfg: CompleteConfig) -> dict[str, str]:
    """Relations the held-out evaluation does not vouch for (relation → why); raises when there is no
    evaluation, or it was made for other triples, model settings or completion settings."""
    path = Path(g.dir) / MODEL_DIR / EVAL_FILE
    how = (f"run `bencao graph complete --graph {g.dir} --evaluate` (same config) first, or set min_precision=0 "
           "to complete without a measured precision")
    if not path.exists():
        raise BencaoError(f"{path}: completion has not been evaluated on held-out triples; {how}")
    ev = json.loads(path.read_text(encoding="utf-8"))
    if ev.get("observed_key") != observed_key(g):
        raise BencaoError(f"{path}: evaluated on other triples (the graph changed since); {how}")
    if ev.get("model") != asdict(model.config):
        raise BencaoError(f"{path}: evaluated with other UKGE settings than the saved model's; {how}")
    if ev.get("settings") != json.loads(json.dumps(_settings(cfg))):
        raise BencaoError(f"{path}: evaluated with other completion settings (threshold, closed relations, ...); {how}")
    gated: dict[str, str] = {}
    relations, _ = completable_relations(g, model, cfg, relation_types(g, cfg.min_type_share))
    for rel in relations:
        m = ev.get("by_relation", {}).get(rel)
        if m is None:
            gated[rel] = "not in the held-out evaluation"
        elif m["proposed"] < cfg.min_evaluated:
            gated[rel] = f"held-out evaluation proposed {m['proposed']} (< min_evaluated {cfg.min_evaluated}): precision unmeasured"
        elif m["precision"] < cfg.min_precision:
            gated[rel] = f"held-out precision {m['precision']:.2f} ({m['correct']}/{m['proposed']}) < min_precision {cfg.min_precision}"
    return gated
