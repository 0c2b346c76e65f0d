"""Ontology dumps as JSON (FoodOntoRAG's format): ``{curie, label, synonyms, definition, relations: {is_a: [...]}}``.

FoodOntoRAG ships its ontology as a JSON dump of concepts, one object per term. Accepted containers:
a JSON array of concepts; an object with the array under ``concepts``, ``terms`` or ``classes``; an
object keyed by CURIE (the key is the CURIE when the value has none); or JSONL (``.jsonl``, one
concept a line). Per concept:

- ``curie`` (or ``id``): the entity id; its type follows the prefix (``type_of_curie``), layer
  ``terminology``; the CURIE is also an ``xref`` alias;
- ``label`` (or ``name``): the name; a concept without one is refused;
- ``synonyms``: strings, or objects with the text under ``text``/``value``/``label`` (``scope``
  kept as the alias kind ``synonym`` regardless) → ``synonym`` aliases;
- ``definition``: the description (a string, or a list whose first string is used);
- ``relations``: ``{relation: [target CURIE | {"curie": ...}, ...]}``: ``is_a`` (also ``parents``
  at the top level) gives ``is_a`` triples, any other key a triple of that relation name
  (lower-cased, spaces → ``_``); confidence 1.0, layer ``imported``. Targets absent from the file
  are counted in the document meta (``targets_not_in_file``) and skipped.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Iterator

from bencao.errors import InputError
from bencao.io import DuplicateKey, _bad_json_string, check_name, iter_jsonl, loads_json, read_text, set_record
from bencao.retrieval.graph.store import DocumentBuilder
from bencao.retrieval.ingest.ontology import type_of_curie
from bencao.retrieval.ingest.registry import register

_CONTAINER_KEYS = ("concepts", "terms", "classes")


def _records(path: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """(where, concept object) for every concept of the file, whatever its container."""
    name = path.name[:-3] if path.name.endswith(".gz") else path.name
    if name.endswith(".jsonl"):
        for lineno, rec in iter_jsonl(path):
            yield f"line {lineno}", rec
        return
    text = read_text(path, guess=False)  # structured data: UTF-8, or the encoding option
    try:
        data = loads_json(text)
    except DuplicateKey as exc:
        raise InputError(path, f"malformed JSON: {exc}") from None
    except json.JSONDecodeError as exc:
        raise InputError(path, f"malformed JSON: {exc.msg} (column {exc.colno})", record=f"line {exc.lineno}") from None
    except RecursionError:
        raise InputError(path, "malformed JSON: nested too deeply") from None
    except ValueError as exc:  # e.g. an integer over Python's digit limit
        raise InputError(path, f"malformed JSON: {exc}") from None
    bad = _bad_json_string(data)  # NUL and lone surrogates arrive as escapes
    if bad:
        raise InputError(path, f"field {bad[0]} {bad[1]}")
    if isinstance(data, dict):
        for key in _CONTAINER_KEYS:
            if isinstance(data.get(key), list):
                data = data[key]
                break
    if isinstance(data, list):
        for i, rec in enumerate(data):
            if not isinstance(rec, dict):
                raise InputError(path, f"expected a concept object, got {type(rec).__name__}", record=f"concept {i}")
            yield f"concept {i}", rec
    elif isinstance(data, dict):
        for key, rec in data.items():
            if not isinstance(rec, dict):
                raise InputError(path, f"expected a concept object, got {type(rec).__name__}", record=f"concept {key!r}")
            yield f"concept {key!r}", {"curie": key, **rec}
    else:
        raise InputError(path, f"expected a JSON array or object of concepts, got {type(data).__name__}")


def _strings(path: Path, where: str, value: Any, key: str, text_keys: tuple[str, ...] = ("text", "value", "label")) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if not isinstance(value, list):
        raise InputError(path, f"{key!r} must be a list", record=where)
    out: list[str] = []
    for v in value:
        if isinstance(v, dict):
            v = next((v[k] for k in text_keys if isinstance(v.get(k), str)), None)
        if not isinstance(v, str):
            raise InputError(path, f"{key!r} holds a value that is neither a string nor an object with {'/'.join(text_keys)}", record=where)
        if v.strip():
            out.append(v.strip())
    return out


def _relation_name(key: str) -> str:
    return re.sub(r"[\s-]+", "_", key.strip().lower())


@register("ontology-json", kind="ontology",
          description="ontology JSON dump (FoodOntoRAG): curie, label, synonyms, definition, relations.is_a (array, keyed object or JSONL)")
def load_ontology_json(b: DocumentBuilder, path: Path, options: dict[str, Any]) -> None:
    concepts: list[tuple[str, str, dict[str, Any]]] = []
    for where, rec in _records(path):
        set_record(where)
        curie = rec.get("curie") or rec.get("id")
        label = rec.get("label") or rec.get("name")
        if not isinstance(curie, str) or not curie.strip():
            raise InputError(path, "missing 'curie' (or 'id')", record=where)
        if not isinstance(label, str) or not label.strip():
            raise InputError(path, f"concept {curie}: missing 'label'", record=where)
        check_name(label, f"concept {curie.strip()}: label")
        rels = rec.get("relations") or {}
        if not isinstance(rels, dict):
            raise InputError(path, "'relations' must be an object {relation: [targets]}", record=where)
        concepts.append((where, curie.strip(), rec))
    b.relation("is_a", "subclass of (ontology hierarchy)")
    for where, curie, rec in concepts:
        set_record(where)
        definition = rec.get("definition")
        if isinstance(definition, list):
            definition = next((d for d in definition if isinstance(d, str) and d.strip()), None)
        if definition is not None and not isinstance(definition, str):
            raise InputError(path, "'definition' must be a string", record=where)
        aliases = [(s, "synonym") for s in _strings(path, where, rec.get("synonyms"), "synonyms")]
        aliases.append((curie, "xref"))
        b.entity((rec.get("label") or rec.get("name")).strip(), type_of_curie(curie), id=curie, layer="terminology", defines=True,
                 description=(definition or "").strip() or None, aliases=aliases,
                 attributes={"ontology": curie.split(":", 1)[0]} if ":" in curie and not curie.startswith("http") else None)
    missing = n = 0
    for where, curie, rec in concepts:
        rels = dict(rec.get("relations") or {})
        if rec.get("parents") is not None:
            rels.setdefault("is_a", rec["parents"])
        for key, targets in rels.items():
            rel = _relation_name(key)
            for target in _strings(path, where, targets, f"relations.{key}", ("curie", "id")):
                if target in b.entities and target != curie:
                    b.triple(curie, rel, target, confidence=1.0, layer="imported", origin="ontology")
                    n += 1
                else:
                    missing += 1
    b.meta.update({"concepts": len(concepts), "relations": n, "targets_not_in_file": missing})
