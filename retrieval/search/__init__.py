"""Question → Evidence: micro, macro, path and two-layer retrieval composed by one ``Retriever``."""

from bencao.retrieval.search.retriever import Retriever

__all__ = ["Retriever"]
