"""Does corpus co-occurrence (PMI) pick the right option better than the IR solver? Issue 24's LLM-free goal.

The LLM-free answerer scores each option by retrieval support: the BM25 of the question over the passages
that hold the option (the classic IR solver of Clark et al. 2016, ``Evidence.option_support``), plus graph
and snippet support (``serving/graph_answerer.py``). Its sibling in that work is the PMI solver: an option
is as good as its words' pointwise mutual information with the question's words, counted over the corpus.
PMI divides by how common each word is, so an option the classics name everywhere (a frequent formula, a
common organ) is not favoured for being everywhere — the failure the RESULTS tables show for the IR
solver (distractors held as often as the gold option).

Here, over the graph's own snippet index (``lexical/snippets``: the postings ``bencao`` serves from, the
same ``analyze`` tokens), for each option: question tokens with 2 ≤ df ≤ 2 % of the passages, option
tokens with 2 ≤ df ≤ 5 %; PMI(q, o) = ln(N·co / (df_q·df_o)) where the two co-occur in a passage (0 where
they never do: no smoothing, which would credit rare words for never meeting), clipped at 0; aggregated
as ``mean`` over all pairs or ``maxq`` (for each option token its best question token, averaged). Rows:

- ``answerer (IR solver …)``: the scores ``bencao eval --system llm-free`` wrote per option
  (``--predictions``), argmax (argmin where the answerer applied its exception rule);
- ``PMI alone``: the PMI support, the same decision rule;
- ``answerer + λ·PMI``: score/max + λ·PMI/max over the question's options.

Each file's records are split by position into halves (as ``bench/graph_routes.py``); the variant
(aggregation, λ) is chosen on the first half's pooled accuracy and the table shows the second half,
with 95 % paired-bootstrap intervals of the difference to the answerer row (``--fit-half 1`` swaps the
halves). Dev files only; nothing
here changes the product.

    bencao eval --graph graphs/classics --system llm-free --out OUT --bench DEV/tcmbench_mcq.jsonl \\
        --bench DEV/cmmlu_traditional_chinese_medicine.jsonl --bench DEV/tcm_best4sdt_sd.jsonl
    python bench/option_pmi.py --graph graphs/classics --predictions OUT/predictions.jsonl \\
        --bench DEV/tcmbench_mcq.jsonl --bench DEV/cmmlu_traditional_chinese_medicine.jsonl \\
        --bench DEV/tcm_best4sdt_sd.jsonl [--append bench/RESULTS.md]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from retrieval_peers import append_result, paired_delta  # noqa: E402  (a bench script beside this one)

Q_MAX_DF, O_MAX_DF = 0.02, 0.05
LAMBDAS = (0.5, 1.0, 2.0)


class Cooccurrence:
    """Passage co-occurrence counts from a bm25s score matrix (CSC: a token's column lists the passages
    that hold it, in ascending order)."""

    def __init__(self, lex: Any):
        sm = lex.bm25.scores
        self.indptr, self.indices = np.asarray(sm["indptr"]), sm["indices"]
        self.vocab, self.n = lex.bm25.vocab_dict, len(lex.ids)
        self.df = np.diff(self.indptr)

    def ids(self, tokens: list[str], max_share: float) -> list[int]:
        out = set()
        for t in tokens:
            i = self.vocab.get(t)
            if i is not None and i < len(self.df) and 2 <= self.df[i] <= max_share * self.n:
                out.add(int(i))
        return sorted(out)

    def docs(self, i: int) -> np.ndarray:
        return np.asarray(self.indices[self.indptr[i]:self.indptr[i + 1]])

    def ppmi(self, q: list[int], o: list[int]) -> np.ndarray:
        """``len(q) × len(o)`` positive PMI, 0 where a pair never shares a passage."""
        out = np.zeros((len(q), len(o)))
        od = [self.docs(j) for j in o]
        for a, i in enumerate(q):
            qd = self.docs(i)
            for b, j in enumerate(o):
                co = len(np.intersect1d(qd, od[b], assume_unique=True))
                if co:
                    out[a, b] = max(0.0, math.log(self.n * co / (float(self.df[i]) * float(self.df[j]))))
        return out


def pmi_support(cooc: Cooccurrence, question: str, options: dict[str, str]) -> dict[str, tuple[float, float]]:
    """Per option letter: (mean PPMI over all pairs, mean over option tokens of the best question token's)."""
    from bencao.retrieval.index.lexical import analyze, analyze_query

    q = cooc.ids(analyze_query(question), Q_MAX_DF)
    out = {}
    for k, text in options.items():
        o = cooc.ids(analyze(str(text)), O_MAX_DF)
        m = cooc.ppmi(q, o) if q and o else np.zeros((0, 0))
        out[k] = (float(m.mean()), float(m.max(axis=0).mean())) if m.size else (0.0, 0.0)
    return out


def decide(rec: dict[str, Any], scores: dict[str, float], exception: bool) -> bool:
    opts = list(rec["options"])
    pick = min(opts, key=lambda k: (scores.get(k, 0.0), opts.index(k))) if exception else \
        max(opts, key=lambda k: (scores.get(k, 0.0), -opts.index(k)))
    return pick in set(rec.get("answer") or [])


def fused(base: dict[str, float], pmi: dict[str, tuple[float, float]], agg: int, lam: float | None) -> dict[str, float]:
    mb = max(base.values(), default=0.0) or 1.0
    mp = max((v[agg] for v in pmi.values()), default=0.0) or 1.0
    if lam is None:  # PMI alone
        return {k: pmi[k][agg] for k in pmi}
    return {k: base.get(k, 0.0) / mb + lam * pmi[k][agg] / mp for k in pmi}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--graph", required=True)
    ap.add_argument("--predictions", required=True, help="predictions.jsonl of `bencao eval --system llm-free` on the same files")
    ap.add_argument("--bench", action="append", required=True)
    ap.add_argument("--fit-half", type=int, choices=(0, 1), default=0, help="the half the variant is chosen on")
    ap.add_argument("--append", default=None)
    args = ap.parse_args(argv)

    from bencao.evaluation.bench_format import load_benches
    from bencao.retrieval.index.lexical import LexicalIndex

    t0 = time.perf_counter()
    lex = LexicalIndex.load(Path(args.graph) / "lexical" / "snippets")
    if lex is None:
        raise SystemExit(f"{args.graph}: no lexical snippet index")
    cooc = Cooccurrence(lex)
    pred: dict[tuple[str, str], dict[str, Any]] = {}
    with open(args.predictions, encoding="utf-8") as fh:
        for line in fh:
            d = json.loads(line)
            pred[(d["bench"], str(d["id"]))] = d.get("prediction") or {}
    rows: list[dict[str, Any]] = []
    for b in load_benches([Path(p) for p in args.bench]):
        pos = 0
        for r in b.records:
            if r.get("task") not in ("mcq", "sd") or not r.get("options"):
                continue
            p = pred.get((b.name, str(r["id"])))
            if p is None or "scores" not in p:
                raise SystemExit(f"{args.predictions}: no option scores for {b.name}/{r['id']} (run bencao eval --system llm-free on the same files)")
            rows.append({"bench": b.name, "half": pos % 2, "rec": r, "scores": p["scores"], "exception": bool(p.get("exception")),
                         "pmi": pmi_support(cooc, r["question"], {str(k): str(v) for k, v in r["options"].items()})})
            pos += 1
    print(f"  PMI support for {len(rows)} records in {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)

    def hits(agg: int | None, lam: float | None, sel: list[dict[str, Any]]) -> np.ndarray:
        return np.array([decide(x["rec"], x["scores"] if agg is None else fused(x["scores"], x["pmi"], agg, lam), x["exception"])
                         for x in sel], dtype=float)

    fit, check = [x for x in rows if x["half"] == args.fit_half], [x for x in rows if x["half"] != args.fit_half]
    which = ("first", "second")
    grid = [(agg, lam) for agg in (0, 1) for lam in (*LAMBDAS, None)]
    names = {0: "mean", 1: "maxq"}
    fit_acc = {g: hits(*g, fit).mean() for g in grid}
    best = max(grid, key=lambda g: fit_acc[g])
    lines = [f"{which[args.fit_half].capitalize()} half (fit), pooled accuracy of each variant: " + "; ".join(
        f"{names[a]} {'alone' if l is None else f'λ={l:g}'} {100 * fit_acc[(a, l)]:.1f}" for a, l in grid)
        + f"; answerer {100 * hits(None, None, fit).mean():.1f}.", ""]
    variants = [("answerer (IR solver + graph + snippet support)", None, None),
                (f"PMI alone ({names[best[0]]})", best[0], None),
                (f"answerer + λ·PMI ({names[best[0]]}, λ={best[1]:g})" if best[1] is not None else "", *best)]
    variants = [v for v in variants if v[0]]
    files = list(dict.fromkeys(x["bench"] for x in rows))
    rng = np.random.default_rng(0)
    lines += [f"| {which[1 - args.fit_half]} half | " + " | ".join(f"{f} (n={sum(1 for x in check if x['bench'] == f)})" for f in files)
              + f" | pooled (n={len(check)}) | Δ pooled vs answerer |", "|---|" + "---:|" * (len(files) + 2)]
    base_all = hits(None, None, check)
    for name, agg, lam in variants:
        cells = []
        for f in files:
            sel = [x for x in check if x["bench"] == f]
            cells.append(f"{100 * hits(agg, lam, sel).mean():.1f}")
        h = hits(agg, lam, check)
        m, lo, hi = paired_delta(h - base_all, rng)
        delta = "–" if agg is None else f"{100 * m:+.1f} [{100 * lo:+.1f}, {100 * hi:+.1f}]"
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {100 * h.mean():.1f} | {delta} |")
    # the same variants over every record, per file, for the record (not a held-out figure)
    lines += ["", "| all records (the variant as chosen above) | " + " | ".join(f"{f} (n={sum(1 for x in rows if x['bench'] == f)})" for f in files)
              + " |", "|---|" + "---:|" * len(files)]
    for name, agg, lam in variants:
        cells = []
        for f in files:
            sel = [x for x in rows if x["bench"] == f]
            h = hits(agg, lam, sel)
            if agg is None:
                cells.append(f"{100 * h.mean():.1f}")
                continue
            m, lo, hi = paired_delta(h - hits(None, None, sel), rng)
            cells.append(f"{100 * h.mean():.1f} (Δ {100 * m:+.1f} [{100 * lo:+.1f}, {100 * hi:+.1f}])")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    text = "\n".join(lines)
    print(text)
    if args.append:
        append_result(args.append, "Options by corpus PMI against the IR solver", "option_pmi.py", argv,
                      f"{time.perf_counter() - t0:.0f} s", text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
