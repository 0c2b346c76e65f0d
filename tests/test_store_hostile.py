"""The store under hostile files (issue 28): files that change while read, remote contexts, resource
bombs, tracebacks, wrong encodings, invisible names, a full disk. Each test fails on the code before."""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
from pathlib import Path

import pytest

from bencao import faults
from bencao.cli import main
from bencao.errors import InputError
from bencao.retrieval.graph.store import Graph
from bencao.retrieval.ingest.registry import ingest_file


@contextlib.contextmanager
def disk_full_at(n: int):  # noqa: ANN201
    """The n-th write (a SQLite statement or a file write) fails as on a full disk: SQLITE_FULL or ENOSPC."""
    import errno

    seen = {"n": 0}

    def full(kind: str) -> None:
        seen["n"] += 1
        if seen["n"] == n:
            if kind == "sqlite":
                raise sqlite3.OperationalError("database or disk is full")
            raise OSError(errno.ENOSPC, "No space left on device")

    with faults.on("sqlite.write", lambda: full("sqlite")), faults.on("file.write", lambda: full("file")):
        yield


def _terms(n: int, start: int = 0) -> bytes:
    return b"".join((json.dumps({"id": f"FZ:{i}", "label": f"term {i}"}) + "\n").encode() for i in range(start, start + n))


def _one_line_error(capsys) -> str:
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip() and not ln.startswith("WARNING")]
    assert len(err) == 1 and err[0].startswith("error: "), err
    return err[0]


def _count(graph: Path, sql: str, *args: object) -> int:
    with sqlite3.connect(graph / "graph.sqlite") as c:
        return c.execute(sql, args).fetchone()[0]


# --------------------------------------------------------------------------- 1. files that change while read


@pytest.mark.parametrize("moment", ["ingest.hashed", "ingest.reading"])
@pytest.mark.parametrize("change", ["truncate", "append"])
def test_file_changed_while_read_is_refused_and_nothing_lost(tmp_path, capsys, moment, change) -> None:
    """A file cut or grown between hashing and parsing (or during the parse read) is refused; adding the
    complete file afterwards stores every record (it is not 'unchanged')."""
    src = tmp_path / "terms.jsonl"
    full = _terms(2000)
    src.write_bytes(full)
    graph = tmp_path / "g"

    def mutate() -> None:
        if change == "truncate":
            with open(src, "r+b") as fh:
                fh.truncate(len(_terms(1000)))
        else:
            with open(src, "ab") as fh:
                fh.write(_terms(500, start=2000))

    with faults.on(moment, mutate):
        rc = main(["graph", "add", "--create", "--graph", str(graph), "--format", "foodon-jsonl", str(src)])
    assert rc == 2
    line = _one_line_error(capsys)
    assert "while it was read" in line and str(src) in line, line
    assert _count(graph, "SELECT COUNT(*) FROM documents") == 0
    src.write_bytes(full)
    assert main(["graph", "add", "--graph", str(graph), "--format", "foodon-jsonl", str(src)]) == 0
    assert capsys.readouterr().out.startswith("added ")
    assert _count(graph, "SELECT COUNT(*) FROM entities WHERE id LIKE 'FZ:%'") == 2000


def test_book_changed_while_read_is_refused(tmp_path) -> None:
    """The line reader of books (its own gzip/encoding sniffing) is watched too."""
    src = tmp_path / "book.txt"
    body = "".join(f"<篇名>第{i}篇\n内容：味甘平。主五脏邪气。\n" for i in range(3000))
    src.write_text("<篇名>测试书\n书名：测试书\n" + body, encoding="utf-8")
    g = Graph.create(tmp_path / "g")

    def cut() -> None:
        with open(src, "r+b") as fh:
            fh.truncate(src.stat().st_size // 2)

    with faults.on("ingest.hashed", cut), pytest.raises(InputError, match="while it was read"):
        ingest_file(g, "books-txt", src)
    assert g.conn.execute("SELECT COUNT(*) FROM documents").fetchone()[0] == 0


# --------------------------------------------------------------------------- 3/4. YAML bombs, deep YAML, wrong shapes


def _alias_bomb(levels: int = 9) -> str:
    """'billion laughs': ~600 bytes whose aliases stand for 9**levels values."""
    out = 'l0: &l0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n'
    for i in range(1, levels):
        out += f"l{i}: &l{i} [" + ",".join([f"*l{i - 1}"] * 9) + "]\n"
    return out


def test_yaml_loader_budgets() -> None:
    import time

    from bencao.config import YamlRefused, parse_yaml

    t0 = time.monotonic()
    with pytest.raises(YamlRefused, match="alias bomb"):
        parse_yaml(_alias_bomb())
    with pytest.raises(YamlRefused, match="nested more than 100 levels"):
        parse_yaml("a: " + "[" * 3000 + "]" * 3000)
    with pytest.raises(YamlRefused, match="recursive"):
        parse_yaml("a: &a [1, *a]")
    with pytest.raises(YamlRefused, match="through aliases"):  # each anchor shallow, the expansion deep
        parse_yaml("a0: &a0 " + "[" * 60 + "]" * 60 + "\n" + "".join(f"a{i}: &a{i} [*a{i - 1}]\n" for i in range(1, 80)))
    assert time.monotonic() - t0 < 5
    # ordinary anchors, aliases and merge keys still work
    assert parse_yaml("base: &b {x: 1}\nitem:\n  <<: *b\n  y: 2\nlist: [*b, *b]\n") == {
        "base": {"x": 1}, "item": {"x": 1, "y": 2}, "list": [{"x": 1}, {"x": 1}]}


def test_disease_tree_alias_bomb_and_deep_yaml_are_one_line(tmp_path, capsys) -> None:
    graph = tmp_path / "g"
    bomb = tmp_path / "tree.yaml"
    bomb.write_text("name: 测试树\n" + _alias_bomb() + "classes: [*l8]\n", encoding="utf-8")
    deep = tmp_path / "deep.yaml"
    deep.write_text("name: x\nclasses: " + "[" * 3000 + "]" * 3000 + "\n", encoding="utf-8")
    for src in (bomb, deep):
        assert main(["graph", "add", "--create", "--graph", str(graph), "--format", "disease-tree", str(src)]) == 2
        line = _one_line_error(capsys)
        assert str(src) in line and len(line) < 400, line


def test_kb_mapping_bomb_error_quotes_a_short_prefix(tmp_path, capsys) -> None:
    csv = tmp_path / "kb.csv"
    csv.write_text("id,name\nDSI1,fz\n", encoding="utf-8")
    mapping = tmp_path / "map.yaml"
    mapping.write_text(_alias_bomb() + "entities:\n  id_column: *l8\n  name_column: name\n  type: x\n", encoding="utf-8")
    assert main(["graph", "add", "--create", "--graph", str(tmp_path / "g"), "--format", "kb-csv", str(csv),
                 "-O", f"mapping={mapping}"]) == 2
    line = _one_line_error(capsys)
    assert str(mapping) in line and len(line) < 400, line
    # the probe's shape: the anchors inside a known key whose type check quoted the expanded value
    # ('expected a number, got [[...' of 9**levels strings); 6 levels keep the code before cheap to run
    nested = ", ".join(['&l0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
                       + [f"&l{i} [" + ",".join([f"*l{i - 1}"] * 9) + "]" for i in range(1, 6)])
    mapping.write_text(f"relations:\n  head_column: id\n  tail_column: name\n  relation: x\n  default_confidence: [{nested}]\n",
                       encoding="utf-8")
    assert main(["graph", "add", "--create", "--graph", str(tmp_path / "g"), "--format", "kb-csv", str(csv),
                 "-O", f"mapping={mapping}"]) == 2
    line = _one_line_error(capsys)
    assert str(mapping) in line and len(line) < 400, line


def test_recipe_yaml_bomb_and_bad_value_are_short(tmp_path) -> None:
    from bencao.config import from_dict, read_yaml
    from bencao.errors import ConfigError
    from bencao.io import ReadLimits

    recipe = tmp_path / "r.yaml"
    recipe.write_text(_alias_bomb(), encoding="utf-8")
    with pytest.raises(ConfigError, match="alias bomb") as exc:
        read_yaml(recipe)
    assert len(str(exc.value)) < 300
    with pytest.raises(ConfigError) as exc:
        from_dict(ReadLimits, {"max_ratio": ["x" * 10_000]}, where="opts")
    assert len(str(exc.value)) < 200


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", ".nan"])
def test_nan_option_refused(tmp_path, capsys, value) -> None:
    src = tmp_path / "terms.jsonl"
    src.write_bytes(_terms(3))
    assert main(["graph", "add", "--create", "--graph", str(tmp_path / "g"), "--format", "foodon-jsonl", str(src),
                 "-O", f"max_ratio={value}"]) == 2
    assert "finite number" in _one_line_error(capsys)


@pytest.mark.parametrize("body", ["sex: [a, b]\n", "- just a list\n", "age_groups: {old: {ages: 60}}\n", "disease_patterns: {x: [1]}\n",
                                  "history_patterns: '(x)'\n", "colour: red\n"])
def test_wrong_shaped_case_lexicon_is_one_line(tmp_path, capsys, body) -> None:
    lex = tmp_path / f"lex{abs(hash(body))}.yaml"
    lex.write_text(body, encoding="utf-8")
    src = tmp_path / "cases.jsonl"
    src.write_text(json.dumps({"case_id": "c1", "sex": "女", "age": 37, "text": "患者，女，37岁。口干。"}, ensure_ascii=False) + "\n",
                   encoding="utf-8")
    assert main(["graph", "add", "--create", "--graph", str(tmp_path / "g"), "--format", "cases-jsonl", str(src),
                 "-O", f"lexicon={lex}"]) == 2
    line = _one_line_error(capsys)
    assert str(lex) in line, line


# --------------------------------------------------------------------------- 2. SKOS fetches nothing; XML entities


_SKOS_JSONLD = {"@id": "http://example.org/fz/one", "@type": "http://www.w3.org/2004/02/skos/core#Concept",
                "http://www.w3.org/2004/02/skos/core#prefLabel": [{"@value": "fuzz one", "@language": "en"}]}


class _Recorder:
    """An HTTP server on 127.0.0.1 (a free port) that records requests and answers a JSON-LD context;
    stopped when the test ends."""

    def __enter__(self) -> "_Recorder":
        import http.server
        import threading

        self.requests: list[str] = []
        recorder = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                recorder.requests.append(self.path)
                body = json.dumps({"@context": {"label": "http://www.w3.org/2004/02/skos/core#prefLabel"}}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/ld+json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/ctx.jsonld"
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)


@pytest.mark.parametrize("where", ["top", "list", "scoped", "import"])
def test_skos_jsonld_http_context_is_never_fetched(tmp_path, where) -> None:
    g = Graph.create(tmp_path / "g")
    with _Recorder() as server:
        doc: dict = dict(_SKOS_JSONLD)
        if where == "top":
            doc["@context"] = server.url
        elif where == "list":
            doc["@context"] = [{"skos": "http://www.w3.org/2004/02/skos/core#"}, server.url]
        elif where == "scoped":
            doc["@context"] = {"x": {"@id": "http://example.org/x", "@context": server.url}}
        else:
            doc["@context"] = {"@version": 1.1, "@import": server.url}
        src = tmp_path / "c.jsonld"
        src.write_text(json.dumps(doc), encoding="utf-8")
        with pytest.raises(InputError, match="never fetched"):
            ingest_file(g, "skos", src)
        assert server.requests == []


def test_skos_jsonld_file_context_is_never_read(tmp_path) -> None:
    g = Graph.create(tmp_path / "g")
    ctx = tmp_path / "ctx.jsonld"
    ctx.write_text(json.dumps({"@context": {"label": "http://www.w3.org/2004/02/skos/core#prefLabel"}}), encoding="utf-8")
    for ref in (ctx.as_uri(), "ctx.jsonld", "file:///etc/hostname"):
        src = tmp_path / "c.jsonld"
        src.write_text(json.dumps({**_SKOS_JSONLD, "@context": ref}), encoding="utf-8")
        with pytest.raises(InputError, match="never fetched"):
            ingest_file(g, "skos", src)
    # and an inline context still works
    src.write_text(json.dumps({"@context": {"skos": "http://www.w3.org/2004/02/skos/core#"}, **_SKOS_JSONLD}), encoding="utf-8")
    ingest_file(g, "skos", src)
    assert g.conn.execute("SELECT COUNT(*) FROM entities WHERE name = 'fuzz one'").fetchone()[0] == 1


_RDF_HEAD = ('<?xml version="1.0"?>\n{dtd}<rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#" '
             'xmlns:skos="http://www.w3.org/2004/02/skos/core#">\n'
             '<skos:Concept rdf:about="http://example.org/fz/one"><skos:prefLabel xml:lang="en">{label}</skos:prefLabel></skos:Concept>\n'
             '</rdf:RDF>\n')


def _laughs() -> str:
    ents = '<!ENTITY l0 "lol">' + "".join(f'<!ENTITY l{i} "{("&l" + str(i - 1) + ";") * 10}">' for i in range(1, 10))
    return f"<!DOCTYPE rdf:RDF [{ents}]>\n"


@pytest.mark.parametrize("fmt,suffix", [("skos", ".rdf"), ("owl", ".owl")])
@pytest.mark.parametrize("case", ["external-file", "external-http", "parameter", "billion-laughs", "external-dtd"])
def test_xml_entities_refused(tmp_path, fmt, suffix, case) -> None:
    import time

    g = Graph.create(tmp_path / "g")
    secret = tmp_path / "secret.txt"
    secret.write_text("SECRET", encoding="utf-8")
    dtd, label = {
        "external-file": (f'<!DOCTYPE rdf:RDF [<!ENTITY x SYSTEM "{secret.as_uri()}">]>\n', "a &x;"),
        "external-http": ('<!DOCTYPE rdf:RDF [<!ENTITY x SYSTEM "http://127.0.0.1:9/x">]>\n', "a &x;"),
        "parameter": ('<!DOCTYPE rdf:RDF [<!ENTITY % p "x">]>\n', "a"),
        "billion-laughs": (_laughs(), "&l9;"),
        "external-dtd": ('<!DOCTYPE rdf:RDF SYSTEM "http://127.0.0.1:9/x.dtd">\n', "a"),
    }[case]
    src = tmp_path / f"c{suffix}"
    body = _RDF_HEAD.format(dtd=dtd, label=label)
    if fmt == "owl":
        body = body.replace("<skos:Concept", '<owl:Ontology rdf:about="http://x/o"/><skos:Concept').replace(
            "xmlns:skos=", 'xmlns:owl="http://www.w3.org/2002/07/owl#" xmlns:skos=')
    src.write_text(body, encoding="utf-8")
    t0 = time.monotonic()
    with pytest.raises(InputError, match="refused"):
        ingest_file(g, fmt, src)
    assert time.monotonic() - t0 < 5


def test_xml_internal_entities_still_read(tmp_path) -> None:
    """Protégé-style entities that shorten IRIs are fine."""
    g = Graph.create(tmp_path / "g")
    src = tmp_path / "c.rdf"
    src.write_text(_RDF_HEAD.format(dtd='<!DOCTYPE rdf:RDF [<!ENTITY fz "http://example.org/fz/">]>\n', label="fuzz one")
                   .replace('"http://example.org/fz/one"', '"&fz;one"'), encoding="utf-8")
    ingest_file(g, "skos", src)
    assert g.conn.execute("SELECT COUNT(*) FROM entities WHERE name = 'fuzz one'").fetchone()[0] == 1


@pytest.mark.parametrize("alias", ["application/rdf+xml", "XML", "rdf/xml"])
def test_skos_rdf_format_aliases_go_through_the_xml_guard(tmp_path, capsys, alias) -> None:
    """rdflib knows its RDF/XML parser also as application/rdf+xml: given as -O rdf_format, that name
    reached the parser past the entity guard (an external file entity was read, a billion laughs ran for
    minutes). Every name of a syntax maps to the one the guards key on; unknown syntaxes are refused."""
    import time

    secret = tmp_path / "secret.txt"
    secret.write_text("SECRET", encoding="utf-8")
    graph = str(tmp_path / "g")
    for dtd, label in ((f'<!DOCTYPE rdf:RDF [<!ENTITY x SYSTEM "{secret.as_uri()}">]>\n', "a &x;"), (_laughs(), "&l9;")):
        src = tmp_path / "c.txt"
        src.write_text(_RDF_HEAD.format(dtd=dtd, label=label), encoding="utf-8")
        t0 = time.monotonic()
        assert main(["graph", "add", "--create", "--graph", graph, "--format", "skos", str(src), "-O", f"rdf_format={alias}"]) == 2
        assert "refused" in _one_line_error(capsys)
        assert time.monotonic() - t0 < 5
    for other in ("trix", "hext", "nonsense"):
        assert main(["graph", "add", "--graph", graph, "--format", "skos", str(src), "-O", f"rdf_format={other}"]) == 2
        assert "not a syntax the skos format reads" in _one_line_error(capsys)
    src.write_text(_RDF_HEAD.format(dtd="", label="fuzz one"), encoding="utf-8")
    assert main(["graph", "add", "--graph", graph, "--format", "skos", str(src), "-O", f"rdf_format={alias}"]) == 0
    ttl = tmp_path / "c.data"
    ttl.write_text('<http://example.org/fz/two> <http://www.w3.org/2004/02/skos/core#prefLabel> "fuzz two"@en .\n', encoding="utf-8")
    assert main(["graph", "add", "--graph", graph, "--format", "skos", str(ttl), "-O", "rdf_format=text/turtle"]) == 0
    assert _count(tmp_path / "g", "SELECT COUNT(*) FROM entities WHERE name IN ('fuzz one', 'fuzz two')") == 2


@pytest.mark.parametrize("fmt,suffix", [("skos", ".rdf"), ("owl", ".owl")])
@pytest.mark.parametrize("option", [None, "latin-1"])
def test_xml_declared_encoding_honoured_once(tmp_path, fmt, suffix, option) -> None:
    g = Graph.create(tmp_path / "g")
    body = _RDF_HEAD.format(dtd="", label="Jalapeño").replace('<?xml version="1.0"?>', '<?xml version="1.0" encoding="ISO-8859-1"?>')
    if fmt == "owl":
        body = body.replace("<skos:Concept", '<owl:Ontology rdf:about="http://x/o"/><owl:Class rdf:about="http://x/J">'
                            '<rdfs:label>Jalapeño</rdfs:label></owl:Class><skos:Concept').replace(
            "xmlns:skos=", 'xmlns:owl="http://www.w3.org/2002/07/owl#" xmlns:rdfs="http://www.w3.org/2000/01/rdf-schema#" xmlns:skos=')
    src = tmp_path / f"c{suffix}"
    src.write_bytes(body.encode("latin-1"))
    ingest_file(g, fmt, src, {"encoding": option} if option else None)
    names = {r[0] for r in g.conn.execute("SELECT name FROM entities")}
    assert "Jalapeño" in names and not any("Ã" in n for n in names), names


# --------------------------------------------------------------------------- 3. deep headings, big cells, catalogue throughput


def test_deep_heading_paths_refused(tmp_path, capsys) -> None:
    graph = str(tmp_path / "g")
    deep = tmp_path / "sections.jsonl"
    deep.write_text(json.dumps({"book": "书", "path": ["书", *[f"卷{i}" for i in range(5000)], "篇"], "title": "篇", "text": "味甘。"},
                               ensure_ascii=False) + "\n", encoding="utf-8")
    book = tmp_path / "book.txt"
    book.write_text("<篇名>书\n<目录>" + "\\".join(f"卷{i}" for i in range(5000)) + "\n<篇名>篇\n内容：味甘。\n", encoding="utf-8")
    for fmt, src in (("sections-jsonl", deep), ("books-txt", book)):
        assert main(["graph", "add", "--create", "--graph", graph, "--format", fmt, str(src)]) == 2
        line = _one_line_error(capsys)
        assert "deeper than the limit" in line and str(src) in line, line
    # 32 levels are fine
    book.write_text("<篇名>书\n<目录>" + "\\".join(f"卷{i}" for i in range(32)) + "\n<篇名>篇\n内容：味甘。\n", encoding="utf-8")
    assert main(["graph", "add", "--graph", graph, "--format", "books-txt", str(book)]) == 0


@pytest.mark.parametrize("fmt", ["catalog-csv", "cases-csv"])
def test_multiline_cell_over_the_cap_refused(tmp_path, capsys, fmt) -> None:
    """Each physical line is short, the quoted cell is not: the cell is refused at the cap."""
    cell = "\n".join(["味甘平主五脏邪气"] * 200)  # ~5 KB over 200 short lines
    if fmt == "catalog-csv":
        text = ("mfh_id,name_zh,base_name_zh,variants_zh,batch,order_in_batch,announcement,date,source_url,note\n"
                f'MFH1,枣,枣,,1,1,公告,2020-01-01,http://x.test/,"{cell}"\n')
    else:
        text = f'case_id,sex,age,text\nc1,女,37,"{cell}"\n'
    src = tmp_path / "t.csv"
    src.write_text(text, encoding="utf-8")
    assert main(["graph", "add", "--create", "--graph", str(tmp_path / "g"), "--format", fmt, str(src), "-O", "max_line_bytes=1024"]) == 2
    line = _one_line_error(capsys)
    assert "a cell of more than 1,024 characters" in line and "row 1" in line, line


@pytest.mark.parametrize("fmt,name", [("skos", "c.ttl"), ("skos", "c.rdf"), ("owl", "c.owl")])
def test_multiline_literal_over_the_cap_refused(tmp_path, capsys, fmt, name) -> None:
    """A definition spread over short lines (a Turtle triple-quoted literal, RDF/XML element text) passed
    the line cap: 48 MB in one SKOS Turtle definition ran for more than 13 minutes, a 16 M-character OWL
    definition was stored. Refused at max_line_bytes, before rdflib parses the Turtle."""
    text = "\n".join(["味甘平主五脏邪气"] * 300)  # ~2.7 K characters over 300 short lines
    if name == "c.ttl":
        body = ('@prefix skos: <http://www.w3.org/2004/02/skos/core#> .\n<http://example.org/a> a skos:Concept ; '
                f'skos:prefLabel "apple"@en ; skos:definition """{text}"""@en .\n')
    elif fmt == "skos":
        body = _RDF_HEAD.format(dtd="", label="apple").replace("</skos:Concept>", f"<skos:definition>{text}</skos:definition></skos:Concept>")
    else:
        body = _OWL.format(body='<owl:Class rdf:about="http://purl.obolibrary.org/obo/X_1"><rdfs:label>apple</rdfs:label>'
                                f'<obo:IAO_0000115 xmlns:obo="http://purl.obolibrary.org/obo/">{text}</obo:IAO_0000115></owl:Class>')
    src = tmp_path / name
    src.write_text(body, encoding="utf-8")
    graph = str(tmp_path / "g")
    assert main(["graph", "add", "--create", "--graph", graph, "--format", fmt, str(src), "-O", "max_line_bytes=1024"]) == 2
    line = _one_line_error(capsys)
    assert "over the limit" in line and "max_line_bytes" in line and str(src) in line, line
    assert main(["graph", "add", "--graph", graph, "--format", fmt, str(src)]) == 0  # under the default cap: read
    assert _count(tmp_path / "g", "SELECT COUNT(*) FROM entities WHERE length(description) > 2000") == 1


def test_catalogue_looks_names_up_in_batches(tmp_path) -> None:
    """Catalogue rows resolve their names against the graph in batched queries, not one query per
    row (10^6 rows took 24 min): the statement count grows with rows/500, not with rows."""
    from bencao.retrieval.ingest.registry import build_document

    rows = ["mfh_id,name_zh,base_name_zh,variants_zh,batch,order_in_batch,announcement,date,source_url,note"]
    rows += [f"M{i},品{i}（甲{i}、乙{i}）,品{i},甲{i}、乙{i},1,{i},公告,2020-01-01,http://x.test/," for i in range(3000)]
    src = tmp_path / "c.csv"
    src.write_text("\n".join(rows) + "\n", encoding="utf-8")
    g = Graph.create(tmp_path / "g")
    ingest_file(g, "catalog-csv", Path(__file__).resolve().parents[1] / "data/sample/mfh_catalog/mfh_catalog_106.csv")
    statements: list[str] = []
    g.conn.set_trace_callback(statements.append)
    b = build_document(g, "catalog-csv", src)
    g.conn.set_trace_callback(None)
    assert len(b.entities) == 9001
    assert len(statements) < 100, len(statements)
    g.commit(b)
    assert g.conn.execute("SELECT COUNT(*) FROM triples WHERE relation = 'variant_of' AND head_id IN (SELECT entity_id FROM aliases WHERE alias LIKE '甲%')").fetchone()[0] == 3000


# --------------------------------------------------------------------------- 4. full disk, encodings that are not text


def test_sqlite_full_is_one_clean_error_not_cannot_rollback(tmp_path) -> None:
    """A real SQLITE_FULL (the store capped with max_page_count): SQLite rolls back by itself, the
    explicit ROLLBACK must not mask it; the graph is unchanged and still writable."""
    from bencao.errors import DiskFull

    g = Graph.create(tmp_path / "g")
    src = tmp_path / "terms.jsonl"
    src.write_bytes(_terms(20000))
    pages = g.conn.execute("PRAGMA page_count").fetchone()[0]
    g.conn.execute(f"PRAGMA max_page_count = {pages + 20}")
    with pytest.raises(DiskFull, match=r"no space left on device while writing .*graph.sqlite; the previous version is unchanged"):
        ingest_file(g, "foodon-jsonl", src)
    assert not g.conn.in_transaction
    assert g.conn.execute("SELECT COUNT(*) FROM documents").fetchone()[0] == 0
    g.conn.execute("PRAGMA max_page_count = 1073741823")
    src.write_bytes(_terms(50))
    ingest_file(g, "foodon-jsonl", src)
    assert g.conn.execute("SELECT COUNT(*) FROM entities").fetchone()[0] == 50


def _leftovers(d: Path) -> list[str]:
    return sorted(str(p.relative_to(d)) for p in d.rglob("*") if ".tmp" in p.name)


def test_full_disk_at_each_write_of_an_add(tmp_path, capsys) -> None:
    """ENOSPC injected at the n-th write (SQLite statement or index/manifest file) of `graph add` on an
    indexed graph, for every n until the add gets through: each run ends in one line, leaves no
    temporary file, and the graph answers the add again once space is back."""
    import shutil

    from tests.retrieval_graphs import build_tcm_graph

    base = tmp_path / "base"
    build_tcm_graph(base).close()
    book = tmp_path / "葛根.txt"
    book.write_text("<篇名>葛根\n内容：葛根，味甘，平。主消渴，身大热，呕吐，诸痹。\n", encoding="utf-8")
    failed_at = []
    for n in range(1, 40):
        graph = tmp_path / f"g{n}"
        shutil.copytree(base, graph)
        with disk_full_at(n):
            rc = main(["graph", "add", str(book), "--graph", str(graph), "--format", "books-txt"])
        if rc == 0:
            capsys.readouterr()
            break
        failed_at.append(n)
        line = _one_line_error(capsys)
        assert "no space left on device" in line, line
        assert _leftovers(graph) == [], _leftovers(graph)
        assert main(["graph", "add", str(book), "--graph", str(graph), "--format", "books-txt"]) == 0
        capsys.readouterr()
        with Graph.open(graph, read_only=True) as g:
            assert [d["source"] for d in g.documents()].count("葛根.txt") == 1
            from bencao.retrieval.index import open_indexes

            assert open_indexes(g).lexical_search("snippets", "葛根 消渴", 3)
    assert len(failed_at) >= 4, failed_at  # SQLite writes and index files were both hit


def _build_recipe(tmp_path: Path, book: Path, name: str) -> Path:
    recipe = tmp_path / f"{name}.yaml"
    recipe.write_text(f"name: {name}\nindex_config: retrieval/lexical\nsources:\n  - format: books-txt\n    path: {book}\n", encoding="utf-8")
    return recipe


def _book(path: Path, n: int) -> Path:
    path.write_text("<篇名>探针书\n" + "".join(f"<篇名>第{i}篇\n内容：味甘平，主五脏邪气{i}。\n" for i in range(n)), encoding="utf-8")
    return path


def test_full_disk_at_each_write_of_a_build(tmp_path, capsys) -> None:
    """ENOSPC/SQLITE_FULL at the n-th write of `graph build` (SQLite statements, the WAL checkpoint, index
    files): one line naming the graph, the previous version still served, no temporary directory left."""
    graph = tmp_path / "g"
    assert main(["graph", "build", "--config", str(_build_recipe(tmp_path, _book(tmp_path / "old.txt", 3), "old")),
                 "--graph", str(graph)]) == 0
    recipe = _build_recipe(tmp_path, _book(tmp_path / "new.txt", 20), "new")
    capsys.readouterr()
    failed_at = []
    for n in range(1, 60):
        with disk_full_at(n):
            rc = main(["graph", "build", "--config", str(recipe), "--graph", str(graph)])
        if rc == 0:
            break
        failed_at.append(n)
        err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip() and not ln.startswith(("build ", "WARNING"))]
        assert len(err) == 1 and err[0].startswith(f"error: no space left on device while building {graph}; the previous version is unchanged"), err
        names = [p.name for p in tmp_path.iterdir() if p.name.startswith(".g.")]
        assert [x for x in names if x.startswith((".g.building-", ".g.link-", ".g.old-"))] == [], names
        assert len([x for x in names if x.startswith(".g.v-")]) == 1, names
        assert _leftovers(tmp_path) == []
        with Graph.open(graph, read_only=True) as g:
            assert [d["source"] for d in g.documents()] == ["old.txt"]
    assert rc == 0 and len(failed_at) >= 3, failed_at
    with Graph.open(graph, read_only=True) as g:
        assert [d["source"] for d in g.documents()] == ["new.txt"]


def _can_mount_tmpfs() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0 and Path("/proc/filesystems").exists() and \
        "tmpfs" in Path("/proc/filesystems").read_text()


def test_full_disk_on_a_real_small_filesystem(tmp_path) -> None:
    """The probe itself: a 3 MB tmpfs (root only; skipped elsewhere). `graph build` ran out of space at
    the WAL checkpoint and ended in a sqlite3.OperationalError traceback; `graph add` of a larger book
    fills the disk in the store or the indexes. Every run is one line, exit 2, no *.tmp files left."""
    import subprocess
    import sys

    if not _can_mount_tmpfs():
        pytest.skip("mounting a small tmpfs needs root")
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(mnt)], capture_output=True).returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    cli = [sys.executable, "-m", "bencao.cli"]
    try:
        graph = mnt / "g"
        empty = tmp_path / "empty.yaml"
        empty.write_text("name: empty\nindex_config: retrieval/lexical\nsources: []\n", encoding="utf-8")
        assert subprocess.run([*cli, "graph", "build", "--config", str(empty), "--graph", str(graph)], capture_output=True).returncode == 0
        import random

        rnd = random.Random(300)
        chars = "甘苦辛酸咸温寒热平凉主治五脏邪气补中益气养血安神除湿利水消肿止痛"
        runs = []
        for n in (300, 1600):  # 300 sections of 300 characters filled the disk at build's WAL checkpoint
            big = tmp_path / f"big{n}.txt"
            big.write_text("<篇名>探针书\n" + "".join(f"<篇名>第{i}篇\n内容：" + "".join(rnd.choice(chars) for _ in range(300)) + "\n"
                                                  for i in range(n)), encoding="utf-8")
            runs += [["graph", "build", "--config", str(_build_recipe(tmp_path, big, f"big{n}")), "--graph", str(graph)],
                     ["graph", "add", "--graph", str(graph), "--format", "books-txt", str(big)]]
        rcs: list[int] = []
        for argv in runs:
            run = subprocess.run([*cli, *argv], capture_output=True, text=True, timeout=120)
            rcs.append(run.returncode)
            if run.returncode == 0:  # the 300-section book fits when added (not when built beside the old version)
                continue
            err = [ln for ln in run.stderr.splitlines() if ln.strip() and not ln.startswith(("build ", "WARNING"))]
            assert run.returncode == 2 and len(err) == 1 and err[0].startswith("error: no space left on device"), run.stderr[-2000:]
            assert "Traceback" not in run.stderr
            assert [p for p in mnt.rglob("*") if ".tmp" in p.name or ".building" in p.name] == []
        assert rcs[0] == 2 and rcs[2:] == [2, 2], rcs
        with Graph.open(graph, read_only=True) as g:
            assert g.conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    finally:
        subprocess.run(["umount", str(mnt)], capture_output=True)


@pytest.mark.parametrize("enc", ["rot13", "base64", "hex", "zlib"])
@pytest.mark.parametrize("fmt,name", [("foodon-jsonl", "t.jsonl"), ("books-txt", "b.txt"), ("catalog-csv", "c.csv")])
def test_non_text_codec_is_one_line(tmp_path, capsys, enc, fmt, name) -> None:
    src = tmp_path / name
    src.write_bytes(_terms(2) if fmt == "foodon-jsonl" else "<篇名>书\n内容：味甘。\n".encode() if fmt == "books-txt" else
                    b"mfh_id,name_zh,base_name_zh,variants_zh,batch,order_in_batch,announcement,date,source_url,note\nM1,a,a,,1,1,x,2020,u,\n")
    assert main(["graph", "add", "--create", "--graph", str(tmp_path / "g"), "--format", fmt, str(src), "-O", f"encoding={enc}"]) == 2
    line = _one_line_error(capsys)
    assert "not a text encoding" in line, line


# --------------------------------------------------------------------------- 5. Big5 vs GB18030, declared encodings checked

_BIG5_BOOK = ("<篇名>神農本草經\n書名：神農本草經\n<目錄>卷上\n<篇名>丹砂\n內容：丹砂，味甘，微寒。主身體五臟百病，養精神，安魂魄，益氣明目，"
              "殺精魅邪惡鬼。久服通神明不老。能化為汞。生山谷。\n<篇名>雲母\n內容：雲母，味甘，平。主身皮死肌，中風寒熱，如在車船上，"
              "除邪氣，安五臟，益子精，明目。\n")


@pytest.mark.parametrize("fmt,name,make", [
    ("books-txt", "本經.txt", lambda: _BIG5_BOOK.replace("目錄", "目录").encode("big5", "replace").replace(b"<\xa5\xd8\xbf\xfd>", b"")),
    ("books-md", "本經.md", lambda: "# 神農本草經\n\n## 丹砂\n\n丹砂，味甘，微寒。主身體五臟百病，養精神，安魂魄，益氣明目。\n\n## 雲母\n\n雲母，味甘，平。主身皮死肌，中風寒熱。\n".encode("big5")),
])
def test_big5_book_detected_not_stored_as_gb18030_mojibake(tmp_path, fmt, name, make) -> None:
    g = Graph.create(tmp_path / "g")
    src = tmp_path / name
    src.write_bytes(make())
    ingest_file(g, fmt, src)
    titles = {r[0] for r in g.conn.execute("SELECT title FROM sections")}
    assert "丹砂" in titles and "雲母" in titles, titles
    texts = "".join(r[0] for r in g.conn.execute("SELECT text FROM snippets"))
    assert "五臟" in texts and not any("\ue000" <= ch <= "\uf8ff" or "\u3040" <= ch <= "\u30ff" for ch in texts)


def _big5_terms() -> bytes:
    return "".join(json.dumps({"id": f"FZ:{i}", "label": f"丹砂雲母{i}號，養精神安魂魄"}, ensure_ascii=False) + "\n" for i in range(20)).encode("big5")


@pytest.mark.parametrize("fmt,name,data", [
    ("foodon-jsonl", "t.jsonl", _big5_terms),
    ("catalog-csv", "c.csv", lambda: ("mfh_id,name_zh,base_name_zh,variants_zh,batch,order_in_batch,announcement,date,source_url,note\n"
                                      + "".join(f"M{i},雲母養精神{i},雲母養精神{i},,1,1,衛生署公告,2020,u,限量使用\n" for i in range(20))).encode("big5")),
    ("books-txt", "b.txt", lambda: _BIG5_BOOK.encode("big5", "replace")),
])
def test_declared_gb18030_on_big5_bytes_refused(tmp_path, capsys, fmt, name, data) -> None:
    src = tmp_path / name
    src.write_bytes(data())
    assert main(["graph", "add", "--create", "--graph", str(tmp_path / "g"), "--format", fmt, str(src), "-O", "encoding=gb18030"]) == 2
    line = _one_line_error(capsys)
    assert "encoding=big5" in line, line
    assert main(["graph", "add", "--graph", str(tmp_path / "g"), "--format", fmt, str(src), "-O", "encoding=big5"]) == 0


@pytest.mark.parametrize("enc", ["gb18030", "big5", "latin-1"])
@pytest.mark.parametrize("fmt,name", [("foodon-jsonl", "t.jsonl"), ("books-txt", "b.txt"), ("ontology-json", "d.json")])
def test_declared_legacy_encoding_on_utf8_bytes_refused(tmp_path, capsys, enc, fmt, name) -> None:
    src = tmp_path / name
    data = {"foodon-jsonl": _terms(1).replace(b"term 0", "大枣鲜品".encode()),
            "books-txt": "<篇名>书\n内容：味甘平，主五脏邪气。\n".encode(),
            "ontology-json": json.dumps([{"curie": "FZ:1", "label": "大枣鲜品"}], ensure_ascii=False).encode()}[fmt]
    src.write_bytes(data)
    assert main(["graph", "add", "--create", "--graph", str(tmp_path / "g"), "--format", fmt, str(src), "-O", f"encoding={enc}"]) == 2
    assert "the bytes are UTF-8" in _one_line_error(capsys)


@pytest.mark.parametrize("enc", ["utf-16", "utf-16-le", "utf-32", "utf-7", "cp500"])
@pytest.mark.parametrize("fmt,name", [("foodon-jsonl", "t.jsonl"), ("books-txt", "b.txt"), ("catalog-csv", "c.csv")])
def test_ascii_incompatible_encoding_is_one_line(tmp_path, capsys, enc, fmt, name) -> None:
    """-O encoding=utf-16 was a UnicodeDecodeError traceback in the books reader (it splits lines on
    bytes); every loader reads line by line, so encodings that do not keep ASCII as ASCII are refused."""
    src = tmp_path / name
    text = ('{"id": "FZ:1", "label": "apple"}\n' if fmt == "foodon-jsonl" else "<篇名>书\n内容：味甘。\n" if fmt == "books-txt" else
            "mfh_id,name_zh,base_name_zh,variants_zh,batch,order_in_batch,announcement,date,source_url,note\nM1,a,a,,1,1,x,2020,u,\n")
    for body in (text.encode(enc, "replace"), text.encode("gb18030")):  # the file in that encoding (EBCDIC has no Chinese), or not
        src.write_bytes(body)
        assert main(["graph", "add", "--create", "--graph", str(tmp_path / "g"), "--format", fmt, str(src), "-O", f"encoding={enc}"]) == 2
        line = _one_line_error(capsys)
        assert "not an ASCII-compatible encoding" in line and "utf-8" in line, line
    src.write_bytes(text.encode("utf-8-sig"))  # a BOM'd UTF-8 name is still fine
    assert main(["graph", "add", "--graph", str(tmp_path / "g"), "--format", fmt, str(src), "-O", "encoding=utf-8-sig"]) == 0


@pytest.mark.parametrize("enc,data_enc,alt", [("latin-1", "gb18030", "gb18030"), ("cp1252", "big5", "big5"), ("iso-8859-15", "gb18030", "gb18030")])
def test_declared_latin_encoding_on_chinese_bytes_refused(tmp_path, capsys, enc, data_enc, alt) -> None:
    """Latin-1 decodes every byte: declared on a GB18030 or Big5 book it stored 'ÈË²Î' mojibake silently."""
    names = ["人参", "黄芪", "当归", "甘草", "大枣", "山药", "枸杞子"] if data_enc == "gb18030" else ["人參", "黃耆", "當歸", "甘草", "大棗", "山藥", "枸杞子"]
    src = tmp_path / "t.jsonl"
    src.write_bytes(b"".join((json.dumps({"id": f"X:{i}", "label": w}, ensure_ascii=False) + "\n").encode(data_enc)
                             for i, w in enumerate(names * 3)))
    graph = str(tmp_path / "g")
    assert main(["graph", "add", "--create", "--graph", graph, "--format", "foodon-jsonl", str(src), "-O", f"encoding={enc}"]) == 2
    line = _one_line_error(capsys)
    assert "implausible" in line and f"-O encoding={alt}" in line, line
    # Western text in the same encoding is read as before (accents between ASCII letters, clusters too)
    latin = tmp_path / "l.jsonl"
    words = ["café crème", "Größe", "süß", "Ærø", "naïve façade", "Jalapeño", "Öl", "Ärger", "pêche", "à côté"]
    latin.write_bytes(b"".join((json.dumps({"id": f"L:{i}", "label": w}, ensure_ascii=False) + "\n").encode(enc) for i, w in enumerate(words)))
    assert main(["graph", "add", "--graph", graph, "--format", "foodon-jsonl", str(latin), "-O", f"encoding={enc}"]) == 0
    assert _count(tmp_path / "g", "SELECT COUNT(*) FROM entities WHERE name IN ('Größe', 'Jalapeño', 'à côté')") == 3


def test_private_use_text_refused(tmp_path, capsys) -> None:
    """GB18030's user-defined area decodes to private-use characters: a file full of them is not text."""
    src = tmp_path / "t.jsonl"
    pua = bytes([0xAA, 0xA1]) * 30
    src.write_bytes(b'{"id": "FZ:1", "label": "' + pua + b'"}\n')
    assert main(["graph", "add", "--create", "--graph", str(tmp_path / "g"), "--format", "foodon-jsonl", str(src), "-O", "encoding=gb18030"]) == 2
    assert "private-use" in _one_line_error(capsys)


# --------------------------------------------------------------------------- 6. invisible names, silent merges

_INVISIBLES = ["\u200b", "\u200d", "\u202e", "\ufeff", "\u2066", "\u00ad"]


def test_invisible_characters_removed_from_names_and_counted(tmp_path, capsys) -> None:
    src = tmp_path / "t.jsonl"
    src.write_text("".join(json.dumps({"id": f"FZ:{i}", "label": f"大{ch}枣{i}", "synonyms": [f"红{ch}枣{i}"]}, ensure_ascii=False) + "\n"
                           for i, ch in enumerate(_INVISIBLES)), encoding="utf-8")
    graph = tmp_path / "g"
    assert main(["graph", "add", "--create", "--graph", str(graph), "--format", "foodon-jsonl", str(src)]) == 0
    out = capsys.readouterr().out
    assert "12 invisible_characters_removed" in out, out
    with sqlite3.connect(graph / "graph.sqlite") as c:
        names = [r[0] for r in c.execute("SELECT name FROM entities WHERE id LIKE 'FZ:%' ORDER BY id")]
        aliases = {r[0] for r in c.execute("SELECT alias FROM aliases")}
    assert names == [f"大枣{i}" for i in range(len(_INVISIBLES))], names
    assert not any(ch in a for a in aliases for ch in _INVISIBLES)


def test_section_titles_normalised_and_capped(tmp_path, capsys) -> None:
    src = tmp_path / "s.jsonl"
    recs = [{"book": "书", "path": ["书", "卷一", "丹\x07砂\x1b[31m"], "title": "丹\x07砂\x1b[31m", "text": "味甘。"},
            {"book": "书", "path": ["书", "卷一", "长" * 100_000], "title": "长" * 100_000, "text": "味苦。"},
            {"book": "书", "path": ["书", "卷一", "云\u200b母\nsecond line"], "title": "云\u200b母\nsecond line", "text": "味甘平。"}]
    src.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in recs), encoding="utf-8")
    graph = tmp_path / "g"
    assert main(["graph", "add", "--create", "--graph", str(graph), "--format", "sections-jsonl", str(src)]) == 0
    out = capsys.readouterr().out
    assert "titles_cut" in out and "titles_with_control_characters" in out, out
    with sqlite3.connect(graph / "graph.sqlite") as c:
        titles = [r[0] for r in c.execute("SELECT title FROM sections ORDER BY ord")]
    assert "丹 砂 [31m" in titles and "云母 second line" in titles, titles
    assert max(len(t) for t in titles) <= 200
    assert not any(ch in t for t in titles for ch in "\x07\x1b\n")


def test_bom_at_every_line_keeps_book_markup(tmp_path) -> None:
    g = Graph.create(tmp_path / "g")
    src = tmp_path / "b.txt"
    src.write_text("\ufeff<篇名>神农本草经\n\ufeff书名：神农本草经\n\ufeff<篇名>丹砂\n\ufeff内容：味甘微寒。\n\ufeff<篇名>云母\n\ufeff内容：味甘平。\n",
                   encoding="utf-8")
    ingest_file(g, "books-txt", src)
    titles = {r[0] for r in g.conn.execute("SELECT title FROM sections")}
    assert {"神农本草经", "丹砂", "云母"} <= titles, titles


@pytest.mark.parametrize("fmt,name,body", [
    ("foodon-jsonl", "t.jsonl", '{"id": "FZ:1", "label": "apple"}\n{"id": "FZ:1", "label": "pear"}\n'),
    ("ontology-json", "d.json", '[{"curie": "FZ:1", "label": "apple"}, {"curie": "FZ:1", "label": "pear"}]'),
    ("kb-csv", "kb.csv", "id,name\nDSI1,apple\nDSI1,pear\n"),
    ("catalog-csv", "c.csv", "mfh_id,name_zh,base_name_zh,variants_zh,batch,order_in_batch,announcement,date,source_url,note\n"
                             "MFH1,apple,apple,,1,1,x,2020,u,\nMFH2,plum,plum,,1,2,x,2020,u,\nMFH1,pear,pear,,1,3,x,2020,u,\n"),
])
def test_conflicting_duplicate_ids_refused(tmp_path, capsys, fmt, name, body) -> None:
    src = tmp_path / name
    src.write_text(body, encoding="utf-8")
    mapping = tmp_path / "m.yaml"
    mapping.write_text("entities:\n  id_column: id\n  name_column: name\n  type: dietary_supplement\n", encoding="utf-8")
    opts = ["-O", f"mapping={mapping}"] if fmt == "kb-csv" else []
    assert main(["graph", "add", "--create", "--graph", str(tmp_path / "g"), "--format", fmt, str(src), *opts]) == 2
    line = _one_line_error(capsys)
    assert "defined twice with different names" in line and "'apple'" in line and "'pear'" in line, line


@pytest.mark.parametrize("body", ['{"id": "FZ:1", "label": "apple", "label": "pear"}\n', '{"id": true, "label": "apple"}\n',
                                  '{"id": 1.5, "label": "apple"}\n', '{"id": ["FZ:1"], "label": "apple"}\n'])
def test_json_duplicate_keys_and_wrong_typed_ids_refused(tmp_path, capsys, body) -> None:
    src = tmp_path / "t.jsonl"
    src.write_text(body, encoding="utf-8")
    assert main(["graph", "add", "--create", "--graph", str(tmp_path / "g"), "--format", "foodon-jsonl", str(src)]) == 2
    line = _one_line_error(capsys)
    assert "duplicate key 'label'" in line or "'id' must be a string" in line, line


def test_existing_id_claimed_under_another_name_is_reported(tmp_path, capsys) -> None:
    graph = str(tmp_path / "g")
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a.write_text('{"id": "FOODON:1", "label": "apple"}\n', encoding="utf-8")
    b.write_text('{"id": "FOODON:1", "label": "pear"}\n{"id": "FOODON:2", "label": "plum"}\n', encoding="utf-8")
    assert main(["graph", "add", "--create", "--graph", graph, "--format", "foodon-jsonl", str(a)]) == 0
    assert main(["graph", "add", "--graph", graph, "--format", "foodon-jsonl", str(b)]) == 0
    assert "1 ids_named_otherwise_in_graph" in capsys.readouterr().out


# --------------------------------------------------------------------------- 7. smaller


def _dead_pid() -> int:
    import subprocess
    import sys

    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_alias_key_cache_tmp_left_by_a_kill_is_removed(tmp_path, monkeypatch) -> None:
    import shutil

    import bencao.retrieval.linking as linking
    from bencao.retrieval.linking import EntityLinker, LinkingConfig
    from tests.retrieval_graphs import build_tcm_graph

    build_tcm_graph(tmp_path / "g").close()
    cache = tmp_path / "g" / "cache"
    cache.mkdir(exist_ok=True)
    dead = cache / f"alias-keys-v9-abc-1-def.sqlite.tmp-{_dead_pid()}-1"
    dead.write_bytes(b"half a database")
    alive = cache / f"alias-keys-v9-abc-1-def.sqlite.tmp-{os.getppid()}-1"
    alive.write_bytes(b"another process is writing this")
    monkeypatch.setattr(linking, "DISK_MIN_ALIASES", 1)
    linking._TABLES.clear()
    with Graph.open(tmp_path / "g") as g:
        EntityLinker(g, LinkingConfig()).link("山药")
    linking._TABLES.clear()
    assert not dead.exists()
    assert alive.exists()  # its writer still runs
    assert list(cache.glob("alias-keys-*.sqlite"))
    shutil.rmtree(cache)


def test_bare_cr_line_ends_are_line_ends(tmp_path) -> None:
    """A books-txt whose only line ends are CR is split into lines (not one line over the cap); OBO
    and Turtle with CR-only line ends read like their LF versions."""
    g = Graph.create(tmp_path / "g")
    book = tmp_path / "b.txt"
    body = "".join(f"<篇名>第{i}篇\r内容：味甘平。主五脏邪气。\r" for i in range(400))
    book.write_bytes(("<篇名>测试书\r书名：测试书\r" + body).encode("utf-8"))
    ingest_file(g, "books-txt", book, {"max_line_bytes": 4096})
    assert g.conn.execute("SELECT COUNT(*) FROM sections").fetchone()[0] == 401
    obo = tmp_path / "o.obo"
    obo.write_bytes(b"format-version: 1.2\rontology: fz\r\r[Term]\rid: FZ:1\rname: apple\r\r[Term]\rid: FZ:2\rname: pear\ris_a: FZ:1\r")
    ingest_file(g, "obo", obo)
    ttl = tmp_path / "c.ttl"
    ttl.write_bytes(b'@prefix skos: <http://www.w3.org/2004/02/skos/core#> .\r@prefix fz: <http://example.org/fz/> .\r'
                    b'fz:one a skos:Concept ;\r  skos:prefLabel "plum"@en .\r')
    ingest_file(g, "skos", ttl)
    names = {r[0] for r in g.conn.execute("SELECT name FROM entities")}
    assert {"apple", "pear", "plum"} <= names, names


def test_case_id_zero_is_an_id(tmp_path) -> None:
    g = Graph.create(tmp_path / "g")
    src = tmp_path / "cases.jsonl"
    src.write_text("".join(json.dumps({"case_id": i, "text": f"患者，女，3{i}岁。口干。"}, ensure_ascii=False) + "\n" for i in (0, 1)),
                   encoding="utf-8")
    ingest_file(g, "cases-jsonl", src)
    assert g.conn.execute("SELECT COUNT(*) FROM entities WHERE type = 'case'").fetchone()[0] == 2


def test_cycles_reported(tmp_path, capsys) -> None:
    src = tmp_path / "t.jsonl"
    src.write_text('{"id": "FZ:1", "label": "a", "parents": ["FZ:2"]}\n{"id": "FZ:2", "label": "b", "parents": ["FZ:3"]}\n'
                   '{"id": "FZ:3", "label": "c", "parents": ["FZ:1"]}\n{"id": "FZ:4", "label": "d", "parents": ["FZ:1"]}\n', encoding="utf-8")
    ttl = tmp_path / "c.ttl"
    ttl.write_text('@prefix skos: <http://www.w3.org/2004/02/skos/core#> .\n@prefix fz: <http://example.org/fz/> .\n'
                   'fz:a a skos:Concept ; skos:prefLabel "a"@en ; skos:broader fz:b .\n'
                   'fz:b a skos:Concept ; skos:prefLabel "b"@en ; skos:broader fz:a .\n', encoding="utf-8")
    graph = str(tmp_path / "g")
    assert main(["graph", "add", "--create", "--graph", graph, "--format", "foodon-jsonl", str(src)]) == 0
    assert "1 is_a_cycles" in capsys.readouterr().out
    assert main(["graph", "add", "--graph", graph, "--format", "skos", str(ttl), "-O", "broader_relation=broader"]) == 0
    assert "1 broader_cycles" in capsys.readouterr().out
    with Graph.open(tmp_path / "g", read_only=True) as g:
        meta = g.documents()[0]["meta"]
    assert meta["is_a_cycles"]["examples"] == [["FZ:1", "FZ:2", "FZ:3"]]


def test_neo4j_export_escapes_spreadsheet_formulas(tmp_path) -> None:
    import csv as csv_mod

    from bencao.retrieval.graph.export_neo4j import export_neo4j

    g = Graph.create(tmp_path / "g")
    src = tmp_path / "t.jsonl"
    src.write_text('{"id": "FZ:1", "label": "=HYPERLINK(\\"http://x\\")", "synonyms": ["+1+1", "-2", "@SUM(A1)"], "definition": "=cmd|calc"}\n',
                   encoding="utf-8")
    ingest_file(g, "foodon-jsonl", src)
    export_neo4j(g, tmp_path / "out")
    with open(tmp_path / "out" / "entities.csv", encoding="utf-8", newline="") as fh:
        cells = [c for row in csv_mod.reader(fh) for c in row]
    assert "'=HYPERLINK(\"http://x\")" in cells and "'=cmd|calc" in cells
    assert not any(c.startswith(("=", "+", "-", "@")) for c in cells), [c for c in cells if c[:1] in "=+-@"]


def test_rebuild_that_drops_an_added_document_says_so(tmp_path, capsys, repo) -> None:
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(f"name: t\nroot: {repo}\nindex: false\nsources:\n"
                      "  - format: catalog-csv\n    path: data/sample/mfh_catalog/mfh_catalog_106.csv\n", encoding="utf-8")
    graph = str(tmp_path / "g")
    assert main(["graph", "build", "--config", str(recipe), "--graph", graph]) == 0
    src = tmp_path / "t.jsonl"
    src.write_bytes(_terms(3))
    assert main(["graph", "add", "--graph", graph, "--format", "foodon-jsonl", str(src)]) == 0
    capsys.readouterr()
    assert main(["graph", "build", "--config", str(recipe), "--graph", graph]) == 0
    err = capsys.readouterr().err
    assert "warning:" in err and "t.jsonl" in err and "add them again" in err, err


def test_short_write_without_errno_is_a_full_disk(tmp_path, capsys) -> None:
    """numpy's tofile on a full disk raises OSError("3025 requested and 2032 written") with no errno
    (seen on a 3 MB tmpfs): still one line, no temporary files."""
    import shutil

    from bencao.errors import is_disk_full
    from tests.retrieval_graphs import build_tcm_graph

    assert is_disk_full(OSError("3025 requested and 2032 written")) and not is_disk_full(OSError("something else"))
    build_tcm_graph(tmp_path / "g").close()
    book = tmp_path / "葛根.txt"
    book.write_text("<篇名>葛根\n内容：葛根，味甘，平。主消渴。\n", encoding="utf-8")

    def short_write() -> None:
        raise OSError("3025 requested and 2032 written")

    with faults.on("file.write", short_write):
        assert main(["graph", "add", str(book), "--graph", str(tmp_path / "g"), "--format", "books-txt"]) == 2
    assert "no space left on device" in _one_line_error(capsys)
    assert _leftovers(tmp_path / "g") == []
    shutil.rmtree(tmp_path / "g")


def test_mapping_file_changed_while_read_is_refused(tmp_path, capsys) -> None:
    csv = tmp_path / "kb.csv"
    csv.write_text("id,name\nDSI1,fz\n", encoding="utf-8")
    mapping = tmp_path / "map.yaml"
    mapping.write_text("entities:\n  id_column: id\n  name_column: name\n  type: dietary_supplement\n", encoding="utf-8")

    def edit() -> None:
        mapping.write_text("entities:\n  id_column: id\n  name_column: name\n  type: other_type\n", encoding="utf-8")

    with faults.on("ingest.hashed", edit):
        assert main(["graph", "add", "--create", "--graph", str(tmp_path / "g"), "--format", "kb-csv", str(csv), "-O", f"mapping={mapping}"]) == 2
    assert "changed while the input was read" in _one_line_error(capsys)


_OWL = ('<?xml version="1.0"?>\n<rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#" xmlns:owl="http://www.w3.org/2002/07/owl#" '
        'xmlns:rdfs="http://www.w3.org/2000/01/rdf-schema#">\n<owl:Ontology rdf:about="http://x/o"/>\n{body}\n</rdf:RDF>\n')


@pytest.mark.parametrize("fmt, name, body, expected", [
    ("obo", "t.obo", "format-version: 1.4\n\n[Term]\nid: X:1\nname: apple\n\n[Term]\nid: X:2\nname: plum\n\n[Term]\nid: X:1\nname: pear\n",
     "term X:1 is named twice: 'apple' (line 5) and 'pear'"),
    ("skos", "t.ttl", '@prefix skos: <http://www.w3.org/2004/02/skos/core#> .\n@prefix ex: <http://example.org/> .\n'
                      'ex:a a skos:Concept ; skos:prefLabel "apple"@en .\nex:a skos:prefLabel "pear"@en .\n',
     "2 prefLabels in language 'en': 'apple' and 'pear'"),
    ("owl", "t.owl", _OWL.format(body='<owl:Class rdf:about="http://purl.obolibrary.org/obo/X_1"><rdfs:label>apple</rdfs:label></owl:Class>'
                                      '<owl:Class rdf:about="http://purl.obolibrary.org/obo/X_1"><rdfs:label>pear</rdfs:label></owl:Class>'),
     "has two rdfs:labels in language '(none)': 'apple' and 'pear'"),
])
def test_ontology_ids_defined_twice_with_different_names_refused(tmp_path, capsys, fmt, name, body, expected) -> None:
    """pronto merges OBO stanzas of one id and rdflib keeps both prefLabels: either way one name was lost silently."""
    src = tmp_path / name
    src.write_text(body, encoding="utf-8")
    assert main(["graph", "add", "--create", "--graph", str(tmp_path / "g"), "--format", fmt, str(src)]) == 2
    line = _one_line_error(capsys)
    assert expected in line and "refused" in line, line


def test_obo_stanzas_of_one_id_with_the_same_name_still_merge(tmp_path, capsys) -> None:
    src = tmp_path / "t.obo"
    src.write_text("format-version: 1.4\n\n[Term]\nid: X:1\nname: apple\n\n[Term]\nid: X:1\nsynonym: \"malus\" EXACT []\n", encoding="utf-8")
    assert main(["graph", "add", "--create", "--graph", str(tmp_path / "g"), "--format", "obo", str(src)]) == 0
    assert "1 entities" in capsys.readouterr().out


def test_owl_labels_in_other_languages_and_repeated_labels_still_read(tmp_path, capsys) -> None:
    src = tmp_path / "t.owl"
    src.write_text(_OWL.format(body='<owl:Class rdf:about="http://purl.obolibrary.org/obo/X_1"><rdfs:label xml:lang="en">apple</rdfs:label>'
                                    '<rdfs:label xml:lang="fr">pomme</rdfs:label></owl:Class>'
                                    '<owl:Class rdf:about="http://purl.obolibrary.org/obo/X_1"><rdfs:label xml:lang="en">apple</rdfs:label></owl:Class>'),
                   encoding="utf-8")
    assert main(["graph", "add", "--create", "--graph", str(tmp_path / "g"), "--format", "owl", str(src)]) == 0
    assert "1 entities" in capsys.readouterr().out
