"""What each index kind holds: one text per item, its language, and its lexical text.

- entities: name + aliases + definition (dense); name + aliases (lexical, for linking)
- triples:  "head relation tail"
- snippets: heading path + text
- sections: heading path + the start of the section's text
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Iterator

from bencao.retrieval.graph.store import Graph
from bencao.text import cjk_counts, lang_of, lang_of_counts

KINDS = ("entities", "triples", "snippets", "sections")


@dataclass
class Item:
    id: str
    text: str  # embedded text
    lex: str  # lexical text
    lang: str
    #: The lexical text as space-separated parts whose tokens can be computed once per distinct part
    #: (an entity's names; a triple's head, relation and tail: 3.4 M triples share 0.5 M names at full scale).
    lex_parts: tuple[str, ...] | None = None


def relation_text(relation: str) -> str:
    return relation.replace("_", " ")


def entity_items(g: Graph, max_aliases: int = 12, max_chars: int = 600) -> Iterator[Item]:
    aliases: dict[str, list[str]] = {}
    for _norm, eid, alias, kind in g.iter_aliases():
        if kind == "xref":
            continue
        lst = aliases.setdefault(eid, [])
        if alias not in lst:
            lst.append(alias)
    for e in g.iter_entities():
        names = [a for a in aliases.get(e["id"], []) if a != e["name"]][:max_aliases]
        text = e["name"]
        if names:
            text += "; " + "; ".join(names)
        if e.get("description"):
            text += ". " + e["description"]
        yield Item(e["id"], text[:max_chars], " ".join([e["name"], *names]), lang_of(e["name"] + " " + (e.get("description") or "")),
                   (e["name"], *names))


def triple_items(g: Graph) -> Iterator[Item]:
    """One item per triple, in storage order; language = ``lang_of(head + tail)``.

    Reads three columns and looks names up in memory (a full triple row with its joins and JSON
    attributes costs ~50 µs; 3.4 M of them were 4 minutes of a full-scale index build)."""
    names = dict(g.conn.execute("SELECT id, name FROM entities"))
    counts = functools.lru_cache(maxsize=None)(cjk_counts)  # per name, not per triple
    for tid, head_id, relation, tail_id in g.conn.execute("SELECT id, head_id, relation, tail_id FROM triples ORDER BY rowid"):
        head, tail, rel = names[head_id], names[tail_id], relation_text(relation)
        (c1, n1), (c2, n2) = counts(head), counts(tail)
        text = f"{head} {rel} {tail}"
        yield Item(tid, text, text, lang_of_counts(c1 + c2, n1 + n2), (head, rel, tail))  # = lang_of(head + tail)


def snippet_items(g: Graph, max_chars: int = 1200) -> Iterator[Item]:
    for s in g.iter_snippets():
        head = " › ".join(s["path"] or [])
        text = f"{head}\n{s['text']}"[:max_chars]
        yield Item(s["id"], text, text, lang_of(s["text"]))


def section_items(g: Graph, body_chars: int = 300) -> Iterator[Item]:
    first: dict[str, str] = {}
    for r in g.conn.execute("SELECT section_id, text FROM snippets ORDER BY section_id, ord"):
        sid = r[0]
        if len(first.get(sid, "")) < body_chars:
            first[sid] = (first.get(sid, "") + r[1])[:body_chars]
    for s in g.iter_sections():
        head = " › ".join(s["path"] or [s["title"]])
        body = first.get(s["id"], "")
        text = f"{head}\n{body}" if body else head
        yield Item(s["id"], text, text, lang_of(body or head))


ITEM_SOURCES = {"entities": entity_items, "triples": triple_items, "snippets": snippet_items, "sections": section_items}
