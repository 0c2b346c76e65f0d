"""Macro retrieval: question → nearest snippets and sections, dense + lexical, fused by RRF."""

from __future__ import annotations

from typing import Any

from bencao.retrieval.evidence import SnippetHit
from bencao.retrieval.graph.store import Graph
from bencao.retrieval.search.fusion import rrf


def macro_retrieve(g: Graph, ix: Any, question: str, *, k_snippets: int = 8, k_sections: int = 3, k_each: int = 20,
                   rrf_k: int = 60) -> list[SnippetHit]:
    if ix is None:
        return []
    out: dict[str, SnippetHit] = {}
    lex = ix.lexical_search("snippets", question, k_each)
    den = ix.dense_search("snippets", question, k_each)
    lex_s, den_s = dict(lex), dict(den)
    fused = rrf([lex, den], rrf_k)[:k_snippets]
    found = g.get_snippets([sid for sid, _ in fused])
    for sid, score in fused:
        if sid in found:
            d = SnippetHit.from_row(found[sid], "macro", score)
            d.scores.update({k: round(v, 4) for k, v in (("bm25", lex_s.get(sid)), ("dense", den_s.get(sid))) if v is not None})
            out[sid] = d
    sec = rrf([ix.lexical_search("sections", question, k_each), ix.dense_search("sections", question, k_each)], rrf_k)[:k_sections]
    for rank, (sec_id, score) in enumerate(sec):
        snips = g.snippets_of_section(sec_id)[:1]
        for s in snips:
            hit = SnippetHit.from_row(s, "section", score)
            if s["id"] in out:
                out[s["id"]].merge(hit)
            else:
                out[s["id"]] = hit
    return list(out.values())
