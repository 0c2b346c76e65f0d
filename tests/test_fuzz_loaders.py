"""Malformed input for EVERY registered loader: exit code 2 with one line naming the file, graph unchanged.

The formats come from the loader registry, so a new loader fails ``test_every_loader_has_fuzz_cases``
until it gets a template here. Each format has a template (a valid file whose main name is a
placeholder) and the table below mutates it: corrupt/truncated/fake/bomb gzip, empty, blank,
binary, UTF-16, Latin-1 (as mojibake-prone bytes), GB18030 without ``encoding``, NUL, control
characters, lone surrogates, whitespace-only and over-long names, a line over ``max_line_bytes``,
plus format-specific breakage (malformed JSON/CSV/OBO/OWL, deep nesting, bad mapping YAML).

Every case runs the real CLI in-process (``bencao graph add``) against one small graph built by
``bencao graph build`` and checks the graph's SQL dump (``sqlite3 .iterdump()``) did not change.
"""

from __future__ import annotations

import gzip
import json
import sqlite3
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable
from xml.sax.saxutils import escape as xml_escape

import pytest

from bencao.cli import main
from bencao.retrieval.ingest.registry import formats

PH = "PLACEHOLDERNAME"


def _jsonl(obj: dict) -> bytes:
    return (json.dumps(obj, ensure_ascii=False) + "\n").encode("utf-8")


_OWL = """<?xml version="1.0"?>
<rdf:RDF xmlns:owl="http://www.w3.org/2002/07/owl#" xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#"
         xmlns:rdfs="http://www.w3.org/2000/01/rdf-schema#" xmlns:oboInOwl="http://www.geneontology.org/formats/oboInOwl#">
    <owl:Ontology rdf:about="http://purl.obolibrary.org/obo/fz.owl"/>
    <owl:Class rdf:about="http://purl.obolibrary.org/obo/FZ_0000002">
        <rdfs:label xml:lang="en">fuzz parent</rdfs:label>
    </owl:Class>
    <owl:Class rdf:about="http://purl.obolibrary.org/obo/FZ_0000001">
        <rdfs:subClassOf rdf:resource="http://purl.obolibrary.org/obo/FZ_0000002"/>
        <rdfs:label xml:lang="en">{name}</rdfs:label>
    </owl:Class>
</rdf:RDF>
"""


@dataclass
class Template:
    """A valid input of one format whose main name is ``name``; ``family`` says how text is escaped."""

    filename: str
    make: Callable[[str], bytes]
    family: str  # json | raw | xml
    extra: dict[str, bytes] = field(default_factory=dict)  # side files (a mapping YAML), named in options
    options: tuple[str, ...] = ()
    names_checked: bool = True  # the placeholder is an entity name (books: a section title)
    stored: str = ""  # SQL counting rows that hold the placeholder's text (?), when it is neither a name nor a title


_CATALOG_HEADER = "mfh_id,name_zh,base_name_zh,variants_zh,batch,order_in_batch,announcement,date,source_url,note\n"

TEMPLATES: dict[str, Template] = {
    "foodon-jsonl": Template("terms.jsonl", lambda n: _jsonl({"id": "FZ:1", "label": n, "synonyms": ["fz one"], "parents": []}), "json"),
    "recipes-jsonl": Template("recipes.jsonl", lambda n: _jsonl({"recipe_id": "1-食疗方#1", "name": n, "category": "粥类",
                                                                  "ingredients": "萝卜五个，粳米三合", "indications": "消渴", "method": "煮粥食之"}), "json"),
    "sections-jsonl": Template("sections.jsonl", lambda n: _jsonl({"book": "测试书", "path": ["测试书", "卷一", n], "title": n,
                                                                    "text": "味甘平。主五脏邪气。"}), "json", names_checked=False),
    "books-txt": Template("book.txt", lambda n: f"<篇名>测试书\n书名：测试书\n<目录>卷一\n<篇名>{n}\n内容：味甘平。主五脏邪气。\n".encode(), "raw",
                          names_checked=False),
    "books-md": Template("book.md", lambda n: f"# 测试书\n\n## {n}\n\n味甘平。主五脏邪气。\n".encode(), "raw", names_checked=False),
    "catalog-csv": Template("catalog.csv", lambda n: (_CATALOG_HEADER + f"MFH900,{n},{n},,1,1,公告,2020-01-01,http://x.test/,\n").encode(), "raw"),
    "kb-csv": Template("kb.csv", lambda n: f"id,name,syn\nDSI900,{n},fz one\n".encode(), "raw",
                       extra={"map.yaml": b"entities:\n  id_column: id\n  name_column: name\n  type: dietary_supplement\n"
                                          b"  aliases:\n    - column: syn\n"},
                       options=("mapping={map.yaml}",)),
    "obo": Template("onto.obo", lambda n: (f"format-version: 1.2\nontology: fz\n\n[Term]\nid: FZ:0000002\nname: fuzz parent\n\n"
                                           f"[Term]\nid: FZ:0000001\nname: {n}\nis_a: FZ:0000002\n").encode(), "raw"),
    "owl": Template("onto.owl", lambda n: _OWL.format(name=xml_escape(n)).encode(), "xml"),
    "ontology-json": Template("dump.json", lambda n: (json.dumps([{"curie": "FZ:2", "label": "fuzz parent", "relations": {"is_a": []}},
                                                                  {"curie": "FZ:1", "label": n, "synonyms": ["fz one"], "definition": "a fuzz food",
                                                                   "relations": {"is_a": ["FZ:2"]}}], ensure_ascii=False) + "\n").encode("utf-8"), "json"),
    "skos": Template("concepts.ttl", lambda n: ("@prefix skos: <http://www.w3.org/2004/02/skos/core#> .\n@prefix fz: <http://example.org/fz/> .\n\n"
                                               "fz:parent a skos:Concept ; skos:prefLabel \"fuzz parent\"@en .\n"
                                               f"fz:one a skos:Concept ; skos:prefLabel \"{n}\"@en ; skos:broader fz:parent .\n").encode(), "raw"),
    "cases-jsonl": Template("cases.jsonl", lambda n: _jsonl({"case_id": "fz1", "sex": "女", "age": 37, "history": ["慢性胃炎"],
                                                              "text": f"患者，女，37岁。自述{n}、口干。", "treatment": "萝卜粥"}), "json",
                            names_checked=False, stored="SELECT COUNT(*) FROM snippets WHERE instr(text, ?) > 0"),
    "cases-csv": Template("cases.csv", lambda n: f"case_id,sex,age,history,text,treatment\nfz1,女,37,慢性胃炎,患者自述{n}。,萝卜粥\n".encode(), "raw",
                          names_checked=False, stored="SELECT COUNT(*) FROM snippets WHERE instr(text, ?) > 0"),
    "disease-tree": Template("tree.yaml", lambda n: f"name: 测试树\nclasses:\n  - name: {n}\n    children:\n      - {{name: 咳嗽, keywords: [咳嗽]}}\n".encode(),
                             "raw"),
}

#: How each family writes a NUL, a control character and a lone surrogate inside a name.
_PAYLOADS = {
    "json": {"nul": b"a\\u0000b", "control": b"a\\u0007b", "surrogate": b"a\\ud800b"},
    "raw": {"nul": b"a\x00b", "control": b"a\x07b", "surrogate": b"a\xed\xa0\x80b"},  # a surrogate in UTF-8 bytes is invalid
    "xml": {"nul": b"a&#0;b", "control": b"a&#7;b", "surrogate": b"a&#xD800;b"},
}
_MOJIBAKE = "Jalapeño Müller".encode("latin-1")  # also decodes as GB18030: must be refused, not stored as 蘄…


@dataclass
class Case:
    fmt: str
    name: str
    filename: str
    content: bytes
    options: tuple[str, ...] = ()
    extra: dict[str, bytes] = field(default_factory=dict)
    bad_file: str | None = None  # the file the message must name (default: the input)


def _bomb() -> bytes:
    """64 MiB of zeros as a ~64 KB gzip stream (built in pieces: bounded memory)."""
    co = zlib.compressobj(9, zlib.DEFLATED, 31)
    block = bytes(1 << 20)
    return b"".join([co.compress(block) for _ in range(64)] + [co.flush()])


def _yaml_bomb(levels: int = 9) -> bytes:
    """'Billion laughs': ~600 bytes of YAML whose aliases stand for 9**levels strings."""
    out = 'l0: &l0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n'
    for i in range(1, levels):
        out += f"l{i}: &l{i} [" + ",".join([f"*l{i - 1}"] * 9) + "]\n"
    return out.encode()


def _with(t: Template, payload: bytes) -> bytes:
    return t.make(PH).replace(PH.encode(), payload)


def _cases(fmt: str) -> list[Case]:
    t = TEMPLATES[fmt]
    base = t.make("fuzz name")
    fn = t.filename
    gz = gzip.compress(base)
    flipped = bytearray(gz)
    flipped[len(gz) // 2] ^= 0xFF
    p = _PAYLOADS[t.family]
    cases = [
        Case(fmt, "gzip-corrupt", fn + ".gz", bytes(flipped)),
        Case(fmt, "gzip-truncated", fn + ".gz", gz[: len(gz) - 12]),
        Case(fmt, "gzip-fake", fn + ".gz", base),
        Case(fmt, "gzip-bomb", fn + ".gz", b"BOMB"),  # replaced by the bomb fixture
        Case(fmt, "empty", fn, b""),
        Case(fmt, "blank", fn, b"\n \n\t\n"),
        Case(fmt, "binary", fn, bytes(range(256)) * 8),
        Case(fmt, "utf16", fn, base.decode("utf-8").encode("utf-16")),
        Case(fmt, "latin1", fn, _with(t, _MOJIBAKE)),
        Case(fmt, "nul", fn, _with(t, p["nul"])),
        Case(fmt, "surrogate", fn, _with(t, p["surrogate"])),
        Case(fmt, "long-line", fn, t.make("y" * 600), options=("max_line_bytes=512",)),
        Case(fmt, "wrong-encoding-declared", fn, _with(t, "大枣".encode("utf-8")), options=("encoding=ascii",)),
        Case(fmt, "unknown-encoding-declared", fn, base, options=("encoding=no-such-codec",)),
    ]
    big5_name = "丹砂雲母養精神安魂魄益氣明目殺精魅邪惡鬼"
    cases += [  # Big5 declared as GB18030 (mojibake with kana and private-use characters), UTF-8 declared as a legacy encoding
        Case(fmt, "big5-declared-gb18030", fn, t.make(big5_name).decode("utf-8").encode("big5", "replace"), options=("encoding=gb18030",)),
        Case(fmt, "utf8-declared-gb18030", fn, t.make("大枣鲜品"), options=("encoding=gb18030",)),
        Case(fmt, "utf8-declared-latin1", fn, t.make("Jalapeño"), options=("encoding=latin-1",)),
        Case(fmt, "not-a-text-codec", fn, base, options=("encoding=rot13",)),
        Case(fmt, "ascii-incompatible-codec", fn, t.make(big5_name).decode("utf-8").encode("gb18030"), options=("encoding=utf-16",)),
    ]
    # GB18030 bytes declared Latin-1: every byte decodes, the text would be mojibake
    cases.append(Case(fmt, "gb18030-declared-latin1", fn, t.make(big5_name).decode("utf-8").encode("gb18030"), options=("encoding=latin-1",)))
    if fmt not in ("books-txt", "books-md"):  # running text may be GB18030; structured formats must say so
        cases.append(Case(fmt, "gb18030-undeclared", fn, t.make("大枣").decode("utf-8").encode("gb18030")))
    if t.names_checked:
        cases += [
            Case(fmt, "control-char-name", fn, _with(t, p["control"])),
            Case(fmt, "long-name", fn, t.make("z" * 1200)),
            Case(fmt, "long-name-option", fn, t.make("z" * 60), options=("max_name_chars=50",)),
        ]
        if fmt not in ("obo", "owl", "skos"):  # an ontology term without a label is named by its id (by design)
            cases.append(Case(fmt, "whitespace-name", fn, t.make("   ")))
    if t.family == "json":
        cases += [
            Case(fmt, "malformed-json", fn, base + b'{"id": oops}\n'),
            Case(fmt, "not-an-object", fn, b"[1, 2, 3]\n"),
            Case(fmt, "deep-nesting", fn, b"[" * 200_000 + b"]" * 200_000 + b"\n"),
            Case(fmt, "huge-integer", fn, b'{"id": ' + b"9" * 5000 + b"}\n"),
            Case(fmt, "nul-in-key", fn, b'{"a\\u0000": 1, "id": "x"}\n'),
        ]
    if fmt in ("catalog-csv", "kb-csv"):
        header, row = base.split(b"\n", 1)
        cases += [
            Case(fmt, "ragged-row", fn, header + b"\n" + row.rstrip(b"\n") + b",extra\n"),
            Case(fmt, "unterminated-quote", fn, header + b'\n"' + row),
            Case(fmt, "duplicate-column", fn, header + b"," + header.split(b",")[0] + b"\n" + row.rstrip(b"\n") + b",x\n"),
        ]
    if fmt in ("foodon-jsonl", "ontology-json", "kb-csv"):  # one id, two different names: never merged silently
        dup = {"foodon-jsonl": base + _jsonl({"id": "FZ:1", "label": "another name"}),
               "ontology-json": base.replace(b"}]", b'}, {"curie": "FZ:1", "label": "another name"}]', 1),
               "kb-csv": base + b"DSI900,another name,x\n"}[fmt]
        cases.append(Case(fmt, "conflicting-duplicate-id", fn, dup))
    if fmt in ("obo", "owl", "skos", "catalog-csv"):  # the same id named twice: refused as above, in these formats' own terms
        dup = {"obo": base + b"\n[Term]\nid: FZ:0000001\nname: another name\n",
               "owl": base.replace(b"</rdf:RDF>", b'<owl:Class rdf:about="http://purl.obolibrary.org/obo/FZ_0000001">'
                                                  b'<rdfs:label xml:lang="en">another name</rdfs:label></owl:Class>\n</rdf:RDF>', 1),
               "skos": base + b'fz:one skos:prefLabel "another name"@en .\n',
               "catalog-csv": base + "MFH900,另一名,另一名,,1,2,公告,2020-01-01,http://x.test/,\n".encode()}[fmt]
        cases.append(Case(fmt, "conflicting-duplicate-id", fn, dup))
    if t.family == "json":
        cases.append(Case(fmt, "duplicate-json-key", fn, base.replace(b'{"', b'{"zz": 1, "zz": 2, "', 1)))
    if fmt in ("catalog-csv", "kb-csv", "cases-csv"):
        header, row = base.split(b"\n", 1)
        cell = "\n".join(["味甘平"] * 200).encode()  # short physical lines, one long quoted cell
        fields = row.rstrip(b"\n").split(b",")
        fields[-1] = b'"' + cell + b'"'
        cases.append(Case(fmt, "multiline-cell-over-cap", fn, header + b"\n" + b",".join(fields) + b"\n", options=("max_line_bytes=512",)))
    if fmt == "sections-jsonl":
        cases.append(Case(fmt, "deep-heading-path", fn, _jsonl({"book": "书", "path": ["书", *["卷"] * 5000, "篇"], "title": "篇", "text": "味甘。"})))
    if fmt == "books-txt":
        cases.append(Case(fmt, "deep-heading-path", fn, ("<篇名>书\n<目录>" + "\\".join(["卷"] * 5000) + "\n<篇名>篇\n内容：味甘。\n").encode()))
    if fmt == "kb-csv":
        mapping = t.extra["map.yaml"]
        cases += [
            Case(fmt, "mapping-latin1", fn, base, extra={"map.yaml": mapping + b"description: caf\xe9\n"}, bad_file="map.yaml"),
            Case(fmt, "mapping-malformed-yaml", fn, base, extra={"map.yaml": b"entities: [unclosed\n"}, bad_file="map.yaml"),
            Case(fmt, "mapping-unknown-key", fn, base, extra={"map.yaml": mapping + b"colour: red\n"}, bad_file="map.yaml"),
            Case(fmt, "mapping-deep", fn, base, extra={"map.yaml": b"a: " + b"[" * 50_000 + b"]" * 50_000 + b"\n"}, bad_file="map.yaml"),
            Case(fmt, "mapping-alias-bomb", fn, base, extra={"map.yaml": _yaml_bomb() + b"entities:\n  id_column: *l8\n"}, bad_file="map.yaml"),
            Case(fmt, "mapping-alias-bomb-in-a-key", fn, base, bad_file="map.yaml", extra={"map.yaml": (  # the type error quoted the expansion
                "relations:\n  head_column: id\n  tail_column: name\n  relation: x\n  default_confidence: ["
                + ", ".join(['&l0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
                            + [f"&l{i} [" + ",".join([f"*l{i - 1}"] * 9) + "]" for i in range(1, 6)]) + "]\n").encode()}),
        ]
    if fmt == "disease-tree":
        cases += [
            Case(fmt, "yaml-alias-bomb", fn, b"name: t\n" + _yaml_bomb() + b"classes: [*l8]\n"),
            Case(fmt, "yaml-deep", fn, b"name: t\nclasses: " + b"[" * 3000 + b"]" * 3000 + b"\n"),
            Case(fmt, "yaml-recursive-alias", fn, b"name: t\nclasses: &c [{name: a, children: *c}]\n"),
        ]
    cases.append(Case(fmt, "nan-option", fn, base, options=("max_ratio=nan",)))
    if fmt in ("obo", "owl"):
        cases += [
            Case(fmt, "json-content", fn, b'{"graphs": [{"id": "x"}]}\n'),
            Case(fmt, "html", fn, b"<html><body>not an ontology</body></html>\n"),
            Case(fmt, "truncated", fn, base[: len(base) * 2 // 3]),
        ]
    if fmt == "skos":
        concept = {"@id": "http://example.org/fz/one", "http://www.w3.org/2004/02/skos/core#prefLabel": "fz"}
        cases += [  # nothing outside the file is read: 127.0.0.1:9 (discard) would only be reached by a fetch
            Case(fmt, "jsonld-http-context", "c.jsonld", json.dumps({**concept, "@context": "http://127.0.0.1:9/ctx.jsonld"}).encode()),
            Case(fmt, "jsonld-file-context", "c.jsonld", json.dumps({**concept, "@context": "file:///etc/hostname"}).encode()),
            Case(fmt, "jsonld-relative-context", "c.jsonld", json.dumps({**concept, "@context": ["ctx.jsonld"]}).encode()),
            Case(fmt, "jsonld-import", "c.jsonld", json.dumps({**concept, "@context": {"@version": 1.1, "@import": "http://127.0.0.1:9/c"}}).encode()),
        ]
    if fmt in ("skos", "owl"):
        xml_fn = "c.rdf" if fmt == "skos" else fn
        xml_base = TEMPLATES["owl"].make("fuzz name")
        laughs = b'<!ENTITY l0 "lol">' + b"".join(f'<!ENTITY l{i} "{("&l" + str(i - 1) + ";") * 10}">'.encode() for i in range(1, 10))
        for name, dtd, label in [("xml-external-entity", b'<!ENTITY x SYSTEM "file:///etc/hostname">', b"a &x;"),
                                 ("xml-billion-laughs", laughs, b"&l9;"),
                                 ("xml-parameter-entity", b'<!ENTITY % p SYSTEM "http://127.0.0.1:9/p">%p;', b"a")]:
            doc = xml_base.replace(b"<rdf:RDF", b"<!DOCTYPE rdf:RDF [" + dtd + b"]>\n<rdf:RDF", 1).replace(b"fuzz name", label)
            cases.append(Case(fmt, name, xml_fn, doc))
            if fmt == "skos":  # rdflib's other names for RDF/XML go through the same guard
                cases.append(Case(fmt, name + "-as-application-rdf-xml", "c.data", doc, options=("rdf_format=application/rdf+xml",)))
    if fmt == "owl":
        cases.append(Case(fmt, "no-ontology-element", fn, b'<?xml version="1.0"?>\n<rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#"/>\n'))
    if fmt == "obo":
        cases.append(Case(fmt, "stanza-garbage", fn, b"format-version: 1.2\n\n[Term]\nid: \x01\x02\nname: \n[[[\n"))
    return cases


ALL = [c for fmt in formats() if fmt in TEMPLATES for c in _cases(fmt)]


def _write_case(case: Case, d: Path, bomb: bytes) -> tuple[Path, list[str]]:
    d.mkdir(parents=True, exist_ok=True)
    t = TEMPLATES[case.fmt]
    files = {**t.extra, **case.extra}
    for name, data in files.items():
        (d / name).write_bytes(data)
    src = d / case.filename
    src.write_bytes(bomb if case.content == b"BOMB" else case.content)
    opts = [o.replace("{map.yaml}", str(d / "map.yaml")) for o in (*t.options, *case.options)]
    return src, opts


def _add(graph: Path, fmt: str, src: Path, opts: list[str]) -> int:
    return main(["graph", "add", "--graph", str(graph), "--format", fmt, str(src), *[a for o in opts for a in ("-O", o)]])


def _dump(graph: Path) -> list[str]:
    with sqlite3.connect(graph / "graph.sqlite") as c:
        return list(c.iterdump())


@pytest.fixture(scope="module")
def bomb() -> bytes:
    return _bomb()


@pytest.fixture(scope="module")
def small_graph(tmp_path_factory, repo) -> tuple[Path, list[str]]:
    root = tmp_path_factory.mktemp("fuzz")
    recipe = root / "recipe.yaml"
    recipe.write_text(f"name: fuzz\nroot: {repo}\nindex: false\nsources:\n"
                      "  - format: catalog-csv\n    path: data/sample/mfh_catalog/mfh_catalog_106.csv\n", encoding="utf-8")
    graph = root / "g"
    assert main(["graph", "build", "--config", str(recipe), "--graph", str(graph)]) == 0
    return graph, _dump(graph)


def test_every_loader_has_fuzz_cases() -> None:
    missing = sorted(set(formats()) - set(TEMPLATES))
    assert not missing, f"loaders without a fuzz template in tests/test_fuzz_loaders.py: {missing}"
    per_format = {fmt: sum(c.fmt == fmt for c in ALL) for fmt in formats()}
    assert min(per_format.values()) >= 14, per_format


@pytest.mark.parametrize("fmt", sorted(TEMPLATES))
def test_templates_are_valid_input(fmt, small_graph, tmp_path, capsys) -> None:
    """The unmutated template ingests, so each failure below comes from its mutation."""
    import shutil

    graph = tmp_path / "copy"
    shutil.copytree(small_graph[0], graph)
    t = TEMPLATES[fmt]
    src, opts = _write_case(Case(fmt, "valid", t.filename, t.make("fuzz name")), tmp_path / "in", b"")
    assert _add(graph, fmt, src, opts) == 0, capsys.readouterr().err
    assert capsys.readouterr().out.startswith("added ")


@pytest.mark.parametrize("case", ALL, ids=[f"{c.fmt}-{c.name}" for c in ALL])
def test_malformed_input_is_one_line_error_and_graph_unchanged(case, small_graph, bomb, tmp_path, capsys) -> None:
    graph, before = small_graph
    src, opts = _write_case(case, tmp_path, bomb)
    capsys.readouterr()
    assert _add(graph, case.fmt, src, opts) == 2
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if not ln.startswith("WARNING")]
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    bad = tmp_path / case.bad_file if case.bad_file else src
    assert str(bad) in lines[0], lines[0]
    assert _dump(graph) == before


@pytest.mark.parametrize("fmt", [f for f in sorted(TEMPLATES) if f not in ("books-txt", "books-md")])
def test_declared_encoding_is_read(fmt, small_graph, tmp_path, capsys) -> None:
    """GB18030 refused above without ``encoding`` is read with ``-o encoding=gb18030``: 大枣 is stored as 大枣."""
    import shutil

    graph = tmp_path / "copy"
    shutil.copytree(small_graph[0], graph)
    t = TEMPLATES[fmt]
    case = Case(fmt, "gb18030-declared", t.filename, t.make("大枣鲜品").decode("utf-8").encode("gb18030"), options=("encoding=gb18030",))
    src, opts = _write_case(case, tmp_path / "in", b"")
    assert _add(graph, fmt, src, opts) == 0, capsys.readouterr().err
    with sqlite3.connect(graph / "graph.sqlite") as c:
        sql = t.stored or ("SELECT COUNT(*) FROM aliases WHERE alias = ?" if t.names_checked else "SELECT COUNT(*) FROM sections WHERE title = ?")
        assert c.execute(sql, ("大枣鲜品",)).fetchone()[0] >= 1


#: Invisible characters (zero-width space and joiner, right-to-left override, a BOM inside a name,
#: an isolate, a soft hyphen): names that print alike must match, so they are removed at ingestion.
_INVISIBLE_NAME = "大\u200b枣\u200d鲜\u202e品\ufeff干\u2066果\u00ad"


@pytest.mark.parametrize("fmt", sorted(TEMPLATES))
def test_invisible_characters_removed_from_names(fmt, small_graph, tmp_path, capsys) -> None:
    import shutil

    graph = tmp_path / "copy"
    shutil.copytree(small_graph[0], graph)
    t = TEMPLATES[fmt]
    if t.stored:
        pytest.skip("the placeholder is free text (a case record), not a name or a title")
    payload = _INVISIBLE_NAME if t.family != "xml" else xml_escape(_INVISIBLE_NAME)
    src, opts = _write_case(Case(fmt, "invisible", t.filename, t.make(payload)), tmp_path / "in", b"")
    assert _add(graph, fmt, src, opts) == 0, capsys.readouterr().err
    assert "invisible_characters_removed" in capsys.readouterr().out
    with sqlite3.connect(graph / "graph.sqlite") as c:
        if t.names_checked:
            assert c.execute("SELECT COUNT(*) FROM aliases WHERE alias = '大枣鲜品干果'").fetchone()[0] >= 1
        elif not t.stored:
            assert c.execute("SELECT COUNT(*) FROM sections WHERE title = '大枣鲜品干果'").fetchone()[0] >= 1
        for table, col in (("aliases", "alias"), ("entities", "name"), ("sections", "title")):
            rows = [r[0] for r in c.execute(f"SELECT {col} FROM {table}")]
            assert not any(ch in r for r in rows for ch in "\u200b\u200d\u202e\ufeff\u2066\u00ad"), (table, fmt)


@pytest.mark.parametrize("change", ["truncate", "append"])
@pytest.mark.parametrize("fmt", sorted(TEMPLATES))
def test_file_changing_while_read_is_refused(fmt, change, small_graph, tmp_path, capsys) -> None:
    """Every format: the input cut or grown between its hash and its parse is refused, graph unchanged."""
    from bencao import faults

    graph, before = small_graph
    t = TEMPLATES[fmt]
    src, opts = _write_case(Case(fmt, "changing", t.filename, t.make("fuzz name")), tmp_path / "in", b"")

    def mutate() -> None:
        data = src.read_bytes()
        src.write_bytes(data[: len(data) // 2] if change == "truncate" else data + data[-40:])

    capsys.readouterr()
    with faults.on("ingest.hashed", mutate):
        assert _add(graph, fmt, src, opts) == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if not ln.startswith("WARNING")]
    assert len(err) == 1 and "while it was read" in err[0] and str(src) in err[0], err
    assert _dump(graph) == before


@pytest.mark.parametrize("fmt", sorted(TEMPLATES))
def test_full_disk_while_committing_is_one_line(fmt, small_graph, tmp_path, capsys) -> None:
    """Every format: SQLite's "database or disk is full" during the commit is one line, graph unchanged."""
    from bencao import faults

    graph, before = small_graph
    t = TEMPLATES[fmt]
    src, opts = _write_case(Case(fmt, "disk-full", t.filename, t.make("fuzz name")), tmp_path / "in", b"")

    def full() -> None:
        raise sqlite3.OperationalError("database or disk is full")

    capsys.readouterr()
    with faults.on("sqlite.write", full):
        assert _add(graph, fmt, src, opts) == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if not ln.startswith("WARNING")]
    assert len(err) == 1 and "no space left on device" in err[0] and "previous version is unchanged" in err[0], err
    assert _dump(graph) == before
