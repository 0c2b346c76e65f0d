"""Shortest relation paths between entities over the store's triples (igraph, directed multigraph).

Paths may walk an edge against its direction (a question entity is often the tail of the fact that
leads to the answer); each step remembers its direction so the verbalisation stays true. Parallel
relations between the same pair are kept (a multigraph, not one edge per pair).

Hubs never join two entities (the notion retrieval uses, ``paths.hub_degree``): an entity with more
than ``hub_degree`` triples (degree from the cached adjacency: the medicine-food catalogue, an
``is_a`` root), and every value of a *hub relation* — a relation with more than
``hub_relation_fanin`` triples per distinct tail (``has_flavour``: 950 triples over 7 flavours;
``listed_in``: 113 over one catalogue) or named in ``hub_relations`` — may end a path but is never
its middle. "杏仁 —listed_in→ 药食同源目录 ←listed_in— 山药" or "X —has_flavour→ 甘 ←has_flavour— Y" says
nothing a reasoning model should learn. Search: every edge weighs 1 + W × (its hub endpoints), so a
path's weight is its hops + W × (hub endpoints + 2 × hub middles), and a path is kept only when
that count equals its endpoints' (no hub middle); the k best such paths are the shortest clean ones.
"""

from __future__ import annotations

import math
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


#: Weight of one hub endpoint of an edge: larger than any path bencao asks for is long.
HUB_WEIGHT = 1000


def hub_relations(graph: Graph, fanin: float, named: tuple[str, ...] | list[str] = ()) -> set[str]:
    """Relations whose tails are shared values: more than ``fanin`` triples per distinct tail (0: none), plus ``named``."""
    out = set(named)
    if fanin > 0:
        for rel, n, tails in graph.conn.execute("SELECT relation, COUNT(*), COUNT(DISTINCT tail_id) FROM triples GROUP BY relation"):
            if tails and n / tails > fanin:
                out.add(rel)
    return out


class PathFinder:
    def __init__(self, graph: Graph, layers: tuple[str, ...] | None = None, *, hub_degree: int = 0, hub_relation_fanin: float = 0.0,
                 hub_relation_names: tuple[str, ...] | list[str] = ()):
        from bencao.igraph_loader import load_igraph

        ig = load_igraph()

        self.graph = graph
        self.hub_relations = hub_relations(graph, hub_relation_fanin, hub_relation_names)
        ids: dict[str, int] = {}
        edges: list[tuple[int, int]] = []
        attrs: list[tuple[str, str, str, str, float]] = []
        hubs: set[str] = set()
        for t in graph.conn.execute("SELECT id, head_id, relation, tail_id, confidence, layer FROM triples ORDER BY rowid"):
            if layers and t["layer"] not in layers:
                continue
            if t["relation"] in self.hub_relations:
                hubs.add(t["tail_id"])
            h = ids.setdefault(t["head_id"], len(ids))
            x = ids.setdefault(t["tail_id"], len(ids))
            if h == x:
                continue
            edges.append((h, x))
            attrs.append((t["id"], t["head_id"], t["relation"], t["tail_id"], float(t["confidence"])))
        self._adjacency = None
        if hub_degree > 0:
            from bencao.retrieval.search.adjacency import adjacency_for

            self._adjacency = adjacency_for(graph)
            hubs |= {e for e in ids if self.degree(e) > hub_degree}
        self.vid = ids
        self.hubs = hubs
        self.g = ig.Graph(n=len(ids), edges=edges, directed=True)
        self.attrs = attrs
        self.weights: list[int] | None = None
        if hubs:
            is_hub = [False] * len(ids)
            for e in hubs:
                if e in ids:
                    is_hub[ids[e]] = True
            self.weights = [1 + HUB_WEIGHT * (is_hub[h] + is_hub[x]) for h, x in edges]

    def __contains__(self, entity_id: str) -> bool:
        return entity_id in self.vid

    def is_hub(self, entity_id: str) -> bool:
        return entity_id in self.hubs

    def degree(self, entity_id: str) -> int:
        """Triples of the entity in the whole graph (the cached adjacency; 0 when hubs are off)."""
        if self._adjacency is None:
            return 0
        from bencao.retrieval.search.paths import degree

        return degree(self._adjacency, entity_id)

    def path_score(self, path: list["Step"]) -> float:
        """Product of confidences, each middle entity scaled by 1 / (1 + ln degree) (retrieval's hub penalty):
        among paths of one length, those through specific entities rank first."""
        score = path_confidence(path)
        for s in path[:-1]:
            mid = s.tail_id if s.forward else s.head_id
            score /= 1.0 + math.log(max(1, self.degree(mid)))
        return score

    def paths(self, src: str, dst: str, *, max_hops: int = 3, k: int = 3) -> list[list[Step]]:
        """Up to ``k`` shortest paths from ``src`` to ``dst`` of at most ``max_hops`` edges, none through a hub."""
        if src not in self.vid or dst not in self.vid or src == dst:
            return []
        s, d = self.vid[src], self.vid[dst]
        ends = HUB_WEIGHT * (self.is_hub(src) + self.is_hub(dst))  # what the endpoints may weigh; a hub middle adds 2 W
        dist = self.g.distances(source=[s], target=[d], weights=self.weights, mode="all")[0][0]
        if dist == float("inf") or dist - ends > max_hops or dist - ends < 1:
            return []
        out = []
        for epath in self.g.get_k_shortest_paths(s, to=d, k=k, mode="all", weights=self.weights, output="epath"):
            if not epath or len(epath) > max_hops:
                continue
            if self.weights is not None and sum(self.weights[e] for e in epath) - len(epath) != ends:
                continue  # passes through a hub
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
