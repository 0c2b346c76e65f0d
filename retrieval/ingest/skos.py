"""SKOS concept schemes (Turtle, RDF/XML, JSON-LD, N-Triples, N3, TriG), read with rdflib.

Every ``skos:Concept`` (and anything else with a ``skos:prefLabel``) becomes an entity, layer
``terminology``:

- id: the concept's IRI as a CURIE when a prefix the file binds covers it (``agrovoc:c_1234``;
  OBO PURLs ``…/obo/FOODON_0001`` → ``FOODON:0001``), else the full IRI; it is also an ``xref`` alias;
- name: the ``skos:prefLabel`` in the first language of the ``lang`` option (default
  ``en,zh,*``: English, then Chinese, then untagged, then any other); the other prefLabels and every
  ``skos:altLabel`` become ``synonym`` aliases, ``skos:hiddenLabel`` ``variant`` aliases;
- ``skos:definition`` (same language choice) → description; ``skos:notation`` and
  ``skos:exactMatch`` targets → ``xref`` aliases (identifiers: ``graph integrate`` merges on them);
  ``skos:closeMatch`` targets and the ``skos:inScheme`` scheme → attributes;
- ``skos:broader`` (and the inverse of ``skos:narrower``) → a triple of relation ``broader_relation``
  (default ``is_a``: the hierarchy the linker's specificity rule walks), ``skos:related`` →
  ``related_to``; confidence 1.0, layer ``imported``; targets absent from the file are counted
  (``targets_not_in_file``) and skipped.

Type: option ``entity_type`` (default: from the CURIE prefix, ``concept`` when unknown). The RDF
syntax comes from the file name (``.ttl``, ``.rdf``/``.xml``/``.owl``, ``.jsonld``, ``.nt``,
``.n3``, ``.trig``) or the option ``rdf_format``. Nothing is fetched from the network and no
other file is read: a JSON-LD ``@context`` (or ``@import``) that names a document instead of
holding the context inline is refused (inline the context), and so are external entities,
parameter entities, nested entities ("billion laughs") and external DTDs in RDF/XML
(:mod:`bencao.retrieval.ingest.xml_guard`); an RDF/XML declaration's encoding is honoured.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bencao.errors import InputError
from bencao.io import check_name, decode_text, read_bytes, read_limits, set_record
from bencao.retrieval.graph.store import DocumentBuilder
from bencao.retrieval.ingest.ontology import type_of_curie
from bencao.retrieval.ingest.registry import register
from bencao.retrieval.ingest.xml_guard import as_utf8_xml, check_entities, declared_encoding

_SUFFIX_FORMATS = {".ttl": "turtle", ".turtle": "turtle", ".rdf": "xml", ".xml": "xml", ".owl": "xml", ".jsonld": "json-ld",
                   ".json": "json-ld", ".nt": "nt", ".n3": "n3", ".trig": "trig", ".nq": "nquads"}
_OBO = "http://purl.obolibrary.org/obo/"


# The syntaxes read, by every name rdflib knows them by (its media types included). Each name maps to
# the canonical one the guards key on: an alias such as application/rdf+xml must not reach rdflib's
# XML parser past the entity guard. Other rdflib parsers (trix, hext, patch) are not read.
_FORMAT_NAMES = {"turtle": "turtle", "ttl": "turtle", "text/turtle": "turtle",
                 "xml": "xml", "rdf/xml": "xml", "rdfxml": "xml", "rdf-xml": "xml", "application/rdf+xml": "xml",
                 "json-ld": "json-ld", "jsonld": "json-ld", "application/ld+json": "json-ld",
                 "nt": "nt", "ntriples": "nt", "n-triples": "nt", "nt11": "nt", "application/n-triples": "nt",
                 "n3": "n3", "text/n3": "n3",
                 "trig": "trig", "application/trig": "trig",
                 "nquads": "nquads", "nq": "nquads", "n-quads": "nquads", "application/n-quads": "nquads"}
_FORMAT_CHOICES = "turtle|xml|json-ld|nt|n3|trig|nquads"


def rdf_format(path: Path, options: dict[str, Any]) -> str:
    if options.get("rdf_format"):
        given = str(options["rdf_format"]).strip()
        if given.lower() not in _FORMAT_NAMES:
            raise InputError(path, f"rdf_format {given[:40]!r} is not a syntax the skos format reads; give -O rdf_format={_FORMAT_CHOICES}")
        return _FORMAT_NAMES[given.lower()]
    name = path.name[:-3] if path.name.endswith(".gz") else path.name
    suffix = Path(name).suffix.lower()
    if suffix not in _SUFFIX_FORMATS:
        raise InputError(path, f"cannot tell the RDF syntax from {suffix or 'no suffix'!r}; give -O rdf_format={_FORMAT_CHOICES}")
    return _SUFFIX_FORMATS[suffix]


def parse_rdf(path: Path, fmt: str) -> Any:
    """An rdflib Graph of the file; every failure becomes an :class:`InputError` naming the file."""
    import rdflib

    raw = read_bytes(path)
    if not raw.strip():
        raise InputError(path, "empty file")
    data: str | bytes
    if fmt == "xml":
        text = decode_text(raw, path, encoding=read_limits().encoding or declared_encoding(raw), guess=False)
        data = as_utf8_xml(text)  # the declared encoding is honoured once; the parser reads UTF-8
        check_entities(data, path)
    else:
        data = decode_text(raw, path, guess=False)  # UTF-8 (RDF's encoding), or the encoding option; NUL and UTF-16 refused
        if "\r" in data and fmt in ("turtle", "nt", "n3", "trig", "nquads"):  # bare-CR line ends read as LF
            data = data.replace("\r\n", "\n").replace("\r", "\n")
        if fmt in ("turtle", "n3", "trig"):
            _check_long_literals(data, path, read_limits().max_line_bytes)
    if fmt == "json-ld":
        _check_jsonld_contexts(data, path)
    rdf = rdflib.Graph()
    try:
        with _no_remote_contexts(path):
            rdf.parse(data=data, format=fmt, publicID=path.resolve().as_uri())
    except InputError:
        raise
    except Exception as exc:  # noqa: BLE001 - rdflib's parsers raise many unrelated types
        msg = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        line = getattr(exc, "lines", None) or getattr(exc, "lineno", None)
        raise InputError(path, f"malformed {fmt}: {msg[:300]}", record=f"line {line}" if isinstance(line, int) else None) from None
    return rdf


def _check_long_literals(text: str, path: Path, cap: int) -> None:
    """Refuse a triple-quoted literal longer than ``cap`` characters before rdflib reads it: its short
    lines pass the line cap, and the Turtle parser slows down sharply on such a literal (48 MB in one
    definition ran for more than 13 minutes)."""
    for quote in ('"""', "'''"):
        start = text.find(quote)
        while start >= 0:
            end = text.find(quote, start + 3)
            if end < 0:
                break
            if end - start - 3 > cap:
                raise InputError(path, f"a string literal of more than {cap:,} characters, over the limit (option max_line_bytes)",
                                 record=f"line {text.count(chr(10), 0, start) + 1}")
            start = text.find(quote, end + 3)


def _check_jsonld_contexts(text: str, path: Path) -> None:
    """Refuse a JSON-LD document whose ``@context`` (anywhere, scoped contexts included) or ``@import``
    names a document (a URL or a file) instead of holding the context inline."""
    import json

    try:
        doc = json.loads(text)
    except ValueError:
        return  # malformed JSON: rdflib's parser reports it
    except RecursionError:
        raise InputError(path, "malformed json-ld: nested too deeply") from None
    stack: list[Any] = [doc]
    while stack:
        node = stack.pop()
        if isinstance(node, list):
            stack.extend(node)
        elif isinstance(node, dict):
            for key, value in node.items():
                if key in ("@context", "@import"):
                    refs = [value] if isinstance(value, str) else [v for v in value if isinstance(v, str)] if isinstance(value, list) else []
                    if refs:
                        raise InputError(path, f"JSON-LD {key} {refs[0][:100]!r} names a document: remote and file contexts are never "
                                               "fetched; put the context inline in the file")
                stack.append(value)


class _RefusedContext(Exception):
    pass


def _no_remote_contexts(path: Path) -> Any:
    """While parsing, rdflib's JSON-LD context loader refuses every document (defence in depth behind
    :func:`_check_jsonld_contexts`)."""
    import contextlib

    from rdflib.plugins.shared.jsonld import context as jsonld_context

    def refuse(source: Any, *args: Any, **kwargs: Any) -> Any:
        raise InputError(path, f"JSON-LD context {str(source)[:100]!r} names a document: remote and file contexts are never fetched; "
                               "put the context inline in the file")

    @contextlib.contextmanager
    def patched() -> Any:
        saved = jsonld_context.source_to_json
        jsonld_context.source_to_json = refuse
        try:
            yield
        finally:
            jsonld_context.source_to_json = saved

    return patched()


def _curie(rdf: Any, iri: str) -> str:
    if iri.startswith(_OBO) and "_" in iri[len(_OBO):]:
        local = iri[len(_OBO):]
        return local.replace("_", ":", 1)
    best = None
    for prefix, ns in rdf.namespaces():
        ns = str(ns)
        if prefix and iri.startswith(ns) and len(iri) > len(ns) and (best is None or len(ns) > len(best[1])):
            best = (prefix, ns)
    if best and not best[0].startswith(("ns", "default")) and best[0] not in ("skos", "rdf", "rdfs", "owl", "xsd", "xml", "dc", "dcterms"):
        return f"{best[0]}:{iri[len(best[1]):]}"
    return iri


def _pick(literals: list[Any], langs: list[str]) -> Any:
    """The literal in the first preferred language ('*' = untagged), else the first in sorted order."""
    by_lang: dict[str, list[Any]] = {}
    for lit in sorted(literals, key=lambda x: (str(getattr(x, "language", "") or ""), str(x))):
        by_lang.setdefault(str(getattr(lit, "language", "") or "").lower(), []).append(lit)
    for lang in langs:
        key = "" if lang == "*" else lang.lower()
        for tag, lits in by_lang.items():
            if tag == key or (key and tag.split("-")[0] == key):
                return lits[0]
    return next(iter(by_lang.values()))[0] if by_lang else None


def _one_preflabel_per_language(path: Path, eid: str, prefs: list[Any]) -> None:
    """SKOS integrity condition S14: at most one prefLabel per language tag. Two (the same concept defined
    twice with different names, or two files concatenated) would keep one silently; refused instead."""
    by_lang: dict[str, set[str]] = {}
    for p in prefs:
        by_lang.setdefault(getattr(p, "language", None) or "", set()).add(str(p).strip())
    for lang, names in by_lang.items():
        if len(names) > 1:
            shown = " and ".join(repr(n[:60]) for n in sorted(names)[:2])
            raise InputError(path, f"{len(names)} prefLabels in language {lang or '(none)'!r}: {shown}; "
                                   "SKOS allows one per language (S14) — conflicting duplicate definitions are refused",
                             record=f"concept {eid}")


@register("skos", kind="ontology", options=("lang", "entity_type", "broader_relation", "rdf_format"),
          description="SKOS concepts via rdflib (Turtle, RDF/XML, JSON-LD, ...): prefLabel/altLabel/hiddenLabel, definition, broader → is_a, exactMatch xrefs")
def load_skos(b: DocumentBuilder, path: Path, options: dict[str, Any]) -> None:
    from rdflib import RDF, URIRef
    from rdflib.namespace import SKOS

    rdf = parse_rdf(path, rdf_format(path, options))
    langs = [x.strip() for x in str(options.get("lang") or "en,zh,*").split(",") if x.strip()]
    broader_rel = str(options.get("broader_relation") or "is_a")
    subjects = {s for s in rdf.subjects(RDF.type, SKOS.Concept) if isinstance(s, URIRef)}
    subjects |= {s for s in rdf.subjects(SKOS.prefLabel, None) if isinstance(s, URIRef)}
    if not subjects:
        raise InputError(path, "no SKOS concept in the file (nothing typed skos:Concept or carrying a skos:prefLabel)")
    ids = {s: _curie(rdf, str(s)) for s in subjects}
    unnamed = 0
    for s in sorted(subjects, key=str):
        eid = ids[s]
        prefs = list(rdf.objects(s, SKOS.prefLabel))
        _one_preflabel_per_language(path, eid, prefs)
        label = _pick(prefs, langs)
        if label is None or not str(label).strip():
            unnamed += 1
            name = eid
        else:
            set_record(f"concept {eid}")
            name = check_name(str(label), "prefLabel")
        aliases = [(str(x), "synonym") for x in sorted(prefs, key=str) if x != label]
        aliases += [(str(x), "synonym") for x in sorted(rdf.objects(s, SKOS.altLabel), key=str)]
        aliases += [(str(x), "variant") for x in sorted(rdf.objects(s, SKOS.hiddenLabel), key=str)]
        aliases += [(str(x), "xref") for x in sorted(rdf.objects(s, SKOS.notation), key=str)]
        aliases += [(_curie(rdf, str(x)), "xref") for x in sorted(rdf.objects(s, SKOS.exactMatch), key=str)]
        aliases.append((eid, "xref"))
        if eid != str(s):
            aliases.append((str(s), "xref"))
        attrs: dict[str, Any] = {}
        close = sorted(_curie(rdf, str(x)) for x in rdf.objects(s, SKOS.closeMatch))
        if close:
            attrs["close_match"] = close
        schemes = sorted(_curie(rdf, str(x)) for x in rdf.objects(s, SKOS.inScheme))
        if schemes:
            attrs["scheme"] = schemes
        definition = _pick(list(rdf.objects(s, SKOS.definition)), langs)
        b.entity(name, str(options.get("entity_type") or type_of_curie(eid)), id=eid, layer="terminology", defines=True,
                 description=str(definition).strip() if definition is not None and str(definition).strip() else None,
                 aliases=aliases, attributes=attrs or None)
    b.relation(broader_rel, "broader concept (SKOS hierarchy)")
    edges: set[tuple[str, str, str]] = set()
    missing = 0
    for s in subjects:
        for child, rel, parent in ([(s, broader_rel, o) for o in rdf.objects(s, SKOS.broader)]
                                   + [(o, broader_rel, s) for o in rdf.objects(s, SKOS.narrower)]
                                   + [(s, "related_to", o) for o in rdf.objects(s, SKOS.related)]):
            if child in ids and parent in ids and child != parent:
                edges.add((ids[child], rel, ids[parent]))
            else:
                missing += 1
    for h, rel, t in sorted(edges):
        b.triple(h, rel, t, confidence=1.0, layer="imported", origin="skos")
    b.meta.update({"concepts": len(subjects), "edges": len(edges), "targets_not_in_file": missing, "concepts_without_label": unnamed})
