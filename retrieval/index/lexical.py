"""BM25 (bm25s) over bencao.text.tokenize tokens (jieba words for Chinese, stemmed words for English).

Tokens come from the normalised key, so traditional and simplified forms, full- and half-width
forms match each other. One index per kind under ``<graph>/lexical/<kind>/``.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any, Iterable

import numpy as np

from bencao.errors import BencaoError
from bencao.io import atomic_write_json
from bencao.text import has_cjk, norm_key, tokenize

_ASCII_WORD = re.compile(r"^[a-z]+$")
_CJK_RUN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]{2,}")


def light_stem(token: str) -> str:
    """English plural → singular by suffix rules (potatoes → potato, berries → berry, cloves → clove).

    Applied the same way to indexed text and queries, so an imperfect stem still matches itself.
    Non-ASCII tokens (Chinese) pass through unchanged.
    """
    if len(token) <= 3 or not _ASCII_WORD.match(token):
        return token
    if token.endswith("ies") and len(token) > 4:
        return token[:-3] + "y"
    if token.endswith("oes"):
        return token[:-2]
    if token.endswith(("ches", "shes", "sses", "xes", "zes")):
        return token[:-2]
    if token.endswith(("ss", "us", "is", "ous")):
        return token
    if token.endswith("s"):
        return token[:-1]
    return token


def analyze(text: str) -> list[str]:
    """Lexical tokens: bencao.text.tokenize (jieba for Chinese, NFKC/t2s/casefold key) + light stemming.

    Chinese text also yields the character bigrams of each run of Chinese characters, so a name
    that jieba split or glued to a neighbour (山 / 药味) still matches a query for it (山药).
    """
    out = [light_stem(t) for t in tokenize(text)]
    if has_cjk(text):
        for run in _CJK_RUN.findall(norm_key(text)):
            out.extend(run[i : i + 2] for i in range(len(run) - 1))
    return out


def analyze_items(items: Iterable[Any], memo: dict[str, list[str]] | None = None) -> list[list[str]]:
    """:func:`analyze` of each item's ``lex`` text; an item with ``lex_parts`` gets the tokens of its
    parts, each distinct part analysed once (``memo`` may be shared between calls: entity names
    recur in the triples). Parts are separated by spaces, which neither jieba nor the CJK bigrams
    cross, so this equals analysing the joined text (up to token order, which BM25 ignores),
    except that a Latin-script part next to a Chinese one is split by the word pattern rather than
    by jieba."""
    memo = {} if memo is None else memo
    out: list[list[str]] = []
    for it in items:
        parts = getattr(it, "lex_parts", None)
        if not parts:
            out.append(analyze(it.lex))
            continue
        toks: list[str] = []
        for p in parts:
            t = memo.get(p)
            if t is None:
                t = memo[p] = analyze(p)
            toks.extend(t)
        out.append(toks)
    return out


def _bm25s():
    """Import bm25s, which sets its own logger to DEBUG on import: keep it at the root's level."""
    import logging

    import bm25s

    logging.getLogger("bm25s").setLevel(logging.NOTSET)
    return bm25s


class LexicalIndex:
    def __init__(self, bm25, ids: list[str]):
        self.bm25 = bm25
        self.ids = ids

    def __len__(self) -> int:
        return len(self.ids)

    @classmethod
    def build(cls, token_lists: list[list[str]], ids: list[str]) -> "LexicalIndex":
        bm25s = _bm25s()

        if len(token_lists) != len(ids):
            raise ValueError("token lists and ids differ in length")
        bm25 = bm25s.BM25()
        # bm25s needs at least one token per document; an empty document gets a placeholder.
        bm25.index([t if t else ["\x00"] for t in token_lists] or [["\x00"]], show_progress=False)
        return cls(bm25, list(ids))

    def scores(self, query: str | list[str]) -> np.ndarray:
        toks = analyze(query) if isinstance(query, str) else list(query)
        vocab = self.bm25.vocab_dict
        toks = [t for t in toks if t in vocab]
        if not toks or not self.ids:
            return np.zeros(len(self.ids), dtype=np.float32)
        return np.asarray(self.bm25.get_scores(toks), dtype=np.float32)[: len(self.ids)]

    def search(self, query: str | list[str], k: int) -> list[tuple[str, float]]:
        s = self.scores(query)
        if not len(s) or k <= 0:
            return []
        k = min(k, len(s))
        top = np.argpartition(-s, k - 1)[:k]
        top = top[np.argsort(-s[top], kind="stable")]
        return [(self.ids[i], float(s[i])) for i in top if s[i] > 0]

    def save(self, directory: Path) -> None:
        tmp = directory.with_name(directory.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        self.bm25.save(str(tmp), show_progress=False)
        atomic_write_json(tmp / "ids.json", self.ids)
        old = directory.with_name(directory.name + ".old")
        shutil.rmtree(old, ignore_errors=True)
        if directory.exists():
            directory.rename(old)
        tmp.rename(directory)
        shutil.rmtree(old, ignore_errors=True)

    @classmethod
    def load(cls, directory: Path) -> "LexicalIndex | None":
        bm25s = _bm25s()

        if not (directory / "ids.json").exists():
            return None
        try:
            bm25 = bm25s.BM25.load(str(directory), show_progress=False)
        except Exception as exc:  # noqa: BLE001 - a damaged index is a user-facing state
            raise BencaoError(f"{directory}: lexical index cannot be read ({exc}); rebuild with `bencao graph index`") from None
        return cls(bm25, json.loads((directory / "ids.json").read_text(encoding="utf-8")))
