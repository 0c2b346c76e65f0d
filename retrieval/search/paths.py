"""Reasoning paths (Yaoshi-RAG): relation paths from linked entities, scored by PathScore.

1. relation patterns: the graph's most frequent relation sequences up to ``max_hops`` (a step is a
   relation followed forwards, ``r``, or backwards, ``~r``), mined from per-entity relation counts
   — or given by an LLM planner;
2. paths: from each linked entity, follow only steps that extend a pattern prefix; paths that reach
   another linked entity are marked ``connects``;
3. the subgraph of path entities plus their one-hop neighbours gets a confidence-weighted PageRank;
   PathScore = product of the path's triple confidences × mean PageRank of its entities; top-k.

Hubs: an entity with more than ``hub_degree`` triples (the medicine-food catalogue every listed
herb points at, a flavour shared by hundreds of herbs, an ``is_a`` root) is never passed through:
"杏仁 —listed_in→ 药食同源目录 —~listed_in→ 山药" says nothing about either herb. Nor does a path end
at one (unless ``hub_endpoints``, the hub is another linked entity, or a planner asked for the hop):
a hub's PageRank made "山药 —listed_in→ 药食同源目录" the top path of every listed herb. With
``hub_penalty`` each middle entity also scales PathScore by 1 / (1 + ln degree), so a path through a
specific entity outranks one through a common one. Equal PathScores are ordered by the terms that
differ: the higher confidence product, then the fewer hops, then the end with more triples (more
support in the graph; hubs never end a path), then the path's triple ids, so a ranking never depends on
enumeration order.
"""

from __future__ import annotations

import json
import math
import threading
from dataclasses import dataclass, field
from typing import Any, Iterable

import numpy as np


from bencao.retrieval.graph.store import Graph
from bencao.retrieval.search.adjacency import adjacency_for
from bencao.retrieval.search.pagerank import pagerank_arrays, path_score


def step_label(relation: str, forward: bool) -> str:
    return relation if forward else "~" + relation


def mine_relation_patterns(g: Graph, max_hops: int = 2, n: int = 30) -> list[tuple[str, ...]]:
    """Most frequent relation sequences of length 1..max_hops (2 at most is mined; longer = repeats of 2).

    Counted on the cached adjacency arrays: a single step ``r``/``~r`` occurs once per ``r`` triple;
    a two-step sequence (a, b) occurs, at each node, (steps a arriving) × (steps b leaving), less
    the walks that go back over the same triple. Ties are broken by the sequence, so the list is
    deterministic.
    """
    adj = adjacency_for(g)
    n_rel, n_nodes = len(adj.relations), len(adj)
    heads = np.repeat(np.arange(n_nodes), np.diff(adj.out_ptr))
    tails, rel = adj.out_dst.astype(np.int64), adj.out_rel.astype(np.int64)
    per_rel = np.bincount(rel, minlength=n_rel)
    steps = [*adj.relations, *("~" + r for r in adj.relations)]
    singles = sorted(((steps[i],), int(c)) for i, c in enumerate(np.concatenate([per_rel, per_rel])) if c > 0)
    singles.sort(key=lambda x: -x[1])
    multi: list[tuple[tuple[str, ...], int]] = []
    if max_hops >= 2 and len(rel):
        from scipy.sparse import csr_matrix

        ones = np.ones(2 * len(rel))
        # arriving steps at a node: x -r-> node is `r` (column r), node -r-> x walked backwards is `~r` (column R + r)
        arrive = csr_matrix((ones, (np.concatenate([tails, heads]), np.concatenate([rel, rel + n_rel]))), shape=(n_nodes, 2 * n_rel))
        # leaving steps: node -r-> x is `r`, x -r-> node walked backwards is `~r`
        leave = csr_matrix((ones, (np.concatenate([heads, tails]), np.concatenate([rel, rel + n_rel]))), shape=(n_nodes, 2 * n_rel))
        counts = np.rint((arrive.T @ leave).toarray()).astype(np.int64)
        idx = np.arange(n_rel)
        counts[idx, idx + n_rel] -= per_rel  # r then ~r over the same triple
        counts[idx + n_rel, idx] -= per_rel  # ~r then r over the same triple
        multi = sorted(((steps[a], steps[b]), int(counts[a, b])) for a, b in zip(*np.nonzero(counts > 0)))
        multi.sort(key=lambda x: -x[1])
    return [p for p, _ in singles] + [p for p, _ in multi][: max(0, n - len(singles))]


@dataclass
class Path:
    entities: list[str]
    triple_ids: list[str]
    steps: list[str]
    confidences: list[float]
    connects: bool = False
    score: float = 0.0
    confidence_product: float = 0.0
    pagerank: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)


def degree(adjacency, entity_id: str) -> int:  # noqa: ANN001
    """Triples in which the entity is head or tail (0 for an entity the adjacency does not know)."""
    i = adjacency.index.get(entity_id)
    if i is None:
        return 0
    return int(adjacency.out_ptr[i + 1] - adjacency.out_ptr[i] + adjacency.in_ptr[i + 1] - adjacency.in_ptr[i])


def enumerate_paths(g: Graph, starts: Iterable[str], patterns: list[tuple[str, ...]], max_hops: int = 2,
                    max_paths: int = 400, fanout: int = 30, hub_degree: int = 0,
                    planned: list[tuple[str, ...]] | None = None, hub_endpoints: bool = False) -> list[Path]:
    """All simple paths from ``starts`` that follow a pattern prefix, up to ``max_hops`` steps.

    With ``hub_degree`` > 0 a path never continues from a middle entity with more triples than that,
    unless it follows one of the ``planned`` sequences (an LLM planner asked for that hop on purpose);
    without ``hub_endpoints`` no path ends at such an entity either, unless it is one of ``starts``.
    """
    starts = list(dict.fromkeys(starts))
    targets = set(starts)
    prefixes: set[tuple[str, ...]] = set()
    for p in patterns:
        for i in range(1, min(len(p), max_hops) + 1):
            prefixes.add(p[:i])
    exempt = {p[:i] for p in (planned or []) for i in range(1, len(p) + 1)}
    paths: list[Path] = []
    adj_cache: dict[str, list[tuple[int, str, str, float]]] = {}

    adjacency = adjacency_for(g)  # per-node edges pre-sorted by confidence: no per-node sort of a hub's edges

    def steps_from(e: str) -> list[tuple[int, str, str, float]]:
        if e not in adj_cache:  # triple rowids for now; their ids are looked up once, at the end
            adj_cache[e] = [(rid, step_label(rel, fwd), other, conf) for rid, rel, other, conf, fwd in adjacency.top_edges(e, fanout * 4)]
        return adj_cache[e]

    frontier = [Path([s], [], [], []) for s in starts]
    for _hop in range(max_hops):
        nxt: list[Path] = []
        for p in frontier:
            if (hub_degree and len(p.entities) > 1 and tuple(p.steps) not in exempt
                    and degree(adjacency, p.entities[-1]) > hub_degree):
                continue  # a hub ends a path; it never joins two others
            per_node = 0
            for tid, step, other, conf in steps_from(p.entities[-1]):
                seq = tuple(p.steps) + (step,)
                if seq not in prefixes or other in p.entities:
                    continue
                if (hub_degree and not hub_endpoints and other not in targets and seq not in exempt
                        and degree(adjacency, other) > hub_degree):
                    continue  # no path ends at a hub (nor passes through it)
                q = Path(p.entities + [other], p.triple_ids + [tid], list(seq), p.confidences + [conf],
                         connects=other in targets and other != p.entities[0])
                paths.append(q)
                nxt.append(q)
                per_node += 1
                if per_node >= fanout or len(paths) >= max_paths:
                    break
            if len(paths) >= max_paths:
                break
        frontier = nxt
        if len(paths) >= max_paths:
            break
    rowids = sorted({r for p in paths for r in p.triple_ids})
    tids = dict(g.conn.execute("SELECT rowid, id FROM triples WHERE rowid IN (SELECT value FROM json_each(?))",
                               (json.dumps(rowids),)).fetchall()) if rowids else {}
    for p in paths:
        p.triple_ids = [tids.get(r) for r in p.triple_ids]  # type: ignore[misc]
    return [p for p in paths if None not in p.triple_ids]


def score_paths(g: Graph, paths: list[Path], damping: float = 0.85, neighbour_limit: int = 30, hub_penalty: bool = False) -> dict[str, float]:
    """Fill ``score``/``confidence_product``/``pagerank`` of each path; returns the PageRank used.

    The subgraph (path entities + up to ``neighbour_limit`` neighbours each, and every triple among
    them) comes from the cached in-memory adjacency; PageRank runs on node numbers, vectorised.
    """
    if not paths:
        return {}
    adj = adjacency_for(g)
    nodes = {e for p in paths for e in p.entities}
    sub = adj.neighbourhood(nodes, neighbour_limit)
    h, t, w = adj.merged_edges_among(sub)  # parallel edges already merged to their mean confidence
    scores = pagerank_arrays(len(sub), h, t, w, damping=damping, merged=True)
    pr = {adj.ids[i]: float(p) for i, p in zip(sub.tolist(), scores.tolist())}
    for e in nodes:  # a path entity unknown to the adjacency (none in practice) gets no rank
        pr.setdefault(e, 0.0)
    for p in paths:
        p.score, p.confidence_product, p.pagerank = path_score(p.confidences, p.entities, pr)
        if hub_penalty and len(p.entities) > 2:
            factor = math.prod(1.0 / (1.0 + math.log(max(1, degree(adj, m)))) for m in p.entities[1:-1])
            p.extra["hub_factor"] = round(factor, 6)
            p.score *= factor
    return pr


_PATTERNS: dict[tuple, list[tuple[str, ...]]] = {}
_LOCK = threading.Lock()


def graph_patterns(g: Graph, max_hops: int, n: int) -> list[tuple[str, ...]]:
    """Mined patterns, cached per graph state."""
    key = (*g.state_key(), max_hops, n)  # cheap, unlike counting 3.5 M triples per query
    with _LOCK:
        if key not in _PATTERNS:
            _PATTERNS[key] = mine_relation_patterns(g, max_hops, n)
        return _PATTERNS[key]


def top_paths(g: Graph, starts: list[str], *, max_hops: int = 2, n_patterns: int = 30, max_paths: int = 400,
              neighbour_limit: int = 30, damping: float = 0.85, top_k: int = 10,
              planned: list[tuple[str, ...]] | None = None, planned_only: bool = False, hub_degree: int = 0,
              hub_penalty: bool = False, hub_endpoints: bool = False) -> list[Path]:
    """The whole path stage: patterns → paths → PageRank → PathScore → top-k (connecting paths first).

    ``planned`` relation sequences (an LLM planner's) are followed beside the mined ones, or instead
    of them with ``planned_only``; a planned sequence may be longer than ``max_hops`` and may pass
    through hubs. Paths that follow a planned sequence are marked ``extra["planned"]``.
    """
    if not starts:
        return []
    planned = [tuple(p) for p in (planned or []) if p]
    pats = list(planned) if planned_only else [*planned, *graph_patterns(g, max_hops, n_patterns)]
    hops = max([max_hops, *(len(p) for p in planned)])
    paths = enumerate_paths(g, starts, pats, max_hops=hops, max_paths=max_paths, fanout=neighbour_limit, hub_degree=hub_degree,
                            planned=planned, hub_endpoints=hub_endpoints)
    full = set(planned)
    for p in paths:
        if tuple(p.steps) in full:
            p.extra["planned"] = True
    score_paths(g, paths, damping=damping, neighbour_limit=neighbour_limit, hub_penalty=hub_penalty)
    adj = adjacency_for(g)
    paths.sort(key=lambda p: (not p.connects, not p.extra.get("planned"), -p.score, -p.confidence_product, len(p.steps),
                              -degree(adj, p.entities[-1]), p.triple_ids))
    return paths[:top_k]
