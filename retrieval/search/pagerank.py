"""Confidence-weighted PageRank (igraph) and Yaoshi-RAG's PathScore.

``weighted_pagerank`` takes directed edges ``(src, dst, confidence)``; parallel edges between the
same ordered pair (two relations linking the same entities) are merged into one edge whose weight
is their mean confidence, so a pair is not counted twice and no relation silently vanishes from the
weight. ``path_score`` = product of the path's edge confidences × mean PageRank of its entities.
"""

from __future__ import annotations

import contextlib
import math
from collections import defaultdict
from typing import Any, Iterable, Sequence

import numpy as np


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
    edges = list(edges)
    names: list[str] = list(dict.fromkeys([*nodes, *(n for s, d, _ in edges for n in (s, d))]))
    if not names:
        return {}
    index = {n: i for i, n in enumerate(names)}
    src = np.fromiter((index[s] for s, _, _ in edges), dtype=np.int64, count=len(edges))
    dst = np.fromiter((index[d] for _, d, _ in edges), dtype=np.int64, count=len(edges))
    w = np.fromiter((float(x) for _, _, x in edges), dtype=np.float64, count=len(edges))
    pr = pagerank_arrays(len(names), src, dst, w, damping=damping, directed=directed)
    return {n: float(p) for n, p in zip(names, pr)}


def pagerank_arrays(n: int, src: np.ndarray, dst: np.ndarray, w: np.ndarray, damping: float = 0.85,
                    directed: bool = True, merged: bool = False) -> np.ndarray:
    """:func:`weighted_pagerank` on node numbers ``0..n-1``: self-loops dropped, parallel edges merged
    to their mean weight (vectorised), igraph's PRPACK solver. Returns one score per node.

    ``merged=True`` says the edges are already one per ordered pair without self-loops (the path
    stage's cached view, ``Adjacency.merged_edges_among``), and skips that step."""
    from bencao.igraph_loader import load_igraph

    ig = load_igraph()

    if n == 0:
        return np.zeros(0)
    src, dst, w = np.asarray(src, dtype=np.int64), np.asarray(dst, dtype=np.int64), np.asarray(w, dtype=np.float64)
    if not merged:
        keep = src != dst
        src, dst, w = src[keep], dst[keep], w[keep]
        if len(src):
            pair, inv = np.unique(src * n + dst, return_inverse=True)
            w = np.bincount(inv, weights=w) / np.bincount(inv)
            src, dst = pair // n, pair % n
    # pairs of Python ints: igraph converts these faster than a NumPy array or a list of lists
    g = ig.Graph(n, zip(src.tolist(), dst.tolist()), directed)
    with _one_openmp_thread():
        pr = g.pagerank(weights=w.tolist() if len(w) else None, damping=damping, directed=directed)
    return np.asarray(pr, dtype=np.float64)


_CONTROLLER: Any = None


def _one_openmp_thread() -> Any:
    """igraph's PageRank runs OpenMP threads; on a small per-query subgraph they cost more than they
    give, and on a busy machine their spin-waiting made it 20-100× slower (bench/RESULTS.md). One
    thread for the call (threadpoolctl), leaving the process's other OpenMP users alone."""
    global _CONTROLLER
    try:
        from threadpoolctl import ThreadpoolController
    except ImportError:  # optional: without it igraph keeps its default threads
        return contextlib.nullcontext()
    if _CONTROLLER is None:
        _CONTROLLER = ThreadpoolController()  # after igraph is imported, so its OpenMP runtime is seen
    return _CONTROLLER.limit(limits=1, user_api="openmp")


def path_score(confidences: Sequence[float], entity_ids: Sequence[str], pagerank: dict[str, float]) -> tuple[float, float, float]:
    """``(PathScore, confidence product, mean PageRank)`` of one path."""
    prod = math.prod(confidences) if confidences else 1.0
    mean_pr = sum(pagerank.get(e, 0.0) for e in entity_ids) / len(entity_ids) if entity_ids else 0.0
    return prod * mean_pr, prod, mean_pr
