"""The SQLite graph store: documents → sections → snippets (macro), entities/triples (micro).

Usage::

    g = Graph.open("graphs/sample")            # or Graph.create(dir)
    b = g.builder(source="神农本草经.txt", kind="book", format="books-txt", content_key=sha1)
    book = b.section("神农本草经")
    sec = b.section("丹砂", parent=book)
    snip = b.snippet(sec, "味甘，微寒。主身体五脏百病……")
    e = b.entity("丹砂", "substance")
    t = b.triple(e, "has_flavour", b.entity("甘", "flavour"), confidence=0.7, snippet=snip)
    g.commit(b)                                # one transaction; a no-op if the document exists

Ids are content hashes, so the same input always gives the same ids and re-ingesting changes
nothing. Every fact records the document that asserted it; ``remove_document`` deletes the
document and then only the triples/entities no other document supports.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import os
import sqlite3
import threading
import uuid
from collections import Counter, OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator

from bencao import faults
from bencao.errors import BencaoError, DiskFull, InvalidValue, is_disk_full
from bencao.io import atomic_write_json, check_name, check_text, clean_title, content_hash, read_limits
from bencao.text import norm_key

SCHEMA_VERSION = 1
DB_NAME = "graph.sqlite"
MANIFEST_NAME = "manifest.json"

#: A streamed document (its loader calls ``DocumentBuilder.checkpoint``) spills into its open transaction
#: whenever the builder holds this many entities and snippets.
SPILL_ITEMS = 20_000

#: When several sources give a triple different layers, the most trusted wins.
LAYER_PRECEDENCE = ("imported", "book", "personal", "completed")

_SCHEMA_SQL = (Path(__file__).with_name("schema.sql")).read_text(encoding="utf-8")


#: Seconds a write waits for another connection's write transaction before giving up.
BUSY_TIMEOUT_S = 60.0


def _ino(path: Path) -> int | None:
    try:
        return os.stat(path).st_ino
    except OSError:
        return None


def store_signature(directory: str | Path) -> tuple | None:
    """What ``stat`` says of the store behind ``directory`` (file, inode, mtimes and sizes of the store and
    its WAL): any commit changes it, at a fraction of the cost of :func:`store_key`, so a server can
    check it before every request and read the generation only when it moved."""
    try:
        real = os.path.realpath(Path(directory) / DB_NAME)
        st = os.stat(real)
        try:
            wal = os.stat(real + "-wal")
            w = (wal.st_mtime_ns, wal.st_size)
        except FileNotFoundError:
            w = (0, 0)
    except OSError:
        return None
    return (real, st.st_ino, st.st_mtime_ns, st.st_size, *w)


def store_key(directory: str | Path) -> tuple[str, int, int] | None:
    """``(store file, its inode, write generation)`` of the graph at ``directory``, read with a short-lived
    read-only connection: a long-lived reader (``bencao serve``) compares it between requests to notice
    a rebuilt graph (another file behind the DIR symlink) or a committed change (a higher generation).
    None when there is no readable graph there (e.g. in the middle of a recovery)."""
    path = Path(directory) / DB_NAME
    try:
        real = os.path.realpath(path)
        ino = os.stat(real).st_ino
        conn = sqlite3.connect(read_only_uri(real), uri=True, timeout=1.0)
        try:
            r = conn.execute("SELECT value FROM meta WHERE key='generation'").fetchone()
        finally:
            conn.close()
    except (OSError, sqlite3.Error):
        return None
    return (real, ino, int(r[0]) if r else 0)


def folder_writable(directory: str | Path) -> bool:
    """Can this process create files in ``directory``? False on a read-only mount and in a folder without write permission."""
    return os.access(directory, os.W_OK)


def read_only_uri(path: str | Path) -> str:
    """The URI that opens the store at ``path`` for reading.

    A WAL-mode store needs its WAL index (``-shm``) even to be read, and SQLite makes that file beside
    the store: in a folder this process cannot write to (a read-only mount, a container image, a shared
    folder), opening a cleanly closed graph fails with "unable to open database file". There the store
    is opened ``immutable``: read as it is on disk, no locks, no WAL index. A store that was not closed
    cleanly (a non-empty ``-wal`` beside it) is opened normally, so its last commits are not skipped."""
    from urllib.parse import quote

    path = Path(path)
    uri = f"file:{quote(str(path))}?mode=ro"
    if folder_writable(path.parent):
        return uri
    wal = Path(f"{path}-wal")
    try:
        pending = wal.stat().st_size > 0
    except OSError:
        pending = False
    return uri if pending else uri + "&immutable=1"


DAMAGED_MANIFEST = MANIFEST_NAME + ".damaged"
#: The manifest's records that must be objects (or lists) when present.
_MANIFEST_SHAPES = {"counts": dict, "embedders": dict, "indexes": dict, "history": list, "build": dict}


def manifest_problem(path: str | Path) -> str | None:
    """What is wrong with the manifest at ``path`` (unreadable, not UTF-8 JSON, not an object, a record of the wrong
    shape), or None when it reads as a manifest."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        return f"unreadable: {exc.strerror or exc}"
    except UnicodeDecodeError:
        return "not UTF-8 text"
    except ValueError as exc:
        return f"not JSON: {exc}"
    if not isinstance(data, dict):
        return f"a JSON {type(data).__name__}, not an object"
    for key, shape in _MANIFEST_SHAPES.items():
        if key in data and not isinstance(data[key], shape):
            return f"its {key!r} record is a {type(data[key]).__name__}, not a{'n object' if shape is dict else ' list'}"
    idx = data.get("indexes") or {}
    for key in ("generation", "config", "lexical", "dense"):
        if key in idx and idx[key] is not None and not isinstance(idx[key], dict):
            return f"its indexes.{key} record is a {type(idx[key]).__name__}, not an object"
    return None


#: Stores this process opened (the newest last): what a "database disk image is malformed" met later is about.
_OPENED: list[Path] = []


def damaged_store_error(path: str | Path, exc: BaseException) -> BencaoError:
    """The one-line error for a store SQLite cannot read (truncated, overwritten, not a database)."""
    return BencaoError(f"{path}: the graph store is damaged ({exc}); it cannot be repaired in place: rebuild the graph with "
                       f"`bencao graph build --config RECIPE --graph {Path(path).parent}` (or restore the folder from a backup)")


def damaged_store_message(exc: BaseException) -> str | None:
    """For the CLI: the one line for a damage error SQLite raised while reading a store this process opened."""
    text = str(exc)
    if not isinstance(exc, sqlite3.DatabaseError) or not any(w in text for w in ("malformed", "not a database", "disk I/O error")):
        return None
    return str(damaged_store_error(_OPENED[-1] if _OPENED else DB_NAME, exc))


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat()


def entity_id_for(name: str, type_: str) -> str:
    """Content-hash id of a name-keyed entity (sources without their own ids)."""
    return "E" + content_hash(type_, norm_key(name))


def triple_id_for(head_id: str, relation: str, tail_id: str) -> str:
    return "T" + content_hash(head_id, relation, tail_id)


def merge_attributes(dicts: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """Merge attribute dicts in source order: lists are unioned (order kept), scalars first-wins."""
    out: dict[str, Any] = {}
    for d in dicts:
        for k, v in d.items():
            if k not in out:
                out[k] = list(v) if isinstance(v, list) else v
            elif isinstance(out[k], list) and isinstance(v, list):
                for item in v:
                    if item not in out[k]:
                        out[k].append(item)
    return out


# --------------------------------------------------------------------------- builder


@dataclass
class _Entity:
    id: str
    name: str
    norm: str
    type: str
    layer: str
    attributes: dict[str, Any] = field(default_factory=dict)
    description: str | None = None


class DocumentBuilder:
    """Collects one document's sections, snippets, entities, aliases and triples for one commit.

    Loaders call its methods while parsing; nothing touches the store until ``Graph.commit``, so a
    parse error leaves the graph exactly as it was.
    """

    def __init__(self, graph: "Graph", *, source: str, kind: str, content_key: str, format: str | None = None,
                 title: str | None = None, licence: str | None = None, meta: dict[str, Any] | None = None):
        self.graph = graph
        self.document_id = "D" + content_hash(format or "", content_key)
        self.source = source
        self.kind = kind
        self.format = format
        self.title = clean_title(title, "document title") or None if title else title  # a 1 MB --title is cut like a heading
        self.licence = clean_title(licence, "licence") or None if licence else licence
        self.meta = dict(meta or {})
        self.sections: list[tuple] = []
        self.snippets: list[tuple] = []
        self.entities: dict[str, _Entity] = {}
        self.aliases: dict[tuple[str, str, str], str] = {}
        self.triples: dict[str, tuple] = {}
        self.triple_sources: dict[tuple[str, str], tuple] = {}
        self.links: dict[tuple[str, str, str], float] = {}
        self.relations: dict[str, tuple] = {}
        self._section_paths: dict[str, list[str]] = {}
        self._section_levels: dict[str, int] = {}
        self._snippet_ord: Counter[str] = Counter()
        self._local_names: dict[tuple[str, str], str] = {}
        self._attrs_cache: dict[tuple, str] = {}
        self._graph_names: dict[tuple[str, str], str | None] = {}  # (type, key) → id in the graph, prefetched
        #: ids a record of the source defines (``entity(..., defines=True)``) → (name, record) of the first definition
        self._defined: dict[str, tuple[str, str | None]] = {}
        #: (id, first name, first record, other name, other record): one id defined with two different names
        self.conflicts: list[tuple[str, str, str | None, str, str | None]] = []
        #: what normalisation and checks changed or found (shown in the add's summary when not zero)
        self.notes: dict[str, int] = {}
        # -- streaming (a loader that calls checkpoint() between batches): what was spilled into the open transaction
        self._tx: contextlib.ExitStack | None = None
        self._spilled: Counter[str] = Counter()
        self._merged_entities: set[str] = set()  # entities this document gave again after a spill (their views are refreshed)
        self._known: "OrderedDict[str, bool]" = OrderedDict()  # spilled entity ids a later triple used (bounded)

    # -- streaming
    @property
    def spilled(self) -> bool:
        return self._tx is not None

    def checkpoint(self) -> bool:
        """Called by a loader between batches of records. Once the builder holds :data:`SPILL_ITEMS` entities and
        snippets, they (with their aliases, triples and sources) are written into the store inside the
        document's one write transaction, opened now and committed by ``Graph.commit``, and dropped from memory:
        a large file streams in bounded memory and still lands all or nothing. True when it spilled (a loader may then
        forget what it kept of the records so far: it is in the store, readable through this graph's connection)."""
        if len(self.entities) + len(self.snippets) >= SPILL_ITEMS and not self.graph.read_only:
            self.graph._spill(self)
            return self._tx is not None
        return False

    def abort(self) -> None:
        """Roll back what a streamed document spilled (its transaction); nothing when it spilled nothing."""
        tx, self._tx = self._tx, None
        if tx is not None:
            import sys

            tx.__exit__(*(sys.exc_info() if sys.exc_info()[0] is not None else (BencaoError, BencaoError("aborted"), None)))

    def _has_entity(self, eid: str) -> bool:
        if eid in self.entities:
            return True
        if self._tx is None:
            return False
        if eid in self._known:
            self._known.move_to_end(eid)
            return True
        found = self.graph.conn.execute("SELECT 1 FROM entities WHERE id=?", (eid,)).fetchone() is not None
        if found:
            self._known[eid] = True
            if len(self._known) > 10_000:
                self._known.popitem(last=False)
        return found

    def _drop_spilled(self) -> None:
        for name, held in (("sections", self.sections), ("snippets", self.snippets), ("entities", self.entities),
                           ("triples", self.triples), ("aliases", self.aliases), ("links", self.links)):
            self._spilled[name] += len(held)
        self.sections, self.snippets = [], []
        self.entities, self.aliases, self.triples, self.triple_sources, self.links = {}, {}, {}, {}, {}
        self._local_names, self._graph_names = {}, {}

    # -- macro
    def section(self, title: str, parent: str | None = None, meta: dict[str, Any] | None = None) -> str:
        """Add a heading; returns its id. ``parent=None`` makes a root (the book itself)."""
        title = clean_title(title, "section title") or "(untitled)"
        path = [*self._section_paths[parent], title] if parent else [title]
        ord_ = len(self.sections)
        sid = "S" + content_hash(self.document_id, json.dumps(path, ensure_ascii=False), ord_)
        level = self._section_levels[parent] + 1 if parent else 0
        self.sections.append((sid, self.document_id, parent, level, title, json.dumps(path, ensure_ascii=False), ord_))
        self._section_paths[sid] = path
        self._section_levels[sid] = level
        return sid

    def section_path(self, section_id: str) -> list[str]:
        return list(self._section_paths[section_id])

    def snippet(self, section_id: str, text: str, n_tokens: int | None = None) -> str:
        from bencao.text import count_tokens

        check_text(text, "snippet text")
        ord_ = self._snippet_ord[section_id]
        self._snippet_ord[section_id] += 1
        sid = "P" + content_hash(section_id, ord_, text)
        self.snippets.append((sid, self.document_id, section_id, ord_, text, n_tokens if n_tokens is not None else count_tokens(text)))
        return sid

    # -- micro
    def entity(self, name: str, type: str, *, id: str | None = None, layer: str = "book",
               attributes: dict[str, Any] | None = None, description: str | None = None,
               aliases: Iterable[tuple[str, str]] = (), defines: bool = False) -> str:
        """Add (or refer to) an entity; returns its id.

        With ``id`` the source's own identifier is used (ontology CURIEs, KB ids). Without it the
        entity is resolved by name: an entity of the same type already known under that name or
        alias (in this document or in the graph) is reused, else a content-hash id is minted.
        ``aliases`` are ``(alias, kind)`` pairs.
        """
        name = check_name(name, "entity name")
        type = check_name(type, "entity type")
        key = norm_key(name)
        if id is None:
            id = self._local_names.get((type, key))
            if id is None:
                if layer == "case":  # the case layer resolves among its own entities, any layer's otherwise known
                    known = self.graph.find_entity_id(key, type)
                else:  # a book, ontology or KB name never resolves to a case-layer entity (case terms, patients)
                    known = self._graph_names.get((type, key), False)
                    if known is False:
                        known = self.graph.find_entity_id(key, type, exclude_layers=("case",))
                id = known or entity_id_for(name, type)
        if defines:  # a record that defines the entity ``id`` (an ontology term, a KB row), not a mention of it
            from bencao.io import current_record

            first = self._defined.get(id)
            if first is None:
                self._defined[id] = (name, current_record())
            elif norm_key(first[0]) != key and len(self.conflicts) < 100:
                self.conflicts.append((id, first[0], first[1], name, current_record()))
        ent = self.entities.get(id)
        if ent is None:
            ent = self.entities[id] = _Entity(id, name, key, type, layer)
            self.alias(id, name, "name")
        if attributes:
            ent.attributes = merge_attributes([ent.attributes, attributes])
        if description and not ent.description:
            cap = read_limits().max_line_bytes  # a definition spread over many short lines (RDF/XML, Turtle) has no line to cap
            if len(description) > cap:
                raise InvalidValue(f"description of {len(description):,} characters, over the limit of {cap:,} (option max_line_bytes)")
            ent.description = check_text(description, "description")
        for alias, kind in aliases:
            self.alias(id, alias, kind)
        return id

    def prefetch_names(self, type_: str, names: Iterable[str]) -> None:
        """Look up in one query per 500 names which of ``names`` the graph already knows as entities of
        ``type_`` (what :meth:`entity` would ask one name at a time): loaders of large tables call it per batch."""
        keys = sorted({k for k in (norm_key(n) for n in names if n and n.strip()) if k and (type_, k) not in self._graph_names})
        for chunk in _chunks(keys, 500):
            q = ",".join("?" * len(chunk))
            best: dict[str, tuple[int, int, str]] = {}
            for norm, eid, is_name, rowid in self.graph.conn.execute(
                    # CROSS JOIN and +e.type keep SQLite on the aliases key: with no statistics it may scan every entity
                    # of the type instead (50 s for 15 lookups once a streamed catalogue had spilled 20 k substances)
                    f"SELECT a.norm, a.entity_id, a.kind='name', e.rowid FROM aliases a CROSS JOIN entities e ON e.id = a.entity_id "
                    f"WHERE a.norm IN ({q}) AND +e.type=? AND e.layer != 'case'", (*chunk, type_)):
                rank = (-int(is_name), rowid, eid)
                if norm not in best or rank < best[norm]:
                    best[norm] = rank
            for k in chunk:
                self._graph_names[(type_, k)] = best[k][2] if k in best else None
        if len(self._graph_names) > 2_000_000:  # bounded: a miss only costs the one-name query
            self._graph_names.clear()

    def alias(self, entity_id: str, alias: str, kind: str) -> None:
        if not alias.strip():
            return
        alias = check_name(alias, f"{kind} alias")
        key = norm_key(alias)
        if not key:
            return
        self.aliases.setdefault((key, entity_id, kind), alias)
        ent = self.entities.get(entity_id)
        if ent is not None:
            self._local_names.setdefault((ent.type, key), entity_id)

    def relation(self, name: str, description: str | None = None, head_type: str | None = None, tail_type: str | None = None) -> None:
        name = check_name(name, "relation name")
        self.relations[name] = (name, description, head_type, tail_type)

    def triple(self, head_id: str, relation: str, tail_id: str, *, confidence: float, layer: str, origin: str,
               snippet: str | None = None, kind: str | None = None, attributes: dict[str, Any] | None = None) -> str:
        """Add a triple with its provenance (the snippet, or the document for curated rows)."""
        if not 0.0 <= confidence <= 1.0:
            raise ValueError(f"confidence {confidence} outside [0, 1]")
        for eid in (head_id, tail_id):
            if not self._has_entity(eid):
                raise KeyError(f"entity {eid} must be added to the builder before a triple uses it")
        if relation not in self.relations:
            self.relations[check_name(relation, "relation name")] = (relation, None, None, None)
        tid = triple_id_for(head_id, relation, tail_id)
        attrs = self._attrs_json(attributes) if attributes else "{}"
        prev = self.triples.get(tid)
        if prev is None or confidence > prev[4]:
            self.triples[tid] = (tid, head_id, relation, tail_id, confidence, layer, origin, attrs)
        kind = kind or ("M1" if snippet else "record")
        src_key = (tid, snippet or "")
        old = self.triple_sources.get(src_key)
        if old is None or confidence > old[4]:
            self.triple_sources[src_key] = (tid, self.document_id, snippet, kind, confidence, layer, origin, attrs)
        return tid

    def _attrs_json(self, attributes: dict[str, Any]) -> str:
        """JSON of a triple's attributes; the few distinct flat ones (e.g. a KB row's source and
        rating) are encoded once per document instead of once per triple."""
        try:
            key = tuple((k, type(v).__name__, v) for k, v in sorted(attributes.items()))  # 1, 1.0 and True stay apart
            hash(key)
        except TypeError:  # lists or dicts as values
            return json.dumps(attributes, ensure_ascii=False, sort_keys=True)
        out = self._attrs_cache.get(key)
        if out is None:
            out = json.dumps(attributes, ensure_ascii=False, sort_keys=True)
            if len(self._attrs_cache) < 10_000:
                self._attrs_cache[key] = out
        return out

    def link(self, src_id: str, dst_id: str, kind: str, score: float) -> None:
        self.links[(src_id, dst_id, kind)] = score

    @property
    def counts(self) -> dict[str, int]:
        sp = self._spilled
        return {"sections": sp["sections"] + len(self.sections), "snippets": sp["snippets"] + len(self.snippets),
                "entities": sp["entities"] + len(self.entities), "aliases": sp["aliases"] + len(self.aliases),
                "triples": sp["triples"] + len(self.triples), **{k: v for k, v in self.notes.items() if v}}

    def hierarchy_cycles(self, relation: str) -> list[list[str]]:
        """Cycles of ``relation`` among this document's triples (``a is_a b is_a a``, ``a is_a a``): the
        strongly connected components of more than one entity, and self-loops (iterative Tarjan)."""
        edges: dict[str, list[str]] = {}
        loops = []
        for _tid, h, rel, t, *_ in self.triples.values():
            if rel == relation:
                if h == t:
                    loops.append([h])
                else:
                    edges.setdefault(h, []).append(t)
        index: dict[str, int] = {}
        low: dict[str, int] = {}
        on: set[str] = set()
        stack: list[str] = []
        out: list[list[str]] = []
        counter = 0
        for root in list(edges):
            if root in index:
                continue
            work = [(root, 0)]
            while work:
                v, i = work.pop()
                if i == 0:
                    index[v] = low[v] = counter
                    counter += 1
                    stack.append(v)
                    on.add(v)
                succ = edges.get(v, [])
                if i < len(succ):
                    work.append((v, i + 1))
                    w = succ[i]
                    if w not in index:
                        work.append((w, 0))
                    elif w in on:
                        low[v] = min(low[v], index[w])
                    continue
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        out.append(sorted(comp))
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[v])
        return loops + out

    def note_graph_names(self) -> None:
        """Count the ids this document defines that the graph already has under another name (a new
        file claiming an existing FoodOn id): the graph keeps its name and the new one becomes an
        alias, which the add's summary now says (``ids_named_otherwise_in_graph``)."""
        ids = list(self._defined)
        n = 0
        examples: list[str] = []
        for chunk in _chunks(ids, 500):
            q = ",".join("?" * len(chunk))
            for eid, norm, name in self.graph.conn.execute(f"SELECT id, norm, name FROM entities WHERE id IN ({q})", chunk):
                if norm != norm_key(self._defined[eid][0]):
                    n += 1
                    if len(examples) < 3:
                        examples.append(f"{eid}: {name!r} in the graph, {self._defined[eid][0]!r} here")
        if n:
            self.notes["ids_named_otherwise_in_graph"] = n
            self.meta["ids_named_otherwise_in_graph"] = {"count": n, "examples": examples}


# --------------------------------------------------------------------------- graph


class Graph:
    """A graph directory: ``graph.sqlite`` + ``manifest.json`` (+ indexes written by retrieval)."""

    def __init__(self, directory: Path, conn: sqlite3.Connection, read_only: bool = False):
        self.dir = directory
        self.conn = conn
        self.read_only = read_only
        self._lock = threading.RLock()
        self._db_ino: int | None = None  # the store file this connection opened (a rebuild replaces it)

    # -- lifecycle
    @classmethod
    def create(cls, directory: str | Path) -> "Graph":
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        g = cls._connect(directory)
        g.conn.executescript(_SCHEMA_SQL)
        if True:
            g.conn.execute("INSERT OR IGNORE INTO meta(key, value) VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
            g.conn.execute("INSERT OR IGNORE INTO meta(key, value) VALUES ('created_at', ?)", (_now(),))
            g.conn.execute("INSERT OR IGNORE INTO meta(key, value) VALUES ('store_id', ?)", (uuid.uuid4().hex,))
        if not (directory / MANIFEST_NAME).exists():
            g.write_manifest(op="create")
        return g

    @classmethod
    def open(cls, directory: str | Path, create: bool = False, read_only: bool = False) -> "Graph":
        """Open an existing graph directory (``create=True`` makes an empty one when missing)."""
        from bencao.retrieval.graph.versions import recover

        directory = Path(directory)
        recover(directory)  # a build killed while swapping, its leftovers (cheap when there are none)
        if not (directory / DB_NAME).exists():
            if create:
                return cls.create(directory)
            raise BencaoError(f"{directory}: no graph here (expected {DB_NAME}); build one with `bencao graph build`")
        if not read_only and not folder_writable(directory):  # a read-only mount: read what can be read, refuse writes in write()
            read_only = True
        try:
            g = cls._connect(directory, read_only=read_only)
            row = g.conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
        except sqlite3.OperationalError as exc:
            if "no such table" in str(exc):  # an empty file, or another program's database
                raise damaged_store_error(directory / DB_NAME, f"no graph tables in it: {exc}") from None
            if "unable to open" not in str(exc):
                raise
            raise BencaoError(f"{directory / DB_NAME}: cannot be opened ({exc}): its folder is read-only and the store was not "
                              f"closed cleanly (a {DB_NAME}-wal is beside it); open it once where the folder is writable (e.g. "
                              f"`bencao graph stats --graph DIR` on a writable copy) to fold the WAL in, then serve that copy") from None
        except sqlite3.DatabaseError as exc:
            raise damaged_store_error(directory / DB_NAME, exc) from None
        version = int(row[0]) if row else None
        if version != SCHEMA_VERSION:
            raise BencaoError(f"{directory}: graph schema version {version} is not the supported version {SCHEMA_VERSION}; rebuild it")
        return g

    @classmethod
    def _connect(cls, directory: Path, read_only: bool = False) -> "Graph":
        path = directory / DB_NAME
        if read_only:
            conn = sqlite3.connect(read_only_uri(path), uri=True, check_same_thread=False, isolation_level=None)
        else:
            conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None, timeout=BUSY_TIMEOUT_S)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute("PRAGMA foreign_keys=ON")
        conn.execute("PRAGMA cache_size=-262144")  # 256 MiB page cache
        conn.row_factory = sqlite3.Row
        g = cls(directory, conn, read_only=read_only)
        g._db_ino = os.stat(path).st_ino
        _OPENED.append(path)
        del _OPENED[:-8]
        return g

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> "Graph":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- writing
    def builder(self, **kwargs: Any) -> DocumentBuilder:
        return DocumentBuilder(self, **kwargs)

    def has_document(self, document_id: str) -> bool:
        return self.conn.execute("SELECT 1 FROM documents WHERE id=?", (document_id,)).fetchone() is not None

    def commit(self, b: DocumentBuilder) -> bool:
        """Write a built document in one transaction. Returns False when it was already present.

        A streamed document (one that spilled, :meth:`DocumentBuilder.checkpoint`) has its transaction open
        already: the rest is written into it, the merged views of what it shares are refreshed, and it commits."""
        if b.spilled:
            try:
                with self._lock:
                    self._write_rows(b, merge=True)
                    self.conn.execute("UPDATE documents SET title=?, licence=?, meta=?, status='ready' WHERE id=?",
                                      (b.title, b.licence, json.dumps(b.meta, ensure_ascii=False), b.document_id))
                    self._refresh_document_views(b)
            except BaseException:
                b.abort()
                raise
            tx, b._tx = b._tx, None
            tx.close()  # COMMIT (the write() block ends normally)
            return True
        with self._lock:
            if self.has_document(b.document_id):
                return False
            c = self.conn
            with self.write():
                c.execute(
                    "INSERT INTO documents(id, source, title, kind, format, licence, status, meta, added_at) VALUES (?,?,?,?,?,?,?,?,?)",
                    (b.document_id, b.source, b.title, b.kind, b.format, b.licence, "ready", json.dumps(b.meta, ensure_ascii=False), _now()),
                )
                self._write_rows(b, merge=False)
                # Entities and triples that existed before this document: refresh merged views.
                # (a source that says nothing of an entity, e.g. a relation file naming it, changes no merged view)
                self._refresh_entities([e.id for e in b.entities.values() if e.attributes or e.description], only_shared=True)
                self._refresh_triples(list(b.triples), only_shared=True)
        return True

    def _spill(self, b: DocumentBuilder) -> None:
        """Write what ``b`` holds into its document's transaction (opened on the first spill) and drop it from ``b``."""
        with self._lock:
            if b._tx is None:
                if self.has_document(b.document_id):
                    return  # already in the graph: commit() will say so
                tx = contextlib.ExitStack()
                tx.enter_context(self.write())
                b._tx = tx
                try:
                    self.conn.execute(
                        "INSERT INTO documents(id, source, title, kind, format, licence, status, meta, added_at) VALUES (?,?,?,?,?,?,?,?,?)",
                        (b.document_id, b.source, b.title, b.kind, b.format, b.licence, "loading", "{}", _now()))
                except BaseException:
                    b.abort()
                    raise
            try:
                self._write_rows(b, merge=True)
            except BaseException:
                b.abort()
                raise
            b._drop_spilled()

    def _write_rows(self, b: DocumentBuilder, merge: bool) -> None:
        """The rows ``b`` holds (its documents row is written already). ``merge``: the document may have written some
        of these entities and triple sources in an earlier spill; they are merged (attributes united, the higher
        confidence kept), not inserted twice."""
        c = self.conn
        faults.call("sqlite.write")
        c.executemany("INSERT INTO sections(id, document_id, parent_id, level, title, path, ord) VALUES (?,?,?,?,?,?,?)", b.sections)
        faults.call("sqlite.write")
        c.executemany("INSERT INTO snippets(id, document_id, section_id, ord, text, n_tokens) VALUES (?,?,?,?,?,?)", b.snippets)
        ents = list(b.entities.values())
        ent_attrs = {e.id: json.dumps(e.attributes, ensure_ascii=False) if e.attributes else "{}" for e in ents}
        c.executemany(
            "INSERT OR IGNORE INTO entities(id, name, norm, type, layer, attributes, description) VALUES (?,?,?,?,?,?,?)",
            ((e.id, e.name, e.norm, e.type, e.layer, ent_attrs[e.id], e.description) for e in ents),
        )
        earlier: dict[str, tuple[str, str | None]] = {}
        if merge and b.spilled:
            for chunk in _chunks([e.id for e in ents], 500):
                q = ",".join("?" * len(chunk))
                for eid, attrs, desc in c.execute(f"SELECT entity_id, attributes, description FROM entity_sources WHERE document_id=? "
                                                  f"AND entity_id IN ({q})", (b.document_id, *chunk)):
                    earlier[eid] = (attrs, desc)
        if earlier:
            updates = []
            for e in ents:
                if e.id in earlier:
                    old_attrs, old_desc = earlier[e.id]
                    merged = merge_attributes([json.loads(old_attrs), e.attributes])
                    updates.append((json.dumps(merged, ensure_ascii=False) if merged else "{}", old_desc or e.description, e.id, b.document_id))
            c.executemany("UPDATE entity_sources SET attributes=?, description=? WHERE entity_id=? AND document_id=?", updates)
            b._merged_entities.update(earlier)
        new = [e for e in ents if e.id not in earlier]
        c.executemany("INSERT INTO entity_sources(entity_id, document_id, attributes, description) VALUES (?,?,?,?)",
                      ((e.id, b.document_id, ent_attrs[e.id], e.description) for e in new))
        faults.call("sqlite.write")
        c.executemany(
            "INSERT OR IGNORE INTO aliases(norm, entity_id, alias, kind, document_id) VALUES (?,?,?,?,?)",
            ((k[0], k[1], alias, k[2], b.document_id) for k, alias in b.aliases.items()),
        )
        c.executemany("INSERT OR IGNORE INTO relations(name, description, head_type, tail_type) VALUES (?,?,?,?)", list(b.relations.values()))
        faults.call("sqlite.write")
        c.executemany(
            "INSERT OR IGNORE INTO triples(id, head_id, relation, tail_id, confidence, layer, origin, attributes) VALUES (?,?,?,?,?,?,?,?)",
            iter(b.triples.values()),
        )
        sources = list(b.triple_sources.values())
        if merge and b.spilled:  # a source this document wrote in an earlier spill: keep the higher confidence
            c.executemany("UPDATE triples SET confidence=? WHERE id=? AND confidence < ? AND layer != 'completed'",
                          ((t[4], t[0], t[4]) for t in b.triples.values()))
            c.executemany("UPDATE triple_sources SET confidence=?, layer=?, origin=?, attributes=? WHERE triple_id=? AND document_id=? "
                          "AND COALESCE(snippet_id, '')=? AND confidence < ?",
                          ((src[4], src[5], src[6], src[7], src[0], src[1], src[2] or "", src[4]) for src in sources))
        c.executemany(
            "INSERT OR IGNORE INTO triple_sources(triple_id, document_id, snippet_id, kind, confidence, layer, origin, attributes) VALUES (?,?,?,?,?,?,?,?)",
            iter(sources),
        )
        c.executemany(
            "INSERT OR REPLACE INTO links(src_id, dst_id, kind, score, document_id) VALUES (?,?,?,?,?)",
            [(s, d, k, score, b.document_id) for (s, d, k), score in b.links.items()],
        )

    def _refresh_document_views(self, b: DocumentBuilder) -> None:
        """A streamed document's merged views: what it shares with other documents, and what it gave twice itself."""
        c = self.conn
        ents = c.execute("SELECT entity_id FROM entity_sources WHERE document_id=? AND (attributes != '{}' OR description IS NOT NULL)",
                         (b.document_id,))
        while chunk := [r[0] for r in ents.fetchmany(20_000)]:  # a cursor read in pieces: a million ids are never held at once
            self._refresh_entities(chunk, only_shared=True)
        self._refresh_entities(sorted(b._merged_entities))
        triples = c.execute("SELECT DISTINCT triple_id FROM triple_sources WHERE document_id=?", (b.document_id,))
        while chunk := [r[0] for r in triples.fetchmany(20_000)]:
            self._refresh_triples(chunk, only_shared=True)

    @contextlib.contextmanager
    def write(self) -> Iterator[sqlite3.Connection]:
        """One write transaction: BEGIN IMMEDIATE … COMMIT, rolled back on any error.

        Every change to the store goes through here, so the generation counter that per-graph caches
        key on (``state_key``) moves with each committed change, in this process and in others.
        """
        from bencao.retrieval.graph.versions import writer_lock

        if self.read_only:
            why = "its folder is read-only" if not folder_writable(self.dir) else "it was opened read-only"
            raise BencaoError(f"{self.dir}: this command writes to the graph, and {why}; run it where the graph is writable")
        with self._lock, writer_lock(self.dir):
            c = self.conn
            try:
                c.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) and "busy" not in str(exc):
                    raise
                raise BencaoError(f"{self.dir}: the graph is being written by another process and stayed busy for "
                                  f"{BUSY_TIMEOUT_S:g}s; run this again when it has finished") from None
            try:
                if self._db_ino is not None and _ino(self.dir / DB_NAME) != self._db_ino:
                    raise BencaoError(f"{self.dir}: the graph was rebuilt while this command ran; nothing was written, "
                                      "run the command again")
                yield c
                c.execute("INSERT INTO meta(key, value) VALUES ('generation', '1') "
                          "ON CONFLICT(key) DO UPDATE SET value = CAST(value AS INTEGER) + 1")
                c.execute("INSERT OR IGNORE INTO meta(key, value) VALUES ('store_id', ?)", (uuid.uuid4().hex,))  # graphs made before it existed
                faults.call("sqlite.write")
                c.execute("COMMIT")
            except BaseException as exc:
                # SQLite may already have rolled back by itself (SQLITE_FULL, SQLITE_IOERR): an explicit
                # ROLLBACK then fails with "no transaction is active" and would hide the real error
                if c.in_transaction:
                    try:
                        c.execute("ROLLBACK")
                    except sqlite3.Error:
                        pass
                if is_disk_full(exc):
                    raise DiskFull(f"no space left on device while writing {self.dir / DB_NAME}; the previous version is unchanged "
                                   "(free some space and run the command again)") from None
                raise

    def generation(self) -> int:
        """The store's write generation: bumped by every committed ``write()`` transaction."""
        r = self.conn.execute("SELECT value FROM meta WHERE key='generation'").fetchone()
        return int(r[0]) if r else 0

    def store_id(self) -> str:
        """A random id minted when the store was created: a rebuilt graph is another store, even in
        the same directory and at the same generation (``graph build`` swaps in a new file)."""
        r = self.conn.execute("SELECT value FROM meta WHERE key='store_id'").fetchone()
        if r:
            return str(r[0])
        r = self.conn.execute("SELECT value FROM meta WHERE key='created_at'").fetchone()  # graphs made before store_id
        return f"created-{r[0]}" if r else ""

    def state_key(self) -> tuple:
        """A cheap key that changes whenever a document is committed or removed (or the store file is
        replaced): per-graph caches (alias tables, adjacency, mined patterns, jieba's taught words)
        are keyed by it instead of counting rows, which costs a table scan on a large graph. Every
        ``write()`` transaction (commit, remove, confidence updates) bumps the stored generation, so
        changes made by another process are seen too; the store id tells a rebuilt graph from the
        old one at the same generation. ``(directory, store id, generation, this connection's changes)``."""
        rows = dict(self.conn.execute("SELECT key, value FROM meta WHERE key IN ('generation', 'store_id', 'created_at')").fetchall())
        sid = rows.get("store_id") or f"created-{rows.get('created_at', '')}"
        return (str(self.dir.resolve()), sid, int(rows.get("generation", 0)), self.conn.total_changes)

    def _refresh_entities(self, ids: list[str], only_shared: bool = False) -> None:
        """Recompute merged attributes/description of entities from their remaining sources."""
        c = self.conn
        for chunk in _chunks(ids, 500):
            q = ",".join("?" * len(chunk))
            having = "HAVING COUNT(*) > 1" if only_shared else ""
            shared = [r[0] for r in c.execute(f"SELECT entity_id FROM entity_sources WHERE entity_id IN ({q}) GROUP BY entity_id {having}", chunk)]
            for eid in shared:
                rows = c.execute(
                    "SELECT es.attributes, es.description FROM entity_sources es JOIN documents d ON d.id = es.document_id "
                    "WHERE es.entity_id=? ORDER BY d.rowid", (eid,)).fetchall()
                attrs = merge_attributes(json.loads(r[0]) for r in rows)
                desc = next((r[1] for r in rows if r[1]), None)
                c.execute("UPDATE entities SET attributes=?, description=? WHERE id=?", (json.dumps(attrs, ensure_ascii=False), desc, eid))

    def _refresh_triples(self, ids: list[str], only_shared: bool = False) -> None:
        """Triple confidence = max over its sources; layer = the most trusted source layer."""
        c = self.conn
        rank = {l: i for i, l in enumerate(LAYER_PRECEDENCE)}
        for chunk in _chunks(ids, 500):
            q = ",".join("?" * len(chunk))
            having = "HAVING COUNT(*) > 1" if only_shared else ""
            rows = c.execute(
                f"SELECT triple_id, MAX(confidence), GROUP_CONCAT(layer, '|') FROM triple_sources WHERE triple_id IN ({q}) GROUP BY triple_id {having}", chunk
            ).fetchall()
            for tid, conf, layers in rows:
                layer = min(layers.split("|"), key=lambda l: rank.get(l, len(rank)))
                c.execute("UPDATE triples SET confidence=?, layer=? WHERE id=? AND layer != 'completed'", (conf, layer, tid))

    def remove_document(self, document_id: str) -> dict[str, int]:
        """Delete a document and exactly what no other document supports. Returns what was removed."""
        with self._lock:
            c = self.conn
            if not self.has_document(document_id):
                raise BencaoError(f"no document {document_id!r} in {self.dir}; list them with `bencao graph stats --documents`")
            before = self.counts()
            with self.write():
                touched_triples = [r[0] for r in c.execute("SELECT DISTINCT triple_id FROM triple_sources WHERE document_id=?", (document_id,))]
                touched_entities = [r[0] for r in c.execute("SELECT entity_id FROM entity_sources WHERE document_id=?", (document_id,))]
                # Sources held by snippets of this document but recorded under another document
                # (e.g. a later extraction run over these snippets) go with the snippets.
                touched_triples += [r[0] for r in c.execute(
                    "SELECT DISTINCT ts.triple_id FROM triple_sources ts JOIN snippets s ON s.id = ts.snippet_id WHERE s.document_id=?", (document_id,))]
                c.execute("DELETE FROM documents WHERE id=?", (document_id,))
                for chunk in _chunks(touched_triples, 500):
                    q = ",".join("?" * len(chunk))
                    c.execute(f"DELETE FROM triples WHERE id IN ({q}) AND NOT EXISTS (SELECT 1 FROM triple_sources ts WHERE ts.triple_id = triples.id)", chunk)
                self._refresh_triples(touched_triples)
                for chunk in _chunks(touched_entities, 500):
                    q = ",".join("?" * len(chunk))
                    c.execute(
                        f"DELETE FROM entities WHERE id IN ({q}) AND NOT EXISTS (SELECT 1 FROM entity_sources es WHERE es.entity_id = entities.id) "
                        "AND NOT EXISTS (SELECT 1 FROM triples t WHERE t.head_id = entities.id OR t.tail_id = entities.id)", chunk)
                self._refresh_entities(touched_entities)
                c.execute("DELETE FROM relations WHERE NOT EXISTS (SELECT 1 FROM triples t WHERE t.relation = relations.name)")
            after = self.counts()
        return {k: before[k] - after[k] for k in before}

    # -- reading
    def counts(self) -> dict[str, int]:
        q = lambda t: self.conn.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0]  # noqa: E731
        return {t: q(t) for t in ("documents", "sections", "snippets", "entities", "aliases", "triples", "triple_sources", "links")}

    def stats(self) -> dict[str, Any]:
        c = self.counts()
        group = lambda sql: {r[0]: r[1] for r in self.conn.execute(sql)}  # noqa: E731
        return {
            "documents": c["documents"],
            "sections": c["sections"],
            "snippets": c["snippets"],
            "entities": c["entities"],
            "aliases": c["aliases"],
            "triples": c["triples"],
            "links": c["links"],
            "by_layer": group("SELECT layer, COUNT(*) FROM triples GROUP BY layer ORDER BY COUNT(*) DESC"),
            "by_entity_type": group("SELECT type, COUNT(*) FROM entities GROUP BY type ORDER BY COUNT(*) DESC"),
            "by_relation": group("SELECT relation, COUNT(*) FROM triples GROUP BY relation ORDER BY COUNT(*) DESC"),
            "by_document_kind": group("SELECT kind, COUNT(*) FROM documents GROUP BY kind ORDER BY COUNT(*) DESC"),
        }

    def documents(self) -> list[dict[str, Any]]:
        rows = self.conn.execute(
            "SELECT d.*, (SELECT COUNT(*) FROM sections s WHERE s.document_id=d.id) AS n_sections, "
            "(SELECT COUNT(*) FROM snippets p WHERE p.document_id=d.id) AS n_snippets, "
            "(SELECT COUNT(*) FROM triple_sources t WHERE t.document_id=d.id) AS n_triple_sources FROM documents d ORDER BY d.rowid").fetchall()
        return [_row(r, json_cols=("meta",)) for r in rows]

    def get_document(self, document_id: str) -> dict[str, Any] | None:
        r = self.conn.execute("SELECT * FROM documents WHERE id=?", (document_id,)).fetchone()
        return _row(r, json_cols=("meta",)) if r else None

    def find_entity_id(self, norm: str, type_: str | None = None, exclude_layers: tuple[str, ...] = ()) -> str | None:
        """Id of an entity known under matching key ``norm`` (name first, then other aliases), of type ``type_``
        when given, in none of ``exclude_layers``."""
        sql = ("SELECT a.entity_id FROM aliases a CROSS JOIN entities e ON e.id = a.entity_id WHERE a.norm=?"
               + (" AND +e.type=?" if type_ else "") + "".join(" AND e.layer != ?" for _ in exclude_layers)
               + " ORDER BY (a.kind='name') DESC, e.rowid LIMIT 1")
        r = self.conn.execute(sql, (norm, *([type_] if type_ else []), *exclude_layers)).fetchone()
        return r[0] if r else None

    def entities_by_alias(self, text: str) -> list[dict[str, Any]]:
        """All entities whose name or alias has the same matching key as ``text``."""
        rows = self.conn.execute(
            "SELECT DISTINCT e.* FROM aliases a JOIN entities e ON e.id = a.entity_id WHERE a.norm=? ORDER BY e.rowid", (norm_key(text),)).fetchall()
        return [_row(r, json_cols=("attributes",)) for r in rows]

    def get_entity(self, entity_id: str) -> dict[str, Any] | None:
        r = self.conn.execute("SELECT * FROM entities WHERE id=?", (entity_id,)).fetchone()
        return _row(r, json_cols=("attributes",)) if r else None

    def get_entities(self, ids: Iterable[str]) -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        for chunk in _chunks(list(dict.fromkeys(ids)), 500):
            q = ",".join("?" * len(chunk))
            for r in self.conn.execute(f"SELECT * FROM entities WHERE id IN ({q})", chunk):
                out[r["id"]] = _row(r, json_cols=("attributes",))
        return out

    def entity_sources_of(self, ids: Iterable[str]) -> dict[str, list[tuple[str, dict[str, Any]]]]:
        """Per entity id, ``(document title, attributes that document gives)`` in the order the documents
        were added: who says what of an entity (the merged ``attributes`` column says it without sources)."""
        out: dict[str, list[tuple[str, dict[str, Any]]]] = {}
        for chunk in _chunks(list(dict.fromkeys(ids)), 500):
            q = ",".join("?" * len(chunk))
            for eid, title, attrs in self.conn.execute(
                    f"SELECT es.entity_id, COALESCE(NULLIF(d.title, ''), d.source), es.attributes FROM entity_sources es "
                    f"JOIN documents d ON d.id = es.document_id WHERE es.entity_id IN ({q}) ORDER BY d.rowid", chunk):
                out.setdefault(eid, []).append((title, json.loads(attrs or "{}")))
        return out

    def aliases_of(self, entity_id: str) -> list[dict[str, Any]]:
        return [dict(r) for r in self.conn.execute(
            "SELECT DISTINCT alias, norm, kind FROM aliases WHERE entity_id=? ORDER BY (kind='name') DESC, alias", (entity_id,))]

    def iter_entities(self, type_: str | None = None) -> Iterator[dict[str, Any]]:
        sql = "SELECT * FROM entities" + (" WHERE type=?" if type_ else "") + " ORDER BY rowid"
        for r in self.conn.execute(sql, (type_,) if type_ else ()):
            yield _row(r, json_cols=("attributes",))

    def iter_aliases(self) -> Iterator[tuple[str, str, str, str]]:
        """(norm, entity_id, alias, kind) for every alias row."""
        yield from self.conn.execute("SELECT norm, entity_id, alias, kind FROM aliases ORDER BY rowid")

    def get_triple(self, triple_id: str) -> dict[str, Any] | None:
        r = self.conn.execute(_TRIPLE_SELECT + " WHERE t.id=?", (triple_id,)).fetchone()
        return _row(r, json_cols=("attributes",)) if r else None

    def get_triples(self, ids: Iterable[str]) -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        for chunk in _chunks(list(dict.fromkeys(ids)), 500):
            q = ",".join("?" * len(chunk))
            for r in self.conn.execute(_TRIPLE_SELECT + f" WHERE t.id IN ({q})", chunk):
                out[r["id"]] = _row(r, json_cols=("attributes",))
        return out

    def get_triples_by_rowid(self, rowids: Iterable[int]) -> dict[int, dict[str, Any]]:
        """Triples by SQLite rowid (the in-memory adjacency's handle), in one query."""
        out: dict[int, dict[str, Any]] = {}
        sql = _TRIPLE_SELECT.replace("SELECT ", "SELECT t.rowid AS _rowid, ", 1) + " WHERE t.rowid IN (SELECT value FROM json_each(?))"
        for r in self.conn.execute(sql, (json.dumps([int(x) for x in dict.fromkeys(rowids)]),)):
            row = _row(r, json_cols=("attributes",))
            out[row.pop("_rowid")] = row
        return out

    def iter_triples(self, layer: str | None = None, relation: str | None = None) -> Iterator[dict[str, Any]]:
        where, args = [], []
        if layer:
            where.append("t.layer=?"); args.append(layer)  # noqa: E702
        if relation:
            where.append("t.relation=?"); args.append(relation)  # noqa: E702
        sql = _TRIPLE_SELECT + (" WHERE " + " AND ".join(where) if where else "") + " ORDER BY t.rowid"
        for r in self.conn.execute(sql, args):
            yield _row(r, json_cols=("attributes",))

    def triples_of(self, entity_id: str, direction: str = "both", relation: str | None = None,
                   limit: int | None = None) -> list[dict[str, Any]]:
        """Triples in which the entity is head (``out``), tail (``in``) or either (``both``), most confident
        first; ``limit``: at most that many."""
        if direction not in ("out", "in", "both"):
            raise ValueError(f"direction must be out, in or both, not {direction!r}")
        rels = [relation] if relation else []
        # one indexed search per side, (head_id, relation) and (tail_id, relation): an OR of the two sides
        # with a relation lets SQLite pick the relation index and scan every triple of that relation
        # (~20 ms on the corpus graph, against well under 1 ms)
        parts, args = [], []
        for side, col in (("out", "head_id"), ("in", "tail_id")):
            if direction in (side, "both"):
                cond = f"{col}=?" + (" AND relation=?" if rels else "")
                parts.append(f"SELECT rowid AS rid, confidence FROM triples WHERE {cond}")
                args += [entity_id, *rels]
        inner = " UNION ".join(parts) + " ORDER BY confidence DESC, rid" + (" LIMIT ?" if limit is not None else "")
        if limit is not None:
            args.append(int(limit))
        sql = _TRIPLE_SELECT + f" WHERE t.rowid IN (SELECT rid FROM ({inner})) ORDER BY t.confidence DESC, t.rowid"
        return [_row(r, json_cols=("attributes",)) for r in self.conn.execute(sql, args)]

    def neighbours(self, entity_id: str, direction: str = "both") -> list[str]:
        ids: list[str] = []
        for t in self.triples_of(entity_id, direction):
            other = t["tail_id"] if t["head_id"] == entity_id else t["head_id"]
            if other not in ids:
                ids.append(other)
        return ids

    def triple_sources_of(self, triple_id: str) -> list[dict[str, Any]]:
        return [_row(r, json_cols=("attributes",)) for r in self.conn.execute(
            "SELECT * FROM triple_sources WHERE triple_id=? ORDER BY rowid", (triple_id,))]

    def documents_of_triples(self, ids: Iterable[str]) -> dict[str, list[str]]:
        """Per triple id, the titles (else sources) of the documents that assert it, in the order they were added:
        the citation of a fact no passage holds (an ontology's is_a, a KB's relation)."""
        out: dict[str, list[str]] = {}
        for chunk in _chunks(list(dict.fromkeys(ids)), 500):
            q = ",".join("?" * len(chunk))
            rows = self.conn.execute(
                f"SELECT ts.triple_id, COALESCE(NULLIF(d.title, ''), d.source) FROM triple_sources ts JOIN documents d ON d.id = ts.document_id "
                f"WHERE ts.triple_id IN ({q}) ORDER BY d.rowid", chunk)
            for tid, title in rows:
                names = out.setdefault(tid, [])
                if title not in names:
                    names.append(title)
        return out

    def snippets_of_triple(self, triple_id: str) -> list[dict[str, Any]]:
        rows = self.conn.execute(
            _SNIPPET_SELECT + " JOIN triple_sources ts ON ts.snippet_id = p.id WHERE ts.triple_id=? ORDER BY p.rowid", (triple_id,)).fetchall()
        return [_snippet_row(r) for r in rows]

    def triples_of_snippet(self, snippet_id: str) -> list[dict[str, Any]]:
        rows = self.conn.execute(
            _TRIPLE_SELECT + " JOIN triple_sources ts ON ts.triple_id = t.id WHERE ts.snippet_id=? ORDER BY t.rowid", (snippet_id,)).fetchall()
        return [_row(r, json_cols=("attributes",)) for r in rows]

    def get_snippet(self, snippet_id: str) -> dict[str, Any] | None:
        r = self.conn.execute(_SNIPPET_SELECT + " WHERE p.id=?", (snippet_id,)).fetchone()
        return _snippet_row(r) if r else None

    def get_snippets(self, ids: Iterable[str]) -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        for chunk in _chunks(list(dict.fromkeys(ids)), 500):
            q = ",".join("?" * len(chunk))
            for r in self.conn.execute(_SNIPPET_SELECT + f" WHERE p.id IN ({q})", chunk):
                out[r["id"]] = _snippet_row(r)
        return out

    def iter_snippets(self, document_id: str | None = None) -> Iterator[dict[str, Any]]:
        sql = _SNIPPET_SELECT + (" WHERE p.document_id=?" if document_id else "") + " ORDER BY p.rowid"
        for r in self.conn.execute(sql, (document_id,) if document_id else ()):
            yield _snippet_row(r)

    def snippets_of_section(self, section_id: str) -> list[dict[str, Any]]:
        return [_snippet_row(r) for r in self.conn.execute(_SNIPPET_SELECT + " WHERE p.section_id=? ORDER BY p.ord", (section_id,))]

    def sections_of(self, document_id: str) -> list[dict[str, Any]]:
        return [_row(r, json_cols=("path",)) for r in self.conn.execute(
            "SELECT * FROM sections WHERE document_id=? ORDER BY ord", (document_id,))]

    def get_section(self, section_id: str) -> dict[str, Any] | None:
        r = self.conn.execute("SELECT * FROM sections WHERE id=?", (section_id,)).fetchone()
        return _row(r, json_cols=("path",)) if r else None

    def child_sections(self, section_id: str) -> list[dict[str, Any]]:
        return [_row(r, json_cols=("path",)) for r in self.conn.execute(
            "SELECT * FROM sections WHERE parent_id=? ORDER BY ord", (section_id,))]

    def iter_sections(self) -> Iterator[dict[str, Any]]:
        for r in self.conn.execute("SELECT * FROM sections ORDER BY rowid"):
            yield _row(r, json_cols=("path",))

    def relations(self) -> list[dict[str, Any]]:
        return [dict(r) for r in self.conn.execute("SELECT * FROM relations ORDER BY name")]

    def links_of(self, entity_id: str) -> list[dict[str, Any]]:
        return [dict(r) for r in self.conn.execute(
            "SELECT * FROM links WHERE src_id=? OR dst_id=? ORDER BY score DESC", (entity_id, entity_id))]

    # -- manifest
    def manifest_path(self) -> Path:
        return self.dir / MANIFEST_NAME

    def read_manifest(self) -> dict[str, Any]:
        """The manifest; {} when there is none. A damaged one (truncated, not JSON, not an object, a record of the
        wrong shape) is a one-line error naming the file and the repair."""
        p = self.manifest_path()
        if not p.exists():
            return {}
        why = manifest_problem(p)
        if why is not None:
            raise BencaoError(f"{p}: damaged manifest ({why}); repair it with `bencao graph index --graph {self.dir} --force` "
                              f"(it keeps the damaged file as {DAMAGED_MANIFEST} and writes a new manifest from the store)")
        return json.loads(p.read_text(encoding="utf-8"))

    def repair_manifest(self) -> str | None:
        """A damaged manifest moved aside (``manifest.json.damaged``) and a new one written from the store; returns the
        problem it had, or None when it was sound. What only the old one knew (the recorded index configuration and
        history) is lost: the caller rebuilds the indexes."""
        p = self.manifest_path()
        why = manifest_problem(p) if p.exists() else None
        if why is None:
            return None
        os.replace(p, self.dir / DAMAGED_MANIFEST)
        self.write_manifest("repair", {"damaged_manifest": why, "kept_as": DAMAGED_MANIFEST})
        return why

    def write_manifest(self, op: str, detail: dict[str, Any] | None = None, **updates: Any) -> dict[str, Any]:
        """Refresh counts, append one history entry and apply top-level ``updates`` (e.g. ``indexes``)."""
        m = self.read_manifest()
        m.setdefault("schema_version", SCHEMA_VERSION)
        m.setdefault("created_at", _now())
        m.setdefault("embedders", {})
        m["updated_at"] = _now()
        m["counts"] = self.counts()
        m.update(updates)
        hist = m.setdefault("history", [])
        hist.append({"op": op, "at": m["updated_at"], **(detail or {})})
        del hist[:-200]
        atomic_write_json(self.manifest_path(), m)
        return m


_TRIPLE_SELECT = (
    "SELECT t.*, h.name AS head, h.type AS head_type, x.name AS tail, x.type AS tail_type FROM triples t "
    "JOIN entities h ON h.id = t.head_id JOIN entities x ON x.id = t.tail_id"
)
_SNIPPET_SELECT = (
    "SELECT p.*, s.path AS path, s.title AS section_title, d.title AS document_title, d.source AS document_source, d.kind AS document_kind FROM snippets p "
    "JOIN sections s ON s.id = p.section_id JOIN documents d ON d.id = p.document_id"
)


def _row(r: sqlite3.Row, json_cols: tuple[str, ...] = ()) -> dict[str, Any]:
    d = dict(r)
    for col in json_cols:
        if col in d and isinstance(d[col], str):
            d[col] = json.loads(d[col])
    return d


def _snippet_row(r: sqlite3.Row) -> dict[str, Any]:
    return _row(r, json_cols=("path",))


def _chunks(seq: list[Any], n: int) -> Iterator[list[Any]]:
    for i in range(0, len(seq), n):
        yield seq[i : i + n]
