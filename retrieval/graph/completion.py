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
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass
from typing import Any, Callable, Literal


from bencao.config import field
from bencao.errors import BencaoError
from bencao.io import content_hash
from bencao.retrieval.graph.confidence import OBSERVED_LAYERS, UKGE

ORIGIN = "ukge-completion"


@dataclass
class CompleteConfig:
    relations: list[str] = field(default_factory=list, help="Relations to complete; empty = every relation with at least min_relation_triples observed triples.")
    exclude_relations: list[str] = field(default_factory=list, help="Relations never completed (e.g. ones whose tails are free text).")
    skip_curated_relations: bool = field(True, help="With relations empty: skip relations whose every source is curated (ontology is_a, catalogue membership): those lists are authoritative, not incomplete extractions.")
    curated_kinds: list[str] = field(default_factory=lambda: ["record"], help="triple_sources.kind values that count as curated.")
    min_relation_triples: int = field(5, help="With relations empty: skip relations with fewer observed triples (too little to learn from).")
    threshold: float = field(0.85, help="Minimum UKGE score for a candidate to be added (Yaoshi-RAG uses 0.85).")
    heads: Literal["typed", "existing"] = field("typed", help="typed: every modelled entity of a head type the relation takes; existing: only heads that already have the relation.")
    max_per_head: int = field(3, help="At most this many new tails per (head, relation), best first.")
    max_total: int = field(5000, help="At most this many triples in one run, best first.")
    min_type_share: float = field(0.05, help="A tail (head) type is allowed when it makes up at least this share of the relation's observed tails (heads).")
    skip_inverse: bool = field(True, help="Do not propose (h, r, t) when (t, r, h) exists or is proposed: DistMult scores both directions alike.")
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


def curated_relations(g: Any, curated_kinds: list[str]) -> set[str]:
    """Relations whose observed triples are all supported by curated sources only."""
    if not curated_kinds:
        return set()
    q = ",".join("?" * len(curated_kinds))
    return {r for (r,) in g.conn.execute(
        f"SELECT t.relation FROM triples t JOIN triple_sources ts ON ts.triple_id = t.id WHERE t.layer != 'completed' "
        f"GROUP BY t.relation HAVING SUM(CASE WHEN ts.kind IN ({q}) THEN 0 ELSE 1 END) = 0", list(curated_kinds))}


ProgressFn = Callable[[str, int, int], None]


def find_candidates(g: Any, model: UKGE, cfg: CompleteConfig, progress: ProgressFn | None = None) -> tuple[list[Candidate], dict[str, Any]]:
    """Score candidate tails and return those at or above the threshold, best first, with a report."""
    import torch

    if not 0.0 <= cfg.threshold <= 1.0:
        raise BencaoError(f"threshold={cfg.threshold} must lie in [0, 1]")
    types = relation_types(g, cfg.min_type_share)
    observed_counts = Counter(r for (r,) in g.conn.execute(
        f"SELECT relation FROM triples WHERE layer IN ({','.join('?' * len(OBSERVED_LAYERS))})", OBSERVED_LAYERS))
    skipped: list[str] = []
    if cfg.relations:
        unknown = [r for r in cfg.relations if r not in model.relation_index]
        if unknown:
            raise BencaoError(f"relations {', '.join(unknown)}: not known to the graph's UKGE model (known: {', '.join(model.relations)})")
        relations = list(cfg.relations)
    else:
        relations = [r for r in model.relations if observed_counts[r] >= cfg.min_relation_triples]
        if cfg.skip_curated_relations:
            curated_only = curated_relations(g, cfg.curated_kinds)
            skipped = [r for r in relations if r in curated_only]
            relations = [r for r in relations if r not in curated_only]
    relations = [r for r in relations if r not in set(cfg.exclude_relations)]

    # Every triple of the graph, any layer: never add one again.
    existing: dict[str, set[tuple[str, str]]] = defaultdict(set)
    for h, r, t in g.conn.execute("SELECT head_id, relation, tail_id FROM triples"):
        existing[r].add((h, t))
    # Types as the graph has them now (the model's copy may predate a type change).
    ent_types = {eid: typ for eid, typ in g.conn.execute("SELECT id, type FROM entities")}
    vocab = [(i, e) for i, e in enumerate(model.entities) if e in ent_types]
    emb = model.module.ent.weight.detach()
    emb_n = torch.nn.functional.normalize(emb, dim=-1)

    found: list[Candidate] = []
    report: dict[str, Any] = {"relations": {}, "skipped_curated": skipped}
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
            for start in range(0, len(head_ids), cfg.batch_size):
                chunk = head_ids[start:start + cfg.batch_size]
                h_idx = torch.tensor([model.entity_index[h] for h in chunk], dtype=torch.long)
                with torch.no_grad():
                    scores = model.module.score_tails(h_idx, torch.full_like(h_idx, r_idx), cand_idx)
                # Enough of the best to find max_per_head new ones past existing tails and inverses.
                k = min(len(cand_ids), cfg.max_per_head + 1 + max(len(tails_by_head[h]) + len(heads_by_tail.get(h, ())) for h in chunk))
                top_v, top_i = torch.topk(scores, k, dim=1)
                for row, h in enumerate(chunk):
                    added = 0
                    order, vals = top_i[row].tolist(), top_v[row].tolist()
                    pos = 0
                    while added < cfg.max_per_head:
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
    found, report = find_candidates(g, model, cfg, progress)
    report.update({"model_hash": model_hash, "threshold": cfg.threshold, "document": None, "added": 0})
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
