"""Ontologies in OBO and OWL (RDF/XML), read with pronto.

Each non-obsolete term becomes an entity whose id is the term's CURIE (``FOODON:00003582``) and
whose type follows the CURIE prefix (``type_of_curie``); its label is the name, its synonyms
become ``synonym`` aliases, its cross-references ``xref`` aliases, its definition the description,
and each direct superclass an ``is_a`` triple (confidence 1.0, layer ``imported``). Obsolete
(deprecated) terms are skipped, and so are ``is_a`` edges to them. OWL class restrictions
(``subClassOf some ...``) are not superclasses and give no triple.

pronto needs every referenced term declared in the file (an OBO/OWL slice exported with
``robot extract`` declares the parents); a reference to an undeclared term is refused with its id.
Imports (``owl:imports``/``import:``) are never fetched: the loader works offline.
"""

from __future__ import annotations

import io
import warnings
from pathlib import Path
from typing import Any

from bencao.errors import InputError
from bencao.io import decode_text, read_bytes, read_limits, set_record
from bencao.retrieval.graph.store import DocumentBuilder
from bencao.retrieval.ingest.ontology import add_is_a, type_of_curie
from bencao.retrieval.ingest.registry import register
from bencao.retrieval.ingest.xml_guard import as_utf8_xml, check_entities, declared_encoding


def read_ontology(path: Path, fmt: str) -> Any:
    """Parse ``path`` with pronto; every failure becomes an :class:`InputError` naming the file (and line)."""
    import pronto
    from pronto.parsers.obo import OboParser
    from pronto.parsers.rdfxml import RdfXMLParser

    data = read_bytes(path)  # bounded: .gz decompressed, line and size limits checked while reading
    if not data.strip():
        raise InputError(path, "empty file")
    if fmt == "owl":
        # the XML declaration's encoding is honoured once: decoded here, handed on as UTF-8
        text = decode_text(data, path, encoding=read_limits().encoding or declared_encoding(data), guess=False)
        data = as_utf8_xml(text)
        check_entities(data, path)  # external/parameter/nested entities refused: nothing read besides the file
    else:
        text = decode_text(data, path, guess=False)  # UTF-8 unless the option encoding says otherwise
        if read_limits().encoding:
            data = text.encode("utf-8")
        if b"\r" in data:  # CRLF or bare-CR line ends (old Mac files): the OBO parser only splits on LF
            data = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    if fmt == "obo":
        _refuse_conflicting_stanzas(data, path)
    else:
        _refuse_conflicting_owl_labels(data, path)
    head = data[:4096]
    if fmt == "owl" and not RdfXMLParser.can_parse(str(path), head):
        raise InputError(path, "not an OWL RDF/XML file: expected an XML document starting with <?xml or <rdf:RDF")
    if fmt == "obo" and not OboParser.can_parse(str(path), head):
        raise InputError(path, "not an OBO file: expected a 'format-version:' header or a [Term] stanza at the start")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # pronto warns about every annotation property it does not model
        try:
            return pronto.Ontology(io.BytesIO(data), import_depth=0, encoding="utf-8")
        except SyntaxError as exc:  # fastobo (OBO) and xml.etree (OWL) both raise SyntaxError subclasses
            msg = str(exc.msg or exc).split(": line ")[0]
            position = getattr(exc, "position", None)  # xml.etree.ElementTree.ParseError: (line, column)
            line = exc.lineno or (position[0] if position else None)
            raise InputError(path, f"malformed {fmt.upper()}: {msg}", record=f"line {line}" if line else None) from None
        except KeyError as exc:
            raise InputError(path, f"term {exc.args[0]} is referenced (e.g. as a superclass) but not declared in the file") from None
        except (ValueError, TypeError, AttributeError) as exc:
            raise InputError(path, f"malformed {fmt.upper()}: pronto cannot read it ({type(exc).__name__}: {exc})") from None
        except BaseException as exc:  # the Rust OBO parser panics (a BaseException) on some malformed input
            if type(exc).__name__ != "PanicException":
                raise
            raise InputError(path, f"malformed {fmt.upper()}: the parser gave up ({exc})") from None


def _refuse_conflicting_stanzas(data: bytes, path: Path) -> None:
    """OBO merges stanzas that share an id, so a second [Term] with the id of an earlier one and another
    name would silently rename it (pronto keeps the last): refused, naming both lines. Stanzas that repeat
    an id with the same name (or none) add to the term, as OBO 1.4 allows."""
    names: dict[str, tuple[str, int]] = {}
    stanza = None
    current: str | None = None
    for number, raw in enumerate(data.split(b"\n"), 1):
        line = raw.strip()
        if line.startswith(b"[") and line.endswith(b"]"):
            stanza, current = line.decode("utf-8", "replace"), None
            continue
        if stanza != "[Term]" or b":" not in line:
            continue
        tag, _, value = line.partition(b":")
        value = value.split(b" !", 1)[0].strip()
        if tag == b"id":
            current = value.decode("utf-8", "replace")
        elif tag == b"name" and current is not None:
            name = value.decode("utf-8", "replace")
            first = names.get(current)
            if first is None:
                names[current] = (name, number)
            elif first[0] != name:
                raise InputError(path, f"term {current} is named twice: {first[0][:60]!r} (line {first[1]}) and {name[:60]!r}; "
                                       "OBO merges stanzas of one id, so one name would be lost — conflicting duplicate ids are refused",
                                 record=f"line {number}")


_RDF_ABOUT = "{http://www.w3.org/1999/02/22-rdf-syntax-ns#}about"
_RDFS_LABEL = "{http://www.w3.org/2000/01/rdf-schema#}label"
_XML_LANG = "{http://www.w3.org/XML/1998/namespace}lang"


def _refuse_conflicting_owl_labels(data: bytes, path: Path) -> None:
    """pronto keeps one ``rdfs:label`` of a class, so a class given two labels in one language (the same
    IRI declared twice with different names, or two files concatenated) silently lost one: refused,
    naming both, as for OBO stanzas and SKOS prefLabels. Labels in different languages are fine.
    Runs after :func:`check_entities`, so the XML holds no external or nested entities."""
    import xml.etree.ElementTree as ET

    labels: dict[tuple[str, str], str] = {}
    depth = 0
    try:
        for event, elem in ET.iterparse(io.BytesIO(data), events=("start", "end")):
            if event == "start":
                depth += 1
                continue
            depth -= 1
            about = elem.get(_RDF_ABOUT)
            if about is not None:
                for child in elem:
                    if child.tag != _RDFS_LABEL or child.text is None or not child.text.strip():
                        continue
                    lang = (child.get(_XML_LANG) or "").lower()
                    name = child.text.strip()
                    first = labels.setdefault((about, lang), name)
                    if first != name:
                        raise InputError(path, f"class {about[:100]} has two rdfs:labels in language {lang or '(none)'!r}: "
                                               f"{first[:60]!r} and {name[:60]!r}; one would be lost — conflicting duplicate "
                                               "definitions are refused")
            if depth <= 1:
                elem.clear()  # a top-level element is done with: bounded memory on large files
    except ET.ParseError:
        return  # malformed XML: pronto's parse reports it with its line


def _load(b: DocumentBuilder, path: Path, fmt: str) -> None:
    ont = read_ontology(path, fmt)
    b.relation("is_a", "subclass of (ontology hierarchy)")
    terms = [t for t in ont.terms() if not t.obsolete]
    kept = {t.id for t in terms}
    unnamed = 0
    for t in terms:
        set_record(f"term {t.id}")
        name = (t.name or "").strip()
        if not name:
            unnamed += 1
            name = t.id
        aliases = [(s.description, "synonym") for s in sorted(t.synonyms, key=lambda s: s.description) if s.description]
        aliases += [(x.id, "xref") for x in sorted(t.xrefs, key=lambda x: x.id)]
        aliases.append((t.id, "xref"))
        attrs: dict[str, Any] = {"ontology": t.id.split(":", 1)[0]} if ":" in t.id else {}
        definition = str(t.definition).strip() if t.definition else None
        b.entity(name, type_of_curie(t.id), id=t.id, layer="terminology", defines=True, description=definition or None,
                 aliases=aliases, attributes=attrs or None)
    n_edges = skipped = 0
    for t in terms:
        set_record(f"term {t.id}")
        for parent in sorted(p.id for p in t.superclasses(distance=1, with_self=False)):
            if parent in kept and parent != t.id:
                add_is_a(b, t.id, parent)
                n_edges += 1
            else:
                skipped += 1
    if not terms:
        raise InputError(path, "no (non-obsolete) terms in the ontology")
    b.meta.update({"terms": len(terms), "obsolete_skipped": len(ont.terms()) - len(terms), "is_a": n_edges,
                   "parents_obsolete_skipped": skipped, "terms_without_label": unnamed})


@register("obo", kind="ontology", description="OBO 1.4 ontology (pronto): terms, synonyms, xrefs, definitions, is_a")
def load_obo(b: DocumentBuilder, path: Path, options: dict[str, Any]) -> None:
    _load(b, path, "obo")


@register("owl", kind="ontology", description="OWL ontology in RDF/XML (pronto): classes, synonyms, xrefs, definitions, subClassOf")
def load_owl(b: DocumentBuilder, path: Path, options: dict[str, Any]) -> None:
    _load(b, path, "owl")
