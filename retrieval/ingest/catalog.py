"""Official catalogues as CSV: the medicine-food homology (药食同源) list and lists like it.

Each row becomes one ``substance`` entity named by its base name (枣), with the full listed name
(枣（大枣、酸枣、黑枣）) as an alias and the catalogue id (MFH001) as an ``xref`` alias, and one
``listed_in`` triple to the catalogue entity (type ``catalog``), confidence 1.0, layer ``imported``.
Entities get name-keyed ids from the store (not the catalogue id), so a substance named the same in
a book merges with the catalogue entry.

Variants: a row that lists several kinds (枣（大枣、酸枣、黑枣）, 姜（生姜、干姜）) names distinct
materia medica — 酸枣 is not 大枣, 干姜 is not 生姜 — so each becomes its own entity with
``variant_of`` → the item and its own ``listed_in``; a book's 大枣 then lands on 大枣, not on 酸枣's
entry. A single variant (龙眼肉（桂圆）) is another name of the item and stays an alias.

A one-character variant is a qualifier of the base name, not a name: 杏仁（甜、苦） gives the
aliases 甜杏仁 and 苦杏仁 (never 甜 or 苦, which are flavours).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bencao.config import field, from_dict
from bencao.errors import ConfigError, InputError
from bencao.retrieval.graph.store import DocumentBuilder
from bencao.retrieval.ingest.csv_table import CsvTable
from bencao.retrieval.ingest.registry import register
from bencao.text import norm_key


@dataclass
class CatalogColumns:
    """Which CSV column holds what. Empty string = the file has no such column."""

    id: str = field("mfh_id", help="catalogue id of the row (kept as an xref alias and an attribute)")
    name: str = field("name_zh", help="full listed name, e.g. 枣（大枣、酸枣、黑枣） (alias)")
    base_name: str = field("base_name_zh", help="base name the entity is named by, e.g. 枣")
    variants: str = field("variants_zh", help="variant names separated by `variant_separator` (aliases)")
    batch: str = field("batch", help="announcement batch (attribute)")
    order: str = field("order_in_batch", help="position in the batch (attribute)")
    announcement: str = field("announcement", help="announcement that listed the item (attribute)")
    date: str = field("date", help="announcement date (attribute)")
    source_url: str = field("source_url", help="URL of the announcement (attribute)")
    note: str = field("note", help="restrictions of use, e.g. 限作为香辛料和调味品使用 (attribute)")


@dataclass
class CatalogOptions:
    columns: CatalogColumns = field(default_factory=CatalogColumns, help="column names (defaults: the MFH catalogue CSV)")
    catalog: str = field("药食同源目录", help="name of the catalogue entity every row is listed in")
    catalog_description: str = field("按照传统既是食品又是中药材的物质目录（国家卫生健康委员会）",
                                     help="description of the catalogue entity")
    entity_type: str = field("substance", help="entity type of the listed items")
    variant_separator: str = field("、", help="separator of the variants column")


#: Rows read, looked up against the graph and offered to the builder (which may spill them, streaming) at a time.
_BATCH = 2000

#: Columns kept as entity attributes, under their column names (mfh_id, batch, ...).
_ATTRIBUTE_ROLES = ("id", "batch", "order", "announcement", "date", "source_url", "note")


def parse_options(path: Path, options: dict[str, Any]) -> CatalogOptions:
    try:
        return from_dict(CatalogOptions, options, where=f"{path.name} options")
    except ConfigError as exc:
        raise InputError(path, str(exc)) from None


def variant_aliases(base: str, variants: str, separator: str) -> list[str]:
    """Variant names as aliases; one-character variants qualify the base name (甜 → 甜杏仁)."""
    out: list[str] = []
    for v in variants.split(separator) if separator else [variants]:
        v = v.strip()
        if not v:
            continue
        out.append(v + base if len(v) == 1 and base not in v else v)
    return out


@register("catalog-csv", kind="catalog", options=("columns", "catalog", "catalog_description", "entity_type", "variant_separator"),
          description="official catalogue CSV (药食同源 list): one substance per row, aliases, listed_in the catalogue")
def load_catalog_csv(b: DocumentBuilder, path: Path, options: dict[str, Any]) -> None:
    opts = parse_options(path, options)
    cols = opts.columns
    table = CsvTable(path)
    table.require({"base_name": cols.base_name})
    table.require({role: getattr(cols, role) for role in ("id", "name", "variants", *_ATTRIBUTE_ROLES)})
    b.relation("listed_in", "the item is listed in the catalogue", opts.entity_type, "catalog")
    b.relation("variant_of", "a kind listed under a catalogue item, e.g. 大枣 under 枣", opts.entity_type, opts.entity_type)
    catalog = b.entity(opts.catalog, "catalog", layer="terminology", description=opts.catalog_description or None)
    n = 0
    ids: dict[str, tuple[str, str]] = {}  # catalogue id -> (base name, where) since the last spill: one id, one substance
    for batch in _batches(table.rows(), _BATCH):  # the graph's known names are looked up per batch, not per row
        names = []
        for row in batch:
            base = row.values.get(cols.base_name, "").strip()
            names.append(base)
            if cols.variants:
                names += variant_aliases(base, row.values.get(cols.variants, ""), opts.variant_separator)
        b.prefetch_names(opts.entity_type, names)
        if b.spilled and cols.id:  # ids of rows already written: read back, not kept
            ids.update(_spilled_ids(b, [row.values.get(cols.id, "").strip() for row in batch]))
        for row in batch:
            n += _add_row(b, path, row, opts, catalog, ids)
        if b.checkpoint():  # a large catalogue streams into its transaction instead of being held whole
            ids.clear()
    if n == 0:
        raise InputError(path, "empty catalogue: no data rows")
    b.meta["rows"] = n


def _spilled_ids(b: DocumentBuilder, ids: list[str]) -> dict[str, tuple[str, str]]:
    """Catalogue ids among ``ids`` that rows of this document already written (spilled) gave: id → (its substance's
    name, where), read from their ``xref`` aliases."""
    by_norm = {norm_key(i): i for i in ids if i}
    out: dict[str, tuple[str, str]] = {}
    keys = list(by_norm)
    for start in range(0, len(keys), 500):
        chunk = keys[start : start + 500]
        q = ",".join("?" * len(chunk))
        for norm, name in b.graph.conn.execute(
                f"SELECT a.norm, e.name FROM aliases a CROSS JOIN entities e ON e.id = a.entity_id WHERE a.norm IN ({q}) "
                "AND +a.kind='xref' AND +a.document_id=?", (*chunk, b.document_id)):  # the key on norm, not a scan of the document's aliases
            out[by_norm[norm]] = (name, "an earlier row")
    return out


def _batches(rows: Any, size: int) -> Any:
    batch = []
    for row in rows:
        batch.append(row)
        if len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch


def _add_row(b: DocumentBuilder, path: Path, row: Any, opts: CatalogOptions, catalog: str,
             ids: dict[str, tuple[str, str]]) -> int:
    cols = opts.columns
    get = lambda role: row.values.get(getattr(cols, role), "").strip() if getattr(cols, role) else ""  # noqa: E731
    base = get("base_name")
    if not base:
        raise InputError(path, f"empty base name (column {cols.base_name!r})", record=row.where)
    if get("id"):  # two substances under one catalogue id would share its xref alias without a word
        first = ids.setdefault(get("id"), (base, str(row.where)))
        if first[0] != base and norm_key(first[0]) != norm_key(base):
            raise InputError(path, f"catalogue id {get('id')[:60]!r} is defined twice with different names: {first[0][:60]!r} "
                                   f"({first[1]}) and {base[:60]!r}; conflicting duplicate ids are refused", record=row.where)
    aliases: list[tuple[str, str]] = []
    if get("name") and get("name") != base:
        aliases.append((get("name"), "synonym"))
    variants = variant_aliases(base, get("variants"), opts.variant_separator)
    if len(variants) == 1:
        aliases.append((variants[0], "variant"))
    if get("id"):
        aliases.append((get("id"), "xref"))
    attrs = {getattr(cols, role): get(role) for role in _ATTRIBUTE_ROLES if get(role)}
    listed_attrs = {getattr(cols, r): get(r) for r in ("id", "batch", "date") if get(r)}
    item = b.entity(base, opts.entity_type, layer="terminology", attributes=attrs, aliases=aliases)
    b.triple(item, "listed_in", catalog, confidence=1.0, layer="imported", origin="catalog-csv", attributes=listed_attrs)
    if len(variants) > 1:
        for v in variants:
            kind = b.entity(v, opts.entity_type, layer="terminology", attributes={"variant_of": base, **attrs})
            b.triple(kind, "variant_of", item, confidence=1.0, layer="imported", origin="catalog-csv")
            b.triple(kind, "listed_in", catalog, confidence=1.0, layer="imported", origin="catalog-csv", attributes=listed_attrs)
    return 1
