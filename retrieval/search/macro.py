"""Macro retrieval: question → nearest snippets and sections, dense + lexical, fused by RRF; and, for a
question with options, MLKG-RAG's stem + option queries, which also give each option its retrieval
support (the classic IR solver: the best BM25 of question + option over passages that hold the option)."""

from __future__ import annotations

import re
from typing import Any

from bencao.deadline import check_deadline
from bencao.retrieval.evidence import SnippetHit
from bencao.retrieval.graph.store import Graph
from bencao.retrieval.search.fusion import rrf
from bencao.text import norm_key


Searched = tuple[list[tuple[str, float]], list[tuple[str, float]]]


def first_stage(ix: Any, question: str, k: int) -> Searched:
    """The question's ``k`` best snippets by BM25 and by the dense index, each best first (both empty without indexes).
    Searched once per question: macro retrieval reads the first ``k_each`` of each, the reranker all ``k``."""
    if ix is None:
        return [], []
    return ix.lexical_search("snippets", question, k), ix.dense_search("snippets", question, k)


def macro_retrieve(g: Graph, ix: Any, question: str, *, k_snippets: int = 8, k_sections: int = 3, k_each: int = 20,
                   rrf_k: int = 60, searched: Searched | None = None) -> list[SnippetHit]:
    """``searched``: the question's :func:`first_stage`, when the caller has it (at a depth of at least ``k_each``)."""
    if ix is None:
        return []
    out: dict[str, SnippetHit] = {}
    lex, den = searched if searched is not None else first_stage(ix, question, k_each)
    lex, den = lex[:k_each], den[:k_each]
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


_PARTS = re.compile(r"[、，,；;/]+")


#: Classifying suffixes of syndrome and disease names (肝热动风证, 湿热病): texts name the pattern without them.
_SUFFIXES = ("证", "证型", "症")


def _core(part: str) -> str:
    for suf in _SUFFIXES:
        if part.endswith(suf) and len(part) - len(suf) >= 2:
            return part[: -len(suf)]
    return part


def holds_option(text: str, option: str) -> bool:
    """Does a passage state the option? Every part of a short option (``肾俞、太溪``) as written (a
    syndrome's classifying suffix 证 aside: 肝热动风证 → 肝热动风); for a longer phrase, most of its
    content tokens."""
    key = norm_key(text)
    parts = [_core(norm_key(p)) for p in _PARTS.split(option) if p.strip()]
    if parts and all(len(p) <= 8 for p in parts):
        return all(p in key for p in parts)
    from bencao.retrieval.index.lexical import analyze

    toks = set(analyze(option))
    return bool(toks) and len(toks & set(analyze(text))) >= 0.7 * len(toks)


def option_retrieve(g: Graph, ix: Any, question: str, options: list[str], *, k_per_option: int = 1,
                    candidates: int = 20) -> tuple[list[SnippetHit], list[float]]:
    """Passages for each option that hold the option, and each option's retrieval support.

    Candidates come from two searches per option — the option's own text (passages that name it) and
    question + option — so an option named in few passages is not lost behind the question's words.
    Those that hold the option are scored by the BM25 of the question alone (every one of them holds
    the option, whose own tokens would only favour long options), and the option's support is its best
    passage's score plus the mean of its three best: the classic IR solver, steadied by a second and
    third passage (bench/option_support.py: on the corpus graph's TCMBench dev halves 28.3 / 28.4 %
    against 23.4 / 28.4 % for question + option BM25)."""
    lex = ix.lexical("snippets") if ix is not None else None
    if lex is None or not options:
        return [], [0.0] * len(options)
    pools: list[list[str]] = []
    for opt in options:
        check_deadline("searching the options")
        if not opt.strip():
            pools.append([])
            continue
        hits = ix.lexical_search("snippets", opt, candidates) + ix.lexical_search("snippets", f"{question} {opt}", candidates)
        pools.append(list(dict.fromkeys(sid for sid, _ in hits)))
    rows = g.get_snippets({sid for pool in pools for sid in pool})
    support: list[float] = []
    kept: list[tuple[int, str, float]] = []
    for i, (opt, pool) in enumerate(zip(options, pools)):
        check_deadline("scoring the options")
        holding = [sid for sid in pool if sid in rows and holds_option(rows[sid]["text"], opt)]
        scores = lex.score_ids(question, holding) if holding else {}
        ranked = sorted(holding, key=lambda sid: -scores[sid])
        best = [scores[sid] for sid in ranked[:3]]
        support.append(round(best[0] + sum(best) / 3, 4) if best else 0.0)
        kept += [(i, sid, scores[sid]) for sid in ranked[:k_per_option]]
    top = max(support, default=0.0) or 1.0
    out: dict[str, SnippetHit] = {}
    for i, sid, score in kept:
        hit = SnippetHit.from_row(rows[sid], f"option:{i}", round(score / top, 4))
        if sid in out:
            out[sid].merge(hit)
        else:
            out[sid] = hit
    return list(out.values()), support
