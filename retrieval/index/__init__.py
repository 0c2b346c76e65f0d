"""Dense (FAISS) and lexical (BM25) indexes over a graph's entities, triples, snippets and sections.

``update_indexes(graph, config)`` builds or refreshes them (called by ``graph build/add/remove``
and ``graph index``); ``open_indexes(graph, config)`` returns the searchable :class:`Indexes`.
"""

from bencao.retrieval.index.build import IndexConfig, Indexes, open_indexes, resolve_index_config, update_indexes
from bencao.retrieval.index.embedder import EmbedderConfig, embedder_id, get_embedder

__all__ = ["IndexConfig", "Indexes", "open_indexes", "resolve_index_config", "update_indexes", "EmbedderConfig", "embedder_id", "get_embedder"]
