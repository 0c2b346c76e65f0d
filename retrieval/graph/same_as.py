"""Cross-type unification (iDISK 2.0): entities of different types that denote one substance, linked ``same_as``.

After ``graph integrate`` has merged what shares an identifier or a name within a type, a name can
still belong to entities of several types: "honey" is a FoodOn food, an UBERON term and an iDISK
supplement ingredient; "Allium sativum" is an NCBITaxon organism and an iDISK ingredient; 山药 is the
catalogue's substance and a FoodOn synonym of "chinese yam (whole)". iDISK unifies what denotes the
same substance and keeps what does not apart. :func:`find_same_as` links two entities of different
types when

- they share a name (kinds ``same_as_alias_kinds``; never an identifier, which integration already
  merged on, nor a book's 一名): the label of both, or the label of one and a Chinese synonym of the
  other (FoodOn's 山药 for the catalogue's 山药) — an English synonym alone is too often a homonym
  (the genus Thymus, the organ thymus), and
- both are substances: of a ``substance_types`` type (food, substance, supplement ingredient,
  chemical, nutrient), or with an ``is_a`` parent of such a type (UBERON's honey is_a FoodOn's "sugar
  syrup or syrup solids"; its blood is_a "animal-derived food") unless an organism, a place, a
  quality, an ancestry or a bare concept; FoodOn's classes of the living plant ("chinese yam plant",
  "Myrica rubra tree"), typed food, are the organism and not a substance.

Everything else that shares a name stays apart — an organism and the ingredient made from it, a
place and a food, a quality and a fruit (orange), an ancestry and a fish (argentine) — and is
counted by type pair. A name shared by more than ``max_same_name`` entities is left alone
(ambiguous). Each link carries its evidence (the shared name and why both are substances); links
are rows of the integration document, so ``--undo`` and re-integration remove them with it.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from typing import Any

from bencao.retrieval.graph.store import Graph
from bencao.text import has_cjk

#: Link kind, and its score (a shared identifier merges; a shared name plus compatible types links).
KIND = "same_as"
SCORE = 0.9
#: Types never counted as a substance by an is_a parent: an organism is what a substance is made of.
NEVER_SUBSTANCE = frozenset({"organism", "ancestry", "place", "quality", "concept"})
#: FoodOn's classes of the living plant ("chinese yam plant", "Myrica rubra tree") are typed food but are the organism.
_PLANT = re.compile(r"\s(plant|tree|shrub|vine|herb plant)$", re.IGNORECASE)
#: Alias kinds that are an entity's own name (its label), as opposed to a synonym or a product-label name (iDISK's
#: label names map "coumaric acid" to the ingredient "acid").
OWN_NAME_KINDS = frozenset({"name"})


def names_shared_across_types(g: Graph) -> int:
    """How many entity names (matching keys) belong to entities of more than one type."""
    return g.conn.execute("SELECT COUNT(*) FROM (SELECT norm FROM entities GROUP BY norm HAVING COUNT(DISTINCT type) > 1)").fetchone()[0]


def _substance_like(g: Graph, types: set[str]) -> dict[str, str]:
    """Entities that are substances by their type, or by an is_a parent of a substance type: id → why."""
    q = ",".join("?" * len(types))
    out = {eid: f"a {typ}" for eid, typ in g.conn.execute(f"SELECT id, type FROM entities WHERE type IN ({q})", sorted(types))}
    for eid, typ, parent, ptype in g.conn.execute(
            f"SELECT h.id, h.type, p.name, p.type FROM triples t JOIN entities h ON h.id = t.head_id JOIN entities p ON p.id = t.tail_id "
            f"WHERE t.relation = 'is_a' AND p.type IN ({q}) AND h.type NOT IN ({q})", [*sorted(types), *sorted(types)]):
        if typ not in NEVER_SUBSTANCE:  # a taxon under FoodOn's "food source" is the organism, not a substance made of it
            out.setdefault(eid, f"a {typ} that is_a {parent} ({ptype})")
    return out


def find_same_as(g: Graph, substance_types: list[str], alias_kinds: list[str], max_same_name: int = 6) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """``same_as`` links between entities of different types that share a name and are both substances,
    and a report: names shared across types before and after, links by type pair, pairs kept apart by type pair."""
    kinds = sorted(set(alias_kinds))
    q = ",".join("?" * len(kinds))
    by_name: dict[str, dict[str, str]] = defaultdict(dict)  # norm → entity → the name as written
    own: set[tuple[str, str]] = set()  # (norm, entity) where the name is the entity's own label
    for norm, eid, alias, kind in g.conn.execute(f"SELECT norm, entity_id, alias, kind FROM aliases WHERE kind IN ({q})", kinds):
        by_name[norm].setdefault(eid, alias)
        if kind in OWN_NAME_KINDS:
            own.add((norm, eid))
    types = {eid: typ for eid, typ in g.conn.execute("SELECT id, type FROM entities")}
    names = {eid: name for eid, name in g.conn.execute("SELECT id, name FROM entities")}
    substance = {e: why for e, why in _substance_like(g, set(substance_types)).items() if not _PLANT.search(names.get(e) or "")}
    links: dict[tuple[str, str], dict[str, Any]] = {}
    apart: Counter[str] = Counter()
    ambiguous = 0
    for norm, ents in by_name.items():
        if len({types.get(e) for e in ents}) < 2:
            continue
        if len(ents) > max_same_name:
            ambiguous += 1
            continue
        ids = sorted(ents, key=lambda e: (types.get(e, ""), e))
        for i, a in enumerate(ids):
            for b in ids[i + 1:]:
                ta, tb = types.get(a), types.get(b)
                if ta == tb or ta is None or tb is None:
                    continue
                # the name is both entities' label, or one's label and the other's Chinese synonym (FoodOn's 山药 for the
                # catalogue's 山药): an English synonym alone is too often a homonym (the genus Thymus, the organ thymus)
                named = ((norm, a) in own and (norm, b) in own) or (((norm, a) in own or (norm, b) in own) and has_cjk(norm))
                if a in substance and b in substance and named:
                    key = (a, b)
                    if key not in links:
                        links[key] = {"src": a, "dst": b, "name": ents[a],
                                      "evidence": f"both named {ents[a]!r}: {names.get(a)} is {substance[a]}, {names.get(b)} is {substance[b]}",
                                      "types": f"{ta}/{tb}"}
                else:
                    apart[" / ".join(sorted((ta, tb)))] += 1
    out = sorted(links.values(), key=lambda x: (x["types"], x["src"], x["dst"]))
    report = {"links": len(out), "links_by_types": dict(Counter(x["types"] for x in out).most_common()),
              "pairs_kept_apart_by_types": dict(apart.most_common(20)), "ambiguous_names": ambiguous,
              "examples": out[:50]}
    return out, report


def names_still_split(g: Graph) -> tuple[int, dict[str, int]]:
    """Names shared across types whose entities are not all joined by same_as links (the homonyms kept apart),
    and how many of them hold each set of types (food / organism: a food and the organism it comes from)."""
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        while parent.get(x, x) != x:
            parent[x] = parent.get(parent[x], parent[x])
            x = parent[x]
        return x

    for a, b in g.conn.execute("SELECT src_id, dst_id FROM links WHERE kind = ?", (KIND,)):
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)
    groups: dict[str, set[tuple[str, str]]] = defaultdict(set)
    for eid, norm, typ in g.conn.execute(
            "SELECT id, norm, type FROM entities WHERE norm IN (SELECT norm FROM entities GROUP BY norm HAVING COUNT(DISTINCT type) > 1)"):
        groups[norm].add((find(eid), typ))
    by_types: Counter[str] = Counter()
    for members in groups.values():
        all_types = {t for _, t in members}
        by_root: dict[str, set[str]] = defaultdict(set)
        for root, typ in members:
            by_root[root].add(typ)
        if not any(ts == all_types for ts in by_root.values()):
            by_types[" / ".join(sorted(all_types))] += 1
    return sum(by_types.values()), dict(by_types.most_common())
