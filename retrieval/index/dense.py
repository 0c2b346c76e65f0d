"""FAISS dense index of one item kind: exact inner product for small sets, HNSW or IVF above a threshold.

Vectors are L2-normalised, so scores are cosine similarities. An index is two files under
``<graph>/index/<embedder-id>/``: ``<kind>.faiss`` and ``<kind>.ids.json`` (row → item id), both
written atomically; the FAISS file is memory-mapped when read.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bencao.errors import BencaoError
from bencao.io import atomic_path, atomic_write_json


@dataclass
class DenseParams:
    exact_max: int = 100_000
    ann: str = "hnsw"  # hnsw | ivf
    hnsw_m: int = 32
    hnsw_ef_search: int = 128
    ivf_nlist: int = 0  # 0 = 4·sqrt(n)
    ivf_nprobe: int = 16


class DenseIndex:
    def __init__(self, index, ids: list[str]):
        self.index = index
        self.ids = ids

    @property
    def kind_name(self) -> str:
        import faiss

        return "flat" if isinstance(self.index, faiss.IndexFlat) else ("hnsw" if isinstance(self.index, faiss.IndexHNSW) else "ivf")

    @property
    def dim(self) -> int:
        return int(self.index.d)

    def __len__(self) -> int:
        return len(self.ids)

    @classmethod
    def build(cls, vectors: np.ndarray, ids: list[str], params: DenseParams | None = None) -> "DenseIndex":
        import faiss

        params = params or DenseParams()
        if vectors.ndim != 2 or vectors.shape[0] != len(ids):
            raise ValueError(f"vectors {vectors.shape} do not match {len(ids)} ids")
        n, d = vectors.shape
        x = np.ascontiguousarray(vectors, dtype=np.float32)
        if n <= params.exact_max:
            index = faiss.IndexFlatIP(d)
        elif params.ann == "hnsw":
            index = faiss.IndexHNSWFlat(d, params.hnsw_m, faiss.METRIC_INNER_PRODUCT)
            index.hnsw.efSearch = params.hnsw_ef_search
        elif params.ann == "ivf":
            nlist = params.ivf_nlist or max(1, min(n // 39, int(4 * math.sqrt(n))))
            quantizer = faiss.IndexFlatIP(d)
            index = faiss.IndexIVFFlat(quantizer, d, nlist, faiss.METRIC_INNER_PRODUCT)
            index.train(x)
            index.nprobe = min(params.ivf_nprobe, nlist)
        else:
            raise BencaoError(f"unknown approximate index {params.ann!r}; use hnsw or ivf")
        if n:
            index.add(x)
        return cls(index, list(ids))

    def search(self, queries: np.ndarray, k: int) -> list[list[tuple[str, float]]]:
        """Top-``k`` (id, cosine) per query row."""
        if not self.ids or k <= 0:
            return [[] for _ in range(len(queries))]
        q = np.ascontiguousarray(np.atleast_2d(queries), dtype=np.float32)
        if q.shape[1] != self.dim:
            raise BencaoError(f"query vectors have {q.shape[1]} dimensions, the index {self.dim}; the index was built with another embedder")
        if len(q) <= SINGLE_THREAD_MAX_QUERIES:
            scores, rows = _search_one_thread(self.index, q, min(k, len(self.ids)))
        else:
            scores, rows = self.index.search(q, min(k, len(self.ids)))
        return [[(self.ids[r], float(s)) for r, s in zip(rr, ss) if r >= 0] for rr, ss in zip(rows, scores)]

    def vectors(self) -> np.ndarray | None:
        """The stored vectors (exact indexes only; approximate ones return None)."""
        import faiss

        if isinstance(self.index, faiss.IndexFlat):
            return faiss.rev_swig_ptr(self.index.get_xb(), self.index.ntotal * self.dim).reshape(self.index.ntotal, self.dim).copy()
        return None

    def save(self, directory: Path, kind: str) -> None:
        import faiss

        directory.mkdir(parents=True, exist_ok=True)
        with atomic_path(directory / f"{kind}.faiss") as tmp:
            faiss.write_index(self.index, str(tmp))
        atomic_write_json(directory / f"{kind}.ids.json", self.ids)

    @classmethod
    def load(cls, directory: Path, kind: str) -> "DenseIndex | None":
        import faiss

        fp, ip = directory / f"{kind}.faiss", directory / f"{kind}.ids.json"
        if not fp.exists() or not ip.exists():
            return None
        # vectors memory-mapped in place (IO_FLAG_MMAP_IFC): a 300 k × 384 index opens in ms and its
        # pages are the page cache's, shared between processes, not a private copy
        repair = f"rebuild it with `bencao graph index --graph {directory.parent.parent} --force`"
        try:
            try:
                index = faiss.read_index(str(fp), getattr(faiss, "IO_FLAG_MMAP_IFC", 0))
            except RuntimeError:
                index = faiss.read_index(str(fp))
        except Exception as exc:  # noqa: BLE001 - a damaged index is a user-facing state
            raise BencaoError(f"{fp}: dense index cannot be read ({' '.join(str(exc).split())[:200]}); {repair}") from None
        try:
            ids = json.loads(ip.read_text(encoding="utf-8"))
            if not (isinstance(ids, list) and all(isinstance(i, str) for i in ids)):
                raise ValueError(f"a JSON {type(ids).__name__}, not a list of ids")
        except (OSError, ValueError) as exc:
            raise BencaoError(f"{ip}: damaged ({' '.join(str(exc).split())[:200]}); {repair}") from None
        if index.ntotal != len(ids):
            raise BencaoError(f"{fp}: {index.ntotal} vectors but {len(ids)} ids; {repair}")
        return cls(index, ids)


#: Up to this many query rows a search runs on one OpenMP thread: a question's one or two vectors
#: gain nothing from a thread team, and on a busy machine its spin-waiting made a 51 k flat search
#: 72 ms instead of 20 ms (2 cores, load ≈ 6; bench/RESULTS.md).
SINGLE_THREAD_MAX_QUERIES = 4


def _search_one_thread(index, q: np.ndarray, k: int):
    import faiss

    n0 = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)  # this thread's OpenMP setting; other threads keep theirs
    try:
        return index.search(q, k)
    finally:
        faiss.omp_set_num_threads(n0)
