"""Confidence-weighted PageRank (igraph) and Yaoshi-RAG's PathScore.

``weighted_pagerank`` takes directed edges ``(src, dst, confidence)``; parallel edges between the
same ordered pair (two relations linking the same entities) are merged into one edge whose weight
is their mean confidence, so a pair is not counted twice and no relation silently vanishes from the
weight. ``path_score`` = product of the path's edge confidences × mean PageRank of its entities.
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Iterable, Sequence


def merge_parallel(edges: Iterable[tuple[str, str, float]]) -> dict[tuple[str, str], float]:
    """Mean confidence per ordered (src, dst) pair."""
    acc: dict[tuple[str, str], list[float]] = defaultdict(list)
    for s, d, w in edges:
        if s != d:
            acc[(s, d)].append(float(w))
    return {k: sum(v) / len(v) for k, v in acc.items()}


def weighted_pagerank(edges: Iterable[tuple[str, str, float]], nodes: Iterable[str] = (), damping: float = 0.85,
                      directed: bool = True) -> dict[str, float]:
    """PageRank over the given nodes and edges with edge weight = (mean) confidence. Sums to 1."""
    import igraph as ig

    merged = merge_parallel(edges)
    names: list[str] = list(dict.fromkeys([*nodes, *(n for pair in merged for n in pair)]))
    if not names:
        return {}
    index = {n: i for i, n in enumerate(names)}
    g = ig.Graph(n=len(names), edges=[(index[s], index[d]) for s, d in merged], directed=directed)
    weights = list(merged.values())
    pr = g.pagerank(weights=weights if weights else None, damping=damping, directed=directed)
    return {n: float(p) for n, p in zip(names, pr)}


def path_score(confidences: Sequence[float], entity_ids: Sequence[str], pagerank: dict[str, float]) -> tuple[float, float, float]:
    """``(PathScore, confidence product, mean PageRank)`` of one path."""
    prod = math.prod(confidences) if confidences else 1.0
    mean_pr = sum(pagerank.get(e, 0.0) for e in entity_ids) / len(entity_ids) if entity_ids else 0.0
    return prod * mean_pr, prod, mean_pr
