"""Entry retrieval: the sections a book heads with a linked entity's name — its own entry.

A materia medica gives each substance a section headed by its name: 食疗本草's 栝蒌（瓜蒌） and
薯蓣（山药）, 神农本草经's 栝蒌根 (the entry of its root). When the question names a substance, the
passages of its entries are about it whether or not the extractors read a fact from them, and
whether or not they repeat the name. :func:`entry_snippets` finds them by heading: a heading whose
name (notes in brackets removed: 枸杞〈寒〉 → 枸杞) or whose modern name in parentheses (薯蓣（山药） →
山药) is the entity's name, else one naming a part of it (栝蒌根, 枸杞叶: the name and one of
:data:`PARTS`). The heading map is read once per graph state.
"""

from __future__ import annotations

import re
import threading
from typing import Iterable

from bencao.retrieval.evidence import SnippetHit
from bencao.retrieval.graph.store import Graph
from bencao.retrieval.name_variants import PARTS, variant_keys
from bencao.text import norm_key

_NOTES = re.compile(r"（[^（）]*）|\([^()]*\)|〈[^〉]*〉|〔[^〕]*〕|[【】\s]")
_INNER = re.compile(r"（([\u4e00-\u9fff]{2,8})）")

_MAPS: dict[tuple, dict[str, list[str]]] = {}
_LOCK = threading.Lock()


def heading_keys(title: str) -> list[str]:
    """The names a section heading gives its subject: 薯蓣（山药） → [薯蓣, 山药]; 枸杞〈寒〉 → [枸杞]."""
    out = [norm_key(_NOTES.sub("", title))]
    out += [norm_key(m) for m in _INNER.findall(title)]
    return [k for k in dict.fromkeys(out) if len(k) >= 2]


def entry_heading(title: str) -> str:
    """A heading as the name it gives: 栝蒌（瓜蒌） → 栝蒌, 枸杞〈寒〉 → 枸杞."""
    return _NOTES.sub("", title) or title


def entry_map(g: Graph) -> dict[str, list[str]]:
    """Heading name → section ids, for the whole macro tree (cached per graph state)."""
    key = g.state_key()
    with _LOCK:
        got = _MAPS.get(key)
        if got is None:
            got = {}
            for sid, title in g.conn.execute("SELECT id, title FROM sections WHERE level > 0 ORDER BY rowid"):
                for k in heading_keys(title):
                    got.setdefault(k, []).append(sid)
            for k in [k for k in _MAPS if k[0] == key[0]]:
                del _MAPS[k]
            _MAPS[key] = got
        return got


def entry_snippets(g: Graph, names: Iterable[str], *, per_name: int = 2, score: float = 1.0 / 61) -> list[SnippetHit]:
    """The first ``per_name`` passages of the entries headed by each name (its own entries first, then its
    parts' entries), as evidence hits found by ``entry``."""
    headings = entry_map(g)
    out: dict[str, SnippetHit] = {}
    for name in dict.fromkeys(norm_key(n) for n in names if n):
        if len(name) < 2:
            continue
        keys = [name, *variant_keys(name)]  # 栝楼 → 栝蒌（瓜蒌）
        sections = [s for k in keys for s in headings.get(k, [])] + [s for k in keys for p in PARTS for s in headings.get(k + p, [])]
        taken = 0
        for sid in sections:
            for row in g.snippets_of_section(sid)[:1]:
                if row["id"] not in out:
                    out[row["id"]] = SnippetHit.from_row(row, "entry", score)
                    taken += 1
            if taken >= per_name:
                break
    return list(out.values())
