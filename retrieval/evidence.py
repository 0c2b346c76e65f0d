"""``Evidence``: what retrieval found for a question, with the scores and provenance that put it there.

Four lists of plain dicts (JSON-serialisable as they are):

- ``entities``: ``id, name, type, mention, confidence, rationale, score, via`` (+ ``attributes``)
- ``triples``:  ``id, head_id, head, relation, tail_id, tail, confidence, score, via, snippet_ids``
- ``paths``:    ``entities`` (ids), ``names``, ``relations``, ``triple_ids``, ``confidences``,
  ``confidence_product``, ``pagerank`` (mean), ``score`` (PathScore), ``text``
- ``snippets``: ``id, text, path`` ([book, volume, section]), ``section_id``, ``document``,
  ``score``, ``scores`` (per strategy), ``via``

``trim(budget)`` keeps the best-scored items of each list under a token budget; ``references()``
numbers the snippets for citation; ``text()`` concatenates everything (used to check whether the
evidence contains a gold answer).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from bencao.text import count_tokens


def path_heading(path: list[str] | None) -> str:
    return " › ".join(path or [])


@dataclass
class Evidence:
    question: str = ""
    entities: list[dict[str, Any]] = field(default_factory=list)
    triples: list[dict[str, Any]] = field(default_factory=list)
    paths: list[dict[str, Any]] = field(default_factory=list)
    snippets: list[dict[str, Any]] = field(default_factory=list)
    stats: dict[str, Any] = field(default_factory=dict)

    # -- serialisation
    def to_dict(self) -> dict[str, Any]:
        return {"question": self.question, "entities": copy.deepcopy(self.entities), "triples": copy.deepcopy(self.triples),
                "paths": copy.deepcopy(self.paths), "snippets": copy.deepcopy(self.snippets), "stats": dict(self.stats),
                "references": self.references()}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Evidence":
        return cls(question=d.get("question", ""), entities=list(d.get("entities") or []), triples=list(d.get("triples") or []),
                   paths=list(d.get("paths") or []), snippets=list(d.get("snippets") or []), stats=dict(d.get("stats") or {}))

    def is_empty(self) -> bool:
        return not (self.entities or self.triples or self.paths or self.snippets)

    # -- rendering
    @staticmethod
    def triple_text(t: dict[str, Any]) -> str:
        return f"{t.get('head')} {str(t.get('relation', '')).replace('_', ' ')} {t.get('tail')}"

    def text(self) -> str:
        """All evidence text, one item a line: entity names and definitions, triples, paths, snippets."""
        lines: list[str] = []
        for e in self.entities:
            lines.append(f"{e.get('name')}: {e['description']}" if e.get("description") else str(e.get("name")))
        lines += [self.triple_text(t) for t in self.triples]
        lines += [p.get("text", "") for p in self.paths]
        lines += [f"{path_heading(s.get('path'))}\n{s.get('text', '')}" for s in self.snippets]
        return "\n".join(x for x in lines if x)

    def references(self) -> list[dict[str, Any]]:
        """Numbered references: ``[{"n": 1, "snippet_id", "heading", "path"}...]`` in snippet order."""
        return [{"n": i, "snippet_id": s["id"], "heading": path_heading(s.get("path")), "path": list(s.get("path") or [])}
                for i, s in enumerate(self.snippets, start=1)]

    def render_references(self) -> str:
        return "\n".join(f"[{r['n']}] {r['heading']} ({r['snippet_id']})" for r in self.references())

    def n_tokens(self) -> int:
        return count_tokens(self.text())

    # -- budget
    def trim(self, budget: int, max_entities: int | None = None, max_triples: int | None = None) -> "Evidence":
        """Keep the best items under ``budget`` tokens (in place; returns self).

        Entities (cheap, needed to read the rest) first, then round-robin by score over paths,
        triples and snippets, so no strategy starves the others. Dropped counts go into ``stats``.
        """
        def cost_entity(e):
            return count_tokens(str(e.get("name", ""))) + count_tokens((e.get("description") or "")[:200]) + 2

        def cost_triple(t):
            return count_tokens(self.triple_text(t)) + 2

        def cost_path(p):
            return count_tokens(p.get("text", "")) + 2

        def cost_snippet(s):
            return count_tokens(s.get("text", "")) + count_tokens(path_heading(s.get("path"))) + 4

        by_score = lambda xs: sorted(xs, key=lambda x: -(x.get("score") or 0.0))  # noqa: E731
        ents = by_score(self.entities)[: max_entities or None]
        trips = by_score(self.triples)[: max_triples or None]
        queues = [(by_score(self.paths), cost_path, []), (trips, cost_triple, []), (by_score(self.snippets), cost_snippet, [])]
        used = 0
        kept_ents = []
        for e in ents:
            c = cost_entity(e)
            if used + c > budget:
                break
            kept_ents.append(e)
            used += c
        progress = True
        while progress:
            progress = False
            for items, cost, kept in queues:
                while items:
                    c = cost(items[0])
                    item = items.pop(0)
                    if used + c <= budget:
                        kept.append(item)
                        used += c
                        progress = True
                        break
        dropped = {"entities": len(self.entities) - len(kept_ents), "paths": len(self.paths) - len(queues[0][2]),
                   "triples": len(self.triples) - len(queues[1][2]), "snippets": len(self.snippets) - len(queues[2][2])}
        self.entities, self.paths, self.triples, self.snippets = kept_ents, queues[0][2], queues[1][2], queues[2][2]
        self.stats["tokens"] = used
        self.stats["budget"] = budget
        self.stats["dropped"] = dropped
        return self
