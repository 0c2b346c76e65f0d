"""Build and update the retrieval indexes of a graph; open them for search.

``update_indexes(graph, config)`` is the one call the graph commands make after the graph changed
(build, add, remove): lexical indexes are rebuilt for kinds whose items changed (BM25 is cheap),
dense vectors come from the embedding cache so only new texts are embedded, and a kind whose
items did not change is left alone. Layout::

    <graph>/index/<embedder-id>/<kind>.faiss, <kind>.ids.json, cache.sqlite, meta.json
    <graph>/lexical/<kind>/  (bm25s files + ids.json), meta.json
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from bencao.config import field, from_dict, load_config, read_yaml, to_dict
from bencao.errors import BencaoError, ConfigError
from bencao.io import atomic_write_json, content_hash
from bencao.retrieval.graph.store import Graph
from bencao.retrieval.index.dense import DenseIndex, DenseParams
from bencao.retrieval.index.embedder import (EmbedderConfig, EmbeddingCache, check_dim, embed_with_cache, embedder_id,
                                             get_embedder, shared_cache_path)
from bencao.retrieval.index.items import ITEM_SOURCES, KINDS
from bencao.retrieval.index.lexical import LexicalIndex, analyze_items

log = logging.getLogger(__name__)

#: Bumped when the lexical analyzer changes, so existing BM25 indexes are rebuilt.
LEXICAL_ANALYZER = "analyze-v4"


@dataclass
class IndexConfig:
    embedder: EmbedderConfig = field(default_factory=EmbedderConfig, help="The dense embedder.")
    kinds: list[str] = field(default_factory=lambda: list(KINDS), help="Item kinds that get a lexical index (entities, triples, snippets, sections).")
    dense_kinds: list[str] = field(default_factory=lambda: ["entities", "snippets", "sections"],
                                   help="Item kinds that get dense vectors (only items in embedder.languages); triples are lexical-only by default.")
    exact_max: int = field(100_000, help="Up to this many vectors a kind uses exact search (IndexFlatIP); above it an approximate index.")
    ann: str = field("hnsw", help="Approximate index above exact_max: hnsw or ivf.")
    hnsw_m: int = field(32, help="HNSW graph degree.")
    ivf_nlist: int = field(0, help="IVF cells; 0 = 4·sqrt(n).")
    embed_batch: int = field(256, help="Texts embedded (and committed to the cache) per step.")
    shared_cache: bool = field(True, help="Also keep vectors in a per-user cache ($BENCAO_CACHE_DIR or ~/.cache/bencao/embeddings), so rebuilding a graph does not re-embed.")

    def dense_params(self) -> DenseParams:
        return DenseParams(exact_max=self.exact_max, ann=self.ann, hnsw_m=self.hnsw_m, ivf_nlist=self.ivf_nlist)

    def validate(self) -> None:
        for k in [*self.kinds, *self.dense_kinds]:
            if k not in KINDS:
                raise ConfigError(f"index kind {k!r} is not one of {', '.join(KINDS)}")
        if self.ann not in ("hnsw", "ivf"):
            raise ConfigError(f"index.ann: {self.ann!r} is not hnsw or ivf")


def resolve_index_config(graph: Graph, config: "IndexConfig | str | Path | dict | None", overrides: list[str] | tuple[str, ...] = ()) -> IndexConfig:
    """Accepts an IndexConfig, a retrieval YAML (its ``index`` section is used), a dict, or None.

    None means: the configuration recorded in the graph manifest by the last index build, else
    the defaults.
    """
    if isinstance(config, IndexConfig):
        cfg = config
    elif config is None:
        recorded = (graph.read_manifest().get("indexes") or {}).get("config")
        cfg = from_dict(IndexConfig, recorded, "manifest indexes.config") if recorded else IndexConfig()
    elif isinstance(config, dict):
        cfg = from_dict(IndexConfig, config.get("index", config), "index")
    else:
        data = read_yaml(config)
        cfg = from_dict(IndexConfig, data.get("index", {}), f"{config}:index")
    if overrides:
        from bencao.config import apply_overrides

        cfg = from_dict(IndexConfig, apply_overrides(to_dict(cfg), list(overrides)), "index overrides")
    cfg.validate()
    return cfg


def _items_hash(items: list) -> str:
    return content_hash(*(f"{it.id}\x1e{it.text}" for it in items), length=20)


def _read_meta(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}


def update_indexes(graph: Graph, config: "IndexConfig | str | Path | dict | None" = None, *, force: bool = False,
                   progress: Callable[[str, int, int], None] | None = None) -> dict[str, Any]:
    """Bring ``<graph>/index`` and ``<graph>/lexical`` up to date with the graph. Returns a summary.

    Safe to interrupt: embedded batches stay in the cache, each index file is replaced atomically.
    """
    cfg = resolve_index_config(graph, config)
    t0 = time.time()
    eid = embedder_id(cfg.embedder)
    dense_dir = graph.dir / "index" / eid
    lex_dir = graph.dir / "lexical"
    lex_meta = _read_meta(lex_dir / "meta.json")
    dense_meta = _read_meta(dense_dir / "meta.json")
    summary: dict[str, Any] = {"embedder": eid, "lexical": {}, "dense": {}, "embedded": 0}
    from bencao.retrieval.search.mentions import teach_jieba

    teach_jieba(graph)  # the graph's Chinese names stay whole words, at index and at query time
    embedder = None
    cache = None
    lex_memo: dict[str, list[str]] = {}  # tokens of entity names, shared by the entity and triple indexes
    try:
        for kind in KINDS:
            want_lex, want_dense = kind in cfg.kinds, kind in cfg.dense_kinds
            if not (want_lex or want_dense):
                continue
            t_kind = time.time()
            items = list(ITEM_SOURCES[kind](graph))
            h = _items_hash(items)
            log.info("%s: %d items read in %.1fs", kind, len(items), time.time() - t_kind)
            if want_lex:
                lh = h + LEXICAL_ANALYZER
                if force or lex_meta.get(kind, {}).get("hash") != lh or not (lex_dir / kind / "ids.json").exists():
                    LexicalIndex.build(analyze_items(items, lex_memo), [it.id for it in items]).save(lex_dir / kind)
                    lex_meta[kind] = {"hash": lh, "n": len(items)}
                    atomic_write_json(lex_dir / "meta.json", lex_meta)
                    log.info("%s: lexical index of %d items built (%.1fs so far)", kind, len(items), time.time() - t_kind)
                summary["lexical"][kind] = lex_meta[kind]["n"]
            if want_dense:
                dense_items = [it for it in items if cfg.embedder.embeds(it.lang)]
                dh = _items_hash(dense_items) + content_hash(cfg.embedder.languages, cfg.exact_max, cfg.ann)
                if force or dense_meta.get(kind, {}).get("hash") != dh or not (dense_dir / f"{kind}.faiss").exists():
                    if embedder is None:
                        embedder = get_embedder(cfg.embedder)
                        cache = EmbeddingCache(dense_dir / "cache.sqlite", embedder.dim,
                                               shared=shared_cache_path(eid) if cfg.shared_cache else None)
                    vecs, n_new = embed_with_cache(embedder, cache, [it.text for it in dense_items], batch=cfg.embed_batch,
                                                   progress=(lambda i, n, k=kind: progress(k, i, n)) if progress else None)
                    summary["embedded"] += n_new
                    index = DenseIndex.build(vecs, [it.id for it in dense_items], cfg.dense_params())
                    index.save(dense_dir, kind)
                    dense_meta[kind] = {"hash": dh, "n": len(dense_items), "of": len(items), "type": index.kind_name, "dim": index.dim}
                    dense_meta["_embedder"] = {"id": eid, "model": cfg.embedder.model, "dim": index.dim}
                    atomic_write_json(dense_dir / "meta.json", dense_meta)
                    log.info("%s: %s index of %d vectors built, %d newly embedded (%.1fs so far)", kind, index.kind_name,
                             len(dense_items), n_new, time.time() - t_kind)
                summary["dense"][kind] = {k: dense_meta[kind][k] for k in ("n", "of", "type")}
    finally:
        if cache is not None:
            cache.close()
    summary["seconds"] = round(time.time() - t0, 2)
    m = graph.read_manifest()
    embedders = dict(m.get("embedders") or {})
    if summary["dense"]:
        embedders[eid] = {"model": cfg.embedder.model, "backend": cfg.embedder.backend, "languages": cfg.embedder.languages,
                          "dim": dense_meta.get("_embedder", {}).get("dim")}
    graph.write_manifest("index", {"embedder": eid, "embedded": summary["embedded"]}, embedders=embedders,
                         indexes={"embedder": eid, "config": to_dict(cfg), "lexical": summary["lexical"], "dense": summary["dense"]})
    return summary


class Indexes:
    """Read side: the lexical and dense indexes of one graph for one configured embedder (loaded lazily)."""

    def __init__(self, graph: Graph, cfg: IndexConfig):
        self.graph = graph
        self.cfg = cfg
        self.embedder_id = embedder_id(cfg.embedder)
        self.dense_dir = graph.dir / "index" / self.embedder_id
        self.lex_dir = graph.dir / "lexical"
        self._lex: dict[str, LexicalIndex | None] = {}
        self._dense: dict[str, DenseIndex | None] = {}
        self._embedder = None
        self._qcache: dict[str, np.ndarray] = {}
        self._check()

    def _check(self) -> None:
        idx_root = self.graph.dir / "index"
        built = sorted(p.name for p in idx_root.iterdir() if p.is_dir()) if idx_root.exists() else []
        if self.cfg.dense_kinds and built and self.embedder_id not in built:
            raise BencaoError(
                f"{self.graph.dir}: the dense index was built with embedder {', '.join(built)}, but {self.embedder_id!r} is configured; "
                f"run `bencao graph index --graph {self.graph.dir}` with this configuration, or set index.embedder.model to the one it was built with")
        meta = _read_meta(self.dense_dir / "meta.json").get("_embedder")
        if meta and meta.get("model") != self.cfg.embedder.model:
            raise BencaoError(f"{self.dense_dir}: built with model {meta.get('model')!r}, configured {self.cfg.embedder.model!r}; rebuild with `bencao graph index`")

    @property
    def has_any(self) -> bool:
        return (self.lex_dir / "meta.json").exists() or (self.dense_dir / "meta.json").exists()

    def lexical(self, kind: str) -> LexicalIndex | None:
        if kind not in self._lex:
            self._lex[kind] = LexicalIndex.load(self.lex_dir / kind)
        return self._lex[kind]

    def dense(self, kind: str) -> DenseIndex | None:
        if kind not in self._dense:
            idx = DenseIndex.load(self.dense_dir, kind) if kind in self.cfg.dense_kinds else None
            if idx is not None and len(idx):
                check_dim(self.embedder(), idx.dim, str(self.dense_dir / f"{kind}.faiss"))
            self._dense[kind] = idx if idx is not None and len(idx) else None
        return self._dense[kind]

    def embedder(self):
        if self._embedder is None:
            self._embedder = get_embedder(self.cfg.embedder)
        return self._embedder

    def can_embed(self, text: str) -> bool:
        from bencao.text import lang_of

        return self.cfg.embedder.embeds(lang_of(text))

    def embed_queries(self, texts: list[str]) -> np.ndarray:
        todo = [t for t in dict.fromkeys(texts) if t not in self._qcache]
        if todo:
            for t, v in zip(todo, self.embedder().encode(todo, query=True)):
                self._qcache[t] = v
            if len(self._qcache) > 20_000:
                self._qcache.clear()
        return np.stack([self._qcache[t] for t in texts]) if texts else np.zeros((0, 1), dtype=np.float32)

    def dense_search(self, kind: str, query: str, k: int) -> list[tuple[str, float]]:
        """Nearest items by cosine; empty when the kind has no dense index or the model cannot read the query."""
        idx = self.dense(kind)
        if idx is None or not query.strip() or not self.can_embed(query):
            return []
        return idx.search(self.embed_queries([query]), k)[0]

    def lexical_search(self, kind: str, query: str, k: int) -> list[tuple[str, float]]:
        idx = self.lexical(kind)
        return idx.search(query, k) if idx is not None else []


def open_indexes(graph: Graph, config: "IndexConfig | str | Path | dict | None" = None) -> Indexes:
    return Indexes(graph, resolve_index_config(graph, config))


def load_index_config(path: str | Path | None, overrides: list[str] | tuple[str, ...] = ()) -> IndexConfig:
    return load_config(IndexConfig, path, overrides)
