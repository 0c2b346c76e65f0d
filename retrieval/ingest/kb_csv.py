"""Typed knowledge-base CSVs (iDISK 2.0 style) through a column-mapping YAML file.

A KB ships entity files (one row per entity: id, name, synonyms, ids in other vocabularies) and
relation files (one row per edge: head id, tail id, and per edge its source and a rating). The
``mapping`` option names a YAML file describing ONE csv, with either an ``entities:`` or a
``relations:`` section (see ``configs/graph/idisk_dsi.yaml`` and ``configs/graph/idisk_relations.yaml``)::

    bencao graph build ... kb-csv data/sample/idisk/DSI_names_400.csv mapping=configs/graph/idisk_dsi.yaml

Entities keep the KB's own ids (``DSI000004``). A relation row's head and tail must be entities
already in the graph or in the same document; ``on_missing: error`` (default) refuses the file
naming the row, ``on_missing: skip`` skips such rows and counts them in the document's meta
(``rows_skipped_missing_entity``). The mapping file's content is hashed into the document id, so
an edited mapping re-ingests the data.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Literal

from bencao.config import field, from_dict, read_yaml
from bencao.errors import ConfigError, InputError
from bencao.io import set_record
from bencao.retrieval.graph.store import DocumentBuilder
from bencao.retrieval.ingest.csv_table import CsvTable, Row
from bencao.retrieval.ingest.registry import register
from bencao.text import norm_key


@dataclass
class AliasColumn:
    column: str = field(help="CSV column holding alias(es)")
    kind: str = field("synonym", help="alias kind: synonym | xref | label_name | ...")
    separator: str = field("", help="separator of several values in one cell, e.g. ' | ' (empty: one value)")


@dataclass
class AttributeColumn:
    column: str = field(help="CSV column kept as an attribute")
    name: str = field("", help="attribute name (default: the column name)")
    separator: str = field("", help="separator of several values in one cell; the attribute is then a list")


@dataclass
class EntityMapping:
    id_column: str = field(help="column with the KB's entity id (used as the graph id)")
    name_column: str = field(help="column with the entity's canonical name")
    type: str = field("", help="fixed entity type for every row (or use type_column)")
    type_column: str = field("", help="column giving each row's entity type")
    layer: str = field("terminology", help="entity layer")
    description_column: str = field("", help="column with a description/definition")
    aliases: list[AliasColumn] = field(default_factory=list, help="alias columns")
    attributes: list[AttributeColumn] = field(default_factory=list, help="attribute columns")


@dataclass
class RelationMapping:
    head_column: str = field(help="column with the head entity's KB id")
    tail_column: str = field(help="column with the tail entity's KB id")
    relation: str = field("", help="fixed relation name (or use relation_column)")
    relation_column: str = field("", help="column giving each row's relation name")
    description: str = field("", help="description of the relation (schema)")
    head_type: str = field("", help="entity type of heads (schema)")
    tail_type: str = field("", help="entity type of tails (schema)")
    confidence_column: str = field("", help="column with a confidence in [0, 1]")
    rating_column: str = field("", help="column with the source's rating (kept as the 'rating' attribute)")
    rating_confidence: dict[str, float] = field(default_factory=dict, help="rating → confidence (ratings matched case- and width-insensitively)")
    default_confidence: float | None = field(None, help="confidence when neither column nor rating map gives one (unset: such a row is an error)")
    source_column: str = field("", help="column with the edge's source (kept as the 'source' attribute)")
    attributes: list[AttributeColumn] = field(default_factory=list, help="further columns kept as triple attributes")
    layer: str = field("imported", help="triple layer")
    on_missing: Literal["error", "skip"] = field("error", help="a row whose head/tail id is in neither the graph nor this file: error or skip (counted)")


@dataclass
class KbMapping:
    entities: EntityMapping | None = field(None, help="mapping of an entity file")
    relations: RelationMapping | None = field(None, help="mapping of a relation file")
    description: str = field("", help="what the file is (free text)")


def mapping_path(path: Path, options: dict[str, Any]) -> Path:
    if not options.get("mapping"):
        raise InputError(path, "format kb-csv needs the option mapping=<mapping.yaml> (see configs/graph/idisk_dsi.yaml)")
    return Path(str(options["mapping"]))  # relative to the current directory


def load_mapping(path: str | Path) -> KbMapping:
    path = Path(path)
    m = from_dict(KbMapping, read_yaml(path), where=str(path))
    if (m.entities is None) == (m.relations is None):
        raise ConfigError(f"{path}: give exactly one of 'entities:' or 'relations:'")
    if m.entities and bool(m.entities.type) == bool(m.entities.type_column):
        raise ConfigError(f"{path}: entities: give exactly one of 'type' or 'type_column'")
    if m.relations:
        r = m.relations
        if bool(r.relation) == bool(r.relation_column):
            raise ConfigError(f"{path}: relations: give exactly one of 'relation' or 'relation_column'")
        for rating, conf in r.rating_confidence.items():
            if not 0.0 <= conf <= 1.0:
                raise ConfigError(f"{path}: relations.rating_confidence.{rating}: {conf} is outside [0, 1]")
        if r.default_confidence is not None and not 0.0 <= r.default_confidence <= 1.0:
            raise ConfigError(f"{path}: relations.default_confidence {r.default_confidence} is outside [0, 1]")
    return m


def _mapping_key(path: Path, options: dict[str, Any]) -> str:
    mp = mapping_path(path, options)
    if not mp.is_file():
        raise ConfigError(f"{mp}: mapping file not found (option mapping of {path})")
    return hashlib.sha1(mp.read_bytes()).hexdigest()


def _values(cell: str, separator: str) -> list[str]:
    parts = cell.split(separator) if separator else [cell]
    return [p.strip() for p in parts if p.strip()]


def _attributes(row: Row, cols: list[AttributeColumn]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for a in cols:
        vals = _values(row.values[a.column], a.separator)
        if vals:
            out[a.name or a.column] = vals if a.separator else vals[0]
    return out


def _load_entities(b: DocumentBuilder, path: Path, table: CsvTable, m: EntityMapping) -> int:
    table.require({"id_column": m.id_column, "name_column": m.name_column, "type_column": m.type_column,
                   "description_column": m.description_column,
                   **{f"aliases[{i}]": a.column for i, a in enumerate(m.aliases)},
                   **{f"attributes[{i}]": a.column for i, a in enumerate(m.attributes)}})
    n = 0
    for row in table.rows():
        eid, name = row.values[m.id_column].strip(), row.values[m.name_column].strip()
        if not eid:
            raise InputError(path, f"empty id (column {m.id_column!r})", record=row.where)
        if not name:
            raise InputError(path, f"empty name (column {m.name_column!r})", record=row.where)
        type_ = m.type or row.values[m.type_column].strip()
        if not type_:
            raise InputError(path, f"empty type (column {m.type_column!r})", record=row.where)
        aliases = [(v, a.kind) for a in m.aliases for v in _values(row.values[a.column], a.separator)]
        aliases.append((eid, "xref"))
        desc = row.values[m.description_column].strip() if m.description_column else ""
        b.entity(name, type_, id=eid, layer=m.layer, defines=True, attributes=_attributes(row, m.attributes) or None,
                 description=desc or None, aliases=aliases)
        n += 1
    return n


#: Relation rows read ahead so the entities they name are fetched from the graph in a few batched queries.
_BLOCK = 5000


def _prefetch(b: DocumentBuilder, ids: set[str], known: dict[str, tuple[str, str, str] | None]) -> None:
    """(name, type, layer) of graph entities among ``ids`` into ``known`` (None when absent), in batches."""
    todo = [i for i in ids if i and i not in b.entities and i not in known]
    for k in range(0, len(todo), 500):
        chunk = todo[k : k + 500]
        q = ",".join("?" * len(chunk))
        found = {r[0]: (r[1], r[2], r[3]) for r in b.graph.conn.execute(f"SELECT id, name, type, layer FROM entities WHERE id IN ({q})", chunk)}
        for i in chunk:
            known[i] = found.get(i)


def _resolve(b: DocumentBuilder, kb_id: str, known: dict[str, tuple[str, str, str] | None] | None = None) -> str | None:
    if kb_id in b.entities:
        return kb_id
    if known is not None and kb_id in known:
        ent = known[kb_id]
        if ent is None:
            return None
        return b.entity(ent[0], ent[1], id=kb_id, layer=ent[2])
    row = b.graph.get_entity(kb_id)
    if row is None:
        return None
    return b.entity(row["name"], row["type"], id=kb_id, layer=row["layer"])


def _blocks(rows: Iterator[Row], n: int) -> Iterator[list[Row]]:
    block: list[Row] = []
    for row in rows:
        block.append(row)
        if len(block) >= n:
            yield block
            block = []
    if block:
        yield block


def _confidence(path: Path, row: Row, m: RelationMapping) -> float:
    if m.confidence_column and row.values[m.confidence_column].strip():
        raw = row.values[m.confidence_column].strip()
        try:
            conf = float(raw)
        except ValueError:
            raise InputError(path, f"confidence {raw!r} (column {m.confidence_column!r}) is not a number", record=row.where) from None
        if not 0.0 <= conf <= 1.0:
            raise InputError(path, f"confidence {conf} (column {m.confidence_column!r}) is outside [0, 1]", record=row.where)
        return conf
    if m.rating_column and m.rating_confidence:
        rating = row.values[m.rating_column].strip()
        table = {norm_key(k): v for k, v in m.rating_confidence.items()}
        if norm_key(rating) in table:
            return table[norm_key(rating)]
        if m.default_confidence is None:
            raise InputError(path, f"rating {rating!r} (column {m.rating_column!r}) has no confidence in the mapping's rating_confidence "
                                   f"({', '.join(m.rating_confidence)}) and no default_confidence is set", record=row.where)
    if m.default_confidence is None:
        raise InputError(path, "no confidence for this row: set confidence_column, rating_confidence or default_confidence in the mapping",
                         record=row.where)
    return m.default_confidence


def _load_relations(b: DocumentBuilder, path: Path, table: CsvTable, m: RelationMapping) -> int:
    table.require({"head_column": m.head_column, "tail_column": m.tail_column, "relation_column": m.relation_column,
                   "confidence_column": m.confidence_column, "rating_column": m.rating_column, "source_column": m.source_column,
                   **{f"attributes[{i}]": a.column for i, a in enumerate(m.attributes)}})
    if m.relation:
        b.relation(m.relation, m.description or None, m.head_type or None, m.tail_type or None)
    n = skipped = 0
    known: dict[str, tuple[str, str, str] | None] = {}
    for block in _blocks(table.rows(), _BLOCK):
        _prefetch(b, {row.values[c].strip() for row in block for c in (m.head_column, m.tail_column)}, known)
        for row in block:
            n, skipped = _relation_row(b, path, row, m, known, n, skipped)
    b.meta["rows_skipped_missing_entity"] = skipped
    return n


def _relation_row(b: DocumentBuilder, path: Path, row: Row, m: RelationMapping, known: dict[str, tuple[str, str, str] | None],
                  n: int, skipped: int) -> tuple[int, int]:
    """One relation row into the builder; returns the updated (rows added, rows skipped)."""
    set_record(row.where)
    head_kb, tail_kb = row.values[m.head_column].strip(), row.values[m.tail_column].strip()
    head, tail = _resolve(b, head_kb, known), _resolve(b, tail_kb, known)
    if head is None or tail is None:
        missing = ", ".join(f"{col} {v!r}" for col, v, e in ((m.head_column, head_kb, head), (m.tail_column, tail_kb, tail)) if e is None)
        if m.on_missing == "skip":
            return n, skipped + 1
        raise InputError(path, f"not an entity in the graph: {missing} (ingest the entity file first, or set on_missing: skip)",
                         record=row.where)
    relation = m.relation or row.values[m.relation_column].strip()
    if not relation:
        raise InputError(path, f"empty relation (column {m.relation_column!r})", record=row.where)
    attrs = _attributes(row, m.attributes)
    if m.source_column and row.values[m.source_column].strip():
        attrs["source"] = row.values[m.source_column].strip()
    if m.rating_column and row.values[m.rating_column].strip():
        attrs["rating"] = row.values[m.rating_column].strip()
    b.triple(head, relation, tail, confidence=_confidence(path, row, m), layer=m.layer, origin="kb-csv", attributes=attrs or None)
    return n + 1, skipped


@register("kb-csv", kind="kb", options=("mapping",), extra_key=_mapping_key,
          description="typed KB CSV (iDISK style) through a mapping YAML: an entity file or a relation file with source and rating")
def load_kb_csv(b: DocumentBuilder, path: Path, options: dict[str, Any]) -> None:
    mp = mapping_path(path, options)
    m = load_mapping(mp)
    table = CsvTable(path)
    b.meta["mapping"] = str(mp)
    n = _load_entities(b, path, table, m.entities) if m.entities else _load_relations(b, path, table, m.relations)  # type: ignore[arg-type]
    if n == 0:
        raise InputError(path, "no rows to ingest" + (" (every row was skipped: its entities are not in the graph)" if b.meta.get("rows_skipped_missing_entity") else ""))
    b.meta["rows"] = n
