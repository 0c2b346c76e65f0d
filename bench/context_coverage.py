"""Does the evidence a reader gets hold the answer? Gold and distractor options in a budgeted context, no LLM.

    HF_HUB_OFFLINE=1 .venv/bin/python bench/context_coverage.py --graph graphs/classics \\
        --bench DEV/tcmbench_mcq.jsonl --bench DEV/tcm_best4sdt_sd.jsonl --budget-chars 1200 [--half a] \\
        [--variant 'bm25' --variant 'bencao:passage_mode=excerpt' ...] [--append bench/RESULTS.md]

For each record and each variant, the context the reader would get (``bench/eval_llm.py``'s conditions: ``bm25`` plain
bm25s passages of the question; ``bencao`` the served context of the question alone, as ``/v1/retrieve`` returns it;
``full`` the context of the question with its options) is rendered under the same character budget, with the
variant's ``answer.context`` settings after the colon (``;``-separated ``key=value``: passage_mode, excerpt_chars,
order, ...). Per variant: ``gold in`` (share of records whose context holds a gold option's text, by the same
matching key as ``bencao eval``'s evidence_contains_gold), ``distractor in`` (share of distractor options held),
``margin`` = gold in − distractor in, with 95 % bootstrap intervals, and the paired Δ margin against the first
variant. A context that holds the gold option as often as the distractors says nothing a reader can use; the
margin is what a reader can gain. This is a cheap proxy for choosing settings; the reader's accuracy
(bench/eval_llm.py) is the measurement.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))


def parse_variant(spec: str) -> tuple[str, dict[str, Any]]:
    import yaml

    source, _, rest = spec.partition(":")
    if source not in ("bm25", "bencao", "full"):
        raise SystemExit(f"variant {spec!r}: source must be bm25, bencao or full")
    over = {}
    for kv in filter(None, (x.strip() for x in rest.split(";"))):
        k, _, v = kv.partition("=")
        over[k.strip()] = yaml.safe_load(v)
    return source, over


def holds(ctx_text: str, option: str) -> bool:
    from bencao.text import norm_key

    k = norm_key(option)
    return bool(k) and k in norm_key(ctx_text)


def main(argv: list[str] | None = None) -> int:
    from eval_llm import boot_ci, load
    from retrieval_peers import PlainBM25, append_result, paired_delta

    from bencao.retrieval.evidence import SnippetHit
    from bencao.serving.answer import context_limits, generator_context
    from bencao.serving.config import load_serve_config, recorded_serving_recipe
    from bencao.serving.context import ContextConfig, passages_context
    from bencao.serving.pipeline import AnswerPipeline
    from bencao.serving.tasks import Query

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--graph", required=True)
    ap.add_argument("--bench", action="append", required=True)
    ap.add_argument("--config", default=None)
    ap.add_argument("--set", action="append", default=[])
    ap.add_argument("--budget-chars", type=int, default=1200)
    ap.add_argument("--variant", action="append", default=None)
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--half", choices=["a", "b"], default=None)
    ap.add_argument("--append", default=None)
    args = ap.parse_args(argv)
    variants = args.variant or ["bm25", "bm25:passage_mode=excerpt", "bencao", "bencao:passage_mode=excerpt", "full",
                                "full:passage_mode=excerpt"]
    parsed = [parse_variant(v) for v in variants]
    records = load(args.bench, args.limit, args.half)
    t0 = time.perf_counter()
    cfg = load_serve_config(args.config or recorded_serving_recipe(args.graph), list(args.set))
    acfg = cfg.answer
    pipe = AnswerPipeline(args.graph, cfg)
    bm25 = PlainBM25(pipe.retriever.g) if any(s == "bm25" for s, _ in parsed) else None
    gold_in = {v: [] for v in variants}
    dis_in = {v: [] for v in variants}
    for i, (name, rec) in enumerate(records, 1):
        q = Query.from_record(rec)
        gold = [rec["options"][a] for a in rec["answer"]]
        dis = [t for k, t in rec["options"].items() if k not in rec["answer"]]
        cache: dict[str, Any] = {}
        for spec, (source, over) in zip(variants, parsed):
            ccfg = ContextConfig(**{**ContextConfig().__dict__, **acfg.context.__dict__, **over})
            if source == "bm25":
                if "bm25" not in cache:
                    ranked = bm25.ranked(q.question, 20)
                    rows = pipe.retriever.g.get_snippets([i for i, _ in ranked])
                    hits = [SnippetHit(id=i, text=rows[i]["text"], path=list(rows[i].get("path") or []), score=s) for i, s in ranked]
                    cache["bm25"] = (hits, pipe.retriever.term_weights(q.question))
                hits, w = cache["bm25"]
                ctx = passages_context(hits, ccfg, q.language, args.budget_chars, context_limits(acfg), q.question, w)
            else:
                if source not in cache:
                    qq = Query(q.question) if source == "bencao" else q
                    cache[source] = (qq, pipe.run([qq], answer=False)[0].evidence)
                qq, ev = cache[source]
                old = acfg.context
                acfg.context = ccfg
                try:
                    ctx = generator_context(qq, ev, acfg, args.budget_chars)
                finally:
                    acfg.context = old
            gold_in[spec].append(any(holds(ctx.text, g) for g in gold))
            dis_in[spec].append(np.mean([holds(ctx.text, d) for d in dis]) if dis else 0.0)
        if i % 25 == 0:
            print(f"{i}/{len(records)} ({time.perf_counter() - t0:.0f} s)", file=sys.stderr, flush=True)
    rng = np.random.default_rng(0)
    base = variants[0]
    lines = [f"n = {len(records)} records, budget {args.budget_chars} characters", "",
             "| context | gold in | distractor in | margin | Δ margin vs " + base + " |", "|---|---:|---:|---:|---:|"]
    m0 = np.array(gold_in[base], float) - np.array(dis_in[base], float)
    for v in variants:
        g, d = np.array(gold_in[v], float), np.array(dis_in[v], float)
        m = g - d
        lo, hi = boot_ci(m, rng)
        dm, dlo, dhi = paired_delta(m - m0, np.random.default_rng(0))
        lines.append(f"| `{v}` | {100 * g.mean():.1f} | {100 * d.mean():.1f} | {100 * m.mean():+.1f} [{100 * lo:+.1f}, {100 * hi:+.1f}] | "
                     f"{100 * dm:+.1f} [{100 * dlo:+.1f}, {100 * dhi:+.1f}] |")
    text = "\n".join(lines)
    print(text)
    if args.append:
        append_result(args.append, "Gold and distractor options in the reader's context", "context_coverage.py", argv,
                      f"{(time.perf_counter() - t0) / 60:.0f} min", text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
