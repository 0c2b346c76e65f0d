"""FoodOn-style ontology terms as JSONL: ``{id, label, synonyms[], parents[], definition}``.

Each term becomes an entity whose id is the ontology CURIE (so entity linking answers in the
ontology's own ids), its synonyms and id become aliases, its definition the description, and each
parent an ``is_a`` triple (confidence 1.0, layer ``imported``). Parents absent from the file are
counted in the document's meta and skipped: an edge to an unlabelled node helps nobody.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bencao.errors import InputError
from bencao.io import iter_jsonl, set_record
from bencao.retrieval.graph.store import DocumentBuilder
from bencao.retrieval.ingest.registry import register

#: Entity type by CURIE prefix; anything else is a generic ``concept``.
PREFIX_TYPES = {
    "FOODON": "food",
    "NCBITaxon": "organism",
    "CHEBI": "chemical",
    "CDNO": "nutrient",
    "PO": "plant_part",
    "UBERON": "anatomy",
    "ENVO": "environment",
    "GAZ": "place",
    "PATO": "quality",
    "HANCESTRO": "ancestry",
}


def type_of_curie(curie: str) -> str:
    prefix = curie.split(":", 1)[0] if ":" in curie and not curie.startswith("http") else ""
    if curie.startswith("http://purl.obolibrary.org/obo/"):
        prefix = curie.rsplit("/", 1)[-1].split("_", 1)[0]
    return PREFIX_TYPES.get(prefix, "concept")


def add_is_a(b: DocumentBuilder, child: str, parent: str) -> None:
    b.triple(child, "is_a", parent, confidence=1.0, layer="imported", origin="ontology")


@register("foodon-jsonl", kind="ontology", description="ontology terms as JSONL: id, label, synonyms, parents, definition, xrefs (FoodOn slice)")
def load_foodon_jsonl(b: DocumentBuilder, path: Path, options: dict[str, Any]) -> None:
    b.relation("is_a", "subclass of (ontology hierarchy)")
    terms: list[tuple[int, dict[str, Any]]] = []
    for lineno, rec in iter_jsonl(path, required=("id", "label")):
        for key in ("synonyms", "parents", "xrefs"):
            val = rec.get(key) or []
            if not isinstance(val, list) or not all(isinstance(v, str) for v in val):
                raise InputError(path, f"'{key}' must be a list of strings", record=f"line {lineno}")
        for key in ("id", "label", "definition"):  # an id of true or 1.5 is refused, not stored as "True"
            if rec.get(key) is not None and not isinstance(rec[key], str):
                raise InputError(path, f"'{key}' must be a string, not {type(rec[key]).__name__} {str(rec[key])[:40]!r}", record=f"line {lineno}")
        terms.append((lineno, rec))
    for lineno, rec in terms:
        set_record(f"line {lineno}")
        curie = str(rec["id"]).strip()
        aliases = [(s, "synonym") for s in rec.get("synonyms") or []]
        aliases += [(x.strip(), "xref") for x in rec.get("xrefs") or [] if x.strip()]  # database cross-references / exactMatch ids
        aliases.append((curie, "xref"))
        b.entity(rec["label"], type_of_curie(curie), id=curie, layer="terminology", defines=True, description=rec.get("definition") or None,
                 aliases=aliases, attributes={"ontology": curie.split(":", 1)[0]} if ":" in curie else None)
    missing = 0
    for _, rec in terms:
        for parent in rec.get("parents") or []:
            if parent in b.entities and parent != rec["id"]:
                add_is_a(b, rec["id"], parent)
            else:
                missing += 1
    b.meta["parents_not_in_file"] = missing
