"""BM25 (bm25s) over bencao.text.tokenize tokens (jieba words for Chinese, stemmed words for English).

Tokens come from the normalised key, so traditional and simplified forms, full- and half-width
forms match each other. One index per kind under ``<graph>/lexical/<kind>/``.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Iterable

import numpy as np

from bencao.errors import BencaoError
from bencao.io import atomic_write_json
from bencao.text import has_cjk, norm_key, tokenize

if TYPE_CHECKING:
    from bencao.retrieval.index.items import Item

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


def _stopwords() -> frozenset[str]:
    from bm25s.stopwords import STOPWORDS_EN

    return frozenset(STOPWORDS_EN)


_QUERY_STOPWORDS = _stopwords()
#: Query tokens found in more than this share of an index's documents only rescore the documents
#: that rarer tokens of the query found (see ``LexicalIndex.search``).
COMMON_DF = 0.02


def analyze_items(items: "Iterable[Item]", memo: dict[str, list[str]] | None = None) -> list[list[str]]:
    """:func:`analyze` of each item's ``lex`` text; an item with ``lex_parts`` gets the tokens of its
    parts, each distinct part analysed once (``memo`` may be shared between calls: entity names
    recur in the triples). Parts are separated by spaces, which neither jieba nor the CJK bigrams
    cross, so this equals analysing the joined text (up to token order, which BM25 ignores),
    except that a Latin-script part next to a Chinese one is split by the word pattern rather than
    by jieba."""
    memo = {} if memo is None else memo
    out: list[list[str]] = []
    for it in items:
        parts = it.lex_parts
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
        """The ``k`` best documents with a positive score, best first (ties: index order).

        Scores are summed over the query tokens' posting lists only, and the top ``k`` is chosen
        among the documents that occur in them: on a 3.4 M-triple index a dense score array and a
        partition over all documents (bm25s' own path) cost ~100 ms a query, the postings of a
        question a few ms."""
        if k <= 0 or not self.ids:
            return []
        toks = analyze(query) if isinstance(query, str) else list(query)
        vocab = self.bm25.vocab_dict
        # English function words ("for", "with") match a large part of an English corpus and rank
        # nothing; they are dropped from the query (bm25s' own English list), unless nothing else is left
        content = [t for t in toks if t not in _QUERY_STOPWORDS] or toks
        tids = np.array([vocab[t] for t in content if t in vocab], dtype=np.int64)
        if not len(tids):
            return []
        # LexicalIndex.build makes bm25s' default (Lucene) variant: a document's score is the sum of
        # its query tokens' precomputed entries, and a document without any of them scores 0
        sm = self.bm25.scores
        indptr, indices, data = sm["indptr"], sm["indices"], sm["data"]
        starts, ends = indptr[tids], indptr[tids + 1]
        if not int((ends - starts).sum()):
            return []
        # common terms (Lucene's high-frequency cutoff): a token in more than COMMON_DF of the
        # documents ("treat" in every `treats` triple) only adds its score to documents that
        # match a rarer token, so it costs a lookup per candidate, not a pass over its postings
        common = (ends - starts) > max(COMMON_DF * len(self.ids), 1000)
        if common.all():
            common[:] = False
        rare = list(zip(starts[~common].tolist(), ends[~common].tolist()))
        post = np.concatenate([indices[a:b] for a, b in rare])
        vals = np.concatenate([data[a:b] for a, b in rare]).astype(np.float64)
        if len(post) * 8 < len(self.ids):
            docs, inv = np.unique(post, return_inverse=True)
            sc = np.bincount(inv, weights=vals)
        else:
            full = np.bincount(post, weights=vals, minlength=len(self.ids))
            docs = np.flatnonzero(full)
            sc = full[docs]
        for a, b in zip(starts[common].tolist(), ends[common].tolist()):
            col = indices[a:b]  # ascending document numbers
            pos = np.minimum(np.searchsorted(col, docs), len(col) - 1)
            hit = col[pos] == docs
            sc[hit] += data[a:b][pos[hit]]
        keep = (sc > 0) & (docs < len(self.ids))
        docs, sc = docs[keep], sc[keep]
        if len(docs) > max(k, 4096):
            # numpy's (arg)partition degrades badly on long runs of equal values, and BM25 scores of
            # short texts take few distinct values (51 k documents, 3 scores: 20 ms; 500 k in two
            # sorted blocks: 100 ms). Partition instead on distinct integer keys: the score to 1e-6,
            # then the lower document number first.
            span = int(docs[-1]) + 1
            scale = min(1e6, 2.0**62 / (span * (float(sc.max()) + 1.0)))
            key = np.rint(sc * scale).astype(np.int64) * span - docs
            sel = np.argpartition(key, len(key) - k)[len(key) - k :]
            docs, sc = docs[sel], sc[sel]
        order = np.lexsort((docs, -sc))[:k]
        return [(self.ids[int(docs[i])], float(sc[i])) for i in order]

    def score_ids(self, query: str | list[str], ids: list[str]) -> dict[str, float]:
        """BM25 of ``query`` for the given documents only (absent ids and documents without a query token score 0).

        Reads each query token's postings and picks the documents asked for: the cost is the
        tokens' posting lengths, not a pass over every document."""
        pos = self.__dict__.get("_pos")
        if pos is None:
            pos = self.__dict__["_pos"] = {d: i for i, d in enumerate(self.ids)}
        want = np.array(sorted({pos[i] for i in ids if i in pos}), dtype=np.int64)
        out = {i: 0.0 for i in ids}
        toks = analyze(query) if isinstance(query, str) else list(query)
        vocab = self.bm25.vocab_dict
        content = [t for t in toks if t not in _QUERY_STOPWORDS] or toks
        tids = [vocab[t] for t in content if t in vocab]
        if not len(want) or not tids:
            return out
        sm = self.bm25.scores
        indptr, indices, data = sm["indptr"], sm["indices"], sm["data"]
        sc = np.zeros(len(want), dtype=np.float64)
        for t in tids:
            col = indices[indptr[t]:indptr[t + 1]]  # ascending document numbers
            if not len(col):
                continue
            at = np.minimum(np.searchsorted(col, want), len(col) - 1)
            hit = col[at] == want
            sc[hit] += data[indptr[t]:indptr[t + 1]][at[hit]]
        for p, v in zip(want.tolist(), sc.tolist()):
            out[self.ids[p]] = v
        return out

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
