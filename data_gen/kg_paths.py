"""Shortest relation paths between entities over the store's triples (igraph, directed multigraph).

Paths may walk an edge against its direction (a question entity is often the tail of the fact that
leads to the answer); each step remembers its direction so the verbalisation stays true. Parallel
relations between the same pair are kept (a multigraph, not one edge per pair).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bencao.retrieval.graph.store import Graph


@dataclass(frozen=True)
class Step:
    triple_id: str
    head_id: str
    relation: str
    tail_id: str
    confidence: float
    forward: bool  # walked head → tail


class PathFinder:
    def __init__(self, graph: Graph, layers: tuple[str, ...] | None = None):
        import igraph as ig

        self.graph = graph
        ids: dict[str, int] = {}
        edges: list[tuple[int, int]] = []
        attrs: list[tuple[str, str, str, str, float]] = []
        for t in graph.conn.execute("SELECT id, head_id, relation, tail_id, confidence, layer FROM triples ORDER BY rowid"):
            if layers and t["layer"] not in layers:
                continue
            h = ids.setdefault(t["head_id"], len(ids))
            x = ids.setdefault(t["tail_id"], len(ids))
            if h == x:
                continue
            edges.append((h, x))
            attrs.append((t["id"], t["head_id"], t["relation"], t["tail_id"], float(t["confidence"])))
        self.vid = ids
        self.g = ig.Graph(n=len(ids), edges=edges, directed=True)
        self.attrs = attrs

    def __contains__(self, entity_id: str) -> bool:
        return entity_id in self.vid

    def paths(self, src: str, dst: str, *, max_hops: int = 3, k: int = 3) -> list[list[Step]]:
        """Up to ``k`` shortest paths from ``src`` to ``dst`` of at most ``max_hops`` edges."""
        if src not in self.vid or dst not in self.vid or src == dst:
            return []
        s, d = self.vid[src], self.vid[dst]
        dist = self.g.distances(source=[s], target=[d], mode="all")[0][0]
        if dist == float("inf") or dist > max_hops:
            return []
        out = []
        for epath in self.g.get_k_shortest_paths(s, to=d, k=k, mode="all", output="epath"):
            if not epath or len(epath) > max_hops:
                continue
            steps, cur = [], src
            for e in epath:
                tid, h, rel, t, conf = self.attrs[e]
                forward = h == cur
                steps.append(Step(tid, h, rel, t, conf, forward))
                cur = t if forward else h
            out.append(steps)
        return out


def path_confidence(path: list[Step]) -> float:
    p = 1.0
    for s in path:
        p *= s.confidence
    return p


def path_triples(paths: list[list[Step]], graph: Graph) -> list[dict[str, Any]]:
    """Distinct triples of the paths in order of first use, with display names."""
    order = list(dict.fromkeys(s.triple_id for p in paths for s in p))
    got = graph.get_triples(order)
    return [got[t] for t in order if t in got]
