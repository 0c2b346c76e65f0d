"""Text normalisation for matching keys. Display text is never altered; Chinese is first-class.

``norm_key`` is the single definition of "the same name" used by the alias table, entity
resolution and linking: NFKC (which folds full-width forms to half-width), the remaining
ideographic punctuation to ASCII, case folding, traditional → simplified Chinese (OpenCC), and
collapsed whitespace. Non-ASCII characters are never stripped.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from typing import Iterable

_SPACE_RE = re.compile(r"\s+")
# Ideographic punctuation that NFKC leaves alone, mapped to its ASCII counterpart for keys.
_PUNCT = str.maketrans({"、": ",", "。": ".", "〈": "<", "〉": ">", "《": "<", "》": ">", "「": '"', "」": '"', "『": '"', "』": '"', "【": "[", "】": "]", "〔": "[", "〕": "]", "∶": ":", "—": "-", "–": "-", "·": " ", "・": " "})
_CJK_RE = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0002ffff]")
# Characters that separate words for tokenisation of non-CJK text.
_WORD_RE = re.compile(r"[\w\u3400-\u4dbf\u4e00-\u9fff]+", re.UNICODE)
_STOP_PUNCT = set(",.;:!?()[]{}<>\"'`~@#$%^&*-_=+|\\/，。；：！？（）【】《》、“”‘’…·")
_PUNCT_OR_SPACE = "".join(sorted(_STOP_PUNCT)) + "".join(chr(i) for i in range(0x110000) if chr(i).isspace())


@functools.lru_cache(maxsize=1)
def _t2s():
    from opencc import OpenCC

    return OpenCC("t2s")


def half_width(text: str) -> str:
    """NFKC: full-width letters, digits and punctuation become half-width; compatibility forms fold."""
    return unicodedata.normalize("NFKC", text)


@functools.lru_cache(maxsize=1)
def _t2s_key_chars() -> frozenset[str] | None:
    """Characters without which t2s cannot change a text; None if OpenCC's tables cannot be read.

    That is every character a single-character entry converts, plus every character of a phrase
    entry that changes its text without containing any of those (so no phrase match is missed).
    """
    conv = _t2s()
    conv.convert("測")  # loads the dictionaries
    try:
        entries = [(k, v) for group in conv._dict_chain_data for entry in group for k, v in entry[2].items()]
    except (AttributeError, IndexError, TypeError):  # another OpenCC layout: always convert
        return None
    chars = {k for k, v in entries if len(k) == 1 and k != v}
    for k, v in entries:
        if len(k) > 1 and k != v and chars.isdisjoint(k):
            chars.update(k)
    return frozenset(chars) or None


def to_simplified(text: str) -> str:
    """Traditional → simplified Chinese (OpenCC t2s). ASCII and other scripts pass through.

    Text sharing no character with any t2s dictionary key cannot change, so it skips the (pure
    Python, ~1 ms) conversion: most of a simplified-Chinese corpus does.
    """
    if not has_cjk(text):
        return text
    keys = _t2s_key_chars()
    if keys is not None and keys.isdisjoint(text):
        return text
    return _t2s().convert(text)


@functools.lru_cache(maxsize=200_000)
def norm_key(text: str) -> str:
    """The matching key of a name: NFKC, punctuation folded, lower-case, simplified, whitespace collapsed."""
    s = half_width(text).translate(_PUNCT).casefold()
    s = to_simplified(s)
    s = _SPACE_RE.sub(" ", s).strip()
    return s


def has_cjk(text: str) -> bool:
    return bool(_CJK_RE.search(text))


_SPACES_RE = re.compile(r"\s+")  # str patterns: the characters str.isspace() accepts
_NOT_CJK_RE = re.compile(r"[^\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0002ffff]+")  # the complement of _CJK_RE


def cjk_counts(text: str) -> tuple[int, int]:
    """(CJK ideographs, non-space characters) of ``text``; ``cjk_ratio`` is their quotient.
    Counted by the regex engine: what is left after removing the rest (corpus snippets: 5x a Python loop)."""
    return len(_NOT_CJK_RE.sub("", text)), len(_SPACES_RE.sub("", text))


def cjk_ratio(text: str) -> float:
    """Share of non-space characters that are CJK ideographs."""
    cjk, n = cjk_counts(text)
    return cjk / n if n else 0.0


def lang_of(text: str) -> str:
    """'zh' when a fifth or more of the characters are CJK, else 'en'."""
    return lang_of_counts(*cjk_counts(text))


def lang_of_counts(cjk: int, chars: int) -> str:
    """:func:`lang_of` from :func:`cjk_counts` (counts of two texts add up to their concatenation's)."""
    return "zh" if chars and cjk / chars >= 0.2 else "en"


class _Segmenter:
    """jieba's dictionary segmentation without HMM: ``rjieba`` (jieba-rs, the same dictionary and
    algorithm, compiled; 14x faster and token-for-token identical on 20,000 corpus lines with 61,713
    custom words — bench/segmenter.py, bench/RESULTS.md), else the pure-Python ``jieba``."""

    def __init__(self) -> None:
        try:
            import rjieba  # its module-level functions share the one dictionary it loads on import

            self._rs = rjieba
            self.name = "rjieba"
        except ImportError:  # pragma: no cover - rjieba is a dependency; jieba keeps working without it
            import logging

            import jieba

            jieba.setLogLevel(logging.WARNING)
            jieba.initialize()
            self._py = jieba
            self.name = "jieba"

    def add_word(self, word: str, freq: int) -> None:
        if self.name == "rjieba":
            self._rs.add_word(word, freq, None)
        else:
            self._py.add_word(word, freq=freq)

    def cut(self, text: str) -> list[str]:
        return self._rs.cut(text, False) if self.name == "rjieba" else self._py.lcut(text, HMM=False)


@functools.lru_cache(maxsize=1)
def _jieba() -> _Segmenter:
    return _Segmenter()


def add_words(words: Iterable[str], normalised: bool = False) -> None:
    """Teach the segmenter domain words (entity names) so they are kept whole when tokenising.
    ``normalised``: the words are already ``norm_key`` forms (the alias table's ``norm`` column)."""
    jb = _jieba()
    for w in words:
        w = w.strip()
        if w and has_cjk(w):
            jb.add_word(w if normalised else norm_key(w), 50_000)


def tokenize(text: str) -> list[str]:
    """Lexical tokens for BM25 and keyword matching: jieba for Chinese, words for the rest.

    Works on the normalised key (so traditional and simplified forms give the same tokens); drops
    pure punctuation; keeps single CJK characters (classical Chinese is largely monosyllabic).
    """
    key = norm_key(text)
    if not key:
        return []
    if has_cjk(key):
        toks = [t.strip() for t in _jieba().cut(key)]
    else:
        toks = _WORD_RE.findall(key)
    # a token made only of punctuation and spaces strips to nothing (str.strip: C speed, per token)
    return [t for t in toks if t and t.strip(_PUNCT_OR_SPACE)]


_SENT_END = "。！？；!?;"


# A sentence ends after one of _SENT_END or a newline, or after "." followed by a space or the end.
_SENT_SPLIT_RE = re.compile(r"(?<=[。！？；!?;\n])|(?<=\.)(?= |$)")


def split_sentences(text: str) -> list[str]:
    """Split on Chinese and Western sentence ends, keeping the terminator with its sentence."""
    return [s for s in (p.strip() for p in _SENT_SPLIT_RE.split(text)) if s]


_ASCII_WORD_RE = re.compile(r"[A-Za-z0-9]+")


# ASCII characters that are not tokens on their own: letters, digits (counted per word) and spaces.
_NOT_A_TOKEN = str.maketrans({chr(i): None for i in range(128) if chr(i).isalnum() or chr(i).isspace()})
_NON_ASCII_SPACE_RE = re.compile(r"[^\S\x00-\x7f]")


def count_tokens(text: str) -> int:
    """Approximate model tokens: one per non-ASCII character (CJK, full-width punctuation), one per
    ~4 letters of an ASCII word, one per ASCII punctuation mark. Additive over sentence splits."""
    ascii_part = text.encode("ascii", "ignore").decode("ascii")
    n = len(text) - len(ascii_part)  # non-ASCII characters ...
    if n:
        n -= len(_NON_ASCII_SPACE_RE.findall(text))  # ... that are not spaces (U+3000, U+00A0 ...)
    n += len(ascii_part.translate(_NOT_A_TOKEN))  # ASCII punctuation and symbols
    n += sum((len(w) + 3) // 4 for w in _ASCII_WORD_RE.findall(text))
    return n


def chunk_text(text: str, max_tokens: int = 300) -> list[str]:
    """Split text into chunks of at most ~``max_tokens`` on sentence boundaries.

    A single sentence longer than the budget is cut at the budget (never dropped).
    """
    sentences = split_sentences(text)
    chunks: list[str] = []
    cur: list[str] = []
    cur_tok = 0
    for s in sentences:
        t = count_tokens(s)
        if t > max_tokens:
            if cur:
                chunks.append("".join(cur) if has_cjk(s) else " ".join(cur))
                cur, cur_tok = [], 0
            # hard-cut an overlong sentence by characters
            step = max(1, int(len(s) * max_tokens / t))
            for i in range(0, len(s), step):
                chunks.append(s[i : i + step])
            continue
        if cur and cur_tok + t > max_tokens:
            chunks.append("".join(cur) if has_cjk("".join(cur)) else " ".join(cur))
            cur, cur_tok = [], 0
        cur.append(s)
        cur_tok += t
    if cur:
        chunks.append("".join(cur) if has_cjk("".join(cur)) else " ".join(cur))
    return [c for c in chunks if c.strip()]
