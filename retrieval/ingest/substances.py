"""Substance names for the pattern extractors: resolve without merging distinct substances.

The herbals give many names for one drug (大枣 一名干枣) and sometimes another drug's name (沙参
一名知母). :class:`SubstanceNames` keeps the two apart for one document:

- ``resolve(name)`` finds an existing substance only through its name or a curated alias
  (catalogue variants, ontology synonyms, KB names) — never through an alias a book extracted
  (kind ``book_synonym``) — so a book's 一名 can never capture a later entry of that name;
- ``admit_aliases(entry, aliases)`` splits an entry's 一名 list into aliases that may be written and
  names kept only as the entry's ``other_names``: an alias is refused when it is the name of another
  entry of the same book, of a substance already known (``resolve``), or the 一名 of two entries.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Iterable

from bencao.retrieval.graph.store import DocumentBuilder, Graph, entity_id_for
from bencao.text import norm_key

BOOK_ALIAS_KIND = "book_synonym"
#: Other names a book gives (旧作X, 俗名X, the modern name of a title): like book_synonym, never trusted to resolve a name.
BOOK_VARIANT_KIND = "book_variant"
BOOK_NAME_KINDS = frozenset({BOOK_ALIAS_KIND, BOOK_VARIANT_KIND})

#: Systematic conversion errors of the TCM-Ancient-Books digitisation (traditional → simplified
#: software): 腳氣 became 香港脚 (5,879 times), 毒氣 became 毒瓦斯 (4,990), 厚 became 浓 (浓朴 for 厚朴,
#: 12,746 times; 味浓, 浓肠胃). Snippets keep the text as the file has it; extracted names are repaired.
ARTIFACTS = (("香港脚", "脚气"), ("毒瓦斯", "毒气"), ("瓦斯", "气"), ("浓", "厚"))


def repair_name(name: str) -> str:
    """An extracted name with the corpus's conversion artifacts undone (浓朴 → 厚朴, 香港脚 → 脚气)."""
    for bad, good in ARTIFACTS:
        if bad in name:
            name = name.replace(bad, good)
    return name


class SubstanceNames:
    def __init__(self, graph: Graph, type_: str = "substance", layer: str = "book"):
        self.graph = graph
        self.type = type_
        self.layer = layer
        self.local: dict[str, str] = {}  # norm → id of substances written by this document
        self.entry_norms: set[str] = set()
        self.alias_owners: Counter[str] = Counter()  # alias norm → distinct entry names that give it
        self._cache: dict[str, str | None] = {}

    def declare_entries(self, names: Iterable[str], pairs: Iterable[tuple[str, str]] = ()) -> None:
        """The book's entry names (and its (entry, alias) pairs), known before any alias is written."""
        self.entry_norms |= {norm_key(n) for n in names}
        seen = {(norm_key(e), norm_key(a)) for e, a in pairs}
        for _, a in seen:
            self.alias_owners[a] += 1

    def resolve(self, name: str) -> str | None:
        """Id of the substance known under ``name`` by its name or a curated alias, else None."""
        key = norm_key(name)
        if key in self.local:
            return self.local[key]
        if key not in self._cache:
            best: tuple[int, int, str] | None = None
            for rank_e, ent in enumerate(self.graph.entities_by_alias(name)):
                if ent["type"] != self.type:
                    continue
                kinds = {a["kind"] for a in self.graph.aliases_of(ent["id"]) if a["norm"] == key}
                trusted = kinds - BOOK_NAME_KINDS
                if not trusted:
                    continue
                cand = (0 if "name" in trusted else 1, rank_e, ent["id"])
                best = cand if best is None or cand < best else best
            self._cache[key] = best[2] if best else None
        return self._cache[key]

    def is_substance(self, name: str) -> bool:
        """``name`` is a substance of the graph (name or curated alias) or an entry of this book."""
        return norm_key(name) in self.entry_norms or self.resolve(name) is not None

    def entity(self, b: DocumentBuilder, name: str, *, attributes: dict[str, Any] | None = None,
               aliases: Iterable[tuple[str, str]] = ()) -> str:
        """Add (or refer to) the substance ``name`` in the builder, resolved as :meth:`resolve` does."""
        eid = self.resolve(name) or entity_id_for(name, self.type)
        eid = b.entity(name, self.type, id=eid, layer=self.layer, attributes=attributes, aliases=aliases)
        self.local[norm_key(name)] = eid
        return eid

    def canonical_of(self, name: str, modern: Iterable[str], curated: bool = True) -> tuple[str, str] | None:
        """(id, name) of the substance a title's modern name names (鸡头子（芡实） → the catalogue's 芡实), when the
        entry's own name is not another substance; else None. ``curated``: only a catalogue's or an ontology's
        substance (not a book layer entry of an earlier book, as 荆芥（假苏） → 神农本草经's 假苏 would be)."""
        own = self.resolve(name)
        for m in modern:
            eid = self.resolve(m)
            if eid is not None and (own is None or own == eid) and norm_key(m) not in self.local:
                ent = self.graph.get_entity(eid)
                if ent is not None and ent.get("type") == self.type and (not curated or ent.get("layer") != "book"):
                    return eid, ent["name"]
        return None

    def admit_aliases(self, name: str, aliases: Iterable[str]) -> tuple[list[str], list[str]]:
        """(aliases that may be written, names kept only as ``other_names``) for the entry ``name``."""
        own = norm_key(name)
        own_id = self.resolve(name)
        ok: list[str] = []
        kept: list[str] = []
        for a in aliases:
            key = norm_key(a)
            if not key or key == own:
                continue
            other = self.resolve(a)
            clash = (key in self.entry_norms or self.alias_owners[key] > 1 or (other is not None and other != own_id))
            (kept if clash else ok).append(a)
        return ok, kept
