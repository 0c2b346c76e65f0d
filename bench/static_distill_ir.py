"""Held-out pairs as a cheap yardstick for embedders: each anchor of a `bencao data pairs` eval file ranks every
distinct positive of the file; MRR@10 and recall@1/10 per model, with the paired bootstrap difference against
the first model named. Minutes instead of the hour that indexing the corpus graph takes, and no dev question:
it picks the embedders worth indexing (bench/retrieval_peers.py is the measure that counts).

    python bench/static_distill_ir.py --pairs PAIRS/eval.jsonl --model DIR_A --model DIR_B [--limit N] [--bm25]

``--bm25`` adds plain BM25 over the same positives (bencao's tokenizer), the lexical baseline of the table.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np


def load_pairs(path: str, limit: int | None) -> tuple[list[str], list[str], np.ndarray]:
    """Anchors, the distinct positives, and each anchor's positive index."""
    anchors, positives, index, gold = [], [], {}, []
    with open(path, encoding="utf-8") as fh:
        for i, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                a, p = row["anchor"], row["positive"]
            except (json.JSONDecodeError, KeyError, TypeError) as exc:
                raise SystemExit(f"{path}:{i}: not a pairs row ({exc})") from None
            if p not in index:
                index[p] = len(positives)
                positives.append(p)
            anchors.append(a)
            gold.append(index[p])
            if limit and len(anchors) >= limit:
                break
    return anchors, positives, np.asarray(gold)


def ranks_from_scores(scores: np.ndarray, gold: np.ndarray) -> np.ndarray:
    """1-based rank of each row's gold column (ties count against it)."""
    g = scores[np.arange(len(gold)), gold]
    return (scores >= g[:, None]).sum(axis=1)  # the gold column itself counts once: rank 1 only when nothing ties it


def dense_ranks(model_dir: str, anchors: list[str], positives: list[str], gold: np.ndarray) -> tuple[np.ndarray, float]:
    from sentence_transformers import SentenceTransformer

    m = SentenceTransformer(model_dir, device="cpu")
    t = time.perf_counter()
    q = m.encode(anchors, batch_size=256, normalize_embeddings=True, convert_to_numpy=True)
    d = m.encode(positives, batch_size=256, normalize_embeddings=True, convert_to_numpy=True)
    secs = time.perf_counter() - t
    out = np.empty(len(anchors), dtype=np.int64)
    for s in range(0, len(anchors), 1024):  # blocks: anchors × positives fits in memory
        out[s : s + 1024] = ranks_from_scores(q[s : s + 1024] @ d.T, gold[s : s + 1024])
    return out, (len(anchors) + len(positives)) / max(secs, 1e-9)


def bm25_ranks(anchors: list[str], positives: list[str], gold: np.ndarray) -> np.ndarray:
    from bencao.retrieval.index.lexical import LexicalIndex, analyze

    ix = LexicalIndex.build((analyze(p) for p in positives), [str(i) for i in range(len(positives))])
    out = np.empty(len(anchors), dtype=np.int64)
    for i, a in enumerate(anchors):
        out[i] = ranks_from_scores(ix.scores(a)[None, :], gold[i : i + 1])[0]
    return out


def metrics(r: np.ndarray) -> dict[str, np.ndarray]:
    return {"mrr@10": np.where(r <= 10, 1.0 / r, 0.0), "recall@1": (r <= 1).astype(float), "recall@10": (r <= 10).astype(float)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", required=True, help="a pairs eval file (bencao data pairs: eval.jsonl)")
    ap.add_argument("--model", action="append", default=[], help="a sentence-transformers folder (repeatable; the first is the baseline)")
    ap.add_argument("--bm25", action="store_true", help="add plain BM25 over the positives (as the first row and the baseline)")
    ap.add_argument("--limit", type=int, default=None, help="only the first N rows")
    ap.add_argument("--n-resamples", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    if not args.model and not args.bm25:
        raise SystemExit("name at least one --model (or --bm25)")
    anchors, positives, gold = load_pairs(args.pairs, args.limit)
    rows: dict[str, tuple[np.ndarray, str]] = {}
    if args.bm25:
        t = time.perf_counter()
        rows["bm25 (plain)"] = (bm25_ranks(anchors, positives, gold), f"{len(anchors) / (time.perf_counter() - t):.0f} q/s")
    for m in args.model:
        r, rate = dense_ranks(m, anchors, positives, gold)
        rows[Path(m).name] = (r, f"{rate:.0f} texts/s")
    rng = np.random.default_rng(args.seed)
    idx = rng.integers(0, len(anchors), size=(args.n_resamples, len(anchors)))
    base_name = next(iter(rows))
    base = metrics(rows[base_name][0])
    print(f"{len(anchors)} anchors, {len(positives)} distinct positives ({args.pairs})\n")
    print(f"| model | speed | mrr@10 | recall@1 | recall@10 | Δ mrr@10 vs {base_name} | Δ recall@10 vs {base_name} |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, (r, speed) in rows.items():
        m = metrics(r)
        cells = [f"{m['mrr@10'].mean():.3f}", f"{100 * m['recall@1'].mean():.1f}", f"{100 * m['recall@10'].mean():.1f}"]
        deltas = []
        for key, scale in (("mrr@10", 1), ("recall@10", 100)):
            if name == base_name:
                deltas.append("–")
                continue
            d = m[key] - base[key]
            lo, hi = np.percentile(d[idx].mean(axis=1), [2.5, 97.5])
            deltas.append(f"{scale * d.mean():+.3f} [{scale * lo:+.3f}, {scale * hi:+.3f}]" if scale == 1 else
                          f"{scale * d.mean():+.1f} [{scale * lo:+.1f}, {scale * hi:+.1f}]")
        print(f"| {name} | {speed} | " + " | ".join(cells + deltas) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
