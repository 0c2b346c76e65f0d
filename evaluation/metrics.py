"""Metrics for every task, per-record scores, bootstrap 95% intervals and breakdown by source.

Definitions (also in the README):

- ``mcq`` ``accuracy``: the predicted set of letters equals the gold set (multi-gold needs all of
  them and nothing else). An abstention predicts nothing and is wrong.
- ``sd`` ``top1``/``top3``/``top5``: some gold option is among the first k of the option ranking.
  Options with equal scores are a tie; the credit of a tie that straddles position k is the
  probability that random tie-breaking puts a gold option in the top k (so a constant scorer earns
  exactly chance). Options missing from the ranking are tied at the bottom. Abstention = 0.
  ``accuracy`` as for mcq is reported too.
- ``tf`` ``accuracy``: predicted bool equals the gold; an abstention (``None``) is wrong.
- ``el`` ``acc_at_1``: chosen id ∈ ``gold_ids``, abstentions counted wrong; ``abstain_rate``;
  ``retry_rate`` (the linker retried with generated synonyms); ``acc_at_1_answered``: accuracy
  over the non-abstained records (absent when every record abstained).
- ``rec`` ``hits_at_1``: the top-ranked candidate is gold (ties and abstention as for sd), averaged
  over records with a non-empty gold list; an abstention selects nothing; ``precision``/``recall``/``f1`` of the selected set against the gold
  set, micro-averaged over records (sums of true positives, selected and gold; 0 when a denominator
  is 0); ``*_macro``: per-record values averaged (per record: P = 0 when nothing is selected,
  R = 0 when the gold is empty, except both empty → P = R = F1 = 1).
- ``qa`` ``bleu``/``chrf``: sacrebleu corpus scores (Chinese tokenisation for ``lang`` zh).
- ``evidence_contains_gold``: share of records whose retrieved evidence mentions a gold option /
  gold candidate / the reference (after :func:`bencao.text.norm_key`), or, for ``tf``, covers at
  least half of the statement's content words. A retrieval-recall proxy; absent without retrieval.
- ``abstain_rate`` wherever a system can abstain.

Intervals: percentile bootstrap over records (paired: every metric of a benchmark uses the same
resamples), ``n_resamples`` draws from ``numpy.random.default_rng(seed)`` — deterministic.
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any, Iterable

import numpy as np

from bencao.text import norm_key, tokenize

#: The metric a benchmark is summarised by (report headline, plot).
MAIN_METRIC = {"mcq": "accuracy", "sd": "top1", "tf": "accuracy", "el": "acc_at_1", "rec": "f1", "qa": "chrf"}

# ----------------------------------------------------------------------------- rankings with ties


def tie_groups(items: list[str], ranking: list[str] | None, scores: Any = None) -> list[list[str]]:
    """Order ``items`` into tie groups, best first.

    ``scores`` may be a mapping item → score or a list aligned with ``ranking``; items with equal
    scores share a group. Without scores the ranking is strict. Items the system did not rank form
    one group at the bottom.
    """
    ranking = [r for r in (ranking or []) if r in items]
    score_of: dict[str, float] = {}
    if isinstance(scores, dict):
        score_of = {k: float(v) for k, v in scores.items() if k in items and v is not None}
    elif isinstance(scores, (list, tuple)) and len(scores) == len(ranking):
        score_of = {k: float(v) for k, v in zip(ranking, scores) if v is not None}
    groups: list[list[str]] = []
    if score_of:
        ranked = sorted(score_of, key=lambda k: -score_of[k])
        for k in ranked:
            if groups and math.isclose(score_of[groups[-1][0]], score_of[k], rel_tol=1e-9, abs_tol=1e-12):
                groups[-1].append(k)
            else:
                groups.append([k])
        placed = set(score_of)
    else:
        seen: set[str] = set()
        for k in ranking:
            if k not in seen:
                groups.append([k])
                seen.add(k)
        placed = seen
    rest = [i for i in items if i not in placed]
    if rest:
        groups.append(rest)
    return groups


def topk_credit(groups: list[list[str]], gold: Iterable[str], k: int) -> float:
    """Probability that some gold item lands in the top ``k`` under uniform random tie-breaking."""
    gold = set(gold)
    pos = 0
    for g in groups:
        if pos >= k:
            return 0.0
        n_gold = sum(1 for x in g if x in gold)
        if pos + len(g) <= k:
            if n_gold:
                return 1.0
        else:
            m = k - pos  # slots of this group that fall inside the top k
            if n_gold == 0:
                return 0.0
            # P(no gold among m drawn from the group) = C(g - j, m) / C(g, m)
            return 1.0 - math.comb(len(g) - n_gold, m) / math.comb(len(g), m)
        pos += len(g)
    return 0.0


# ----------------------------------------------------------------------------- per-record scores


def _abstained(pred: dict[str, Any] | None) -> bool:
    return pred is None or bool(pred.get("abstained"))


def score_choice(rec: dict[str, Any], pred: dict[str, Any] | None) -> dict[str, float]:
    gold = set(rec["answer"])
    answer = set() if _abstained(pred) else set(pred.get("answer") or [])
    out = {"accuracy": float(answer == gold), "abstained": float(_abstained(pred))}
    if rec["task"] == "sd":
        ranked = bool(pred and (pred.get("ranking") or pred.get("scores")))
        groups = tie_groups(list(rec["options"]), pred.get("ranking"), pred.get("scores")) if ranked else []
        for k in (1, 3, 5):
            out[f"top{k}"] = topk_credit(groups, gold, k) if ranked else 0.0
    return out


def score_tf(rec: dict[str, Any], pred: dict[str, Any] | None) -> dict[str, float]:
    answer = None if _abstained(pred) else pred.get("answer")
    return {"accuracy": float(answer is rec["answer"]), "abstained": float(answer is None)}


def score_el(rec: dict[str, Any], pred: dict[str, Any] | None) -> dict[str, float]:
    abstained = _abstained(pred) or not pred.get("chosen_id")
    chosen = None if abstained else str(pred["chosen_id"])
    return {
        "acc_at_1": float(chosen in rec["gold_ids"]),
        "abstained": float(abstained),
        "retried": float(bool(pred and pred.get("retried"))),
    }


def score_rec(rec: dict[str, Any], pred: dict[str, Any] | None) -> dict[str, float]:
    gold = set(rec["gold"])
    selected: set[str] = set()
    if not _abstained(pred):
        selected = {s for s in (pred.get("selected") or []) if s in rec["candidates"]}
    hit = 0.0
    if pred and (pred.get("ranking") or pred.get("scores")):  # the ranking counts even when selection abstained
        hit = topk_credit(tie_groups(list(rec["candidates"]), pred.get("ranking"), pred.get("scores")), gold, 1)
    tp = len(selected & gold)
    if not selected and not gold:
        p = r = f = 1.0
    else:
        p = tp / len(selected) if selected else 0.0
        r = tp / len(gold) if gold else 0.0
        f = 2 * p * r / (p + r) if p + r else 0.0
    return {
        "hits_at_1": hit, "has_gold": float(bool(gold)), "tp": float(tp), "n_selected": float(len(selected)),
        "n_gold": float(len(gold)), "precision_macro": p, "recall_macro": r, "f1_macro": f,
        "abstained": float(_abstained(pred)),
    }


def score_qa(rec: dict[str, Any], pred: dict[str, Any] | None) -> dict[str, float]:
    return {"abstained": float(_abstained(pred) or not (pred or {}).get("text"))}


SCORERS = {"mcq": score_choice, "sd": score_choice, "tf": score_tf, "el": score_el, "rec": score_rec, "qa": score_qa}


def score_record(rec: dict[str, Any], pred: dict[str, Any] | None) -> dict[str, float]:
    """Per-record values that the benchmark metrics aggregate."""
    return SCORERS[rec["task"]](rec, pred)


# ----------------------------------------------------------------------------- evidence proxy


def evidence_contains_gold(rec: dict[str, Any], evidence_text: str) -> bool:
    """Does the evidence mention the gold answer? (see the module docstring)"""
    ev = norm_key(evidence_text or "")
    if not ev:
        return False
    if rec["task"] == "tf":
        words = [w for w in (norm_key(t) for t in tokenize(rec["statement"])) if w and any(c.isalnum() for c in w)]
        if not words:
            return False
        return sum(1 for w in words if w in ev) >= len(words) / 2
    return any(g and g in ev for g in (norm_key(t) for t in _gold_strings(rec)))


def _gold_strings(rec: dict[str, Any]) -> list[str]:
    from bencao.evaluation.bench_format import gold_texts

    return gold_texts(rec)


# ----------------------------------------------------------------------------- aggregation


def _ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(den > 0, num / np.where(den > 0, den, 1), 0.0)


def _metric_arrays(task: str, rows: list[dict[str, float]], ev: list[float | None], answers: bool) -> dict[str, Any]:
    """metric name → function(index matrix (B, n)) → values (B,). Index matrix of one row = the data."""
    col = lambda key: np.array([r[key] for r in rows], dtype=float)  # noqa: E731
    fns: dict[str, Any] = {}

    def mean_of(v: np.ndarray):
        return lambda idx: v[idx].mean(axis=1)

    def ratio_of(num: np.ndarray, den: np.ndarray):
        return lambda idx: _ratio(num[idx].sum(axis=1), den[idx].sum(axis=1))

    if answers:
        if task in ("mcq", "sd", "tf"):
            fns["accuracy"] = mean_of(col("accuracy"))
            fns["abstain_rate"] = mean_of(col("abstained"))
        if task == "sd":
            for k in (1, 3, 5):
                fns[f"top{k}"] = mean_of(col(f"top{k}"))
        if task == "el":
            acc, ab = col("acc_at_1"), col("abstained")
            fns["acc_at_1"] = mean_of(acc)
            fns["abstain_rate"] = mean_of(ab)
            fns["retry_rate"] = mean_of(col("retried"))
            if (ab < 1).any():
                fns["acc_at_1_answered"] = ratio_of(acc * (1 - ab), 1 - ab)
        if task == "rec":
            has_gold = col("has_gold")
            if has_gold.any():
                fns["hits_at_1"] = ratio_of(col("hits_at_1") * has_gold, has_gold)
            tp, sel, gold = col("tp"), col("n_selected"), col("n_gold")

            def f1(idx: np.ndarray) -> np.ndarray:
                p = _ratio(tp[idx].sum(1), sel[idx].sum(1))
                r = _ratio(tp[idx].sum(1), gold[idx].sum(1))
                return _ratio(2 * p * r, p + r)

            fns["precision"] = ratio_of(tp, sel)
            fns["recall"] = ratio_of(tp, gold)
            fns["f1"] = f1
            for m in ("precision_macro", "recall_macro", "f1_macro"):
                fns[m] = mean_of(col(m))
            fns["abstain_rate"] = mean_of(col("abstained"))
        if task == "qa":
            fns["abstain_rate"] = mean_of(col("abstained"))
    known = np.array([e is not None for e in ev], dtype=float)
    if known.any():
        hits = np.array([float(e) if e is not None else 0.0 for e in ev])
        fns["evidence_contains_gold"] = ratio_of(hits, known)
    return fns


def corpus_text_scores(records: list[dict[str, Any]], preds: list[dict[str, Any] | None]) -> dict[str, float]:
    """sacrebleu corpus BLEU and chrF of free-text answers (empty hypothesis when abstained)."""
    import sacrebleu

    hyps = [((p or {}).get("text") or "") for p in preds]
    refs = [[r["answer"] for r in records]]
    zh = any(r.get("lang", "").startswith("zh") for r in records)
    bleu = sacrebleu.corpus_bleu(hyps, refs, tokenize="zh" if zh else "13a")
    chrf = sacrebleu.corpus_chrf(hyps, refs)
    return {"bleu": round(bleu.score, 4), "chrf": round(chrf.score, 4)}


def aggregate(
    records: list[dict[str, Any]],
    preds: list[dict[str, Any] | None],
    evidence_hits: list[bool | None] | None = None,
    *,
    answers: bool = True,
    n_resamples: int = 1000,
    seed: int = 0,
    by_source: bool = True,
) -> dict[str, Any]:
    """Metrics of one benchmark: ``{"task", "n", <metric>: value, ..., "ci95": {...}, "by_source": {...}}``.

    ``preds[i]`` is the system's prediction for ``records[i]`` (None when the system gives no answer
    for it); ``answers=False`` (retrieval-only systems) reports only the evidence metric.
    """
    if not records:
        raise ValueError("no records to score")
    task = records[0]["task"]
    ev = list(evidence_hits) if evidence_hits is not None else [None] * len(records)
    rows = [score_record(r, p) for r, p in zip(records, preds)]
    fns = _metric_arrays(task, rows, ev, answers)
    n = len(records)
    out: dict[str, Any] = {"task": task, "n": n}
    full = np.arange(n)[None, :]
    for name, fn in fns.items():
        out[name] = round(float(fn(full)[0]), 6)
    if answers and task == "qa":
        out.update(corpus_text_scores(records, preds))
    if n_resamples > 0 and fns:
        rng = np.random.default_rng(seed)
        idx = rng.integers(0, n, size=(n_resamples, n))
        out["ci95"] = {}
        for name, fn in fns.items():
            vals = fn(idx)
            lo, hi = np.percentile(vals, [2.5, 97.5])
            out["ci95"][name] = [round(float(lo), 6), round(float(hi), 6)]
    if by_source:
        groups: dict[str, list[int]] = defaultdict(list)
        for i, r in enumerate(records):
            groups[r.get("source") or ""].append(i)
        if len(groups) > 1:
            out["by_source"] = {}
            for src, ids in sorted(groups.items()):
                sub = aggregate([records[i] for i in ids], [preds[i] for i in ids], [ev[i] for i in ids],
                                answers=answers, n_resamples=0, by_source=False)
                out["by_source"][src] = sub
    return out
