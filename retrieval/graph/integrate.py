"""Multi-source entity integration (iDISK 2.0's integration step): one entity per real-world thing.

Sources name the same thing under their own ids: ChEBI has two "vitamin C" classes, iDISK has the
supplement ingredient "Vitamin C" (UMLS C2349136), FoodOn's slice carries HANCESTRO terms under
three spellings of the prefix. :func:`integrate` merges them:

- **by shared identifier**: entities that share an alias of kind ``xref`` (a UMLS CUI, a CURIE, a
  KB id, a SKOS ``exactMatch`` target), whatever their types. Identifiers are compared on
  :func:`xref_key`: case folded, OBO PURLs and identifiers.org IRIs read as CURIEs, and a UMLS CUI
  written bare (iDISK's ``C0019906``), as ``UMLS:C0019906``, ``UMLS_CUI:C0019906`` or a UMLS IRI is
  one key — so FoodOn, UBERON and iDISK "honey" merge when their sources give the same CUI;
- **by a same-as statement**: a triple of a relation in ``same_as_relations`` (``exact_match``,
  ``same_as``, ``equivalent_to``, ...) between two entities merges them, whatever their types;
- **by normalised name within a type**: entities whose names have the same matching key
  (:func:`bencao.text.norm_key`) and the same type, or types of one ``type_groups`` entry (a
  ChEBI chemical and an iDISK supplement ingredient are both substances);
- groups are closed transitively; a group larger than ``max_group`` is reported and left alone
  (a chain of shared ids usually means one bad cross-reference).

Merges across types are listed apart in the report (``cross_type``, ``cross_type_groups``).

**Noise names** (iDISK's filter) are never merge keys: a name with no letter (digits or
punctuation only) or a single non-Chinese character (a single Chinese character, 枣 or 姜, is a
word); aliases with such text are removed (identifiers of kind ``xref`` are kept). An entity all
of whose names are noise (``8``, ``%``, ``X``) is **quarantined** (``quarantine_noise``): it leaves
the graph with its aliases, triples and links, journalled like a merge, so ``--undo`` brings it
back; the report counts it (``quarantined``) and ``bencao graph integrate --quarantined`` lists
every quarantined entity with its triples. Entities with a noise name and another, real name stay
and are listed in ``noise_names``.

**How a merge is stored.** The store's contract is that every row is tied to the document that
asserted it and that removing a document removes exactly what nothing else supports. A merge
therefore rewrites rows in place, in one ``Graph.write()`` transaction, keeping each row's document:
the merged entity's sources, aliases (plus its old id as an ``xref`` alias under each of its
documents), triples with their sources, and links move to the canonical entity (the one whose
source was ingested first); triples that become identical are one triple with the sources of both;
a triple between two merged entities (a self-loop) is dropped. What was removed, created and
updated is journalled in a derived document (kind ``derived``, format ``integration``), so:

- :func:`undo_integration` (``bencao graph integrate --undo``, or ``bencao graph remove`` of that
  document) restores the graph as it was, except rows of documents removed since;
- running :func:`integrate` again first undoes the previous integration, then integrates the graph
  as it is now, so the canonical entity is re-chosen after sources came or went. ``bencao graph
  add`` and ``bencao graph remove`` do that by themselves on an integrated graph.

Triple confidences of merged triples are recomputed from their sources (max): re-run ``bencao graph
confidence`` after integrating a calibrated graph.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from dataclasses import asdict, dataclass
from typing import Any, Callable, Iterable

from bencao.config import field
from bencao.errors import BencaoError
from bencao.io import content_hash
from bencao.retrieval.graph.same_as import KIND as SAME_AS_KIND, SCORE as SAME_AS_SCORE
from bencao.retrieval.graph.same_as import find_same_as, names_shared_across_types, names_still_split
from bencao.retrieval.graph.store import Graph, _now, merge_attributes, triple_id_for
from bencao.text import has_cjk, norm_key

FORMAT = "integration"

COLUMNS: dict[str, tuple[str, ...]] = {
    "entities": ("id", "name", "norm", "type", "layer", "attributes", "description"),
    "entity_sources": ("entity_id", "document_id", "attributes", "description"),
    "aliases": ("norm", "entity_id", "alias", "kind", "document_id"),
    "triples": ("id", "head_id", "relation", "tail_id", "confidence", "layer", "origin", "attributes"),
    "triple_sources": ("triple_id", "document_id", "snippet_id", "kind", "confidence", "layer", "origin", "attributes"),
    "links": ("src_id", "dst_id", "kind", "score", "document_id"),
}
#: Primary (or unique) key columns of each table, by position in COLUMNS.
KEYS: dict[str, tuple[int, ...]] = {
    "entities": (0,), "entity_sources": (0, 1), "aliases": (0, 1, 3, 4), "triples": (0,), "triple_sources": (0, 1, 2), "links": (0, 1, 2),
}


@dataclass
class IntegrateConfig:
    by_xref: bool = field(True, help="Merge entities that share an identifier alias (kind in xref_kinds: UMLS CUI, CURIE, KB id), whatever their types.")
    xref_kinds: list[str] = field(default_factory=lambda: ["xref"], help="Alias kinds that are identifiers.")
    by_name: bool = field(True, help="Merge entities of one type (or one type group) whose names have the same matching key.")
    type_groups: list[list[str]] = field(default_factory=lambda: [["chemical", "nutrient", "supplement_ingredient"]],
                                         help="Types compared as one for name merges (a ChEBI chemical and an iDISK supplement ingredient are both substances).")
    exclude_types: list[str] = field(default_factory=list, help="Entity types never merged by name.")
    max_group: int = field(10, help="A merge group larger than this is reported and left alone (a chain of shared ids usually means one bad cross-reference).")
    filter_noise: bool = field(True, help="Remove aliases whose text is noise (no letter, or one non-Chinese character); never merge on such names.")
    quarantine_noise: bool = field(True, help="Move entities all of whose names are noise ('8', '%', 'X') out of the graph with their triples "
                                              "(journalled: `--quarantined` lists them, `--undo` restores them).")
    same_as_relations: list[str] = field(default_factory=lambda: ["exact_match", "exactmatch", "same_as", "equivalent_to", "equivalent_class",
                                                                  "equivalentclass", "skos:exactmatch", "owl:sameas"],
                                         help="Relations by which a source says two entities are the same thing: their ends are merged, whatever their types.")
    same_as_links: bool = field(True, help="Cross-type unification: link (same_as, with the evidence) entities of different types that "
                                           "share a name or a curated alias and are both substances (retrieval/graph/same_as.py); "
                                           "other homonyms stay apart.")
    substance_types: list[str] = field(default_factory=lambda: ["food", "substance", "supplement_ingredient", "chemical", "nutrient"],
                                       help="Types that denote substances (an entity is one too when an is_a parent is of such a type).")
    same_as_alias_kinds: list[str] = field(default_factory=lambda: ["name", "synonym", "label_name", "variant", "traditional"],
                                           help="Alias kinds compared for same_as links (curated names; not identifiers, not a book's 一名).")
    max_same_name: int = field(6, help="A name shared by more entities than this is ambiguous: no same_as link on it.")
    dry_run: bool = field(False, help="Report what would be merged without writing.")


# --------------------------------------------------------------------------- finding groups


_LETTER = re.compile(r"[^\W\d_]", re.UNICODE)


def is_noise(text: str) -> bool:
    """No letter at all (digits, punctuation), or a single character that is not Chinese."""
    t = text.strip()
    if not _LETTER.search(t):
        return True
    return len(t) < 2 and not has_cjk(t)


_CUI = re.compile(r"c\d{7}")
_UMLS_PREFIXES = ("umls:", "umls_cui:", "umlscui:", "umls_cid:", "cui:", "umls.cui:")
_IRI_FORMS = (
    (re.compile(r"https?://purl\.obolibrary\.org/obo/([a-z][a-z0-9]*)_(.+)"), r"\1:\2"),
    (re.compile(r"https?://identifiers\.org/([^/:]+)[:/](.+)"), r"\1:\2"),
    (re.compile(r"https?://linkedlifedata\.com/resource/umls/id/(c\d{7})"), r"umls:\1"),
    (re.compile(r"https?://uts\.nlm\.nih\.gov/\S*?(c\d{7})"), r"umls:\1"),
    (re.compile(r"obo:([a-z][a-z0-9]*)_(.+)"), r"\1:\2"),
)


def xref_key(text: str) -> str:
    """The key an identifier is matched on: case folded; an OBO PURL, identifiers.org IRI or
    ``obo:X_1`` as the CURIE ``x:1``; a UMLS CUI in any of its spellings (bare ``C0019906``,
    ``UMLS:C0019906``, ``UMLS_CUI:C0019906``, a UMLS IRI) as ``umls:c0019906``."""
    t = text.strip().lower()
    for pat, repl in _IRI_FORMS:
        m = pat.fullmatch(t)
        if m:
            t = m.expand(repl)
            break
    for prefix in _UMLS_PREFIXES:
        if t.startswith(prefix) and _CUI.fullmatch(t[len(prefix):].strip()):
            return "umls:" + t[len(prefix):].strip()
    if _CUI.fullmatch(t):
        return "umls:" + t
    return norm_key(t)


def noise_only_entities(g: Graph, cfg: "IntegrateConfig") -> list[dict[str, Any]]:
    """Entities whose name and every non-identifier alias are noise (iDISK's filter), with their triple counts."""
    out = []
    xk = set(cfg.xref_kinds)
    for eid, name, typ in g.conn.execute("SELECT id, name, type FROM entities").fetchall():
        if not is_noise(name):
            continue
        if any(not is_noise(a) for a, k in g.conn.execute("SELECT alias, kind FROM aliases WHERE entity_id=?", (eid,)) if k not in xk):
            continue
        n = g.conn.execute("SELECT COUNT(*) FROM triples WHERE head_id=? OR tail_id=?", (eid, eid)).fetchone()[0]
        out.append({"id": eid, "name": name, "type": typ, "triples": n})
    return out


class _UnionFind:
    def __init__(self) -> None:
        self.parent: dict[str, str] = {}

    def find(self, x: str) -> str:
        root = x
        while self.parent.get(root, root) != root:
            root = self.parent[root]
        while self.parent.get(x, x) != root:  # path compression
            self.parent[x], x = root, self.parent[x]
        return root

    def union(self, a: str, b: str) -> None:
        ra, rb = self.find(a), self.find(b)
        self.parent.setdefault(ra, ra)
        self.parent.setdefault(rb, rb)
        if ra != rb:
            self.parent[max(ra, rb)] = min(ra, rb)


@dataclass
class MergeGroup:
    canonical: str
    members: list[str]  # canonical first
    reasons: list[str]


def find_groups(g: Graph, cfg: IntegrateConfig) -> tuple[list[MergeGroup], dict[str, Any]]:
    """Merge groups (canonical = the entity whose earliest source document came first) and a report."""
    quarantine = noise_only_entities(g, cfg) if cfg.quarantine_noise else []
    out_ids = {q["id"] for q in quarantine}
    ents: dict[str, tuple[str, str, str]] = {eid: (name, norm, typ) for eid, name, norm, typ in
                                             g.conn.execute("SELECT id, name, norm, type FROM entities") if eid not in out_ids}
    uf = _UnionFind()
    why: dict[str, list[str]] = defaultdict(list)  # entity → reasons it joined
    if cfg.by_xref and cfg.xref_kinds:
        q = ",".join("?" * len(cfg.xref_kinds))
        by_key: dict[str, set[str]] = defaultdict(set)
        for alias, eid in g.conn.execute(f"SELECT alias, entity_id FROM aliases WHERE kind IN ({q})", list(cfg.xref_kinds)):
            if eid in ents:
                by_key[xref_key(alias)].add(eid)
        for key, ids in by_key.items():
            if len(ids) > 1:
                first, *rest = sorted(ids)
                for other in rest:
                    uf.union(first, other)
                for eid in ids:
                    why[eid].append(f"shares identifier {key!r}")
    if cfg.same_as_relations:
        rels = sorted({r.lower() for r in cfg.same_as_relations})
        q = ",".join("?" * len(rels))
        for h, rel, t in g.conn.execute(f"SELECT head_id, relation, tail_id FROM triples WHERE LOWER(relation) IN ({q})", rels):
            if h in ents and t in ents and h != t:
                uf.union(h, t)
                why[h].append(f"a source says {rel} {t}")
                why[t].append(f"a source says {h} {rel}")
    noise_names: list[dict[str, str]] = []
    if cfg.by_name:
        group_of = {t: min(grp) for grp in cfg.type_groups for t in grp}
        excluded = set(cfg.exclude_types)
        by_name: dict[tuple[str, str], list[str]] = defaultdict(list)
        for eid, (name, norm, typ) in ents.items():
            if cfg.filter_noise and is_noise(name):
                noise_names.append({"id": eid, "name": name, "type": typ})
                continue
            if typ not in excluded and norm:
                by_name[(group_of.get(typ, typ), norm)].append(eid)
        for (typ, norm), ids in by_name.items():
            if len(ids) > 1:
                first, *rest = sorted(ids)
                for other in rest:
                    uf.union(first, other)
                for eid in ids:
                    why[eid].append(f"same name {norm!r} ({typ})")
    components: dict[str, list[str]] = defaultdict(list)
    for eid in list(uf.parent):
        components[uf.find(eid)].append(eid)
    first_doc = {eid: rank for eid, rank in g.conn.execute(
        "SELECT es.entity_id, MIN(d.rowid) FROM entity_sources es JOIN documents d ON d.id = es.document_id GROUP BY es.entity_id")}
    rowid = {eid: r for eid, r in g.conn.execute("SELECT id, rowid FROM entities")}
    groups: list[MergeGroup] = []
    too_large: list[dict[str, Any]] = []
    for ids in components.values():
        ids = [i for i in dict.fromkeys(ids) if i in ents]
        if len(ids) < 2:
            continue
        # canonical: a live term before a deprecated one, then the earliest source, then the first row
        ids.sort(key=lambda e: (ents[e][1].startswith("obsolete"), first_doc.get(e, 1 << 62), rowid.get(e, 1 << 62), e))
        if len(ids) > cfg.max_group:
            too_large.append({"size": len(ids), "members": [{"id": e, "name": ents[e][0], "type": ents[e][2]} for e in ids[:20]]})
            continue
        groups.append(MergeGroup(ids[0], ids, sorted({r for e in ids for r in why[e]})))
    groups.sort(key=lambda grp: grp.canonical)
    cross = [grp for grp in groups if len({ents[e][2] for e in grp.members}) > 1]
    report = {"groups": len(groups), "entities_merged": sum(len(grp.members) - 1 for grp in groups),
              "too_large": too_large, "noise_names": noise_names[:200], "noise_names_total": len(noise_names),
              "quarantined": len(quarantine), "quarantined_triples": sum(q["triples"] for q in quarantine),
              "quarantined_entities": quarantine[:200],
              "cross_type": len(cross),
              "cross_type_groups": [{"canonical": grp.canonical, "members": [{"id": e, "name": ents[e][0], "type": ents[e][2]} for e in grp.members],
                                     "because": grp.reasons} for grp in cross[:200]],
              "examples": [{"canonical": {"id": grp.canonical, "name": ents[grp.canonical][0], "type": ents[grp.canonical][2]},
                            "merged": [{"id": e, "name": ents[e][0], "type": ents[e][2]} for e in grp.members[1:]],
                            "because": grp.reasons} for grp in groups[:200]]}
    report["_quarantine_ids"] = [q["id"] for q in quarantine]
    report["_quarantine_all"] = quarantine
    return groups, report


# --------------------------------------------------------------------------- journal helpers


def _select(c: Any, table: str, where: str, ids: list[str]) -> list[tuple]:
    cols = ", ".join(COLUMNS[table])
    out: list[tuple] = []
    for i in range(0, len(ids), 400):
        chunk = ids[i:i + 400]
        q = ",".join("?" * len(chunk))
        out += [tuple(r) for r in c.execute(f"SELECT {cols} FROM {table} WHERE {where.format(q=q)}", chunk * where.count("{q}"))]
    return out


def _key(table: str, row: Iterable[Any]) -> tuple:
    row = tuple(row)
    return tuple("" if (table == "triple_sources" and i == 2 and row[i] is None) else row[i] for i in KEYS[table])


def _exists(c: Any, table: str, row: tuple) -> tuple | None:
    cols = COLUMNS[table]
    conds, args = [], []
    for i in KEYS[table]:
        if table == "triple_sources" and i == 2:
            conds.append("COALESCE(snippet_id, '') = ?")
            args.append(row[i] or "")
        else:
            conds.append(f"{cols[i]} = ?")
            args.append(row[i])
    r = c.execute(f"SELECT {', '.join(cols)} FROM {table} WHERE {' AND '.join(conds)}", args).fetchone()
    return tuple(r) if r else None


def _insert(c: Any, table: str, rows: list[tuple], ignore: bool = False) -> None:
    if rows:
        cols = COLUMNS[table]
        c.executemany(f"INSERT {'OR IGNORE ' if ignore else ''}INTO {table}({', '.join(cols)}) VALUES ({','.join('?' * len(cols))})", rows)


def _delete(c: Any, table: str, rows: list[tuple]) -> None:
    cols = COLUMNS[table]
    for row in rows:
        conds = []
        args = []
        for i in KEYS[table]:
            if table == "triple_sources" and i == 2:
                conds.append("COALESCE(snippet_id, '') = ?")
                args.append(row[i] or "")
            else:
                conds.append(f"{cols[i]} = ?")
                args.append(row[i])
        c.execute(f"DELETE FROM {table} WHERE {' AND '.join(conds)}", args)


# --------------------------------------------------------------------------- merging


def _quarantine(g: Graph, ids: list[str]) -> dict[str, list[tuple]]:
    """Remove entities (noise-only names) with their sources, aliases, triples and links; returns the
    removed rows for the journal. Runs inside the caller's write transaction."""
    c = g.conn
    rem: dict[str, list[tuple]] = {t: [] for t in COLUMNS}
    if not ids:
        return rem
    rem["entities"] = _select(c, "entities", "id IN ({q})", ids)
    rem["entity_sources"] = _select(c, "entity_sources", "entity_id IN ({q})", ids)
    rem["aliases"] = _select(c, "aliases", "entity_id IN ({q})", ids)
    rem["triples"] = _select(c, "triples", "head_id IN ({q}) OR tail_id IN ({q})", ids)
    rem["triple_sources"] = _select(c, "triple_sources", "triple_id IN ({q})", [t[0] for t in rem["triples"]])
    rem["links"] = _select(c, "links", "src_id IN ({q}) OR dst_id IN ({q})", ids)
    _delete(c, "triples", rem["triples"])  # their triple_sources cascade
    _delete(c, "links", rem["links"])
    for i in range(0, len(ids), 400):
        chunk = ids[i:i + 400]
        c.execute(f"DELETE FROM entities WHERE id IN ({','.join('?' * len(chunk))})", chunk)  # sources, aliases cascade
    return rem


def _merge(g: Graph, groups: list[MergeGroup], cfg: IntegrateConfig, quarantine: list[str] | None = None) -> tuple[dict[str, Any], dict[str, int]]:
    """Quarantine ``quarantine`` (entities), then rewrite the rows of merged entities onto their
    canonical entity; returns (journal, counts).

    Runs inside the caller's write transaction.
    """
    c = g.conn
    qrem = _quarantine(g, list(quarantine or []))
    canon = {m: grp.canonical for grp in groups for m in grp.members[1:]}
    merged, canonicals = list(canon), sorted({grp.canonical for grp in groups})
    to = lambda e: canon.get(e, e)  # noqa: E731
    removed: dict[str, list[tuple]] = {t: [] for t in COLUMNS}
    created: dict[str, list[tuple]] = {t: [] for t in COLUMNS}
    updated: dict[str, list[tuple]] = {t: [] for t in COLUMNS}  # rows as they were before the merge changed them
    counts = {"self_loops_dropped": 0, "triples_rewritten": 0, "triples_joined": 0, "noise_aliases_removed": 0}

    removed["entities"] = _select(c, "entities", "id IN ({q})", merged)
    removed["entity_sources"] = _select(c, "entity_sources", "entity_id IN ({q})", merged)
    removed["aliases"] = _select(c, "aliases", "entity_id IN ({q})", merged)
    removed["triples"] = _select(c, "triples", "head_id IN ({q}) OR tail_id IN ({q})", merged)
    removed["triple_sources"] = _select(c, "triple_sources", "triple_id IN ({q})", [t[0] for t in removed["triples"]])
    removed["links"] = _select(c, "links", "src_id IN ({q}) OR dst_id IN ({q})", merged)
    updated["entities"] = _select(c, "entities", "id IN ({q})", canonicals)

    pending: dict[str, dict[tuple, tuple]] = {t: {} for t in COLUMNS}  # key → new row (inserted at the end)

    def put(table: str, row: tuple, combine: Callable[[tuple, tuple], tuple] | None = None) -> None:
        """Create ``row`` unless its key exists; where it does, ``combine(old, new)`` may update it."""
        k = _key(table, row)
        if k in pending[table]:
            if combine:
                pending[table][k] = combine(pending[table][k], row)
            return
        old = _exists(c, table, row)
        if old is None:
            pending[table][k] = row
        elif combine:
            new = combine(old, row)
            if new != old:
                updated[table].append(old)
                _delete(c, table, [old])
                _insert(c, table, [new])

    def join_sources(old: tuple, new: tuple) -> tuple:  # entity_sources: attributes merged, first description kept
        attrs = merge_attributes([json.loads(old[2] or "{}"), json.loads(new[2] or "{}")])
        return (old[0], old[1], json.dumps(attrs, ensure_ascii=False), old[3] or new[3])

    def keep_max(pos: int) -> Callable[[tuple, tuple], tuple]:
        return lambda old, new: new if new[pos] > old[pos] else old

    for eid, doc, attrs, desc in removed["entity_sources"]:
        put("entity_sources", (to(eid), doc, attrs, desc), join_sources)
    for norm, eid, alias, kind, doc in removed["aliases"]:
        if cfg.filter_noise and kind not in cfg.xref_kinds and is_noise(alias):
            counts["noise_aliases_removed"] += 1
            continue
        put("aliases", (norm, to(eid), alias, kind, doc))
    for eid, doc, _, _ in removed["entity_sources"]:  # the old id stays findable, under each of its documents
        put("aliases", (norm_key(eid), to(eid), eid, "xref", doc))
    sources_of: dict[str, list[tuple]] = defaultdict(list)
    for ts in removed["triple_sources"]:
        sources_of[ts[0]].append(ts)
    touched_triples: set[str] = set()
    for tid, h, rel, t, conf, layer, origin, attrs in removed["triples"]:
        nh, nt = to(h), to(t)
        if nh == nt:
            counts["self_loops_dropped"] += 1
            continue
        nid = triple_id_for(nh, rel, nt)
        counts["triples_rewritten"] += 1
        if nid in pending["triples"] or _exists(c, "triples", (nid,)):
            counts["triples_joined"] += 1
        put("triples", (nid, nh, rel, nt, conf, layer, origin, attrs))
        touched_triples.add(nid)
        for ts in sources_of[tid]:
            put("triple_sources", (nid, *ts[1:]), keep_max(4))
    for src, dst, kind, score, doc in removed["links"]:
        if to(src) != to(dst):
            put("links", (to(src), to(dst), kind, score, doc), keep_max(3))

    # the old rows go (triples first: they reference the entities), then the new rows come
    _delete(c, "triples", removed["triples"])  # their triple_sources cascade
    _delete(c, "links", removed["links"])
    for i in range(0, len(merged), 400):
        chunk = merged[i:i + 400]
        c.execute(f"DELETE FROM entities WHERE id IN ({','.join('?' * len(chunk))})", chunk)  # sources, aliases cascade
    for table in ("triples", "triple_sources", "entity_sources", "aliases", "links"):
        rows = list(pending[table].values())
        _insert(c, table, rows)
        created[table] = rows
    new_ids = {r[0] for r in created["triples"]}
    updated["triples"] += _select(c, "triples", "id IN ({q})", [t for t in touched_triples if t not in new_ids])
    g._refresh_triples(sorted(touched_triples))
    g._refresh_entities(canonicals)
    for table in COLUMNS:  # the quarantined rows first: they were removed first
        removed[table] = qrem[table] + removed[table]
    counts["quarantined"] = len(qrem["entities"])
    if cfg.filter_noise:
        counts["noise_aliases_removed"] += _drop_noise_aliases(g, cfg, removed)
    journal = {"canonical": canon, "removed": removed, "created": created, "updated": updated}
    return journal, counts


def _drop_noise_aliases(g: Graph, cfg: IntegrateConfig, removed: dict[str, list[tuple]]) -> int:
    """Noise aliases of the entities that were not merged (merged ones were filtered on the way)."""
    q = ",".join("?" * len(cfg.xref_kinds)) or "''"
    rows = [tuple(r) for r in g.conn.execute(
        f"SELECT {', '.join(COLUMNS['aliases'])} FROM aliases WHERE kind NOT IN ({q}) AND kind != 'name'", list(cfg.xref_kinds))
        if is_noise(r[2])]
    removed["aliases"] += rows
    _delete(g.conn, "aliases", rows)
    return len(rows)


def _undo(g: Graph, journal: dict[str, Any]) -> dict[str, int]:
    """Reverse a merge journal inside the caller's write transaction (rows of documents removed
    since are not brought back)."""
    c = g.conn
    rows = {k: {t: [tuple(r) for r in v] for t, v in journal[k].items()} for k in ("removed", "created", "updated")}
    docs = {r[0] for r in c.execute("SELECT id FROM documents")}
    snippets_ok = lambda sid: sid is None or c.execute("SELECT 1 FROM snippets WHERE id=?", (sid,)).fetchone() is not None  # noqa: E731
    # 1. what the merge created goes
    for table in ("triple_sources", "aliases", "entity_sources", "links"):
        _delete(c, table, rows["created"][table])
    created_triples = [r[0] for r in rows["created"]["triples"]]
    for i in range(0, len(created_triples), 400):
        chunk = created_triples[i:i + 400]
        c.execute(f"DELETE FROM triples WHERE id IN ({','.join('?' * len(chunk))}) "
                  "AND NOT EXISTS (SELECT 1 FROM triple_sources ts WHERE ts.triple_id = triples.id)", chunk)
    # 2. what it changed gets its old values back (where the row is still there)
    for old in rows["updated"]["entities"]:
        c.execute("UPDATE entities SET name=?, norm=?, type=?, layer=?, attributes=?, description=? WHERE id=?", (*old[1:], old[0]))
    for old in rows["updated"]["triples"]:
        c.execute("UPDATE triples SET confidence=?, layer=?, attributes=? WHERE id=?", (old[4], old[5], old[7], old[0]))
    for table in ("triple_sources", "entity_sources", "links"):
        for old in rows["updated"][table]:
            if _exists(c, table, old) is not None:  # gone with its document otherwise
                _delete(c, table, [old])
                _insert(c, table, [old])
    # 3. what it removed comes back, where its documents still exist
    ent_docs: dict[str, set[str]] = defaultdict(set)
    for r in rows["removed"]["entity_sources"]:
        ent_docs[r[0]].add(r[1])
    _insert(c, "entities", [r for r in rows["removed"]["entities"] if ent_docs[r[0]] & docs], ignore=True)
    alive = lambda eid: c.execute("SELECT 1 FROM entities WHERE id=?", (eid,)).fetchone() is not None  # noqa: E731
    _insert(c, "entity_sources", [r for r in rows["removed"]["entity_sources"] if r[1] in docs and alive(r[0])], ignore=True)
    _insert(c, "aliases", [r for r in rows["removed"]["aliases"] if r[4] in docs and alive(r[1])], ignore=True)
    ts_ok = [r for r in rows["removed"]["triple_sources"] if r[1] in docs and snippets_ok(r[2])]
    supported = {r[0] for r in ts_ok}
    c.executemany("INSERT OR IGNORE INTO relations(name) VALUES (?)", sorted({(r[2],) for r in rows["removed"]["triples"]}))
    _insert(c, "triples", [r for r in rows["removed"]["triples"] if r[0] in supported and alive(r[1]) and alive(r[3])], ignore=True)
    _insert(c, "triple_sources", [r for r in ts_ok if c.execute("SELECT 1 FROM triples WHERE id=?", (r[0],)).fetchone()], ignore=True)
    _insert(c, "links", [r for r in rows["removed"]["links"] if r[4] in docs and alive(r[0]) and alive(r[1])], ignore=True)
    # 4. canonical entities nothing supports any more go (as `remove_document` would have done)
    canonicals = sorted(set(journal["canonical"].values()))
    for i in range(0, len(canonicals), 400):
        chunk = canonicals[i:i + 400]
        c.execute(f"DELETE FROM entities WHERE id IN ({','.join('?' * len(chunk))}) "
                  "AND NOT EXISTS (SELECT 1 FROM entity_sources es WHERE es.entity_id = entities.id) "
                  "AND NOT EXISTS (SELECT 1 FROM triples t WHERE t.head_id = entities.id OR t.tail_id = entities.id)", chunk)
    touched = sorted({r[0] for r in rows["removed"]["triples"]} | {r[0] for r in rows["updated"]["triples"]})
    g._refresh_triples(touched)
    g._refresh_entities(sorted(set(canonicals) | {r[0] for r in rows["removed"]["entities"]}))
    c.execute("DELETE FROM relations WHERE NOT EXISTS (SELECT 1 FROM triples t WHERE t.relation = relations.name)")
    return {"entities_restored": len(rows["removed"]["entities"]), "rows_created_removed": sum(len(v) for v in rows["created"].values())}


# --------------------------------------------------------------------------- public API


class _DryRun(Exception):
    """Raised inside a write transaction to roll it back."""


def integration_document(g: Graph) -> dict[str, Any] | None:
    """The graph's current integration document (with its journal in ``meta``), or None."""
    r = g.conn.execute("SELECT id FROM documents WHERE format=? ORDER BY rowid DESC LIMIT 1", (FORMAT,)).fetchone()
    return g.get_document(r[0]) if r else None


def undo_integration(g: Graph) -> dict[str, Any]:
    """Undo the graph's integration (one transaction). Returns what was undone; a no-op without one."""
    doc = integration_document(g)
    if doc is None:
        return {"undone": None}
    with g.write() as c:
        out = _undo(g, doc["meta"]["journal"])
        c.execute("DELETE FROM documents WHERE format=?", (FORMAT,))
    g.write_manifest("integrate-undo", {"document": doc["id"], **out})
    return {"undone": doc["id"], **out}


def integrate(g: Graph, cfg: IntegrateConfig | None = None) -> dict[str, Any]:
    """Merge entities across sources (see the module docstring); returns the report.

    In one transaction: the previous integration (if any) is undone, groups are found on the graph
    as it then is, merged, and journalled in a new ``integration`` document.
    """
    cfg = cfg or IntegrateConfig()
    if cfg.max_group < 2:
        raise BencaoError(f"max_group={cfg.max_group}: must be at least 2")
    previous = integration_document(g)
    if cfg.dry_run:  # on the graph as it would be without the previous integration, then rolled back
        try:
            with g.write():
                if previous is not None:
                    _undo(g, previous["meta"]["journal"])
                groups, report = find_groups(g, cfg)
                report.pop("_quarantine_ids")
                q_ids = report.pop("_quarantine_all")
                _merge(g, groups, cfg, [q["id"] for q in q_ids])  # rolled back below: the links are found on the merged graph
                if cfg.same_as_links:
                    report["names_shared_across_types_before"] = names_shared_across_types(g)
                    _links, report["same_as"] = find_same_as(g, cfg.substance_types, cfg.same_as_alias_kinds, cfg.max_same_name)
                raise _DryRun
        except _DryRun:
            pass
        return {**report, "dry_run": True, "document": None, "replaced": None}
    with g.write() as c:
        if previous is not None:
            _undo(g, previous["meta"]["journal"])
            c.execute("DELETE FROM documents WHERE format=?", (FORMAT,))
        groups, report = find_groups(g, cfg)
        q_ids, q_all = report.pop("_quarantine_ids"), report.pop("_quarantine_all")
        journal, counts = _merge(g, groups, cfg, q_ids) if groups or cfg.filter_noise or q_ids else ({}, {})
        report.update(counts)
        report["document"] = None
        links: list[dict[str, Any]] = []
        if cfg.same_as_links:  # on the merged graph: what a name still joins across types
            report["names_shared_across_types_before"] = names_shared_across_types(g)
            links, report["same_as"] = find_same_as(g, cfg.substance_types, cfg.same_as_alias_kinds, cfg.max_same_name)
        if groups or counts.get("noise_aliases_removed") or counts.get("quarantined") or links:
            doc_id = "D" + content_hash(FORMAT, json.dumps(journal["canonical"], sort_keys=True), json.dumps(asdict(cfg), sort_keys=True),
                                        json.dumps(q_ids), g.conn.execute("SELECT COUNT(*), MAX(rowid) FROM documents").fetchone()[1])
            meta = {"config": asdict(cfg), "report": {k: v for k, v in report.items() if k not in ("examples", "quarantined_entities")},
                    "quarantine": q_all, "journal": journal}
            title = f"integration: {report['entities_merged']} entities merged into {report['groups']}"
            if q_ids:
                title += f", {len(q_ids)} noise-named entities quarantined"
            if links:
                title += f", {len(links)} same_as links across types"
            c.execute("INSERT INTO documents(id, source, title, kind, format, licence, status, meta, added_at) VALUES (?,?,?,?,?,?,?,?,?)",
                      (doc_id, "graph integrate", title, "derived", FORMAT, None, "ready", json.dumps(meta, ensure_ascii=False), _now()))
            # the links belong to this document: --undo, a re-integration or `graph remove` of it takes them away
            c.executemany("INSERT OR IGNORE INTO links(src_id, dst_id, kind, score, document_id) VALUES (?,?,?,?,?)",
                          [(x["src"], x["dst"], SAME_AS_KIND, SAME_AS_SCORE, doc_id) for x in links])
            report["document"] = doc_id
        if cfg.same_as_links:
            report["names_shared_across_types_after"], report["names_kept_apart_by_types"] = names_still_split(g)
    report["replaced"] = previous["id"] if previous else None
    g.write_manifest("integrate", {"document": report["document"], "groups": report["groups"], "merged": report["entities_merged"]})
    return report


def quarantined(g: Graph) -> dict[str, Any]:
    """What the graph's integration quarantined: ``{document, entities: [{id, name, type, triples,
    aliases: [...], triple_rows: [(head, relation, tail), ...]}]}`` read from its journal (empty when
    not integrated)."""
    doc = integration_document(g)
    if doc is None:
        return {"document": None, "entities": []}
    listed = {q["id"]: dict(q) for q in doc["meta"].get("quarantine") or []}
    removed = doc["meta"]["journal"].get("removed") or {}
    for r in removed.get("aliases") or []:
        if r[1] in listed:
            listed[r[1]].setdefault("aliases", []).append({"alias": r[2], "kind": r[3]})
    for r in removed.get("triples") or []:
        for end in (r[1], r[3]):
            if end in listed and [r[1], r[2], r[3]] not in listed[end].setdefault("triple_rows", []):
                listed[end]["triple_rows"].append([r[1], r[2], r[3]])
    return {"document": doc["id"], "entities": list(listed.values())}


def reintegrate_if_integrated(g: Graph) -> dict[str, Any] | None:
    """After a document was added or removed: integrate again with the recorded settings (None when
    the graph was never integrated)."""
    doc = integration_document(g)
    if doc is None:
        return None
    from bencao.config import from_dict

    return integrate(g, from_dict(IntegrateConfig, doc["meta"].get("config") or {}, where=f"document {doc['id']}"))


def summary(report: dict[str, Any]) -> str:
    """A few human lines about an integration report."""
    head = "would merge" if report.get("dry_run") else "merged"
    lines = [f"{head} {report['entities_merged']} entities into {report['groups']} canonical entities"
             + (f" (document {report['document']}; undo with `bencao graph integrate --undo`)" if report.get("document") else "")]
    if "triples_rewritten" in report:
        lines.append(f"  triples moved to canonical entities: {report['triples_rewritten']} ({report['triples_joined']} joined an identical triple, "
                     f"{report['self_loops_dropped']} self-loops dropped); noise aliases removed: {report['noise_aliases_removed']}")
    for ex in report.get("examples", [])[:10]:
        m = ", ".join(f"{x['name']} [{x['id']}, {x['type']}]" for x in ex["merged"])
        lines.append(f"  {ex['canonical']['name']} [{ex['canonical']['id']}, {ex['canonical']['type']}] ← {m}  ({'; '.join(ex['because'])})")
    if report.get("groups", 0) > 10:
        lines.append(f"  ... {report['groups'] - 10} more groups (see --json)")
    for big in report.get("too_large", []):
        lines.append(f"  left alone: a group of {big['size']} (over max_group): " + ", ".join(x["name"] for x in big["members"][:5]) + " ...")
    if report.get("cross_type"):
        lines.append(f"  merged across types: {report['cross_type']} groups hold entities of more than one type")
        for grp in report.get("cross_type_groups", [])[:5]:
            lines.append("    " + " = ".join(f"{m['name']} [{m['id']}, {m['type']}]" for m in grp["members"]))
    sa = report.get("same_as")
    if sa is not None:
        lines.append(f"  names shared across types: {report.get('names_shared_across_types_before')} before the same_as links"
                     + (f", {report['names_shared_across_types_after']} still split after (homonyms kept apart)"
                        if report.get("names_shared_across_types_after") is not None else ""))
        lines.append(f"  {'would link' if report.get('dry_run') else 'linked'} {sa['links']} pairs same_as across types "
                     f"({', '.join(f'{k}: {v}' for k, v in sa['links_by_types'].items()) or 'none'})")
        if report.get("names_kept_apart_by_types"):
            lines.append("  names kept apart, by the types that share them: "
                         + ", ".join(f"{k}: {v}" for k, v in list(report["names_kept_apart_by_types"].items())[:8]))
        for x in sa["examples"][:5]:
            lines.append(f"    {x['evidence']}")
    if report.get("quarantined"):
        verb = "would quarantine" if report.get("dry_run") else "quarantined"
        names = ", ".join(repr(q["name"]) for q in report.get("quarantined_entities", [])[:8])
        lines.append(f"  {verb} {report['quarantined']} entities whose every name is noise ({names}; {report['quarantined_triples']} triples)"
                     + ("; list them with `bencao graph integrate --quarantined`" if not report.get("dry_run") else ""))
    if report.get("noise_names_total"):
        lines.append(f"  entities with a noise name and another name (kept, never merged on the noise name): {report['noise_names_total']}")
    return "\n".join(lines)
