"""Grounding that grounds the LLM teacher's reasoning (TCM-DiffRAG §2.2.2), behind one small function.

``make_grounder(name, graph, ...)`` returns ``ground(question, query_triples) -> Grounding``:

- ``retriever``: the retrieval package's :class:`~bencao.retrieval.search.Retriever` (micro: query
  triples → nearest graph triples → their snippets; macro: question → snippets and sections;
  reasoning paths) over the graph's indexes — the default (``auto``) when the graph has indexes;
- ``graph`` (the fallback, no index needed): CoT triples → their heads/tails linked by alias → the
  graph triples around them, ranked by token overlap with the query triple and confidence → those
  triples' snippets; the question → its nearest snippets (BM25 over jieba tokens, built in memory).

Both ground in the book/ontology graph only: triples of layer ``personal`` and snippets of
reasoning documents (earlier teacher output) never come back as evidence.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Callable

from bencao.data_gen.linking import AliasLinker
from bencao.errors import ConfigError
from bencao.retrieval.evidence import GENERATED_KINDS
from bencao.retrieval.graph.store import Graph
from bencao.text import tokenize


@dataclass
class Grounding:
    triples: list[dict[str, Any]] = field(default_factory=list)  # graph triple rows (head, relation, tail, id, confidence)
    snippets: list[dict[str, Any]] = field(default_factory=list)  # {"id", "text", "source"}


#: Layers never used as evidence (the teacher's own earlier output).
EXCLUDED_LAYERS = ("personal",)

Grounder = Callable[[str, list[dict[str, Any]]], Grounding]
GROUNDERS: dict[str, Callable[..., Grounder]] = {}


def register_grounder(name: str):
    def deco(fn: Callable[..., Grounder]) -> Callable[..., Grounder]:
        GROUNDERS[name] = fn
        return fn

    return deco


def has_indexes(graph: Graph) -> bool:
    """Whether retrieval indexes were built for this graph (``bencao graph build`` / ``index``)."""
    return bool(graph.read_manifest().get("indexes"))


def resolve_grounding(name: str, graph: Graph) -> str:
    """``auto`` → ``retriever`` when the graph has indexes, else ``graph``; other names as given."""
    if name == "auto":
        return "retriever" if has_indexes(graph) else "graph"
    if name not in GROUNDERS:
        raise ConfigError(f"grounding: unknown strategy {name!r}; known: auto, {', '.join(sorted(GROUNDERS))}")
    return name


def make_grounder(name: str, graph: Graph, **kw: Any) -> Grounder:
    """The grounder registered as ``name`` (``auto`` resolved first); options a strategy does not use are ignored."""
    return GROUNDERS[resolve_grounding(name, graph)](graph, **kw)


def _source(s: dict[str, Any]) -> str:
    path = s.get("path") or []
    return " / ".join(path) if path else (s.get("document_title") or "")


@register_grounder("graph")
def graph_grounder(graph: Graph, *, linker: AliasLinker | None = None, k_triples: int = 8, k_snippets: int = 3,
                   max_snippet_chars: int = 400, lock: threading.Lock | None = None, **_: Any) -> Grounder:
    import bm25s

    lock = lock or threading.Lock()
    linker = linker or AliasLinker(graph)
    # Ground in the book/ontology graph only: earlier teacher output (layer personal, reasoning
    # documents) never feeds back into new reasoning, and a replayed run sees the same evidence.
    reasoning_docs = {d["id"] for d in graph.documents() if d["kind"] == "reasoning"}
    snips = [s for s in graph.iter_snippets() if s["document_id"] not in reasoning_docs]
    bm25 = None
    if snips:
        bm25 = bm25s.BM25()
        bm25.index([tokenize(s["text"]) or ["∅"] for s in snips], show_progress=False)

    def ground(question: str, query_triples: list[dict[str, Any]]) -> Grounding:
        ev = Grounding()
        with lock:
            scored: dict[str, tuple[float, dict[str, Any]]] = {}
            for qt in query_triples:
                qtoks = set(tokenize(f"{qt.get('head', '')} {qt.get('relation', '')} {qt.get('tail', '')}"))
                ents = [m.entity_id for side in ("head", "tail") for m in linker.link(str(qt.get(side, "")))]
                for eid in dict.fromkeys(ents):
                    for t in [t for t in graph.triples_of(eid) if t["layer"] not in EXCLUDED_LAYERS][:200]:
                        toks = set(tokenize(f"{t['head']} {t['relation']} {t['tail']}"))
                        score = len(qtoks & toks) / max(1, len(qtoks | toks)) + 0.1 * float(t["confidence"])
                        if t["id"] not in scored or score > scored[t["id"]][0]:
                            scored[t["id"]] = (score, t)
            ev.triples = [t for _, t in sorted(scored.values(), key=lambda st: -st[0])[:k_triples]]
            seen: set[str] = set()
            for t in ev.triples:
                for s in graph.snippets_of_triple(t["id"])[:1]:
                    if s["id"] not in seen:
                        seen.add(s["id"])
                        ev.snippets.append({"id": s["id"], "text": s["text"][:max_snippet_chars], "source": _source(s)})
        if bm25 is not None and k_snippets > 0:
            q = tokenize(question)
            if q:
                res, sc = bm25.retrieve([q], k=min(k_snippets, len(snips)), show_progress=False)
                for i, score in zip(res[0], sc[0]):
                    s = snips[int(i)]
                    if score > 0 and s["id"] not in seen:
                        seen.add(s["id"])
                        ev.snippets.append({"id": s["id"], "text": s["text"][:max_snippet_chars], "source": _source(s)})
        return ev

    return ground


@register_grounder("retriever")
def retriever_grounder(graph: Graph, *, k_triples: int = 8, k_snippets: int = 3, max_snippet_chars: int = 400,
                       lock: threading.Lock | None = None, retrieval_config: str | None = None,
                       retrieval_overrides: list[str] | tuple[str, ...] = (), **_: Any) -> Grounder:
    """Grounding from :class:`~bencao.retrieval.search.Retriever`: its best ``k_triples`` graph triples (personal
    layer excluded), one source snippet of each, then ``k_snippets`` more of its snippets by score."""
    from bencao.retrieval.search import Retriever
    from bencao.retrieval.search.retriever import MAX_QUESTION_CHARS

    lock = lock or threading.Lock()
    retriever = Retriever.from_config(graph, retrieval_config, tuple(retrieval_overrides))

    def ground(question: str, query_triples: list[dict[str, Any]]) -> Grounding:
        qt = [(str(t.get("head", "")), str(t.get("relation", "")), str(t.get("tail", ""))) for t in query_triples]
        qt = [t for t in qt if t[0] and t[2]]
        with lock:
            ev = retriever.retrieve(question[:MAX_QUESTION_CHARS], query_triples=qt or None)
            triples = [t for t in ev.triples if t.layer not in EXCLUDED_LAYERS][:k_triples]
            texts = {s.id: {"text": s.text, "path": s.path, "document_title": s.document, "document_kind": s.document_kind}
                     for s in ev.snippets}
            texts.update(graph.get_snippets(sid for t in triples for sid in t.snippet_ids if sid not in texts))
        # teacher text (reasoning documents, M2) never grounds new reasoning
        banned = {sid for sid, r in texts.items() if r.get("document_kind") in GENERATED_KINDS}
        # one source snippet per triple: its first that is book text, not an earlier reasoning
        of_triples = [next((sid for sid in t.snippet_ids if sid not in banned and sid in texts), None) for t in triples]
        keep = list(dict.fromkeys(sid for sid in of_triples if sid))
        keep += [s.id for s in ev.snippets if s.id not in banned and s.id not in keep][:k_snippets]
        return Grounding(triples=[{"id": t.id, "head": t.head, "relation": t.relation, "tail": t.tail, "confidence": t.confidence,
                                   "layer": t.layer} for t in triples],
                         snippets=[{"id": sid, "text": texts[sid]["text"][:max_snippet_chars], "source": _source(texts[sid])} for sid in keep])

    return ground
