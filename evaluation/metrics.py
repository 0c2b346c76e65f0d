"""Metrics for every task, per-record scores, bootstrap 95% intervals and breakdown by source.

Definitions (also in docs/evaluation.md and docs/evaluation-metrics.md):

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
  over the non-abstained records (absent when every record abstained). FoodOntoRAG's pair:
  ``acc_at_1_first_pass`` = correct without a retry (a first pass below τ is a miss), against
  the final ``acc_at_1``; ``synonym_rate`` = share of records whose final link came from the
  retry, LLM synonyms or rule variants (``via_synonym``, which the linker sets on its result; for
  predictions written without it, a rationale starting "retry with" or "after synonyms").
- ``rec`` ``hits_at_1``: the top-ranked candidate is gold (ties and abstention as for sd), averaged
  over records with a non-empty gold list; an abstention selects nothing; ``precision``/``recall``/``f1`` of the selected set against the gold
  set, micro-averaged over records (sums of true positives, selected and gold; 0 when a denominator
  is 0); ``*_macro``: per-record values averaged (per record: P = 0 when nothing is selected,
  R = 0 when the gold is empty, except both empty → P = R = F1 = 1).
- open-ended ``rec`` (no ``candidates``; Yaoshi-RAG): the free-text answer's foods, as the
  runner links them (``items``: mentions → graph entities of the food types, plus gold names
  written verbatim), are the ranked selection; an item is correct when its entity is the gold
  name's entity or its name/mention has the gold name's matching key; ``hits_at_1`` = the first
  item is gold; ``precision``/``recall``/``f1`` as above.
- ``qa`` ``bleu``/``chrf``: sacrebleu corpus scores (Chinese tokenisation for ``lang`` zh);
  ``gleu``: Google-BLEU (nltk ``corpus_gleu``, 1–4-grams, on sacrebleu's tokens), MLKG-RAG's metric.
- ``context_precision``/``context_recall``/``context_entity_recall`` (and ``judge_*``), for any
  task with a reference: see :mod:`bencao.evaluation.context_metrics`; means over the records
  whose evidence the runner scored.
- **Retrieval from the question alone** (the probe of :mod:`bencao.evaluation.probe`: the served
  retrieval recipe, the question only — no options, no option queries —, its snippets in rank
  order as the passages; every ``mcq``/``sd`` record, ``rec`` with candidates, ``qa``; absent
  without a graph or with ``eval.retrieval_probe=false``). A passage *holds* an option when the
  option's matching key (:func:`bencao.text.norm_key`) occurs in it, as for
  ``evidence_contains_gold``. For k = 5, 10, 20:

  - ``answer_recall@k``: share of records with a passage holding a gold option (candidate,
    reference) among the first k;
  - ``distractor_rate@k``: mean over records (with at least one distractor) of the share of
    their distractor options held by some passage of the first k;
  - ``margin@k``: mean over the same records of (gold found in the top k) − (share of distractors
    found): ``answer_recall@k − distractor_rate@k`` on records with distractors. Its interval is
    the bootstrap of the per-record differences (paired: gold and distractors of the same record
    stay together). A retriever that returns every option's text scores recall 1 and margin 0;
    one that returns nothing scores 0 and 0: only passages that hold the gold *and not* the
    distractors move the margin;
  - ``mrr``: mean of 1 / rank of the first gold-holding passage (0 when none of the top 20 does);
  - ``passage_chars@10``: mean characters of the first 10 passages (heading path and text), and
    ``passages@10`` their mean number: longer or more passages find more by chance.

  See docs/evaluation-metrics.md.
- ``evidence_contains_gold`` (reported as *coverage: evidence covers the gold option*): share of
  records whose retrieved evidence — what the system itself retrieved, options and option queries
  included — mentions a gold option / gold candidate / the reference (after
  :func:`bencao.text.norm_key`), or, for ``tf``, covers at least half of the statement's content
  words. Coverage, not retrieval quality: with one query per option every option's text lands in
  the evidence about equally often. Absent without retrieval.
- ``evidence_holds_gold_parts`` (mcq, sd): the same, with a gold option that lists several items
  (肾俞、太溪; 当归，白芍) held when every item is mentioned, each anywhere in the evidence, and a
  syndrome's classifying suffix (证/证型) not required (脾胃虚寒证 → 脾胃虚寒). Items shorter than two
  characters are not split off (the option must then occur whole). Never lower than
  ``evidence_contains_gold``; a lenient reading of retrieval recall, reported beside the strict one.
- ``abstain_rate`` wherever a system can abstain.

Intervals: percentile bootstrap over records (paired: every metric of a benchmark uses the same
resamples), ``n_resamples`` draws from ``numpy.random.default_rng(seed)`` — deterministic. Two
systems scored on the same records with the same seed draw the same resamples.
"""

from __future__ import annotations

import math
import re
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
    retried = bool(pred and pred.get("retried"))
    via = pred.get("via_synonym") if pred else None
    if via is None:
        via = retried and not abstained and str((pred or {}).get("rationale") or "").startswith(("retry with", "after synonyms"))
    correct = chosen in rec["gold_ids"]
    return {
        "acc_at_1": float(correct),
        "acc_first_pass": float(correct and not retried),
        "abstained": float(abstained),
        "retried": float(retried),
        "via_synonym": float(bool(via)),
    }


def open_rec_hits(rec: dict[str, Any], pred: dict[str, Any] | None) -> list[bool]:
    """For each food the free-text answer names (``pred["items"]``, in order), is it a gold food?

    A gold food is matched at most once: by entity id (``pred["gold_linked"]`` maps gold names to
    the runner's link) or by matching key of the item's name or mention.
    """
    if _abstained(pred):
        return []
    gold = list(rec["gold"])
    gold_ids = (pred or {}).get("gold_linked") or {}
    keys = {g: norm_key(g) for g in gold}
    taken: set[str] = set()
    hits: list[bool] = []
    for it in (pred or {}).get("items") or []:
        names = {norm_key(str(it.get(k) or "")) for k in ("name", "mention")} - {""}
        eid = it.get("id")
        match = next((g for g in gold if g not in taken and ((eid and gold_ids.get(g) == eid) or keys[g] in names)), None)
        if match is not None:
            taken.add(match)
        hits.append(match is not None)
    return hits


def score_rec(rec: dict[str, Any], pred: dict[str, Any] | None) -> dict[str, float]:
    if "candidates" not in rec:
        return _score_open_rec(rec, pred)
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


def _score_open_rec(rec: dict[str, Any], pred: dict[str, Any] | None) -> dict[str, float]:
    hits = open_rec_hits(rec, pred)
    gold = rec["gold"]
    tp = sum(hits)
    if not hits and not gold:
        p = r = f = 1.0
    else:
        p = tp / len(hits) if hits else 0.0
        r = tp / len(gold) if gold else 0.0
        f = 2 * p * r / (p + r) if p + r else 0.0
    return {"hits_at_1": float(bool(hits) and hits[0]), "has_gold": float(bool(gold)), "tp": float(tp), "n_selected": float(len(hits)),
            "n_gold": float(len(gold)), "precision_macro": p, "recall_macro": r, "f1_macro": f,
            "abstained": float(_abstained(pred) or not (pred or {}).get("text"))}


def score_qa(rec: dict[str, Any], pred: dict[str, Any] | None) -> dict[str, float]:
    return {"abstained": float(_abstained(pred) or not (pred or {}).get("text"))}


SCORERS = {"mcq": score_choice, "sd": score_choice, "tf": score_tf, "el": score_el, "rec": score_rec, "qa": score_qa}


def score_record(rec: dict[str, Any], pred: dict[str, Any] | None) -> dict[str, float]:
    """Per-record values that the benchmark metrics aggregate."""
    return SCORERS[rec["task"]](rec, pred)


# ----------------------------------------------------------------------------- evidence proxy


def evidence_contains_gold(rec: dict[str, Any], evidence_text: str) -> bool:
    """Does the evidence mention the gold answer? (see the module docstring)"""
    return _contains_gold(rec, norm_key(evidence_text or ""))


def evidence_recall(rec: dict[str, Any], evidence_text: str) -> tuple[bool, bool | None]:
    """``(evidence_contains_gold, evidence_holds_gold_parts)``, the evidence normalised once."""
    ev = norm_key(evidence_text or "")
    return _contains_gold(rec, ev), _holds_gold_parts(rec, ev)


def _contains_gold(rec: dict[str, Any], ev: str) -> bool:
    if not ev:
        return False
    if rec["task"] == "tf":
        words = [w for w in (norm_key(t) for t in tokenize(rec["statement"])) if w and any(c.isalnum() for c in w)]
        if not words:
            return False
        return sum(1 for w in words if w in ev) >= len(words) / 2
    return any(g and g in ev for g in (norm_key(t) for t in _gold_strings(rec)))


_LIST_SEPARATORS = re.compile(r"[、，,；;/]")  # punctuation only: 和 and 与 occur inside terms (和胃降逆)
_SYNDROME_SUFFIX = re.compile(r"(证型|证候|证)$")


def gold_parts(text: str) -> list[str]:
    """The items a gold option is held by: its list items, a syndrome without its 证/证型 suffix."""
    key = norm_key(text)
    items = [x for x in (_SYNDROME_SUFFIX.sub("", part) for part in _LIST_SEPARATORS.split(key)) if x]
    if not items or any(len(x) < 2 for x in items):
        stripped = _SYNDROME_SUFFIX.sub("", key)
        return [stripped if len(stripped) >= 2 else key]
    return items


def evidence_holds_gold_parts(rec: dict[str, Any], evidence_text: str) -> bool | None:
    """Lenient :func:`evidence_contains_gold` for option tasks (see the module docstring); None for others."""
    return _holds_gold_parts(rec, norm_key(evidence_text or ""))


def _holds_gold_parts(rec: dict[str, Any], ev: str) -> bool | None:
    if rec["task"] not in ("mcq", "sd"):
        return None
    if not ev:
        return False
    return any(all(p in ev for p in gold_parts(g)) for g in _gold_strings(rec) if g)


def _gold_strings(rec: dict[str, Any]) -> list[str]:
    from bencao.evaluation.bench_format import gold_texts

    return gold_texts(rec)


# ----------------------------------------------------------------------------- aggregation


def _ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(den > 0, num / np.where(den > 0, den, 1), 0.0)


#: The k of the question-only retrieval metrics (= bencao.evaluation.probe.KS).
RETRIEVAL_KS = (5, 10, 20)


def retrieval_arrays(probes: list[dict[str, Any] | None]) -> dict[str, np.ndarray] | None:
    """Per-record columns of the probe rows (see the module docstring): ``have`` (a row exists),
    ``gold@k`` (0/1), ``has_distractors``, ``distractors@k`` (share found), ``rr``, ``chars@10``,
    ``passages@10``. None when no record has a row."""
    have = np.array([p is not None for p in probes], dtype=float)
    if not have.any():
        return None
    cols: dict[str, np.ndarray] = {"have": have}
    rank = [None if p is None else p.get("gold_rank") for p in probes]
    dist = [list(((p or {}).get("distractor_ranks") or {}).values()) for p in probes]
    cols["has_distractors"] = np.array([float(p is not None and bool(d)) for p, d in zip(probes, dist)])
    for k in RETRIEVAL_KS:
        cols[f"gold@{k}"] = np.array([float(r is not None and r <= k) for r in rank])
        cols[f"distractors@{k}"] = np.array([sum(1 for x in d if x is not None and x <= k) / len(d) if d else 0.0 for d in dist])
    cols["rr"] = np.array([1.0 / r if r else 0.0 for r in rank])
    cols["chars@10"] = np.array([float(((p or {}).get("chars") or {}).get("10", 0)) for p in probes])
    cols["passages@10"] = np.array([float(min(10, (p or {}).get("n_passages", 0))) for p in probes])
    return cols


def _retrieval_fns(probes: list[dict[str, Any] | None], ratio_of: Any) -> dict[str, Any]:
    cols = retrieval_arrays(probes)
    if cols is None:
        return {}
    have, has_d = cols["have"], cols["has_distractors"]
    fns: dict[str, Any] = {}
    for k in RETRIEVAL_KS:
        fns[f"answer_recall@{k}"] = ratio_of(cols[f"gold@{k}"], have)
    if has_d.any():
        for k in RETRIEVAL_KS:
            fns[f"distractor_rate@{k}"] = ratio_of(cols[f"distractors@{k}"] * has_d, has_d)
        for k in RETRIEVAL_KS:
            fns[f"margin@{k}"] = ratio_of((cols[f"gold@{k}"] - cols[f"distractors@{k}"]) * has_d, has_d)
    fns["mrr"] = ratio_of(cols["rr"], have)
    fns["passage_chars@10"] = ratio_of(cols["chars@10"], have)
    fns["passages@10"] = ratio_of(cols["passages@10"], have)
    return fns


def _metric_arrays(task: str, rows: list[dict[str, float]], ev: list[float | None], answers: bool,
                   ctx: list[dict[str, Any] | None], parts: list[bool | None] | None = None,
                   probes: list[dict[str, Any] | None] | None = None) -> dict[str, Any]:
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
            fns["acc_at_1_first_pass"] = mean_of(col("acc_first_pass"))
            fns["synonym_rate"] = mean_of(col("via_synonym"))
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
    known_parts = np.array([e is not None for e in (parts or [])], dtype=float)
    if known_parts.any():
        fns["evidence_holds_gold_parts"] = ratio_of(np.array([float(e) if e is not None else 0.0 for e in parts]), known_parts)
    fns.update(_retrieval_fns(list(probes or []), ratio_of))
    for key in sorted({k for c in ctx for k in (c or {}) if k.startswith(("context_", "judge_context_"))}):
        have = np.array([float(c is not None and c.get(key) is not None) for c in ctx])
        vals = np.array([float(c[key]) if c is not None and c.get(key) is not None else 0.0 for c in ctx])
        fns[key] = ratio_of(vals, have)
    return fns


def corpus_text_scores(records: list[dict[str, Any]], preds: list[dict[str, Any] | None]) -> dict[str, float]:
    """sacrebleu corpus BLEU and chrF of free-text answers (empty hypothesis when abstained)."""
    import sacrebleu

    hyps = [((p or {}).get("text") or "") for p in preds]
    refs = [[r["answer"] for r in records]]
    zh = any(r.get("lang", "").startswith("zh") for r in records)
    bleu = sacrebleu.corpus_bleu(hyps, refs, tokenize="zh" if zh else "13a")
    chrf = sacrebleu.corpus_chrf(hyps, refs)
    return {"bleu": round(bleu.score, 4), "chrf": round(chrf.score, 4), "gleu": round(corpus_gleu(hyps, refs[0], zh), 4)}


def corpus_gleu(hyps: list[str], refs: list[str], zh: bool) -> float:
    """Google-BLEU (Wu et al., 2016) over the corpus, 0–100: nltk's ``corpus_gleu`` (1–4-grams) on
    sacrebleu's tokenisation (``zh``: Chinese characters one by one; else ``13a``)."""
    from nltk.translate.gleu_score import corpus_gleu as _gleu
    from sacrebleu.tokenizers.tokenizer_13a import Tokenizer13a
    from sacrebleu.tokenizers.tokenizer_zh import TokenizerZh

    tok = TokenizerZh() if zh else Tokenizer13a()
    hyp_toks = [tok(h).split() for h in hyps]
    ref_toks = [[tok(r).split()] for r in refs]
    if not any(hyp_toks):
        return 0.0
    return 100.0 * _gleu(ref_toks, hyp_toks, min_len=1, max_len=4)


def aggregate(
    records: list[dict[str, Any]],
    preds: list[dict[str, Any] | None],
    evidence_hits: list[bool | None] | None = None,
    context_scores: list[dict[str, Any] | None] | None = None,
    *,
    answers: bool = True,
    n_resamples: int = 1000,
    seed: int = 0,
    by_source: bool = True,
    evidence_parts: list[bool | None] | None = None,
    retrieval: list[dict[str, Any] | None] | None = None,
) -> dict[str, Any]:
    """Metrics of one benchmark: ``{"task", "n", <metric>: value, ..., "ci95": {...}, "by_source": {...}}``.

    ``preds[i]`` is the system's prediction for ``records[i]`` (None when the system gives no answer
    for it); ``answers=False`` (retrieval-only systems) reports only the evidence metrics.
    ``retrieval[i]``: the question-only probe's row for ``records[i]``
    (:func:`bencao.evaluation.probe.passage_ranks`; None: not probed), aggregated into
    ``answer_recall@k`` and the rest.
    """
    if not records:
        raise ValueError("no records to score")
    task = records[0]["task"]
    ev = list(evidence_hits) if evidence_hits is not None else [None] * len(records)
    ctx = list(context_scores) if context_scores is not None else [None] * len(records)
    rows = [score_record(r, p) for r, p in zip(records, preds)]
    parts = list(evidence_parts) if evidence_parts is not None else [None] * len(records)
    probes = list(retrieval) if retrieval is not None else [None] * len(records)
    fns = _metric_arrays(task, rows, ev, answers, ctx, parts, probes)
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
                sub = aggregate([records[i] for i in ids], [preds[i] for i in ids], [ev[i] for i in ids], [ctx[i] for i in ids],
                                answers=answers, n_resamples=0, by_source=False, evidence_parts=[parts[i] for i in ids],
                                retrieval=[probes[i] for i in ids])
                out["by_source"][src] = sub
    return out
