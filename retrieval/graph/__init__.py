"""The knowledge-graph store (SQLite by default; the tables are the contract)."""

from bencao.retrieval.graph.store import SCHEMA_VERSION, DocumentBuilder, Graph

__all__ = ["Graph", "DocumentBuilder", "SCHEMA_VERSION"]
