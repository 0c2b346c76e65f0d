"""XML inputs (OWL and SKOS RDF/XML) checked before a parser sees them: entities and encodings.

- **Entities.** A document type declaration may declare internal entities (Protégé writes
  ``<!ENTITY obo "http://purl.obolibrary.org/obo/">`` to shorten IRIs), but an entity whose value
  refers to another entity (the nesting of a "billion laughs" bomb), an external entity
  (``SYSTEM``/``PUBLIC``: a file or a URL), a parameter entity, an unparsed entity or an external DTD
  is refused at once, and so is a document whose entity references would expand to more than
  :data:`MAX_EXPANSION_FACTOR` times its size. Nothing is ever fetched or read besides the file.
- **Encoding.** The encoding an XML declaration names is used exactly once: the text is decoded
  with it (or with the ``encoding`` option, which must then agree with the declaration up to
  aliases, or the declaration's encoding is overridden by the option) and handed to the parser as
  UTF-8 with the declaration rewritten to say so, so a parser never decodes twice ("JalapeÃ±o").
"""

from __future__ import annotations

import re
import xml.parsers.expat
from pathlib import Path

from bencao.errors import InputError

#: Entity references may expand the document at most this many times its own size (and 1 MiB).
MAX_EXPANSION_FACTOR = 10
_XML_DECL = re.compile(rb"^(\xef\xbb\xbf)?<\?xml[^>]*?\?>")
_ENCODING_ATTR = re.compile(rb"""encoding\s*=\s*(["'])([A-Za-z][A-Za-z0-9._-]*)\1""")
_ENTITY_REF = re.compile(r"&[A-Za-z_:][\w.:\-]*;")


class _Stop(Exception):
    pass


def declared_encoding(data: bytes) -> str | None:
    """The encoding an XML declaration at the start of ``data`` names (None without one)."""
    m = _XML_DECL.match(data[:1024])
    if not m:
        return None
    enc = _ENCODING_ATTR.search(m.group(0))
    return enc.group(2).decode("ascii") if enc else None


def as_utf8_xml(text: str) -> bytes:
    """``text`` (already decoded) as UTF-8 bytes whose XML declaration, if any, says UTF-8."""
    data = text.encode("utf-8")
    m = _XML_DECL.match(data[:1024])
    if m and _ENCODING_ATTR.search(m.group(0)):
        decl = _ENCODING_ATTR.sub(b'encoding="UTF-8"', m.group(0), count=1)
        data = decl + data[m.end():]
    return data


def check_entities(data: bytes, path: Path) -> None:
    """Refuse the entity declarations described in the module doc (reads only up to the end of the DTD)."""
    if b"<!DOCTYPE" not in data[:1 << 20] and b"<!ENTITY" not in data:
        return
    parser = xml.parsers.expat.ParserCreate()
    parser.SetParamEntityParsing(xml.parsers.expat.XML_PARAM_ENTITY_PARSING_NEVER)
    internal: dict[str, str] = {}

    def refuse(problem: str) -> None:
        raise InputError(path, problem, record=f"line {parser.CurrentLineNumber}")

    def on_doctype(name: str, system_id: str | None, public_id: str | None, has_internal: int) -> None:
        if system_id or public_id:
            refuse(f"external DTD {system_id or public_id!r}: refused (nothing outside the file is read)")

    def on_entity(name: str, is_param: int, value: str | None, base: str | None, system_id: str | None,
                  public_id: str | None, notation: str | None) -> None:
        if is_param:
            refuse(f"parameter entity %{name}; in the DTD: refused")
        if value is None or system_id or public_id or notation:
            refuse(f"external entity &{name}; ({system_id or public_id!r}): refused (nothing outside the file is read)")
        if _ENTITY_REF.search(value):
            refuse(f"entity &{name}; refers to another entity (nested entities, as in a 'billion laughs' bomb): refused")
        internal[name] = value

    def stop(*_: object) -> None:
        raise _Stop

    parser.StartDoctypeDeclHandler = on_doctype
    parser.EntityDeclHandler = on_entity
    parser.EndDoctypeDeclHandler = stop
    parser.StartElementHandler = stop
    try:
        parser.Parse(data, True)
    except _Stop:
        pass
    except xml.parsers.expat.ExpatError:
        return  # malformed: the real parser reports it, naming the line
    if internal:
        text = data.decode("utf-8", "replace")
        expanded = sum(len(value) * text.count(f"&{name};") for name, value in internal.items())
        budget = max(1 << 20, MAX_EXPANSION_FACTOR * len(data))
        if expanded > budget:
            raise InputError(path, f"entity references expand to {expanded:,} characters, more than {MAX_EXPANSION_FACTOR} times "
                                   f"the file's {len(data):,} bytes: refused")
