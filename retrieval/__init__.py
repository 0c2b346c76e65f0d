"""The graph and everything deterministic over it: store, ingestion, indexes, linking, search, ranking."""
