"""Dense (FAISS) and lexical (BM25) indexes over a graph's entities, triples, snippets and sections.

``update_indexes(graph, config)`` builds or refreshes them (``graph index``, ``graph build``);
``refresh_indexes(graph)`` is the call every command that writes makes afterwards;
``open_indexes(graph)`` returns the searchable :class:`Indexes` (checked current with the store).
"""

from bencao.retrieval.index.build import (IndexConfig, Indexes, open_indexes, refresh_indexes, resolve_index_config, stale_reasons,
                                          update_indexes)
from bencao.retrieval.index.embedder import EmbedderConfig, embedder_id, get_embedder, vector_fingerprint

__all__ = ["IndexConfig", "Indexes", "open_indexes", "refresh_indexes", "resolve_index_config", "stale_reasons", "update_indexes",
           "EmbedderConfig", "embedder_id", "get_embedder", "vector_fingerprint"]
