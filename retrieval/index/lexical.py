"""BM25 (bm25s) over bencao.text.tokenize tokens (jieba words for Chinese, stemmed words for English).

Tokens come from the normalised key, so traditional and simplified forms, full- and half-width
forms match each other. One index per kind under ``<graph>/lexical/<kind>/``.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from array import array
from typing import TYPE_CHECKING, Iterable, Iterator

import numpy as np

from bencao import faults
from bencao.errors import BencaoError
from bencao.io import atomic_write_json
from bencao.text import has_cjk, norm_key, tokenize_key

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
    key = norm_key(text)  # once: tokens and bigrams both read it
    out = [light_stem(t) for t in tokenize_key(key)]
    if has_cjk(text):
        for run in _CJK_RUN.findall(key):
            out.extend(run[i : i + 2] for i in range(len(run) - 1))
    return out


def _stopwords() -> frozenset[str]:
    from bm25s.stopwords import STOPWORDS_EN

    return frozenset(STOPWORDS_EN)


_QUERY_STOPWORDS = _stopwords()

#: The words a Chinese question is phrased with, not what it asks about: dropped from a query (never
#: from the indexed text) before it is tokenised, so neither they nor the bigrams across them
#: (药的, 效是, 是什) match passages that merely ask something themselves (厥阴有什么含义呢). Longest
#: first; a name holding one of them survives (何首乌: 何 alone is not in the list).
QUESTION_WORDS_ZH = ("是什么", "为什么", "什么", "哪一项", "哪一个", "哪一种", "哪一些", "哪些", "哪个", "哪种", "哪项", "哪味", "哪一",
                     "如何", "怎么", "怎样", "是否", "请问", "下列", "以下", "有何", "的是", "吗", "呢", "的")
_QUESTION_WORDS_RE = re.compile("|".join(sorted(map(re.escape, QUESTION_WORDS_ZH), key=len, reverse=True)))


def analyze_query(text: str) -> list[str]:
    """:func:`analyze` for a query: Chinese question words (:data:`QUESTION_WORDS_ZH`) become breaks first.
    A query made of nothing else keeps them."""
    if not has_cjk(text):
        return analyze(text)
    return analyze(_QUESTION_WORDS_RE.sub(" ", norm_key(text))) or analyze(text)
#: Query tokens found in more than this share of an index's documents only rescore the documents
#: that rarer tokens of the query found (see ``LexicalIndex.search``).
COMMON_DF = 0.02


def analyze_items(items: "Iterable[Item]", memo: dict[str, list[str]] | None = None) -> list[list[str]]:
    """:func:`analyze` of each item's ``lex`` text (see :func:`iter_analyzed`)."""
    return list(iter_analyzed((it.lex_parts or it.lex for it in items), memo))


#: Most distinct parts :func:`iter_analyzed` remembers the tokens of (a million entity names would hold ~0.5 GB).
MEMO_MAX = 200_000


def iter_analyzed(sources: "Iterable[str | tuple[str, ...]]", memo: dict[str, list[str]] | None = None) -> Iterator[list[str]]:
    """Tokens of each item's lexical text, one list at a time: a string is analysed whole; a tuple
    of parts (an item's ``lex_parts``) gets the tokens of its parts, each distinct part analysed
    once (``memo`` may be shared between calls: entity names recur in the triples). Parts are
    separated by spaces, which neither jieba nor the CJK bigrams cross, so this equals analysing the
    joined text (up to token order, which BM25 ignores), except that a Latin-script part next to a
    Chinese one is split by the word pattern rather than by jieba."""
    memo = {} if memo is None else memo
    for src in sources:
        if len(memo) > MEMO_MAX:  # bounded: a miss only costs analysing the part again
            memo.clear()
        if isinstance(src, str):
            yield analyze(src)
            continue
        toks: list[str] = []
        for p in src:
            t = memo.get(p)
            if t is None:
                t = memo[p] = analyze(p)
            toks.extend(t)
        yield toks


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
    def build(cls, token_lists: Iterable[list[str]], ids: list[str]) -> "LexicalIndex":
        """BM25 over ``token_lists`` (any iterable: consumed one list at a time, never held whole),
        row ``i`` for ``ids[i]``: bm25s' default Lucene variant, its file format and scores."""
        bm25s = _bm25s()

        builder = PostingsBuilder()
        for toks in token_lists:
            builder.add(toks if toks else ["\x00"])  # bm25s needs a token per document: an empty one gets a placeholder
        if builder.n_docs != len(ids):
            raise ValueError(f"{builder.n_docs} token lists for {len(ids)} ids")
        if not builder.n_docs:
            builder.add(["\x00"])
        bm25 = bm25s.BM25()
        bm25.scores, bm25.vocab_dict = builder.finish(k1=bm25.k1, b=bm25.b)
        bm25.unique_token_ids_set = set(bm25.vocab_dict.values())
        bm25.nonoccurrence_array = None  # the Lucene variant has none
        return cls(bm25, list(ids))

    def scores(self, query: str | list[str]) -> np.ndarray:
        toks = analyze_query(query) if isinstance(query, str) else list(query)
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
        toks = analyze_query(query) if isinstance(query, str) else list(query)
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

    def idf(self, tokens: Iterable[str]) -> dict[str, float]:
        """BM25's idf of each token the index knows (Lucene: ln(1 + (N − df + .5)/(df + .5))), from its posting lengths."""
        vocab = self.bm25.vocab_dict
        indptr = self.bm25.scores["indptr"]
        n = len(self.ids)
        out = {}
        for t in dict.fromkeys(tokens):
            tid = vocab.get(t)
            if tid is None:
                continue
            df = int(indptr[tid + 1] - indptr[tid])
            out[t] = float(np.log1p((n - df + 0.5) / (df + 0.5)))
        return out

    def score_ids(self, query: str | list[str], ids: list[str]) -> dict[str, float]:
        """BM25 of ``query`` for the given documents only (absent ids and documents without a query token score 0).

        Reads each query token's postings and picks the documents asked for: the cost is the
        tokens' posting lengths, not a pass over every document."""
        pos = self.__dict__.get("_pos")
        if pos is None:
            pos = self.__dict__["_pos"] = {d: i for i, d in enumerate(self.ids)}
        want = np.array(sorted({pos[i] for i in ids if i in pos}), dtype=np.int64)
        out = {i: 0.0 for i in ids}
        toks = analyze_query(query) if isinstance(query, str) else list(query)
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
        try:
            faults.call("file.write")
            self.bm25.save(str(tmp), show_progress=False)
            faults.call("file.write")
            TokenVocab.save(self.bm25.vocab_dict, tmp)
            atomic_write_json(tmp / "ids.json", self.ids)
        except BaseException:  # a full disk (or any failure) leaves no half-written index behind
            shutil.rmtree(tmp, ignore_errors=True)
            raise
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
            if (directory / TokenVocab.FILES[0]).exists():
                # bm25s' own load parses the vocabulary JSON (1.45 M tokens of 338 k corpus snippets:
                # seconds and ~150 MB); here the score arrays and the vocabulary are memory-mapped
                params = json.loads((directory / "params.index.json").read_text(encoding="utf-8"))
                params.pop("version", None)
                num_docs = params.pop("num_docs", None)
                bm25 = bm25s.BM25(**params)
                bm25.load_scores(save_dir=str(directory), mmap=True, num_docs=num_docs)
                bm25.vocab_dict = TokenVocab.load(directory)
                bm25.unique_token_ids_set = range(len(bm25.vocab_dict))
                bm25.nonoccurrence_array = None
            else:  # an index written before the memory-mapped vocabulary
                bm25 = bm25s.BM25.load(str(directory), show_progress=False, mmap=True)
        except Exception as exc:  # noqa: BLE001 - a damaged index is a user-facing state
            raise BencaoError(f"{directory}: lexical index cannot be read ({_one_line(exc)}); rebuild it with "
                              f"`bencao graph index --graph {directory.parent.parent} --force`") from None
        try:
            ids = json.loads((directory / "ids.json").read_text(encoding="utf-8"))
            if not (isinstance(ids, list) and all(isinstance(i, str) for i in ids)):
                raise ValueError(f"a JSON {type(ids).__name__}, not a list of ids")
        except (OSError, ValueError) as exc:
            raise BencaoError(f"{directory / 'ids.json'}: damaged ({_one_line(exc)}); rebuild it with "
                              f"`bencao graph index --graph {directory.parent.parent} --force`") from None
        return cls(bm25, ids)


class PostingsBuilder:
    """bm25s' BM25 (Lucene variant: idf = ln(1 + (N - df + .5)/(df + .5)), tf/(tf + k1(1 - b + b·dl/avgdl)))
    built from a stream of token lists, the same CSC score matrix ``bm25s.BM25.index`` makes.

    bm25s needs every document's token list at once (3.4 M triples: ~9 GiB of Python lists); here each
    list becomes int32 token ids in a flat buffer, and every ``chunk`` documents the buffer becomes
    (document, term, tf) postings with numpy: 12 bytes a posting until :meth:`finish`."""

    def __init__(self, chunk: int = 100_000):
        self.vocab: dict[str, int] = {}
        self.chunk = chunk
        self._tok = array("i")
        self._lens = array("i")
        self._parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self._doc_len: list[np.ndarray] = []
        self._flushed = 0  # documents already turned into postings
        self.n_docs = 0

    def add(self, tokens: list[str]) -> None:
        vocab, buf = self.vocab, self._tok
        for t in tokens:
            i = vocab.get(t)
            if i is None:
                i = vocab[t] = len(vocab)
            buf.append(i)
        self._lens.append(len(tokens))
        self.n_docs += 1
        if len(self._lens) >= self.chunk:
            self._flush()

    def _flush(self) -> None:
        if not len(self._lens):
            return
        lens = np.frombuffer(self._lens, dtype=np.int32).copy()
        tok = np.frombuffer(self._tok, dtype=np.int32).astype(np.int64)
        doc = np.repeat(np.arange(self._flushed, self._flushed + len(lens), dtype=np.int64), lens)
        key, tf = np.unique((doc << 31) | tok, return_counts=True)  # sorted by document, then term
        self._parts.append(((key >> 31).astype(np.int32), (key & 0x7FFFFFFF).astype(np.int32), tf.astype(np.int32)))
        self._doc_len.append(lens)
        self._flushed += len(lens)
        self._tok, self._lens = array("i"), array("i")

    def finish(self, k1: float = 1.5, b: float = 0.75) -> tuple[dict, dict[str, int]]:
        """(bm25s ``scores`` dict, vocabulary); the builder is spent."""
        self._flush()
        cat = lambda i, dt: np.concatenate([p[i] for p in self._parts]) if self._parts else np.zeros(0, dt)  # noqa: E731
        doc, term, tf = cat(0, np.int32), cat(1, np.int32), cat(2, np.int32)
        self._parts = []
        dl = np.concatenate(self._doc_len) if self._doc_len else np.zeros(0, np.int32)
        n_docs, n_vocab = len(dl), len(self.vocab)
        avg = np.float64(dl.mean()) if n_docs else np.float64(1.0)
        counts = np.bincount(term, minlength=n_vocab)
        # as bm25s: idf in float64 stored as float32; the tf part in float64; the product stored as float32
        idf = np.log1p((n_docs - counts.astype(np.float64) + 0.5) / (counts + 0.5)).astype(np.float32)
        dl64 = dl.astype(np.float64)
        scores = np.empty(len(term), dtype=np.float32)
        step = 1 << 23  # float64 temporaries of 8 M postings at a time, not of all of them
        t64 = norm = None
        for i in range(0, len(term), step):
            t64 = tf[i : i + step].astype(np.float64)
            norm = (1 - b) + b * dl64[doc[i : i + step]] / avg
            scores[i : i + step] = idf[term[i : i + step]].astype(np.float64) * (t64 / (k1 * norm + t64))
        del tf, t64, norm
        order = np.argsort(term, kind="stable")  # by term, documents ascending inside a term
        del term
        indptr = np.zeros(n_vocab + 1, dtype=np.int64)
        np.cumsum(counts, out=indptr[1:])
        indices = doc[order]
        del doc
        data = scores[order]
        del order, scores
        vocab = self.vocab
        vocab.setdefault("", n_vocab)  # bm25s' empty token, after the others (unless a document had it)
        self.vocab = {}
        return {"data": data, "indices": indices, "indptr": indptr, "num_docs": n_docs}, vocab


class TokenVocab:
    """A BM25 vocabulary (token → term id) in memory-mapped arrays instead of a Python dict: 64-bit
    BLAKE2b hashes of the tokens, sorted, with their term ids; the tokens' UTF-8 bytes by term id,
    to confirm a hash match. Opening costs nothing; a lookup is a binary search and one comparison."""

    FILES = ("vocab.hash.npy", "vocab.tid.npy", "vocab.offsets.npy", "vocab.blob.npy")

    def __init__(self, hashes: np.ndarray, tids: np.ndarray, offsets: np.ndarray, blob: np.ndarray):
        self.hashes, self.tids, self.offsets, self.blob = hashes, tids, offsets, blob

    @staticmethod
    def _hash(token: str) -> int:
        import hashlib

        return int.from_bytes(hashlib.blake2b(token.encode("utf-8"), digest_size=8).digest(), "little")

    @classmethod
    def save(cls, vocab: dict[str, int], directory: Path) -> None:
        by_id = [""] * (max(vocab.values(), default=-1) + 1)
        for tok, i in vocab.items():
            by_id[i] = tok
        enc = [t.encode("utf-8") for t in by_id]
        offsets = np.zeros(len(enc) + 1, dtype=np.int64)
        np.cumsum([len(b) for b in enc], out=offsets[1:])
        blob = np.frombuffer(b"".join(enc), dtype=np.uint8)
        hashes = np.fromiter((cls._hash(t) for t in by_id), dtype=np.uint64, count=len(by_id))
        order = np.argsort(hashes, kind="stable")
        for name, arr in zip(cls.FILES, (hashes[order], order.astype(np.int32), offsets, blob)):
            np.save(directory / name, arr)

    @classmethod
    def load(cls, directory: Path) -> "TokenVocab":
        return cls(*(np.load(directory / name, mmap_mode="r") for name in cls.FILES))

    def get(self, token: str, default: int | None = None) -> int | None:
        h = np.uint64(self._hash(token))
        i = int(np.searchsorted(self.hashes, h))
        want = token.encode("utf-8")
        while i < len(self.hashes) and self.hashes[i] == h:
            tid = int(self.tids[i])
            if bytes(self.blob[self.offsets[tid] : self.offsets[tid + 1]]) == want:
                return tid
            i += 1
        return default

    def __getitem__(self, token: str) -> int:
        tid = self.get(token)
        if tid is None:
            raise KeyError(token)
        return tid

    def __contains__(self, token: object) -> bool:
        return isinstance(token, str) and self.get(token) is not None

    def __len__(self) -> int:
        return len(self.tids)


def _one_line(exc: BaseException) -> str:
    return " ".join(f"{type(exc).__name__}: {exc}".split())[:300]
