"""Weighted PageRank and PathScore on a small hand-built graph with known numbers."""

from __future__ import annotations

import math

import numpy as np
import pytest

from bencao.retrieval.graph.store import Graph
from bencao.retrieval.search.pagerank import merge_parallel, path_score, weighted_pagerank
from bencao.retrieval.search.paths import enumerate_paths, mine_relation_patterns, score_paths, top_paths


def power_iteration(nodes, edges, d=0.85, iters=500):
    """Reference PageRank: weighted, directed, dangling mass spread uniformly."""
    idx = {n: i for i, n in enumerate(nodes)}
    n = len(nodes)
    W = np.zeros((n, n))
    for (s, t), w in edges.items():
        W[idx[s], idx[t]] += w
    out = W.sum(axis=1)
    p = np.full(n, 1.0 / n)
    for _ in range(iters):
        nxt = np.zeros(n)
        for i in range(n):
            if out[i] > 0:
                nxt += d * p[i] * W[i] / out[i]
            else:
                nxt += d * p[i] / n
        nxt += (1 - d) / n
        p = nxt
    return {nd: p[idx[nd]] for nd in nodes}


def test_two_node_cycle_is_uniform():
    pr = weighted_pagerank([("a", "b", 0.3), ("b", "a", 0.9)])
    assert pr["a"] == pytest.approx(0.5) and pr["b"] == pytest.approx(0.5)


def test_weighted_pagerank_matches_reference_and_averages_parallel_edges():
    edges = [("A", "B", 0.9), ("A", "B", 0.5), ("A", "C", 0.2), ("B", "C", 0.8), ("C", "A", 1.0), ("C", "D", 0.4)]
    merged = merge_parallel(edges)
    assert merged[("A", "B")] == pytest.approx(0.7)  # mean of the two parallel relations
    pr = weighted_pagerank(edges, damping=0.85)
    ref = power_iteration(["A", "B", "C", "D"], merged, d=0.85)
    for k in ref:
        assert pr[k] == pytest.approx(ref[k], abs=1e-6)
    assert sum(pr.values()) == pytest.approx(1.0)
    # Weights matter: A→B (0.7) vs A→C (0.2) sends more of A's rank to B than an unweighted graph would.
    unweighted = power_iteration(["A", "B", "C", "D"], {k: 1.0 for k in merged}, d=0.85)
    assert pr["B"] > unweighted["B"]
    # Damping is honoured: with d=0 every node gets 1/n.
    flat = weighted_pagerank(edges, damping=0.0)
    assert all(v == pytest.approx(0.25) for v in flat.values())


def test_path_score_is_product_times_mean_pagerank():
    pr = {"x": 0.5, "y": 0.3, "z": 0.2}
    score, prod, mean = path_score([0.9, 0.8], ["x", "y", "z"], pr)
    assert prod == pytest.approx(0.72)
    assert mean == pytest.approx(1.0 / 3)
    assert score == pytest.approx(0.72 / 3)


@pytest.fixture()
def small_graph(tmp_path) -> Graph:
    g = Graph.create(tmp_path / "g")
    b = g.builder(source="hand", kind="kb", content_key="hand-1", format="test")
    A, B, C, D = (b.entity(n, "thing") for n in ("alpha", "beta", "gamma", "delta"))
    b.triple(A, "r", B, confidence=0.9, layer="imported", origin="t")
    b.triple(A, "r2", B, confidence=0.5, layer="imported", origin="t")
    b.triple(A, "s", C, confidence=0.2, layer="imported", origin="t")
    b.triple(B, "s", C, confidence=0.8, layer="imported", origin="t")
    b.triple(C, "t", A, confidence=1.0, layer="imported", origin="t")
    b.triple(C, "t", D, confidence=0.4, layer="imported", origin="t")
    g.commit(b)
    return g


def test_path_scores_on_graph_use_confidence_pagerank(small_graph):
    g = small_graph
    A = g.find_entity_id("alpha")
    B, C, D = (g.find_entity_id(n) for n in ("beta", "gamma", "delta"))
    patterns = mine_relation_patterns(g, max_hops=2, n=50)
    assert ("s",) in patterns and ("r", "s") in patterns  # A -r-> B -s-> C occurs in the graph
    paths = enumerate_paths(g, [A, C], patterns, max_hops=2)
    by_steps = {(tuple(p.entities), tuple(p.steps)): p for p in paths}
    p = by_steps[((A, B, C), ("r", "s"))]
    assert p.connects  # ends at the other linked entity
    assert [g.get_triple(t)["relation"] for t in p.triple_ids] == ["r", "s"]  # real triple ids, in path order
    pr = score_paths(g, paths, damping=0.85)
    # The subgraph is the whole graph here; PageRank = the reference with parallel A→B averaged.
    ref = power_iteration([A, B, C, D], {(A, B): 0.7, (A, C): 0.2, (B, C): 0.8, (C, A): 1.0, (C, D): 0.4})
    for k, v in ref.items():
        assert pr[k] == pytest.approx(v, abs=1e-6)
    assert p.confidence_product == pytest.approx(0.9 * 0.8)
    assert p.score == pytest.approx(0.72 * (ref[A] + ref[B] + ref[C]) / 3, rel=1e-6)
    best = top_paths(g, [A, C], max_hops=2, top_k=3)
    assert len(best) == 3 and all(x.connects for x in best[:1])
    assert all(best[i].connects >= best[i + 1].connects for i in range(len(best) - 1))
    g.close()


def test_mined_patterns_rank_by_frequency(small_graph):
    pats = mine_relation_patterns(small_graph, max_hops=1, n=10)
    singles = [p for p in pats if len(p) == 1]
    assert singles[0] in {("s",), ("~s",), ("t",), ("~t",)}  # s and t occur twice, r and r2 once
    assert all(len(p) == 1 for p in pats)
    assert math.isclose(len(singles), 8)


def test_merged_edges_among_a_subset(small_graph):
    from bencao.retrieval.search.adjacency import adjacency_for

    g = small_graph
    adj = adjacency_for(g)
    A, B, C = (g.find_entity_id(n) for n in ("alpha", "beta", "gamma"))
    sub = np.array(sorted(adj.index[e] for e in (A, B, C)))
    h, t, w = adj.merged_edges_among(sub)
    got = {(adj.ids[sub[i]], adj.ids[sub[j]]): x for i, j, x in zip(h.tolist(), t.tolist(), w.tolist())}
    # A→B's two relations (0.9, 0.5) are one edge of weight 0.7; C→D leaves the subset
    assert got == pytest.approx({(A, B): 0.7, (A, C): 0.2, (B, C): 0.8, (C, A): 1.0})


def test_neighbourhood_keeps_the_most_confident_neighbours_of_a_hub(tmp_path):
    from bencao.retrieval.search.adjacency import adjacency_for

    g = Graph.create(tmp_path / "hub")
    b = g.builder(source="hand", kind="kb", content_key="hub-1", format="test")
    hub = b.entity("甘", "flavour")
    herbs = [b.entity(f"herb{i:02d}", "herb") for i in range(40)]
    for i, h in enumerate(herbs):  # herb39 is the most confident, herb00 the least
        b.triple(h, "has_flavour", hub, confidence=0.5 + i / 100, layer="imported", origin="t")
    b.triple(hub, "related_to", herbs[0], confidence=0.995, layer="imported", origin="t")  # an out-edge outranks them
    g.commit(b)
    adj = adjacency_for(g)
    got = {adj.ids[i] for i in adj.neighbourhood({hub}, 3).tolist()}
    assert got == {hub, herbs[0], herbs[39], herbs[38]}
    g.close()


def test_adjacency_is_kept_on_disk_for_the_next_process(small_graph, monkeypatch):
    import dataclasses

    from bencao.retrieval.search import adjacency as adjmod

    g = small_graph
    monkeypatch.setattr(adjmod, "PERSIST_MIN_TRIPLES", 0)
    adjmod._CACHE.clear()
    built = adjmod.adjacency_for(g)
    saved = sorted((g.dir / "cache").glob("adjacency-*"))
    assert len(saved) == 1
    adjmod._CACHE.clear()  # a new process: nothing in memory

    def no_build(_g):
        raise AssertionError("rebuilt although the disk copy is current")

    monkeypatch.setattr(adjmod.Adjacency, "build", classmethod(lambda cls, _g: no_build(_g)))
    loaded = adjmod.adjacency_for(g)
    for f in dataclasses.fields(adjmod.Adjacency):
        a, b = getattr(built, f.name), getattr(loaded, f.name)
        assert (np.array_equal(a, b) if isinstance(a, np.ndarray) else a == b), f.name
    A = g.find_entity_id("alpha")
    assert loaded.top_edges(A, 2) == built.top_edges(A, 2)
    monkeypatch.undo()  # the real build again, for the changed graph
    monkeypatch.setattr(adjmod, "PERSIST_MIN_TRIPLES", 0)
    b = g.builder(source="hand2", kind="kb", content_key="hand-2", format="test")
    b.triple(b.entity("alpha", "thing"), "r", b.entity("epsilon", "thing"), confidence=0.3, layer="imported", origin="t")
    g.commit(b)  # a new generation: the old directory is replaced, not reused
    adjmod._CACHE.clear()
    changed = adjmod.adjacency_for(g)
    assert "epsilon" in {g.get_entity(e)["name"] for e in changed.ids}
    now = sorted((g.dir / "cache").glob("adjacency-*"))
    assert len(now) == 1 and now != saved


def _catalogue_graph(tmp_path):
    """40 herbs listed in one catalogue (a hub of 40 triples), herb00 with two specific effects of equal weight."""
    g = Graph.create(tmp_path / "cat")
    b = g.builder(source="hand", kind="kb", content_key="cat-1", format="test")
    cat = b.entity("药食同源目录", "catalogue")
    herbs = [b.entity(f"herb{i:02d}", "herb") for i in range(40)]
    for h in herbs:
        b.triple(h, "listed_in", cat, confidence=1.0, layer="imported", origin="t")
    e1, e2 = b.entity("补中益气", "effect"), b.entity("壮筋骨", "effect")
    b.triple(herbs[0], "has_effect", e1, confidence=0.6, layer="book", origin="t")
    b.triple(herbs[0], "has_effect", e2, confidence=0.6, layer="book", origin="t")
    g.commit(b)
    return g, herbs[0], cat


def test_no_path_ends_at_a_hub_unless_asked(tmp_path):
    g, herb, cat = _catalogue_graph(tmp_path)
    with_hub = top_paths(g, [herb], max_hops=1, hub_degree=20, hub_endpoints=True)
    assert with_hub[0].entities[-1] == cat  # the hub's PageRank puts the catalogue listing first
    paths = top_paths(g, [herb], max_hops=1, hub_degree=20)  # the retriever's default: hub_endpoints off
    assert paths and all(p.entities[-1] != cat for p in paths)
    linked = top_paths(g, [herb, cat], max_hops=1, hub_degree=20)  # a linked hub is a target: the path joining them stays
    assert any(p.entities == [herb, cat] and p.connects for p in linked)
    g.close()


def test_equal_pathscores_are_ordered_the_same_way_every_time(tmp_path):
    g, herb, _ = _catalogue_graph(tmp_path)
    runs = [[(p.score, tuple(p.triple_ids)) for p in top_paths(g, [herb], max_hops=1, hub_degree=20)] for _ in range(3)]
    assert runs[0] == runs[1] == runs[2]
    scores = [s for s, _ in runs[0]]
    assert len(scores) == 2 and scores[0] == pytest.approx(scores[1])  # a true tie, broken by the triple ids
    assert [ids for _, ids in runs[0]] == sorted(ids for _, ids in runs[0])
    g.close()
