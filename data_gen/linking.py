"""Dictionary entity linking over the graph's alias table (no model): exact ``norm_key`` matches.

Candidates are jieba tokens of the text and joins of up to ``max_ngram`` adjacent tokens, plus the
whole text (an option such as "藿香正气散" is usually one name). Longer matches win over the
tokens they contain. This is the linking the LLM-free teacher uses; retrieval has the full linker.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from bencao.retrieval.graph.store import Graph
from bencao.text import add_words, has_cjk, norm_key, tokenize


@dataclass(frozen=True)
class Mention:
    surface: str
    entity_id: str
    start: int  # token offsets
    end: int


class AliasLinker:
    def __init__(self, graph: Graph, max_ngram: int = 4, min_chars_cjk: int = 2, min_chars_latin: int = 3):
        self.graph = graph
        self.max_ngram = max_ngram
        self.min_cjk = min_chars_cjk
        self.min_latin = min_chars_latin
        self.index: dict[str, list[str]] = defaultdict(list)
        words = []
        for norm, eid, alias, _kind in graph.iter_aliases():
            if eid not in self.index[norm]:
                self.index[norm].append(eid)
            if has_cjk(alias):
                words.append(alias)
        add_words(words)

    def _long_enough(self, key: str) -> bool:
        return len(key) >= (self.min_cjk if has_cjk(key) else self.min_latin)

    def link(self, text: str, whole: bool = True) -> list[Mention]:
        """Mentions in ``text``, longest first; each entity once."""
        found: list[Mention] = []
        key = norm_key(text)
        if whole and key in self.index:
            found += [Mention(text, e, 0, 10**6) for e in self.index[key]]
        toks = tokenize(text)
        spans: list[tuple[int, int, str]] = []
        for n in range(min(self.max_ngram, len(toks)), 0, -1):
            for i in range(len(toks) - n + 1):
                parts = toks[i : i + n]
                joined = "".join(parts) if all(has_cjk(p) for p in parts) else " ".join(parts)
                if joined in self.index and self._long_enough(joined):
                    if any(s <= i and i + n <= e for s, e, _ in spans):
                        continue  # inside a longer match
                    spans.append((i, i + n, joined))
        for s, e, joined in spans:
            found += [Mention(joined, eid, s, e) for eid in self.index[joined]]
        out, seen = [], set()
        for m in found:
            if m.entity_id not in seen:
                seen.add(m.entity_id)
                out.append(m)
        return out
