"""Yaoshi-RAG's keyword front end: a keyword of the question → its candidate entities → the selector.

The question-understanding stage (``bencao.serving.understand``) names the question's keywords.
Each is looked up like a mention, but without the retry: its ``k`` best candidate entities — the
alias tables' exact and normalised matches first, then BM25 over names and aliases fused with dense
search over entity texts, the linker's own candidate order — go to the linker's selector (the
entity-choice LLM with ``linking.selector: llm``, as in the paper's Textbox 2, which may answer "none
fits"; else the rules), then to the scorer when one is configured, and the choice stands when its
confidence reaches ``linking.tau``. A keyword that names nothing in the graph ("食材", "推荐") is
dropped, not retried with synonyms: keywords are many and most of them are not entities.
"""

from __future__ import annotations

from typing import Any

from bencao.retrieval.linking import EntityLinker, LinkResult


def link_keyword(linker: EntityLinker, keyword: str, context: str | None = None, k: int = 10) -> LinkResult:
    """The keyword's top-``k`` candidates → selector (→ scorer) → ``tau``; abstains when nothing fits."""
    keyword = keyword.strip()
    cands: list[dict[str, Any]] = linker._candidates(keyword, context=context)[: max(1, k)]
    choice = linker._choose(keyword, context, cands) if cands else None
    report = [linker._report(c) for c in cands]
    extra = {"selector_rationale": choice.get("selector_rationale") if choice else None,
             "scorer_rationale": choice.get("scorer_rationale") if choice else None,
             "alternatives": list(choice.get("alternatives") or []) if choice else []}  # the scorer's, when it rejected the choice
    tau = linker.cfg.tau
    if choice is None or choice.get("abstain") is True or choice["confidence"] < tau:
        why = f"{choice['rationale']}; confidence {choice['confidence']:.2f} < tau {tau}" if choice else "no candidate"
        return LinkResult(keyword, None, None, round(choice["confidence"], 4) if choice else 0.0, f"abstained: {why}", report,
                          False, True, **extra)
    ent = linker.g.get_entity(choice["id"]) or {}
    return LinkResult(keyword, choice["id"], ent.get("name"), round(choice["confidence"], 4), f"keyword: {choice['rationale']}",
                      report, False, False, ent.get("type"), **extra)
