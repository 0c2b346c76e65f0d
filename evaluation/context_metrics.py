"""Retrieval-context metrics of TCM-DiffRAG's RAGAS table: context precision, recall, entity recall.

A record is scored when it has a **reference**: its ``gold_evidence`` (a list of passages) when it
has one, else its gold answer (:func:`bencao.evaluation.bench_format.gold_texts`: the gold option
texts, the gold items, the reference answer, the statement). The **contexts** are the retrieved
evidence items in rank order (snippets, then triples), as the runner reads them from the graph.

Two variants, the same three numbers:

- **lexical** (no LLM, always computed): *terms* are the content tokens of a text
  (:func:`bencao.text.tokenize` — jieba for Chinese — minus English and Chinese stopwords and
  punctuation). A context item *covers* a reference sentence when it contains the sentence
  (matching keys) or at least ``judge.lexical_coverage`` (0.6) of its distinct terms.

  - ``context_precision``: RAGAS's average precision over the ranked items, an item counting as
    relevant when it covers some reference sentence: Σ_k precision@k · rel_k / #relevant (0 with
    no relevant item);
  - ``context_recall``: the share of reference sentences covered by the contexts together;
  - ``context_entity_recall``: the share of the reference's distinct terms found in the contexts
    (an LLM-free stand-in for RAGAS's entities).

- **judge** (``judge.enabled`` with a ``judge.llm`` block): an LLM, prompted with the Jinja
  templates ``evaluation/prompts/context_{precision,recall,entity_recall}.{zh,en}.jinja``, gives
  a 0/1 verdict per context item (useful for the reference?) and per reference sentence
  (attributable to the contexts?) and lists the reference's entities with whether the contexts
  mention each: ``judge_context_precision`` / ``judge_context_recall`` /
  ``judge_context_entity_recall``, computed as above. A reply that stays unreadable after one
  repair leaves that number out for the record (counted in ``judge_failed``).
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from bencao.prompting import quoted_line
from bencao.serving.config import JudgeConfig  # noqa: F401  (the judge's settings live in the eval section)
from bencao.text import has_cjk, norm_key, split_sentences, tokenize

PROMPTS_DIR = Path(__file__).with_name("prompts")
LEXICAL_KEYS = ("context_precision", "context_recall", "context_entity_recall")
JUDGE_KEYS = tuple(f"judge_{k}" for k in LEXICAL_KEYS)


# --------------------------------------------------------------------------- references and terms


def reference_sentences(rec: dict[str, Any]) -> list[str]:
    """The reference the contexts are measured against, as sentences ([] when the record has none)."""
    from bencao.evaluation.bench_format import gold_texts

    passages = rec.get("gold_evidence") or gold_texts(rec)
    out: list[str] = []
    for p in passages:
        out += split_sentences(p) or [p]
    return [s for s in out if terms(s) or norm_key(s)]


@functools.lru_cache(maxsize=1)
def _stopwords() -> frozenset[str]:
    from bm25s.stopwords import STOPWORDS_CHINESE, STOPWORDS_EN

    return frozenset(STOPWORDS_EN) | frozenset(STOPWORDS_CHINESE)


@functools.lru_cache(maxsize=50_000)
def _terms(text: str) -> frozenset[str]:
    stop = _stopwords()
    return frozenset(t for t in tokenize(text) if t not in stop and (has_cjk(t) or len(t) > 1))


def terms(text: str) -> frozenset[str]:
    """Content terms of ``text`` (matching keys; stopwords, punctuation and single Latin letters dropped)."""
    return _terms(text or "")


def covers(item: str, sentence: str, coverage: float = 0.6) -> bool:
    key = norm_key(sentence)
    if key and key in norm_key(item):
        return True
    want = terms(sentence)
    return bool(want) and len(want & terms(item)) >= coverage * len(want)


def average_precision(relevant: list[bool]) -> float:
    """RAGAS context precision: Σ_k precision@k · rel_k / #relevant (0 without a relevant item)."""
    hits = 0
    total = 0.0
    for k, rel in enumerate(relevant, start=1):
        if rel:
            hits += 1
            total += hits / k
    return total / hits if hits else 0.0


def lexical_context_scores(rec: dict[str, Any], contexts: list[str], coverage: float = 0.6) -> dict[str, float] | None:
    """The three lexical numbers for one record (None when it has no reference)."""
    ref = reference_sentences(rec)
    if not ref:
        return None
    if not contexts:
        return {k: 0.0 for k in LEXICAL_KEYS}
    relevant = [any(covers(c, s, coverage) for s in ref) for c in contexts]
    joined = "\n".join(contexts)
    ref_terms = frozenset().union(*(terms(s) for s in ref))
    ctx_terms = frozenset().union(*(terms(c) for c in contexts))
    return {
        "context_precision": round(average_precision(relevant), 6),
        "context_recall": round(sum(covers(joined, s, coverage) for s in ref) / len(ref), 6),
        "context_entity_recall": round(len(ref_terms & ctx_terms) / len(ref_terms), 6) if ref_terms else float(covers(joined, ref[0], coverage)),
    }


# --------------------------------------------------------------------------- the LLM judge

_VERDICTS = {"type": "object", "required": ["verdicts"],
             "properties": {"verdicts": {"type": "array", "items": {"type": "integer", "enum": [0, 1]}}}}
_ENTITIES = {"type": "object", "required": ["entities"],
             "properties": {"entities": {"type": "array", "items": {"type": "object", "required": ["entity", "in_context"],
                                                                      "properties": {"entity": {"type": "string"}, "in_context": {"type": "boolean"}}}}}}


def _lang(rec: dict[str, Any]) -> str:
    lang = str(rec.get("lang") or "")
    if lang:
        return "en" if lang.startswith("en") else "zh"
    from bencao.evaluation.bench_format import query_text

    return "zh" if has_cjk(query_text(rec)) else "en"


def judge_messages(rec: dict[str, Any], contexts: list[str], cfg: JudgeConfig) -> dict[str, list[dict[str, str]]]:
    """The three judge requests of one record (metric → chat messages)."""
    from bencao.data_gen.templates import render
    from bencao.evaluation.bench_format import query_text

    # one line each (a passage cannot start a numbered item of its own), fence tags defused (issue 26 item 4)
    # the judge prompts fence them between <contexts> lines
    shown = [quoted_line(c[: cfg.max_context_chars], "contexts") for c in contexts[: cfg.max_contexts]]
    ref = reference_sentences(rec)
    lang = _lang(rec)
    user_dir = cfg.prompts_dir
    # the user's templates first, then the shipped evaluation ones (render falls back to data_gen's own)
    dirs = str(PROMPTS_DIR) if not user_dir else user_dir
    common = {"question": query_text(rec), "contexts": shown, "reference": ref}
    out = {}
    for metric in ("context_precision", "context_recall", "context_entity_recall"):
        try:
            out[metric] = render(metric, lang, prompts_dir=dirs, **common)
        except Exception:  # noqa: BLE001 - a user directory without this template: the shipped one
            out[metric] = render(metric, lang, prompts_dir=str(PROMPTS_DIR), **common)
    return out


def judge_context_scores(records: list[dict[str, Any]], contexts: list[list[str]], client: Any, cfg: JudgeConfig) -> list[dict[str, Any] | None]:
    """Judge verdicts → the three numbers per record (None for records without a reference)."""
    from bencao.llm.structured import complete_json_many

    jobs: list[tuple[int, str, list[dict[str, str]], int]] = []
    for i, (rec, ctx) in enumerate(zip(records, contexts)):
        ref = reference_sentences(rec)
        if not ref:
            continue
        msgs = judge_messages(rec, ctx, cfg)
        shown = min(len(ctx), cfg.max_contexts)
        if shown:
            jobs.append((i, "context_precision", msgs["context_precision"], shown))
        jobs.append((i, "context_recall", msgs["context_recall"], len(ref)))
        jobs.append((i, "context_entity_recall", msgs["context_entity_recall"], 0))
    out: list[dict[str, Any] | None] = [None if not reference_sentences(r) else {} for r in records]
    if not jobs:
        return out
    schemas = {"context_precision": _VERDICTS, "context_recall": _VERDICTS, "context_entity_recall": _ENTITIES}
    results = []
    for metric in schemas:  # one parallel round per metric (each has its own schema)
        batch = [j for j in jobs if j[1] == metric]
        if batch:
            res = complete_json_many(client, [j[2] for j in batch], schemas[metric], lang=_lang(records[batch[0][0]]), **cfg.llm.params())
            results += list(zip(batch, res))
    for (i, metric, _, n), res in results:
        scores = out[i]
        assert scores is not None
        key = f"judge_{metric}"
        verdicts = res.value.get("verdicts") if res.ok and metric != "context_entity_recall" else None
        if not res.ok or (verdicts is not None and len(verdicts) != n):
            scores["judge_failed"] = scores.get("judge_failed", 0) + 1
            continue
        if metric == "context_precision":
            scores[key] = round(average_precision([bool(v) for v in verdicts]), 6)
        elif metric == "context_recall":
            scores[key] = round(sum(verdicts) / n, 6)
        else:
            ents = res.value["entities"]
            scores[key] = round(sum(bool(e["in_context"]) for e in ents) / len(ents), 6) if ents else 0.0
    for i, rec in enumerate(records):
        if out[i] is not None and not contexts[i]:
            out[i]["judge_context_precision"] = 0.0  # nothing retrieved: nothing precise
    return out
