"""Reasoning paths (Yaoshi-RAG): relation paths from linked entities, scored by PathScore.

1. relation patterns: the graph's most frequent relation sequences up to ``max_hops`` (a step is a
   relation followed forwards, ``r``, or backwards, ``~r``), mined from per-entity relation counts
   — or given by an LLM planner;
2. paths: from each linked entity, follow only steps that extend a pattern prefix; paths that reach
   another linked entity are marked ``connects``;
3. the subgraph of path entities plus their one-hop neighbours gets a confidence-weighted PageRank;
   PathScore = product of the path's triple confidences × mean PageRank of its entities; top-k.
"""

from __future__ import annotations

import threading
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any, Iterable

import numpy as np

from bencao.retrieval.graph.store import Graph
from bencao.retrieval.search.adjacency import adjacency_for
from bencao.retrieval.search.pagerank import pagerank_arrays, path_score


def step_label(relation: str, forward: bool) -> str:
    return relation if forward else "~" + relation


def mine_relation_patterns(g: Graph, max_hops: int = 2, n: int = 30) -> list[tuple[str, ...]]:
    """Most frequent relation sequences of length 1..max_hops (2 at most is mined; longer = repeats of 2)."""
    out_rel: dict[str, Counter] = defaultdict(Counter)
    in_rel: dict[str, Counter] = defaultdict(Counter)
    singles: Counter = Counter()
    for head, rel, tail in g.conn.execute("SELECT head_id, relation, tail_id FROM triples"):
        out_rel[head][rel] += 1
        in_rel[tail][rel] += 1
        singles[(rel,)] += 1
        singles[("~" + rel,)] += 1
    patterns: Counter = Counter(singles)
    if max_hops >= 2:
        for node in set(out_rel) | set(in_rel):
            # steps arriving at node: x -r-> node (r) or node -r-> x traversed backwards (~r)
            arrive = Counter({r: c for r, c in in_rel[node].items()})
            arrive.update({"~" + r: c for r, c in out_rel[node].items()})
            leave = Counter({r: c for r, c in out_rel[node].items()})
            leave.update({"~" + r: c for r, c in in_rel[node].items()})
            for a, ca in arrive.items():
                for b, cb in leave.items():
                    same_edge = (b == ("~" + a if not a.startswith("~") else a[1:]))
                    cnt = ca * cb - (min(ca, cb) if same_edge else 0)
                    if cnt > 0:
                        patterns[(a, b)] += cnt
    multi = [p for p, _ in patterns.most_common() if len(p) > 1][: max(0, n - len(singles))]
    return [p for p, _ in singles.most_common()] + multi


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


def enumerate_paths(g: Graph, starts: Iterable[str], patterns: list[tuple[str, ...]], max_hops: int = 2,
                    max_paths: int = 400, fanout: int = 30) -> list[Path]:
    """All simple paths from ``starts`` that follow a pattern prefix, up to ``max_hops`` steps."""
    starts = list(dict.fromkeys(starts))
    targets = set(starts)
    prefixes: set[tuple[str, ...]] = set()
    for p in patterns:
        for i in range(1, min(len(p), max_hops) + 1):
            prefixes.add(p[:i])
    paths: list[Path] = []
    adj_cache: dict[str, list[tuple[str, str, str, float]]] = {}

    adjacency = adjacency_for(g)  # per-node edges pre-sorted by confidence: no per-node sort of a hub's edges

    def steps_from(e: str) -> list[tuple[str, str, str, float]]:
        if e not in adj_cache:
            top = adjacency.top_edges(e, fanout * 4)
            tids = dict(g.conn.execute(f"SELECT rowid, id FROM triples WHERE rowid IN ({','.join('?' * len(top))})",
                                       [t[0] for t in top]).fetchall()) if top else {}
            adj_cache[e] = [(tids[rid], step_label(rel, fwd), other, conf) for rid, rel, other, conf, fwd in top if rid in tids]
        return adj_cache[e]

    frontier = [Path([s], [], [], []) for s in starts]
    for _hop in range(max_hops):
        nxt: list[Path] = []
        for p in frontier:
            per_node = 0
            for tid, step, other, conf in steps_from(p.entities[-1]):
                seq = tuple(p.steps) + (step,)
                if seq not in prefixes or other in p.entities:
                    continue
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
    return paths


def local_subgraph_edges(g: Graph, nodes: set[str], neighbour_limit: int = 30) -> tuple[set[str], list[tuple[str, str, float]]]:
    """Path entities plus up to ``neighbour_limit`` one-hop neighbours each; edges among them."""
    adj = adjacency_for(g)
    sub = adj.neighbourhood(nodes, neighbour_limit)
    h, t, w = adj.edges_among(sub)
    ids = adj.ids
    return set(nodes) | {ids[i] for i in sub.tolist()}, [(ids[a], ids[b], float(c)) for a, b, c in zip(h.tolist(), t.tolist(), w.tolist())]


def score_paths(g: Graph, paths: list[Path], damping: float = 0.85, neighbour_limit: int = 30) -> dict[str, float]:
    """Fill ``score``/``confidence_product``/``pagerank`` of each path; returns the PageRank used.

    The subgraph (path entities + up to ``neighbour_limit`` neighbours each, and every triple among
    them) comes from the cached in-memory adjacency; PageRank runs on node numbers, vectorised.
    """
    if not paths:
        return {}
    adj = adjacency_for(g)
    nodes = {e for p in paths for e in p.entities}
    sub = adj.neighbourhood(nodes, neighbour_limit)
    h, t, w = adj.edges_among(sub)
    local = np.searchsorted(sub, np.concatenate([h, t]))
    scores = pagerank_arrays(len(sub), local[: len(h)], local[len(h):], w, damping=damping)
    pr = {adj.ids[i]: float(p) for i, p in zip(sub.tolist(), scores.tolist())}
    for e in nodes:  # a path entity unknown to the adjacency (none in practice) gets no rank
        pr.setdefault(e, 0.0)
    for p in paths:
        p.score, p.confidence_product, p.pagerank = path_score(p.confidences, p.entities, pr)
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
              patterns: list[tuple[str, ...]] | None = None) -> list[Path]:
    """The whole path stage: patterns → paths → PageRank → PathScore → top-k (connecting paths first)."""
    if not starts:
        return []
    pats = patterns if patterns is not None else graph_patterns(g, max_hops, n_patterns)
    paths = enumerate_paths(g, starts, pats, max_hops=max_hops, max_paths=max_paths, fanout=neighbour_limit)
    score_paths(g, paths, damping=damping, neighbour_limit=neighbour_limit)
    paths.sort(key=lambda p: (not p.connects, -p.score))
    return paths[:top_k]
