"""Reciprocal rank fusion of ranked lists."""

from __future__ import annotations


def rrf(ranked_lists: list[list[tuple[str, float]]], k: int = 60) -> list[tuple[str, float]]:
    """Fuse ranked ``(id, score)`` lists: score(id) = Σ 1/(k + rank). Best first; ties keep first-seen order."""
    acc: dict[str, float] = {}
    for lst in ranked_lists:
        for rank, (item, _s) in enumerate(lst):
            acc[item] = acc.get(item, 0.0) + 1.0 / (k + rank + 1)
    return sorted(acc.items(), key=lambda kv: -kv[1])
