"""The loader registry. A loader fills a DocumentBuilder from one file; the registry does the rest.

Register a format::

    @register("foodon-jsonl", kind="ontology", description="FoodOn-style JSONL terms")
    def load_foodon_jsonl(b: DocumentBuilder, path: Path, options: dict) -> None: ...

``ingest_file`` hashes the input (bytes + format + options) into the document id, so re-ingesting
is a no-op; runs the loader; refuses an empty result; and commits in one transaction, so a bad
record leaves the graph exactly as it was.

Every format also accepts the reading options of ``bencao.io.ReadLimits`` (``encoding``,
``max_line_bytes``, ``max_bytes``, ``max_ratio``, ``max_name_chars``): the loader reads through
``bencao.io`` under those limits, and a value the builder refuses (``InvalidValue``: an empty
name, a control character) becomes an ``InputError`` naming the file and the record being read.
"""

from __future__ import annotations

import importlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from bencao.errors import BencaoError, InputError, InvalidValue
from bencao import faults
from bencao.faults import fault
from bencao.config import short
from bencao.io import LIMIT_OPTIONS, clean_title, cleaned_counts, current_record, file_hash, limits_from_options, using_limits, watching
from bencao.retrieval.graph.store import DocumentBuilder, Graph

LoaderFn = Callable[[DocumentBuilder, Path, dict[str, Any]], None]
#: Extra bytes a loader wants hashed into the document id (e.g. the content of a mapping file an
#: option names), so editing that file re-ingests the data.
KeyFn = Callable[[Path, dict[str, Any]], str]


@dataclass(frozen=True)
class LoaderSpec:
    name: str
    kind: str  # document kind: book | ontology | catalog | kb | case | qa | reasoning
    description: str
    fn: LoaderFn
    options: tuple[str, ...] = ()  # option names the loader understands (others are refused)
    extra_key: KeyFn | None = None  # content of files named by options, hashed into the document id


LOADERS: dict[str, LoaderSpec] = {}

# Modules that register loaders; imported on first use so `bencao --help` stays fast.
_LOADER_MODULES = (
    "bencao.retrieval.ingest.ontology",
    "bencao.retrieval.ingest.obo",
    "bencao.retrieval.ingest.materia_medica",
    "bencao.retrieval.ingest.books",
    "bencao.retrieval.ingest.catalog",
    "bencao.retrieval.ingest.kb_csv",
    "bencao.retrieval.ingest.recipes",
    "bencao.retrieval.ingest.ontology_json",
    "bencao.retrieval.ingest.skos",
    "bencao.retrieval.ingest.cases",
)


def register(name: str, *, kind: str, description: str, options: tuple[str, ...] = (),
             extra_key: KeyFn | None = None) -> Callable[[LoaderFn], LoaderFn]:
    def deco(fn: LoaderFn) -> LoaderFn:
        LOADERS[name] = LoaderSpec(name, kind, description, fn, options, extra_key)
        return fn

    return deco


def _load_modules() -> None:
    for mod in _LOADER_MODULES:
        try:
            importlib.import_module(mod)
        except ModuleNotFoundError as exc:
            if exc.name != mod:
                raise


def get_loader(name: str) -> LoaderSpec:
    _load_modules()
    if name not in LOADERS:
        raise BencaoError(f"unknown format {name!r}; known formats: {', '.join(sorted(LOADERS))}")
    return LOADERS[name]


def formats() -> list[str]:
    _load_modules()
    return sorted(LOADERS)


def build_document(graph: Graph, fmt: str, path: str | Path, options: dict[str, Any] | None = None,
                   title: str | None = None, licence: str | None = None) -> DocumentBuilder:
    """Parse ``path`` with the ``fmt`` loader into a builder (nothing is written yet)."""
    spec = get_loader(fmt)
    path = Path(path)
    options = dict(options or {})
    accepted = tuple(dict.fromkeys(spec.options + LIMIT_OPTIONS))
    unknown = sorted(set(options) - set(accepted))
    if unknown:
        raise BencaoError(f"format {fmt!r} has no option(s) {', '.join(unknown)}; it accepts: {', '.join(accepted)}")
    limits = limits_from_options(options, where=f"{path}: options")
    if not path.exists():
        raise InputError(path, "file not found")
    if not path.is_file():
        raise InputError(path, "not a regular file")
    # Options that change what is read go into the document id; limits only accept or refuse.
    keyed = {k: v for k, v in options.items() if k in spec.options or k == "encoding"}
    loader_options = {k: v for k, v in options.items() if k in spec.options}
    # The bytes parsed must be the bytes hashed into the document id: every complete read of the file
    # while it is parsed is hashed too and compared, and so are its size and modification time (a file
    # cut or appended to while it is read would otherwise be stored, incomplete, under the id of another
    # content, and adding the complete file later would say "unchanged").
    with using_limits(limits), watching(path) as watch:
        digest = file_hash(path, limits)
        key = digest + json.dumps(keyed, sort_keys=True, ensure_ascii=False)
        extra = spec.extra_key(path, loader_options) if spec.extra_key is not None else ""
        key += extra
        b = graph.builder(source=path.name, kind=spec.kind, format=fmt, content_key=key, title=title or _title_of(path), licence=licence,
                          meta={"path": str(path), "options": options})
        if graph.has_document(b.document_id):
            return b
        faults.call("ingest.hashed")
        try:
            _parse(b, spec, path, loader_options, watch, digest, extra)
        except BaseException:
            b.abort()  # a streamed document rolls back what it spilled: all or nothing
            raise
    if not b.sections and not b.snippets and not b.entities and not b.spilled:
        raise InputError(path, "empty document: nothing to ingest")
    return b


def _parse(b: DocumentBuilder, spec: LoaderSpec, path: Path, loader_options: dict[str, Any], watch: Any, digest: str, extra: str) -> None:
    """Run the loader into ``b`` and make the checks that need the whole parse (the file unchanged, ids defined once)."""
    try:
        spec.fn(b, path, loader_options)
    except InvalidValue as exc:  # a value the builder refused: name the file and the record being read
        watch.verify(digest)  # a record cut in half by a concurrent writer: say that, not what it broke
        raise InputError(path, str(exc), record=current_record()) from None
    except BencaoError:
        watch.verify(digest)
        raise
    watch.verify(digest)
    if spec.extra_key is not None and spec.extra_key(path, loader_options) != extra:  # the mapping/lexicon file changed meanwhile
        raise InputError(path, "a file named by an option (mapping, lexicon) changed while the input was read; nothing was added "
                               "(add it again)")
    if b.conflicts:  # the same id defined twice with different names: never merged silently
        eid, first, where1, other, where2 = b.conflicts[0]
        more = f" ({len(b.conflicts)} such ids)" if len(b.conflicts) > 1 else ""
        raise InputError(path, f"id {eid!r} is defined twice with different names: {short(first)} ({where1 or 'first'}) and "
                               f"{short(other)}{more}; conflicting duplicate ids are refused", record=where2)
    if b.title:
        b.title = clean_title(b.title, "document title") or b.title
    b.notes.update(cleaned_counts())
    b.note_graph_names()
    _note_cycles(b, {"is_a", str(loader_options.get("broader_relation") or "is_a")})


def ingest_file(graph: Graph, fmt: str, path: str | Path, options: dict[str, Any] | None = None,
                title: str | None = None, licence: str | None = None) -> tuple[str, bool, dict[str, int]]:
    """Ingest one file. Returns ``(document_id, added, counts)``; ``added`` is False when already present."""
    b = build_document(graph, fmt, path, options, title, licence)
    fault("ingest.parsed")
    try:
        added = graph.commit(b) if b.spilled or not graph.has_document(b.document_id) else False
    except UnicodeEncodeError as exc:  # a lone surrogate that no check caught: still one line, nothing written
        raise InputError(path, f"text that is not valid Unicode ({exc.reason}: {exc.object[exc.start:exc.end]!r})") from None
    fault("ingest.committed")
    return b.document_id, added, b.counts


def _note_cycles(b: DocumentBuilder, relations: set[str]) -> None:
    """Hierarchy cycles (``is_a``, SKOS ``broader``) are kept (the source says so) but never silently:
    counted in the summary (``is_a_cycles``) with examples in the document's metadata."""
    for rel in sorted(relations):
        if rel not in b.relations:
            continue
        cycles = b.hierarchy_cycles(rel)
        if cycles:
            b.notes[f"{rel}_cycles"] = len(cycles)
            b.meta[f"{rel}_cycles"] = {"count": len(cycles), "examples": [c[:10] for c in cycles[:5]]}


def _title_of(path: Path) -> str:
    name = path.name
    for suf in (".gz", ".jsonl", ".json", ".txt", ".md", ".csv", ".obo", ".owl", ".ttl", ".rdf", ".jsonld", ".yaml", ".yml"):
        if name.endswith(suf):
            name = name[: -len(suf)]
    return name
