"""TCM-DiffRAG's personalized recall: the preferred layer gets its own top-k, however the layer ranks globally."""

from __future__ import annotations

from bencao.retrieval.search.micro import micro_retrieve, nearest_triples


class Rows:
    """The two store calls micro retrieval makes here, over an in-memory table of triples."""

    def __init__(self, layers: dict[str, str]):
        self.rows = {tid: {"id": tid, "head_id": "h", "relation": "treats", "tail_id": f"t{tid}", "confidence": 0.9, "layer": layer,
                           "origin": "test", "head": "h", "tail": f"t{tid}"} for tid, layer in layers.items()}
        self.asked: list[int] = []

    def get_triples(self, ids):
        ids = list(ids)
        self.asked.append(len(ids))
        return {i: self.rows[i] for i in ids if i in self.rows}

    def snippets_of_triple(self, tid):
        return []


class Ranked:
    """An index whose lexical ranking is fixed: 200 book triples first, the one personal triple 150th."""

    def __init__(self, order: list[str]):
        self.order = order

    def lexical_search(self, kind, query, k):
        return [(tid, 1.0 / (i + 1)) for i, tid in enumerate(self.order[:k])]

    def dense_search(self, kind, query, k):
        return []


def _graph_and_index():
    order = [f"b{i}" for i in range(149)] + ["p0"] + [f"b{i}" for i in range(149, 200)]
    layers = {tid: ("personal" if tid.startswith("p") else "book") for tid in order}
    return Rows(layers), Ranked(order)


def test_a_personal_triple_ranked_150th_is_recalled_with_top_5():
    g, ix = _graph_and_index()
    triples, _ = micro_retrieve(g, ix, ["脾虚 泄泻"], [], k_triples=5, anchored_triples=0, layers=["personal"])
    assert [t.id for t in triples] == ["p0"]
    fused, _ = nearest_triples(g, ix, ["脾虚 泄泻"], 5)  # without the layer: the global top 5, all book triples
    assert [tid for tid, _ in fused] == ["b0", "b1", "b2", "b3", "b4"]


def test_the_deeper_search_stops_when_the_index_runs_out():
    g, ix = _graph_and_index()
    kept, _ = nearest_triples(g, ix, ["q"], 3, layers=["completed"])  # no triple of that layer at all
    assert kept == [] and max(g.asked) == 201  # looked at everything the index had, then stopped


def test_every_shipped_recipe_with_a_cot_model_recalls_the_personal_layer_first():
    from bencao.recipes import list_recipes
    from bencao.serving.config import load_serve_config

    with_cot = [r.name for r in list_recipes() if r.kind == "serving" and load_serve_config(r.name).cot.llm is not None]
    assert with_cot, "no shipped serving recipe has a CoT model"
    for name in with_cot:
        assert load_serve_config(name).retrieval.micro.prefer_layers == ["personal"], name
