"""``Evidence``: what retrieval found for a question, with the scores and provenance that put it there.

Typed, small dataclasses — the only thing that crosses from retrieval to answering:

- :class:`LinkedEntity`: ``id, name, type, layer, mention, confidence, rationale, score, via, roles``
  (+ ``description``, ``attributes``, ``link``: the linker's selector/scorer rationales and synonyms)
- :class:`TripleHit`: ``id, head_id, head, relation, tail_id, tail, confidence, layer, origin, score,
  via, snippet_ids`` (+ ``attributes``)
- :class:`PathHit`: ``entities`` (ids), ``names``, ``relations``, ``triple_ids``, ``confidences``,
  ``confidence_product``, ``pagerank`` (mean), ``score`` (PathScore), ``connects``, ``text``,
  ``planned_by`` (mined | llm)
- :class:`SnippetHit`: ``id, text, path`` ([book, volume, section]), ``section_id``, ``document``,
  ``document_kind``, ``score``, ``scores`` (per strategy), ``via``; ``generated`` is true for
  teacher-written reasoning documents (the personalized layer), which are cited as such.
- ``option_support``: for a question with options, each option's retrieval support (the best BM25
  score of question + option over passages that hold the option: the classic IR solver).

``to_dict()`` gives the JSON every front end has always returned; ``from_dict()`` reads it back.
``trim(budget)`` keeps the best-scored items of each list under a token budget; ``references()``
numbers the snippets for citation; ``text()`` concatenates everything (used to check whether the
evidence contains a gold answer).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from bencao.text import count_tokens, has_cjk

#: Document kinds whose text a teacher model wrote (not a source book): cited as generated.
GENERATED_KINDS = frozenset({"reasoning"})


def path_heading(path: list[str] | None) -> str:
    return " › ".join(path or [])


def _pick(cls: type, d: dict[str, Any]) -> dict[str, Any]:
    names = {f.name for f in dataclasses.fields(cls)}
    return {k: v for k, v in d.items() if k in names}


def _drop_empty(d: dict[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    for k in keys:
        if k in d and d[k] in (None, {}, []):
            del d[k]
    return d


@dataclass
class LinkedEntity:
    """A graph entity the question (or an option) was linked to, and why."""

    id: str
    name: str | None = None
    type: str | None = None
    layer: str | None = None
    mention: str | None = None
    confidence: float = 0.0
    rationale: str = ""
    score: float = 0.0
    via: list[str] = field(default_factory=list)  # linking | dense | layer-link | understanding
    roles: list[str] = field(default_factory=list)  # question | option:<i> | patient | disease
    description: str | None = None
    attributes: dict[str, Any] = field(default_factory=dict)
    link: dict[str, Any] | None = None  # selector/scorer rationales, synonyms tried, first-pass choice
    # attribute → [{"value", "sources": [document titles]}] for the attributes sources disagree on by design
    # (nature, flavour, toxicity, ...): who says what (``attributes`` holds the values merged, without sources)
    attribution: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return _drop_empty(dataclasses.asdict(self), ("link", "attribution"))

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "LinkedEntity":
        return cls(**_pick(cls, d))


@dataclass
class TripleHit:
    """A graph triple in the evidence, with how it was found and the snippets that assert it."""

    id: str
    head_id: str
    head: str
    relation: str
    tail_id: str
    tail: str
    confidence: float
    layer: str | None = None
    origin: str | None = None
    score: float = 0.0
    via: list[str] = field(default_factory=list)  # micro | asked | anchored | path | personal
    snippet_ids: list[str] = field(default_factory=list)
    attributes: dict[str, Any] = field(default_factory=dict)
    sources: list[str] = field(default_factory=list)  # titles of the documents asserting it, in the order they were added

    @classmethod
    def from_row(cls, row: dict[str, Any], *, score: float = 0.0, via: list[str] | None = None) -> "TripleHit":
        """From a store row (``Graph.get_triples``)."""
        return cls(id=row["id"], head_id=row["head_id"], head=row.get("head") or row["head_id"], relation=row["relation"],
                   tail_id=row["tail_id"], tail=row.get("tail") or row["tail_id"], confidence=float(row["confidence"]),
                   layer=row.get("layer"), origin=row.get("origin"), score=score, via=list(via or []),
                   attributes=dict(row.get("attributes") or {}))

    def text(self) -> str:
        return f"{self.head} {self.relation.replace('_', ' ')} {self.tail}"

    def to_dict(self) -> dict[str, Any]:
        return _drop_empty(dataclasses.asdict(self), ("attributes",))

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "TripleHit":
        return cls(**_pick(cls, d))


@dataclass
class PathHit:
    """A reasoning path from a linked entity, scored by PathScore = ∏ confidence × mean PageRank."""

    entities: list[str]
    names: list[str]
    relations: list[str]
    triple_ids: list[str]
    confidences: list[float]
    confidence_product: float = 0.0
    pagerank: float = 0.0
    score: float = 0.0
    connects: bool = False
    text: str = ""
    planned_by: str = "mined"

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "PathHit":
        return cls(**_pick(cls, d))


@dataclass
class SnippetHit:
    """A text unit of the macro tree (or a reasoning text), with the strategies that found it."""

    id: str
    text: str
    path: list[str] = field(default_factory=list)
    section_id: str | None = None
    document: str | None = None
    document_kind: str | None = None
    score: float = 0.0
    scores: dict[str, float] = field(default_factory=dict)
    via: list[str] = field(default_factory=list)  # micro | macro | section | therapy | therapy-case | personal
    case: dict[str, Any] | None = None  # a clinical case (MLKG case layer): case_id, classification, explanations, patient_match

    @property
    def generated(self) -> bool:
        """Teacher-written reasoning (the personalized layer), not a source text."""
        return self.document_kind in GENERATED_KINDS

    @classmethod
    def from_row(cls, row: dict[str, Any], via: str, score: float) -> "SnippetHit":
        """From a store row (``Graph.get_snippets`` & co.), found by strategy ``via`` with ``score``."""
        return cls(id=row["id"], text=row["text"], path=list(row.get("path") or []), section_id=row.get("section_id"),
                   document=row.get("document_title") or row.get("document_source"), document_kind=row.get("document_kind"),
                   scores={via: score}, via=[via])

    def merge(self, other: "SnippetHit") -> None:
        """Fold another hit of the same snippet in: best score per strategy, strategies united."""
        for k, v in other.scores.items():
            self.scores[k] = max(self.scores.get(k, 0.0), v)
        self.via = list(dict.fromkeys(self.via + other.via))
        if self.case is None and other.case:  # a case record found by micro/macro first keeps what therapy retrieval says of it
            self.case = other.case

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["generated"] = self.generated
        case = d.pop("case")
        if case:
            d.update(case)  # the old flat JSON: case_id, classification, explanations, patient_match
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "SnippetHit":
        case = {k: d[k] for k in _CASE_KEYS if k in d} or d.get("case")
        return cls(**{**_pick(cls, d), "case": case or None})


_CASE_KEYS = ("case_id", "classification", "explanations", "patient_match")

#: Entity attributes whose values are given per source (the books disagree on them by design).
SOURCED_ATTRIBUTES = ("nature", "flavour", "toxicity", "meridian", "dose", "dosage", "contraindications")


def title_cite(title: str) -> str:
    """A document title as cited in text: 《神农本草经》 for a Chinese title, the title itself otherwise."""
    return f"《{title}》" if has_cjk(title) else title


def attribute_sources(rows: list[tuple[str, dict[str, Any]]], keys: tuple[str, ...] = SOURCED_ATTRIBUTES) -> dict[str, list[dict[str, Any]]]:
    """``(document title, attributes it gives)`` rows (``Graph.entity_sources_of``) → attribute →
    ``[{"value", "sources"}]``, values in the order first given, sources in document order."""
    out: dict[str, list[dict[str, Any]]] = {}
    for title, attrs in rows:
        for key in keys:
            vals = attrs.get(key)
            for v in (vals if isinstance(vals, list) else [vals] if vals not in (None, "") else []):
                items = out.setdefault(key, [])
                item = next((x for x in items if x["value"] == v), None)
                if item is None:
                    items.append({"value": v, "sources": [title]})
                elif title not in item["sources"]:
                    item["sources"].append(title)
    return out


def attributed_values(e: LinkedEntity) -> dict[str, str]:
    """Each of ``e``'s attributes as a line, sourced ones with the documents that give each value:
    ``{"nature": "平 (《神农本草经》); 热 (《千金食治》)", "mfh_id": "MFH037"}`` (the generator's entity lines)."""
    out: dict[str, str] = {}
    for k, v in e.attributes.items():
        if v in (None, "", [], {}):
            continue
        given = e.attribution.get(k)
        if given:
            out[k] = "; ".join(f"{x['value']} ({'、'.join(title_cite(t) for t in x['sources'])})" for x in given)
        else:
            out[k] = _fmt_value(v)
    return out


def _fmt_value(value: Any) -> str:
    if isinstance(value, list):
        return "、".join(_fmt_value(v) for v in value)
    if isinstance(value, dict):
        return "; ".join(f"{k}: {_fmt_value(v)}" for k, v in value.items())
    return str(value)


@dataclass
class Evidence:
    question: str = ""
    entities: list[LinkedEntity] = field(default_factory=list)
    triples: list[TripleHit] = field(default_factory=list)
    paths: list[PathHit] = field(default_factory=list)
    snippets: list[SnippetHit] = field(default_factory=list)
    option_support: list[float] = field(default_factory=list)  # per option: best BM25 of question+option over passages holding it
    stats: dict[str, Any] = field(default_factory=dict)

    # -- serialisation
    def to_dict(self) -> dict[str, Any]:
        return {"question": self.question, "entities": [e.to_dict() for e in self.entities], "triples": [t.to_dict() for t in self.triples],
                "paths": [p.to_dict() for p in self.paths], "snippets": [s.to_dict() for s in self.snippets],
                "option_support": list(self.option_support), "stats": dict(self.stats), "references": self.references()}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Evidence":
        return cls(question=d.get("question", ""),
                   entities=[LinkedEntity.from_dict(x) for x in d.get("entities") or []],
                   triples=[TripleHit.from_dict(x) for x in d.get("triples") or []],
                   paths=[PathHit.from_dict(x) for x in d.get("paths") or []],
                   snippets=[SnippetHit.from_dict(x) for x in d.get("snippets") or []],
                   option_support=[float(x) for x in d.get("option_support") or []], stats=dict(d.get("stats") or {}))

    def is_empty(self) -> bool:
        return not (self.entities or self.triples or self.paths or self.snippets)

    def entity(self, entity_id: str) -> LinkedEntity | None:
        return next((e for e in self.entities if e.id == entity_id), None)

    def ids(self) -> dict[str, list[str]]:
        """Ids of what the evidence holds, by kind (``snippet_ids``, ``triple_ids``, ``entity_ids``)."""
        out = {"snippet_ids": [s.id for s in self.snippets], "triple_ids": [t.id for t in self.triples],
               "entity_ids": [e.id for e in self.entities]}
        return {k: v for k, v in out.items() if v}

    # -- rendering
    def text(self) -> str:
        """All evidence text, one item a line: entity names and definitions, triples, paths, snippets."""
        lines: list[str] = []
        for e in self.entities:
            lines.append(f"{e.name}: {e.description}" if e.description else str(e.name))
        lines += [t.text() for t in self.triples]
        lines += [p.text for p in self.paths]
        lines += [f"{path_heading(s.path)}\n{s.text}" for s in self.snippets]
        return "\n".join(x for x in lines if x)

    def references(self) -> list[dict[str, Any]]:
        """Numbered references: ``[{"n": 1, "snippet_id", "heading", "path", "generated"}...]`` in snippet order."""
        return [{"n": i, "snippet_id": s.id, "heading": path_heading(s.path), "path": list(s.path), "generated": s.generated}
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
        def cost_entity(e: LinkedEntity) -> int:
            return count_tokens(str(e.name or "")) + count_tokens((e.description or "")[:200]) + 2

        def cost_triple(t: TripleHit) -> int:
            return count_tokens(t.text()) + 2

        def cost_path(p: PathHit) -> int:
            return count_tokens(p.text) + 2

        def cost_snippet(s: SnippetHit) -> int:
            return count_tokens(s.text) + count_tokens(path_heading(s.path)) + 4

        def by_score(xs: list) -> list:
            return sorted(xs, key=lambda x: -(x.score or 0.0))

        ents = by_score(self.entities)[: max_entities or None]
        trips = by_score(self.triples)[: max_triples or None]
        queues: list[tuple[list, Any, list]] = [(by_score(self.paths), cost_path, []), (trips, cost_triple, []),
                                                (by_score(self.snippets), cost_snippet, [])]
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
                    item = items.pop(0)
                    c = cost(item)
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
