"""Entity mentions in a question without an LLM: longest alias-table matches over word / jieba n-grams.

English: word n-grams (plural-insensitive through the linker's normalised keys). Chinese: jieba
tokens (the graph's Chinese names are taught to jieba first so they stay whole) and their n-grams.
Keys are ``norm_key`` forms, so traditional and simplified, full- and half-width forms all match; a classical
name's variant writing (栝楼 for 栝蒌, :mod:`bencao.retrieval.name_variants`) matches too.
"""

from __future__ import annotations

import re
import threading

from bencao.retrieval.graph.store import Graph
from bencao.retrieval.index.lexical import light_stem
from bencao.retrieval.name_variants import PARTS, variant_keys
from bencao.text import add_words, has_cjk, norm_key, tokenize

_TAUGHT: set[tuple] = set()
_LOCK = threading.Lock()
_WORD = re.compile(r"[\w\u3400-\u4dbf\u4e00-\u9fff'-]+")


def teach_jieba(g: Graph) -> None:
    """Add the graph's Chinese names and aliases to jieba's dictionary (once per graph state)."""
    key = g.state_key()  # cheap, unlike counting the alias table per question
    with _LOCK:
        if key in _TAUGHT:
            return
        # the alias table's matching keys are the norm_key forms the segmenter is taught
        add_words((k for (k,) in g.conn.execute("SELECT DISTINCT norm FROM aliases WHERE kind != 'xref'")), normalised=True)
        _TAUGHT.add(key)


def extract_mentions(g: Graph, text: str, base_keys: dict | set, *, max_ngram: int = 6, min_cjk_chars: int = 2,
                     stopwords: set[str] | frozenset = frozenset(), limit: int = 8) -> list[str]:
    """Mentions in ``text`` that name graph entities, longest first, non-overlapping, in text order."""
    teach_jieba(g)
    toks = tokenize(text)
    if not toks:
        return []
    spans: list[tuple[int, int, str]] = []
    n = len(toks)
    for size in range(min(max_ngram, n), 0, -1):
        for i in range(0, n - size + 1):
            part = toks[i : i + size]
            cjk = has_cjk("".join(part))
            s = "".join(part) if cjk else " ".join(part)
            if cjk and len(s) < min_cjk_chars:
                continue
            if size == 1 and (s in stopwords or (not cjk and len(s) < 3)):
                continue
            if all(p in stopwords for p in part):
                continue
            spans.append((i, i + size, s))
    keys = list({norm_key(s) for _, _, s in spans})
    # 栝楼 for the graph's 栝蒌 (a variant writing), or for 栝蒌根 (the entry of a part: the linker's last resort too)
    variants = {k: [*variant_keys(k), *(v + p for v in (k, *variant_keys(k)) for p in PARTS)] for k in keys if has_cjk(k) and len(k) >= 2}
    keys += [v for vs in variants.values() for v in vs]
    found: set[str] = set()
    for j in range(0, len(keys), 400):
        chunk = keys[j : j + 400]
        q = ",".join("?" * len(chunk))
        found.update(r[0] for r in g.conn.execute(f"SELECT DISTINCT norm FROM aliases WHERE norm IN ({q})", chunk))
    taken = [False] * n
    out: list[tuple[int, str]] = []
    for i, k, s in spans:  # already longest-first
        if any(taken[i:k]):
            continue
        k_s = norm_key(s)
        hit = k_s in found or (not has_cjk(s) and " ".join(light_stem(t) for t in s.split()) in base_keys) \
            or any(v in found for v in variants.get(k_s, ()))
        if hit:
            for x in range(i, k):
                taken[x] = True
            out.append((i, s))
    out.sort()
    return [s for _, s in out][:limit]
