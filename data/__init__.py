"""The bundled sample data (package data ``bencao.data``; ``sample/`` keeps its PROVENANCE and licence files)."""
