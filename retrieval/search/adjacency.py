"""The graph's triples as in-memory CSR arrays, built once per graph state and shared by queries.

Path scoring needs, per query, the one-hop neighbourhood of a few hundred entities and every edge
among them. Asking SQLite for each entity's edges and filtering in Python costs O(degree) Python
work per entity, which hub entities (a flavour every third herb points at) make slow on a large
graph. Here node numbers follow the sorted entity ids, out- and in-edges are CSR arrays
(``numpy``), and a subgraph is a few vectorised gathers and a membership mask.

Memory: about 56 bytes per triple plus the id table (~0.25 GB for 3.5 M triples over 0.5 M entities).
"""

from __future__ import annotations

import json
import os
import shutil
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bencao.io import content_hash
from bencao.retrieval.graph.store import Graph


@dataclass
class Adjacency:
    ids: list[str]  # node number → entity id (sorted)
    index: dict[str, int]
    out_ptr: np.ndarray  # CSR by head: out_dst[out_ptr[i]:out_ptr[i+1]] are i's tails
    out_dst: np.ndarray
    out_w: np.ndarray  # triple confidence, aligned with out_dst
    in_ptr: np.ndarray  # CSR by tail: in_src[in_ptr[i]:in_ptr[i+1]] are i's heads
    in_src: np.ndarray

    out_rowid: np.ndarray  # triple rowid, aligned with out_dst
    out_rel: np.ndarray  # relation code (index into ``relations``), aligned with out_dst
    in_w: np.ndarray
    in_rowid: np.ndarray
    in_rel: np.ndarray
    relations: list[str]
    # the PageRank view: one edge per ordered (head, tail) pair, weight = mean confidence of the
    # pair's triples, self-loops dropped; CSR by head, tails ascending
    pr_ptr: np.ndarray
    pr_dst: np.ndarray
    pr_w: np.ndarray

    @classmethod
    def build(cls, g: Graph) -> "Adjacency":
        ent = g.conn.execute("SELECT rowid, id FROM entities ORDER BY id").fetchall()
        ids = [r[1] for r in ent]
        index = {e: i for i, e in enumerate(ids)}
        ent_rowid = np.fromiter((r[0] for r in ent), dtype=np.int64, count=len(ent))
        node_of = np.full(int(ent_rowid.max()) + 1 if len(ent) else 1, -1, dtype=np.int64)  # entity rowid → node number
        node_of[ent_rowid] = np.arange(len(ent))
        del ent
        relations = [r[0] for r in g.conn.execute("SELECT DISTINCT relation FROM triples ORDER BY relation")]
        rel_index = {r: i for i, r in enumerate(relations)}
        parts: dict[str, list[np.ndarray]] = {"src": [], "dst": [], "w": [], "rowid": [], "rel": []}
        # entity rowids come from the join in SQLite: integers instead of two text ids per triple
        cur = g.conn.execute("SELECT t.rowid, h.rowid, x.rowid, t.confidence, t.relation FROM triples t "
                             "JOIN entities h ON h.id = t.head_id JOIN entities x ON x.id = t.tail_id")
        while True:
            rows = cur.fetchmany(100_000)
            if not rows:
                break
            parts["rowid"].append(np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows)))
            parts["src"].append(node_of[np.fromiter((r[1] for r in rows), dtype=np.int64, count=len(rows))].astype(np.int32))
            parts["dst"].append(node_of[np.fromiter((r[2] for r in rows), dtype=np.int64, count=len(rows))].astype(np.int32))
            parts["w"].append(np.fromiter((r[3] for r in rows), dtype=np.float64, count=len(rows)))
            parts["rel"].append(np.fromiter((rel_index[r[4]] for r in rows), dtype=np.int32, count=len(rows)))
        cat = {k: (np.concatenate(v) if v else np.zeros(0, dtype=np.int64 if k == "rowid" else np.float64 if k == "w" else np.int32))
               for k, v in parts.items()}
        src, dst, w, rowid, rel = cat["src"], cat["dst"], cat["w"], cat["rowid"], cat["rel"]
        n = len(ids)
        # each node's edges by confidence (highest first), then relation, then rowid
        out_order = np.lexsort((rowid, rel, -w, src))
        in_order = np.lexsort((rowid, rel, -w, dst))
        out_ptr = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(np.bincount(src, minlength=n), out=out_ptr[1:])
        in_ptr = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(np.bincount(dst, minlength=n), out=in_ptr[1:])
        pr_ptr, pr_dst, pr_w = _merged_csr(n, src, dst, w)
        return cls(ids, index, out_ptr, dst[out_order], w[out_order], in_ptr, src[in_order],
                   rowid[out_order], rel[out_order], w[in_order], rowid[in_order], rel[in_order], relations,
                   pr_ptr, pr_dst, pr_w)

    def top_edges(self, entity_id: str, k: int) -> list[tuple[int, str, str, float, bool]]:
        """The ``k`` most confident triples touching the entity, either direction:
        ``(triple rowid, relation, other entity, confidence, forward)``, out-edges first on ties."""
        i = self.index.get(entity_id)
        if i is None or k <= 0:
            return []
        o0, o1 = int(self.out_ptr[i]), int(self.out_ptr[i + 1])
        i0, i1 = int(self.in_ptr[i]), int(self.in_ptr[i + 1])
        o1, i1 = min(o1, o0 + k), min(i1, i0 + k)  # segments are sorted: only their heads can make the top k
        w = np.concatenate([self.out_w[o0:o1], self.in_w[i0:i1]])
        order = np.argsort(-w, kind="stable")[:k]
        n_out = o1 - o0
        out: list[tuple[int, str, str, float, bool]] = []
        for j in order.tolist():
            if j < n_out:
                p = o0 + j
                out.append((int(self.out_rowid[p]), self.relations[self.out_rel[p]], self.ids[self.out_dst[p]], float(self.out_w[p]), True))
            else:
                p = i0 + j - n_out
                out.append((int(self.in_rowid[p]), self.relations[self.in_rel[p]], self.ids[self.in_src[p]], float(self.in_w[p]), False))
        return out

    def __len__(self) -> int:
        return len(self.ids)

    @staticmethod
    def _gather(ptr: np.ndarray, vals: np.ndarray, nodes: np.ndarray, cap: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Concatenated CSR rows of ``nodes`` (the first ``cap`` entries of each when given):
        (owner position in ``nodes`` of each entry, position in ``vals``)."""
        starts, ends = ptr[nodes], ptr[nodes + 1]
        lens = ends - starts
        if cap is not None:
            lens = np.minimum(lens, cap)
        total = int(lens.sum())
        if not total:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        owner = np.repeat(np.arange(len(nodes)), lens)
        offs = np.arange(total) - np.repeat(np.cumsum(lens) - lens, lens)
        return owner, starts[owner] + offs

    def neighbourhood(self, nodes: set[str], neighbour_limit: int) -> np.ndarray:
        """Node numbers of ``nodes`` plus, for each, its ``neighbour_limit`` most confident distinct
        neighbours (either direction; equally confident edges in storage order: relation, triple).

        Each node's edges are stored most confident first, so only the first ``2 × limit`` of each
        direction are read: a hub with 10^5 triples costs what a leaf costs."""
        seeds = np.array(sorted(self.index[e] for e in nodes if e in self.index), dtype=np.int64)
        if not len(seeds) or neighbour_limit <= 0:
            return seeds
        cap = 2 * neighbour_limit  # parallel edges to one neighbour may take several of the first slots
        o_owner, o_pos = self._gather(self.out_ptr, self.out_dst, seeds, cap)
        i_owner, i_pos = self._gather(self.in_ptr, self.in_src, seeds, cap)
        owner = np.concatenate([o_owner, i_owner])
        nb = np.concatenate([self.out_dst[o_pos], self.in_src[i_pos]]).astype(np.int64)
        w = np.concatenate([self.out_w[o_pos], self.in_w[i_pos]])
        if not len(nb):
            return seeds
        order = np.lexsort((nb, -w, owner))  # per owner: most confident first, then entity number
        owner, nb = owner[order], nb[order]
        _, first = np.unique(owner * len(self.ids) + nb, return_index=True)  # first sight of each (owner, neighbour)
        keep = np.zeros(len(nb), dtype=bool)
        keep[first] = True
        owner, nb = owner[keep], nb[keep]
        rank = np.arange(len(owner)) - np.searchsorted(owner, owner, side="left")
        return np.unique(np.concatenate([seeds, nb[rank < neighbour_limit]]))

    def edges_among(self, nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Every triple whose head and tail are both in ``nodes``: (head numbers, tail numbers, confidences)."""
        if not len(nodes):
            z = np.zeros(0, dtype=np.int64)
            return z, z, np.zeros(0, dtype=np.float64)
        mask = np.zeros(len(self.ids), dtype=bool)
        mask[nodes] = True
        owner, pos = self._gather(self.out_ptr, self.out_dst, nodes)
        tails = self.out_dst[pos]
        ok = mask[tails]
        return nodes[owner[ok]], tails[ok].astype(np.int64), self.out_w[pos[ok]]

    def merged_edges_among(self, nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The PageRank edges among ``nodes`` (sorted node numbers): one per ordered pair, weight = the
        mean confidence of its triples, no self-loops. Returns (heads, tails, weights) as positions in
        ``nodes`` (0..len(nodes)-1), ready for :func:`pagerank_arrays` with ``merged=True``."""
        if not len(nodes):
            z = np.zeros(0, dtype=np.int64)
            return z, z, np.zeros(0, dtype=np.float64)
        owner, pos = self._gather(self.pr_ptr, self.pr_dst, nodes)
        tails = self.pr_dst[pos]
        local = np.searchsorted(nodes, tails)
        local[local == len(nodes)] = 0
        ok = nodes[local] == tails
        return owner[ok], local[ok], self.pr_w[pos[ok]]


def _merged_csr(n: int, src: np.ndarray, dst: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    keep = src != dst
    key = src[keep].astype(np.int64) * max(n, 1) + dst[keep]
    if not len(key):
        return np.zeros(n + 1, dtype=np.int64), np.zeros(0, dtype=np.int32), np.zeros(0, dtype=np.float64)
    pair, inv = np.unique(key, return_inverse=True)
    mean_w = np.bincount(inv, weights=w[keep]) / np.bincount(inv)
    heads = pair // n
    ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(heads, minlength=n), out=ptr[1:])
    return ptr, (pair % n).astype(np.int32), mean_w


_CACHE: "OrderedDict[tuple, Adjacency]" = OrderedDict()
_LOCK = threading.Lock()
_MAX_GRAPHS = 2

#: Graphs with at least this many triples keep their adjacency on disk under ``<graph>/cache/``
#: (memory-mapped when read back), so a new process skips the build (about a minute at 3.4 M triples).
PERSIST_MIN_TRIPLES = 200_000
_DISK_VERSION = 1
_ARRAYS = ("out_ptr", "out_dst", "out_w", "in_ptr", "in_src", "out_rowid", "out_rel", "in_w", "in_rowid", "in_rel",
           "pr_ptr", "pr_dst", "pr_w")


def _disk_dir(g: Graph, key: tuple) -> Path:
    # the store's id and its write generation (``Graph.state_key``): every bencao write bumps the
    # generation and a rebuilt graph is a new store, so a directory name never outlives the state
    # it was built from
    return g.dir / "cache" / f"adjacency-v{_DISK_VERSION}-{content_hash(key[1], length=12)}-{key[2]}"


def _load(d: Path) -> Adjacency | None:
    try:
        meta = json.loads((d / "meta.json").read_text(encoding="utf-8"))
        ids = np.load(d / "ids.npy").tolist()
        arrays = {k: np.load(d / f"{k}.npy", mmap_mode="r") for k in _ARRAYS}
    except (OSError, ValueError, KeyError):
        return None
    if len(ids) != meta.get("nodes"):
        return None
    return Adjacency(ids=ids, index={e: i for i, e in enumerate(ids)}, relations=list(meta["relations"]), **arrays)


def _save(adj: Adjacency, d: Path) -> None:
    """Written to a temporary directory and renamed into place; a read-only graph directory is
    simply not cached. Older states' directories are removed."""
    from bencao.io import remove_stale_tmp

    if d.parent.is_dir():
        remove_stale_tmp(d.parent, "adjacency-*.tmp-*")  # left by a killed process
    tmp = d.with_name(f"{d.name}.tmp-{os.getpid()}-{threading.get_ident()}")
    try:
        tmp.mkdir(parents=True)
        np.save(tmp / "ids.npy", np.array(adj.ids, dtype=str))
        for k in _ARRAYS:
            np.save(tmp / f"{k}.npy", np.asarray(getattr(adj, k)))
        (tmp / "meta.json").write_text(json.dumps({"nodes": len(adj.ids), "relations": adj.relations}), encoding="utf-8")
        os.rename(tmp, d)
    except OSError:  # unwritable, or another process renamed its copy first
        shutil.rmtree(tmp, ignore_errors=True)
        return
    for old in d.parent.glob("adjacency-*"):
        if old != d and ".tmp-" not in old.name:
            shutil.rmtree(old, ignore_errors=True)


def adjacency_for(g: Graph) -> Adjacency:
    """The graph's adjacency, built on first use and rebuilt when the graph changes (``Graph.state_key``);
    large graphs also keep it on disk for the next process."""
    key = g.state_key()
    with _LOCK:
        adj = _CACHE.get(key)
        if adj is not None:
            _CACHE.move_to_end(key)
            return adj
        for k in [k for k in _CACHE if k[0] == key[0]]:  # an older state of the same graph
            del _CACHE[k]
        d = _disk_dir(g, key)
        adj = _load(d) if d.exists() else None
        if adj is None:
            adj = Adjacency.build(g)
            if len(adj.out_dst) >= PERSIST_MIN_TRIPLES:
                _save(adj, d)
        _CACHE[key] = adj
        while len(_CACHE) > _MAX_GRAPHS:
            _CACHE.popitem(last=False)
        return adj
