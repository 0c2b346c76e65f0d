"""Build and update the retrieval indexes of a graph; open them for search; keep them current.

``update_indexes(graph, config)`` brings the indexes up to date with the graph: lexical indexes
are rebuilt for kinds whose items changed (BM25 is cheap), dense vectors come from the embedding
cache keyed by (model fingerprint, text) so only texts this model never embedded are embedded, and
a kind whose items, settings and model did not change is left alone. Layout::

    <graph>/index/<embedder-id>/<kind>.faiss, <kind>.ids.json, cache.sqlite, meta.json
    <graph>/lexical/<kind>/  (bm25s files + ids.json), meta.json

Freshness: the manifest's ``indexes.generation`` records, per index kind, the store generation
(``Graph.generation``, bumped by every committed write) and store id the index reflects, and
``embedders[<id>]`` records the model (name, resolved path, weight fingerprint, dim, languages).
:func:`refresh_indexes` is the one call every command that writes to the graph makes afterwards
(a no-op for a graph without indexes, and a cheap check when nothing changed); opening the indexes
for queries (:class:`Indexes`) finds an index behind the store and refreshes it when the graph is
open for writing, or refuses with a one-line error naming ``bencao graph index`` when it is not.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np

from bencao.config import field, from_dict, load_config, read_yaml, to_dict
from bencao.errors import BencaoError, ConfigError
from bencao.faults import fault
from bencao.io import atomic_write_json, content_hash
from bencao.retrieval.graph.store import Graph
from bencao.retrieval.index.dense import DenseIndex, DenseParams
from bencao.retrieval.index.embedder import (EmbedderConfig, EmbeddingCache, check_dim, embed_with_cache, embedder_id,
                                             get_embedder, model_path, shared_cache_path, vector_fingerprint)
from bencao.retrieval.index.items import ITEM_SOURCES, KINDS
from bencao.retrieval.index.lexical import LexicalIndex, iter_analyzed

log = logging.getLogger(__name__)

#: Bumped when the lexical analyzer changes, so existing BM25 indexes are rebuilt.
LEXICAL_ANALYZER = "analyze-v4"
#: ``BENCAO_FAULT=<point>`` makes :func:`fault_point` raise there: the crash tests' stand-in for a kill.
FAULT_ENV = "BENCAO_FAULT"
#: Embedder settings that decide what the stored vectors are; the rest (device, batch size) are the
#: running process's own.
_VECTOR_FIELDS = ("backend", "model", "languages", "max_seq_length", "query_prefix")


class SimulatedCrash(RuntimeError):
    """Raised at a named fault point (tests of crash recovery)."""


def fault_point(name: str) -> None:
    """Raise :class:`SimulatedCrash` when ``$BENCAO_FAULT`` names this point."""
    if os.environ.get(FAULT_ENV) == name:
        raise SimulatedCrash(f"simulated crash at {name}")


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


def _parse_index_config(graph: Graph, config: "IndexConfig | str | Path | dict | None",
                        overrides: list[str] | tuple[str, ...] = ()) -> IndexConfig:
    if isinstance(config, IndexConfig):
        cfg = from_dict(IndexConfig, to_dict(config), "index")  # a copy: the caller's object is not filled in
    elif config is None:
        recorded = recorded_index_config(graph)
        cfg = recorded if recorded is not None else IndexConfig()
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


def recorded_index_config(graph: Graph) -> IndexConfig | None:
    """The index configuration recorded in the manifest by the last index build, if any."""
    recorded = (graph.read_manifest().get("indexes") or {}).get("config")
    return from_dict(IndexConfig, recorded, f"{graph.dir}/manifest.json indexes.config") if recorded else None


def _adopt_recorded_embedder(cfg: IndexConfig, recorded: IndexConfig | None) -> None:
    """An embedder config that names no model means the one the index was built with: its vector
    settings are taken from the record; device and batch size stay the caller's."""
    if cfg.embedder.model.strip():
        return
    if recorded is not None and recorded.embedder.model.strip():
        for f in _VECTOR_FIELDS:
            setattr(cfg.embedder, f, getattr(recorded.embedder, f))
    else:
        cfg.embedder.model = cfg.embedder.model_name


def resolve_index_config(graph: Graph, config: "IndexConfig | str | Path | dict | None", overrides: list[str] | tuple[str, ...] = ()) -> IndexConfig:
    """The configuration to build with: an IndexConfig, a retrieval YAML (its ``index`` section), a
    dict, or None (the configuration recorded by the last index build, else the defaults).

    A configuration that names no embedder model keeps the model the graph's index was built with
    (else the packaged MiniLM); the result always names its model."""
    cfg = _parse_index_config(graph, config, overrides)
    _adopt_recorded_embedder(cfg, recorded_index_config(graph))
    return cfg


@dataclass
class _KindItems:
    """One kind's items as an index build needs them, read in one pass without keeping ``Item``
    objects: ids, lexical sources (text, or the ``lex_parts`` tuple of shared names), the dense
    subset's ids and texts, and content hashes of (id, text) of all items and of the dense subset."""

    ids: list[str]
    lex: list[Any]
    dense_ids: list[str]
    dense_texts: list[str]
    hash: str
    dense_hash: str


def _read_items(kind: str, graph: Graph, embedder: EmbedderConfig | None, want_lex: bool) -> _KindItems:
    import hashlib

    h_all, h_dense = hashlib.sha1(), hashlib.sha1()  # = content_hash over f"{id}\x1e{text}" parts
    out = _KindItems([], [], [], [], "", "")
    for it in ITEM_SOURCES[kind](graph):
        part = f"{it.id}\x1e{it.text}".encode("utf-8") + b"\x1f"
        h_all.update(part)
        out.ids.append(it.id)
        if want_lex:
            out.lex.append(it.lex_parts or it.lex)
        if embedder is not None and embedder.embeds(it.lang):
            h_dense.update(part)
            out.dense_ids.append(it.id)
            out.dense_texts.append(it.text)
    out.hash, out.dense_hash = h_all.hexdigest()[:20], h_dense.hexdigest()[:20]
    return out


def _read_meta(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
    except (OSError, ValueError):
        return {}  # a damaged meta file means: rebuild that directory's indexes


@contextlib.contextmanager
def _index_lock(graph: Graph) -> Iterator[None]:
    """One index build per graph at a time, across processes (a second waits, then finds the work done)."""
    try:
        import fcntl

        fh = open(graph.dir / ".index.lock", "a+")
    except (ImportError, OSError):  # no flock (Windows) or a read-only directory
        yield
        return
    try:
        fcntl.flock(fh, fcntl.LOCK_EX)
        yield
    finally:
        fh.close()


def _state(graph: Graph) -> dict[str, Any]:
    return {"store": graph.store_id(), "generation": graph.generation()}


def stale_reasons(graph: Graph, cfg: IndexConfig | None = None) -> list[str]:
    """Why the graph's indexes do not reflect the store (and the recorded model), or [] when they do
    (also [] for a graph that has no indexes). Cheap: reads the manifest, the store's generation and
    the model's remembered file hashes; never the items."""
    m = graph.read_manifest().get("indexes") or {}
    if not m:
        return []
    cfg = cfg or recorded_index_config(graph) or IndexConfig()
    rec = m.get("generation") or {}
    if not rec:
        return ["the indexes record no store generation (built by an older bencao)"]
    now = _state(graph)
    if rec.get("store") != now["store"]:
        return ["the indexes were built for another store (the graph was rebuilt)"]
    out = []
    dense_dir = graph.dir / "index" / str(m.get("embedder") or "")
    files = {"lexical": lambda k: [graph.dir / "lexical" / k / "ids.json"],
             "dense": lambda k: [dense_dir / f"{k}.faiss", dense_dir / f"{k}.ids.json"]}
    for family, kinds in (("lexical", cfg.kinds), ("dense", cfg.dense_kinds)):
        for kind in kinds:
            g = (rec.get(family) or {}).get(kind)
            if g is None:
                out.append(f"no {family} {kind} index")
            elif g != now["generation"]:
                out.append(f"{family} {kind} index at store generation {g}, the store at {now['generation']}")
            elif any(not p.exists() for p in files[family](kind)):
                missing = next(p for p in files[family](kind) if not p.exists())
                out.append(f"{family} {kind} index recorded but {missing.relative_to(graph.dir)} is missing")
    if cfg.dense_kinds and m.get("embedder"):
        info = (graph.read_manifest().get("embedders") or {}).get(m["embedder"]) or {}
        try:
            fp = vector_fingerprint(cfg.embedder)
        except ConfigError as exc:
            out.append(str(exc))
        else:
            if info.get("fingerprint") and info["fingerprint"] != fp:
                out.append(f"the model {cfg.embedder.model_name!r} changed since its vectors were made "
                           f"(fingerprint {info['fingerprint']} → {fp})")
    return out


def refresh_indexes(graph: Graph, progress: Callable[[str, int, int], None] | None = None) -> dict[str, Any] | None:
    """The one call every command that writes to a graph makes after its commit: brings the graph's
    indexes (built before with ``bencao graph index`` or by ``graph build``) up to date with the
    store, with the configuration recorded at their last build. A no-op for a graph without
    indexes; only a cheap check when nothing changed. Returns ``update_indexes``' summary or None."""
    fault_point("refresh_indexes")
    if not graph.read_manifest().get("indexes"):
        return None
    return update_indexes(graph, None, progress=progress)


def _unchanged_summary(graph: Graph, cfg: IndexConfig, eid: str, fp: str | None, force: bool) -> dict[str, Any] | None:
    """The summary of an update with nothing to do (every wanted kind recorded at the store's current
    state with this configuration and model, its files present), or None when there is work."""
    if force:
        return None
    m = graph.read_manifest().get("indexes") or {}
    if not m or m.get("config") != to_dict(cfg) or stale_reasons(graph, cfg):
        return None
    if cfg.dense_kinds and ((graph.read_manifest().get("embedders") or {}).get(eid) or {}).get("fingerprint") != fp:
        return None
    lex_dir, dense_dir = graph.dir / "lexical", graph.dir / "index" / eid
    if not all((lex_dir / k / "ids.json").exists() for k in cfg.kinds):
        return None
    if not all((dense_dir / f"{k}.faiss").exists() for k in cfg.dense_kinds):
        return None
    return {"embedder": eid, "lexical": {k: m.get("lexical", {}).get(k) for k in cfg.kinds},
            "dense": {k: m.get("dense", {}).get(k) for k in cfg.dense_kinds}, "embedded": 0, "unchanged": True}


def update_indexes(graph: Graph, config: "IndexConfig | str | Path | dict | None" = None, *, force: bool = False,
                   progress: Callable[[str, int, int], None] | None = None) -> dict[str, Any]:
    """Bring ``<graph>/index`` and ``<graph>/lexical`` up to date with the graph. Returns a summary
    (``embedded``: texts embedded by this run, summed over kinds).

    Safe to interrupt: embedded batches stay in the cache, each index file is replaced atomically,
    and the manifest records a kind's store generation only once its index is written.
    """
    cfg = resolve_index_config(graph, config)
    t0 = time.time()
    eid = embedder_id(cfg.embedder)
    with _index_lock(graph):
        fp = vector_fingerprint(cfg.embedder) if cfg.dense_kinds else None
        done = _unchanged_summary(graph, cfg, eid, fp, force)
        if done is not None:
            done["seconds"] = round(time.time() - t0, 2)
            return done
        if graph.read_only:
            from bencao.retrieval.graph.store import folder_writable

            why = "its folder is read-only" if not folder_writable(graph.dir) else "the graph was opened read-only"
            raise BencaoError(f"{graph.dir}: the indexes need building ({'; '.join(stale_reasons(graph, cfg)) or 'forced'}), and {why}; "
                              f"run `bencao graph index --graph DIR` where the graph is writable")
        state = _state(graph)  # read before the items: a write during the build leaves the record behind, never ahead
        summary = _build(graph, cfg, eid, fp, state, force, progress)
        _prepare_query_caches(graph)
    summary["seconds"] = round(time.time() - t0, 2)
    return summary


def _build(graph: Graph, cfg: IndexConfig, eid: str, fp: str | None, state: dict[str, Any], force: bool,
           progress: Callable[[str, int, int], None] | None) -> dict[str, Any]:
    dense_dir = graph.dir / "index" / eid
    lex_dir = graph.dir / "lexical"
    lex_meta = _read_meta(lex_dir / "meta.json")
    dense_meta = _read_meta(dense_dir / "meta.json")
    summary: dict[str, Any] = {"embedder": eid, "lexical": {}, "dense": {}, "embedded": 0}
    gen_record: dict[str, Any] = {"store": state["store"], "lexical": {}, "dense": {}}
    from bencao.retrieval.search.mentions import teach_jieba

    teach_jieba(graph)  # the graph's Chinese names stay whole words, at index and at query time
    embedder = None
    cache = None
    lex_memo: dict[str, list[str]] = {}  # tokens of entity names, shared by the entity and triple indexes
    dense_settings = content_hash(cfg.embedder.languages, cfg.exact_max, cfg.ann, cfg.hnsw_m, cfg.ivf_nlist, fp)
    try:
        for kind in KINDS:
            want_lex, want_dense = kind in cfg.kinds, kind in cfg.dense_kinds
            if not (want_lex or want_dense):
                continue
            t_kind = time.time()
            if progress:  # reading and the lexical build take minutes at corpus scale: say which kind is under way
                progress(f"{kind} (reading)", 0, 1)
            items = _read_items(kind, graph, cfg.embedder if want_dense else None, False)  # lexical texts: streamed below
            log.info("%s: %d items read in %.1fs", kind, len(items.ids), time.time() - t_kind)
            if want_lex:
                lh = items.hash + LEXICAL_ANALYZER
                if force or lex_meta.get(kind, {}).get("hash") != lh or not (lex_dir / kind / "ids.json").exists():
                    if progress:
                        progress(f"{kind} (lexical, {len(items.ids):,} items)", 0, 1)
                    # a second read of the items, streamed: a million texts are never held beside their tokens
                    lex = (it.lex_parts or it.lex for it in ITEM_SOURCES[kind](graph))
                    LexicalIndex.build(iter_analyzed(lex, lex_memo), items.ids).save(lex_dir / kind)
                    lex_meta[kind] = {"hash": lh, "n": len(items.ids)}
                    log.info("%s: lexical index of %d items built (%.1fs so far)", kind, len(items.ids), time.time() - t_kind)
                items.lex = []
                lex_meta[kind]["generation"] = state["generation"]
                atomic_write_json(lex_dir / "meta.json", lex_meta)
                fault("index.lexical")  # crash tests: one kind's lexical index written, the manifest not yet told
                summary["lexical"][kind] = lex_meta[kind]["n"]
                gen_record["lexical"][kind] = state["generation"]
            if want_dense:
                dh = items.dense_hash + dense_settings
                if force or dense_meta.get(kind, {}).get("hash") != dh or not (dense_dir / f"{kind}.faiss").exists():
                    if embedder is None:
                        embedder = get_embedder(cfg.embedder)
                        cache = EmbeddingCache(dense_dir / "cache.sqlite", embedder.dim, fp or "",
                                               shared=shared_cache_path(eid) if cfg.shared_cache else None)
                    vecs, n_new = embed_with_cache(embedder, cache, items.dense_texts, batch=cfg.embed_batch,
                                                   progress=(lambda i, n, k=kind: progress(k, i, n)) if progress else None)
                    summary["embedded"] += n_new
                    index = DenseIndex.build(vecs, items.dense_ids, cfg.dense_params())
                    del vecs
                    index.save(dense_dir, kind)
                    dense_meta[kind] = {"hash": dh, "n": len(items.dense_ids), "of": len(items.ids), "type": index.kind_name, "dim": index.dim}
                    dense_meta["_embedder"] = {"id": eid, "model": cfg.embedder.model_name, "fingerprint": fp, "dim": index.dim}
                    log.info("%s: %s index of %d vectors built, %d newly embedded (%.1fs so far)", kind, index.kind_name,
                             len(items.dense_ids), n_new, time.time() - t_kind)
                    del index
                dense_meta[kind]["generation"] = state["generation"]
                atomic_write_json(dense_dir / "meta.json", dense_meta)
                summary["dense"][kind] = {k: dense_meta[kind][k] for k in ("n", "of", "type")}
                gen_record["dense"][kind] = state["generation"]
            del items
        if cache is not None:
            cache.prune()  # vectors of older weights of this model: never asked for again by this index
    finally:
        if cache is not None:
            cache.close()
    fault("index.written")  # crash tests: every index file written, the manifest's record not yet
    m = graph.read_manifest()
    embedders = dict(m.get("embedders") or {})
    if summary["dense"]:
        embedders[eid] = {"model": cfg.embedder.model_name, "path": model_path(cfg.embedder), "fingerprint": fp,
                          "backend": cfg.embedder.backend, "languages": cfg.embedder.languages,
                          "max_seq_length": cfg.embedder.max_seq_length, "query_prefix": cfg.embedder.query_prefix,
                          "dim": (dense_meta.get("_embedder") or {}).get("dim")}
    graph.write_manifest("index", {"embedder": eid, "embedded": summary["embedded"], "generation": state["generation"]},
                         embedders=embedders,
                         indexes={"embedder": eid, "config": to_dict(cfg), "lexical": summary["lexical"], "dense": summary["dense"],
                                  "generation": gen_record})
    return summary


def _prepare_query_caches(graph: Graph) -> None:
    """A large graph's derived query structures that persist on disk (the adjacency arrays, the alias
    key maps), made now for the state just indexed, so the first question after a build or a write
    does not pay for them (3.4 M triples, 1.1 M aliases: about two minutes)."""
    from bencao.retrieval.linking import DISK_MIN_ALIASES, prepare_alias_tables
    from bencao.retrieval.search.adjacency import PERSIST_MIN_TRIPLES, adjacency_for

    t = time.time()
    if graph.conn.execute("SELECT COALESCE(MAX(rowid), 0) FROM triples").fetchone()[0] >= PERSIST_MIN_TRIPLES:
        adjacency_for(graph)
    if graph.conn.execute("SELECT COALESCE(MAX(rowid), 0) FROM aliases").fetchone()[0] >= DISK_MIN_ALIASES:
        prepare_alias_tables(graph)
    log.info("query caches ready in %.1fs", time.time() - t)


def query_index_config(graph: Graph, cfg: IndexConfig) -> IndexConfig:
    """The index configuration queries must use: the one the graph's indexes were built with
    (kinds, embedder, its languages), with the caller's device and batch size.

    A caller's config that names another embedder than the index holds is a one-line error."""
    recorded = recorded_index_config(graph)
    if recorded is None:
        out = from_dict(IndexConfig, to_dict(cfg), "index")
        _adopt_recorded_embedder(out, None)
        return out
    want = cfg.embedder.model.strip()
    have = recorded.embedder.model_name
    if want and want != have and recorded.dense_kinds and _other_model(graph, cfg.embedder, recorded.embedder):
        info = (graph.read_manifest().get("embedders") or {}).get(embedder_id(recorded.embedder)) or {}
        raise BencaoError(
            f"{graph.dir}: its dense index was built with embedder {have!r} ({info.get('path', have)}, fingerprint "
            f"{info.get('fingerprint', '?')}), but the config names {want!r}; drop index.embedder.model from the config to query "
            f"with the index's embedder, or rebuild the index for {want!r}: `bencao graph index --graph {graph.dir} --config YOUR.yaml`")
    out = from_dict(IndexConfig, to_dict(recorded), "index")
    out.embedder.device = cfg.embedder.device
    out.embedder.batch_size = cfg.embedder.batch_size
    return out


def _other_model(graph: Graph, want: EmbedderConfig, have: EmbedderConfig) -> bool:
    """Do two differently named models differ (another path, and other weights)?"""
    try:
        if model_path(want) == model_path(have):
            return False
        return vector_fingerprint(want) != vector_fingerprint(have)
    except ConfigError:
        return True


class Indexes:
    """Read side: the lexical and dense indexes of one graph (loaded lazily), for the embedder they
    were built with.

    Opening checks that the indexes reflect the store (:func:`stale_reasons`): a graph open for
    writing is refreshed first, a read-only one refuses with a one-line error. A long-lived reader
    (``bencao serve``) reloads a kind when a later write replaced its index."""

    def __init__(self, graph: Graph, cfg: IndexConfig | None = None):
        self.graph = graph
        self.cfg = query_index_config(graph, cfg or IndexConfig())
        self.embedder_id = embedder_id(self.cfg.embedder)
        self.dense_dir = graph.dir / "index" / self.embedder_id
        self.lex_dir = graph.dir / "lexical"
        self._lex: dict[str, LexicalIndex | None] = {}
        self._dense: dict[str, DenseIndex | None] = {}
        self._embedder = None
        self._qcache: dict[str, np.ndarray] = {}
        self._ensure_current()
        self._seen = graph.state_key()[1:3]
        self._metas = self._read_metas()

    def _ensure_current(self) -> None:
        why = stale_reasons(self.graph, self.cfg)
        if not why:
            return
        where = self.graph.dir
        if self.graph.read_only:
            raise BencaoError(f"{where}: the indexes are behind the graph ({'; '.join(why)}); "
                              f"bring them up to date with `bencao graph index --graph {where}`")
        print(f"refreshing the indexes of {where}: {'; '.join(why)}", file=sys.stderr)
        update_indexes(self.graph, None)
        self.cfg = query_index_config(self.graph, self.cfg)

    def _read_metas(self) -> dict[str, Any]:
        return {"lexical": _read_meta(self.lex_dir / "meta.json"), "dense": _read_meta(self.dense_dir / "meta.json")}

    def _sync(self) -> None:
        """After a write by this or another process, drop the loaded kinds whose index was rebuilt."""
        seen = self.graph.state_key()[1:3]
        if seen == self._seen:
            return
        self._seen = seen
        metas = self._read_metas()
        for family, loaded in (("lexical", self._lex), ("dense", self._dense)):
            for kind in list(loaded):
                if (metas[family].get(kind) or {}).get("hash") != (self._metas[family].get(kind) or {}).get("hash"):
                    del loaded[kind]
        self._metas = metas

    @property
    def has_any(self) -> bool:
        return (self.lex_dir / "meta.json").exists() or (self.dense_dir / "meta.json").exists()

    def lexical(self, kind: str) -> LexicalIndex | None:
        self._sync()
        if kind not in self._lex:
            self._lex[kind] = LexicalIndex.load(self.lex_dir / kind)
        return self._lex[kind]

    def dense(self, kind: str) -> DenseIndex | None:
        self._sync()
        if kind not in self._dense:
            idx = DenseIndex.load(self.dense_dir, kind) if kind in self.cfg.dense_kinds else None
            if idx is not None and len(idx) and self._embedder is not None:
                check_dim(self._embedder, idx.dim, str(self.dense_dir / f"{kind}.faiss"))
            self._dense[kind] = idx if idx is not None and len(idx) else None
        return self._dense[kind]

    def embedder(self):
        """The query embedder, loaded on the first query it can read (a Chinese question against an
        English-only index never loads it)."""
        if self._embedder is None:
            emb = get_embedder(self.cfg.embedder)
            for kind, idx in self._dense.items():
                if idx is not None:
                    check_dim(emb, idx.dim, str(self.dense_dir / f"{kind}.faiss"))
            self._embedder = emb
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
        if not query.strip() or not self.can_embed(query):
            return []
        idx = self.dense(kind)
        if idx is None:
            return []
        return idx.search(self.embed_queries([query]), k)[0]

    def lexical_search(self, kind: str, query: str, k: int) -> list[tuple[str, float]]:
        idx = self.lexical(kind)
        return idx.search(query, k) if idx is not None else []


def open_indexes(graph: Graph, config: "IndexConfig | str | Path | dict | None" = None) -> Indexes:
    """The graph's indexes for queries; ``config`` may select the device and batch size, and may
    name the embedder only as a check (it must be the one the index holds)."""
    return Indexes(graph, _parse_index_config(graph, config) if config is not None else None)


def load_index_config(path: str | Path | None, overrides: list[str] | tuple[str, ...] = ()) -> IndexConfig:
    return load_config(IndexConfig, path, overrides)
