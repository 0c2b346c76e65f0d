"""Segmenter agreement and speed: jieba (pure Python) vs rjieba (jieba-rs) on corpus text.

Both get the same custom words (the way ``bencao.text.add_words`` teaches the graph's names) and
run without HMM (as ``bencao.text.tokenize`` does). Texts are lines of the TCM-Ancient-Books
corpus, normalised by ``norm_key`` as the index sees them. Reports: share of lines segmented
identically, token-boundary precision/recall of rjieba against jieba, and characters per second
of each (interleaved blocks, same process).

    python bench/segmenter.py --corpus data/corpus/tcm_ancient_books --lines 20000 \\
        --words data/sample/mfh_catalog/mfh_catalog_106.csv --titles
"""

from __future__ import annotations

import argparse
import csv
import gzip
import json
import random
import time
from pathlib import Path


def read_lines(corpus: Path, n: int, seed: int, titles: list[str] | None = None) -> list[str]:
    """``n`` random lines (spread over every book); section titles (``<篇名>``) go to ``titles``."""
    from bencao.text import has_cjk, norm_key

    books = sorted(corpus.glob("*.txt*"))
    rnd = random.Random(seed)
    out: list[str] = []
    per_book = max(1, n // len(books) + 1)
    for b in books:
        raw = gzip.open(b, "rb").read() if b.suffix == ".gz" else b.read_bytes()
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            text = raw.decode("gb18030", errors="replace")
        lines = [norm_key(x) for x in text.splitlines() if len(x) > 8 and has_cjk(x) and not x.startswith("<")]
        if titles is not None:
            titles.extend(x[4:].strip() for x in text.splitlines() if x.startswith("<篇名>") and 2 <= len(x[4:].strip()) <= 8)
        out.extend(rnd.sample(lines, min(per_book, len(lines))))
    rnd.shuffle(out)
    return out[:n]


def custom_words(paths: list[str], _unused: int = 0) -> list[str]:
    words: list[str] = []
    for p in paths:
        with open(p, encoding="utf-8") as fh:
            for row in csv.reader(fh):
                words.extend(c for c in row if 2 <= len(c) <= 8 and all("\u4e00" <= ch <= "\u9fff" for ch in c))
    return list(dict.fromkeys(words))


def boundaries(tokens: list[str]) -> set[int]:
    out, pos = set(), 0
    for t in tokens:
        pos += len(t)
        out.add(pos)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--lines", type=int, default=20000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--words", nargs="*", default=[], help="CSV files whose Chinese cells are taught as custom words")
    ap.add_argument("--titles", action="store_true", help="also teach every section title (<篇名>, 2-8 characters) of the corpus")
    args = ap.parse_args()
    import logging

    import jieba
    import rjieba

    from bencao.text import norm_key

    jieba.setLogLevel(logging.WARNING)
    jieba.initialize()
    titles: list[str] = []
    lines = read_lines(Path(args.corpus), args.lines, args.seed, titles)
    words = custom_words(args.words, 0) + (list(dict.fromkeys(titles)) if args.titles else [])
    for w in words:
        jieba.add_word(norm_key(w), freq=50_000)
        rjieba.add_word(norm_key(w), 50_000, None)
    chars = sum(len(x) for x in lines)
    t_j = t_r = 0.0
    same = 0
    tp = n_j = n_r = 0
    block = 500
    for i in range(0, len(lines), block):
        part = lines[i : i + block]
        t = time.perf_counter()
        a = [jieba.lcut(x, HMM=False) for x in part]
        t_j += time.perf_counter() - t
        t = time.perf_counter()
        b = [rjieba.cut(x, False) for x in part]
        t_r += time.perf_counter() - t
        for x, y in zip(a, b):
            same += x == y
            bx, by = boundaries(x), boundaries(y)
            tp += len(bx & by)
            n_j += len(bx)
            n_r += len(by)
    diffs = []
    for x in lines[:3000]:
        a, b = jieba.lcut(x, HMM=False), rjieba.cut(x, False)
        if a != b and len(diffs) < 8:
            diffs.append({"jieba": "/".join(a)[:120], "rjieba": "/".join(b)[:120]})
    print(json.dumps({"lines": len(lines), "characters": chars, "custom_words": len(words),
                      "identical_lines": round(same / len(lines), 4), "boundary_precision": round(tp / n_r, 5),
                      "boundary_recall": round(tp / n_j, 5), "jieba_chars_per_s": round(chars / t_j), "rjieba_chars_per_s": round(chars / t_r),
                      "speedup": round(t_j / t_r, 1), "examples_of_differences": diffs}, ensure_ascii=False, indent=1))


if __name__ == "__main__":
    main()
