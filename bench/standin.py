"""A fast stand-in embedder for index-shape benchmarks: signed feature hashing of character n-grams.

Registered as embedder backend ``hashing`` (``index.embedder.backend=hashing``). It reads every
language (characters, not words), makes L2-normalised float32 vectors of any dimension, and
embeds ~10^4-10^5 texts a second on one core, so a 1 M-vector index can be built in minutes to
measure index build, memory and search at full scale. It is NOT a semantic model: recall and
speed-up of approximate search are measured on real MiniLM vectors instead (run_bench.py).
"""

from __future__ import annotations

import numpy as np

from bencao.retrieval.index.embedder import EmbedderConfig, register_embedder

STANDIN_MODEL = "char-ngram-hash-384"


class HashingEmbedder:
    def __init__(self, cfg: EmbedderConfig, dim: int = 384):
        from sklearn.feature_extraction.text import HashingVectorizer

        self.id = cfg.model
        self.dim = dim
        self.batch_size = cfg.batch_size
        self._vec = HashingVectorizer(analyzer="char_wb", ngram_range=(1, 2), n_features=dim, alternate_sign=True,
                                      norm="l2", lowercase=True, dtype=np.float32)

    def encode(self, texts: list[str], *, query: bool = False) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        x = self._vec.transform(texts).toarray().astype(np.float32, copy=False)
        # an all-zero row (empty text) gets a fixed unit vector so inner products stay defined
        empty = ~x.any(axis=1)
        if empty.any():
            x[empty, 0] = 1.0
        return x


@register_embedder("hashing")
def _make(cfg: EmbedderConfig) -> HashingEmbedder:
    return HashingEmbedder(cfg)
