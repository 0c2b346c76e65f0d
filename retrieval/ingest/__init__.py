"""Loaders: each input format registered by name, each turning a file into one graph document."""

from bencao.retrieval.ingest.registry import LOADERS, LoaderSpec, ingest_file, register

__all__ = ["LOADERS", "LoaderSpec", "register", "ingest_file"]
