"""Export a graph directory to Neo4j: CSVs with neo4j-admin import headers, ``import.sh`` and ``load.cypher``.

Nodes: ``Entity`` (plus a label from its type: substance → ``Substance``), ``Document``, ``Section``,
``Snippet``. Relationships: the macro tree (``Document -[:HAS_SECTION]-> Section``,
``Section -[:HAS_SECTION]-> Section``, ``Section -[:HAS_SNIPPET]-> Snippet``), every triple as a
relationship typed by its relation name (``has_ingredient`` → ``HAS_INGREDIENT``, properties id,
relation, confidence, layer, origin, attributes), triple provenance (``Snippet -[:SUPPORTS
{triple_id}]-> head entity`` for snippet sources, ``Document -[:ASSERTS {triple_id}]-> head``
for curated rows), and entity links (``SAME_AS``/``EXPLAINS`` with a score).

Two ways in: ``import.sh`` runs ``neo4j-admin database import full`` (Neo4j 5, offline, fastest,
into an empty database); ``load.cypher`` MERGEs the same CSVs into a running server with ``LOAD
CSV`` (copy the CSVs into the server's import directory, then ``cypher-shell -f load.cypher``).

CSVs are RFC 4180 (quotes doubled, every text field quoted), UTF-8, so Chinese text, commas,
quotes and newlines survive (``--multiline-fields=true``). Array values (labels, aliases, heading
paths) are joined with U+001F, a control character no text contains (``--array-delimiter=U+001F``).

A text cell that starts with ``=``, ``+``, ``-``, ``@``, a tab or a CR (a spreadsheet would run it as
a formula: "CSV injection") is written with a leading apostrophe, ``'=cmd|...``, the convention
spreadsheets read as "text"; ids are escaped the same way in every file, so references still match.
"""

from __future__ import annotations

import csv
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import typer

from bencao.errors import BencaoError
from bencao.io import atomic_path, atomic_write_text
from bencao.retrieval.graph.store import Graph

ARRAY_DELIMITER = "\x1f"
_ARRAY_DELIMITER_ARG = "U+001F"


@dataclass(frozen=True)
class CsvFile:
    name: str
    kind: str  # "nodes" | "relationships"
    header: tuple[str, ...]


ENTITIES = CsvFile("entities.csv", "nodes", ("id:ID(Entity)", ":LABEL", "name", "norm", "type", "layer", "description",
                                             "aliases:string[]", "attributes"))
DOCUMENTS = CsvFile("documents.csv", "nodes", ("id:ID(Document)", ":LABEL", "source", "title", "kind", "format", "licence", "added_at"))
SECTIONS = CsvFile("sections.csv", "nodes", ("id:ID(Section)", ":LABEL", "title", "level:int", "path:string[]", "ord:int", "document_id"))
SNIPPETS = CsvFile("snippets.csv", "nodes", ("id:ID(Snippet)", ":LABEL", "text", "n_tokens:int", "ord:int", "document_id", "section_id"))
DOCUMENT_SECTIONS = CsvFile("document_sections.csv", "relationships", (":START_ID(Document)", ":END_ID(Section)", ":TYPE"))
SECTION_SECTIONS = CsvFile("section_sections.csv", "relationships", (":START_ID(Section)", ":END_ID(Section)", ":TYPE"))
SECTION_SNIPPETS = CsvFile("section_snippets.csv", "relationships", (":START_ID(Section)", ":END_ID(Snippet)", ":TYPE"))
TRIPLES = CsvFile("triples.csv", "relationships", (":START_ID(Entity)", ":END_ID(Entity)", ":TYPE", "id", "relation", "confidence:float",
                                                   "layer", "origin", "attributes"))
SUPPORTS = CsvFile("supports.csv", "relationships", (":START_ID(Snippet)", ":END_ID(Entity)", ":TYPE", "triple_id", "relation", "kind",
                                                     "confidence:float", "layer"))
ASSERTS = CsvFile("asserts.csv", "relationships", (":START_ID(Document)", ":END_ID(Entity)", ":TYPE", "triple_id", "relation", "kind",
                                                   "confidence:float", "layer"))
LINKS = CsvFile("links.csv", "relationships", (":START_ID(Entity)", ":END_ID(Entity)", ":TYPE", "kind", "score:float"))

FILES = (ENTITIES, DOCUMENTS, SECTIONS, SNIPPETS, DOCUMENT_SECTIONS, SECTION_SECTIONS, SECTION_SNIPPETS, TRIPLES, SUPPORTS, ASSERTS, LINKS)

_NON_WORD = re.compile(r"[^\w]+", re.UNICODE)


def label_for_type(type_: str) -> str:
    """Entity type → Neo4j label: ``supplement_ingredient`` → ``SupplementIngredient`` (Chinese kept)."""
    parts = [p for p in _NON_WORD.split(type_.replace("_", " ")) if p]
    label = "".join(p[:1].upper() + p[1:] for p in parts) or "Concept"
    return "T" + label if label[0].isdigit() else label


def rel_type(relation: str) -> str:
    """Relation name → relationship type: ``has_ingredient`` → ``HAS_INGREDIENT``; ``主治`` stays ``主治``."""
    t = _NON_WORD.sub("_", relation.strip()).strip("_").upper()
    if not t:
        return "RELATED_TO"
    return "R_" + t if t[0].isdigit() else t


def _array(values: Iterable[str]) -> str:
    return ARRAY_DELIMITER.join(v.replace(ARRAY_DELIMITER, " ") for v in values)


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True) if value else ""


def _rows(g: Graph, spec: CsvFile) -> Iterator[list[Any]]:
    c = g.conn
    if spec is ENTITIES:
        aliases: dict[str, list[str]] = {}
        for _norm, eid, alias, _kind in g.iter_aliases():
            lst = aliases.setdefault(eid, [])
            if alias not in lst:
                lst.append(alias)
        for e in g.iter_entities():
            yield [e["id"], _array(["Entity", label_for_type(e["type"])]), e["name"], e["norm"], e["type"], e["layer"],
                   e["description"] or "", _array(aliases.get(e["id"], [])), _json(e["attributes"])]
    elif spec is DOCUMENTS:
        for r in c.execute("SELECT id, source, title, kind, format, licence, added_at FROM documents ORDER BY rowid"):
            yield [r["id"], "Document", r["source"], r["title"] or "", r["kind"], r["format"] or "", r["licence"] or "", r["added_at"]]
    elif spec is SECTIONS:
        for s in g.iter_sections():
            yield [s["id"], "Section", s["title"], s["level"], _array(s["path"]), s["ord"], s["document_id"]]
    elif spec is SNIPPETS:
        for r in c.execute("SELECT id, text, n_tokens, ord, document_id, section_id FROM snippets ORDER BY rowid"):
            yield [r["id"], "Snippet", r["text"], r["n_tokens"], r["ord"], r["document_id"], r["section_id"]]
    elif spec is DOCUMENT_SECTIONS:
        for r in c.execute("SELECT document_id, id FROM sections WHERE parent_id IS NULL ORDER BY rowid"):
            yield [r[0], r[1], "HAS_SECTION"]
    elif spec is SECTION_SECTIONS:
        for r in c.execute("SELECT parent_id, id FROM sections WHERE parent_id IS NOT NULL ORDER BY rowid"):
            yield [r[0], r[1], "HAS_SECTION"]
    elif spec is SECTION_SNIPPETS:
        for r in c.execute("SELECT section_id, id FROM snippets ORDER BY rowid"):
            yield [r[0], r[1], "HAS_SNIPPET"]
    elif spec is TRIPLES:
        for t in c.execute("SELECT id, head_id, relation, tail_id, confidence, layer, origin, attributes FROM triples ORDER BY rowid"):
            yield [t["head_id"], t["tail_id"], rel_type(t["relation"]), t["id"], t["relation"], t["confidence"], t["layer"], t["origin"],
                   _json(json.loads(t["attributes"] or "{}"))]
    elif spec in (SUPPORTS, ASSERTS):
        cond = "ts.snippet_id IS NOT NULL" if spec is SUPPORTS else "ts.snippet_id IS NULL"
        start = "ts.snippet_id" if spec is SUPPORTS else "ts.document_id"
        typ = "SUPPORTS" if spec is SUPPORTS else "ASSERTS"
        for r in c.execute(f"SELECT {start}, t.head_id, ts.triple_id, t.relation, ts.kind, ts.confidence, ts.layer FROM triple_sources ts "
                           f"JOIN triples t ON t.id = ts.triple_id WHERE {cond} ORDER BY ts.rowid"):
            yield [r[0], r[1], typ, r[2], r[3], r[4], r[5], r[6]]
    elif spec is LINKS:
        for r in c.execute("SELECT src_id, dst_id, kind, score FROM links ORDER BY rowid"):
            yield [r["src_id"], r["dst_id"], rel_type(r["kind"]), r["kind"], r["score"]]


_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def safe_cell(value: Any) -> Any:
    """A text cell a spreadsheet would run as a formula gets a leading apostrophe (see the module doc)."""
    if isinstance(value, str) and value.startswith(_FORMULA_START):
        return "'" + value
    return value


def _write_csv(path: Path, spec: CsvFile, rows: Iterable[list[Any]]) -> int:
    n = 0
    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8", newline="") as fh:
        w = csv.writer(fh, quoting=csv.QUOTE_NONNUMERIC, lineterminator="\n")
        fh.write(",".join(spec.header) + "\n")  # header unquoted, exactly as neo4j-admin documents it
        for row in rows:
            w.writerow([safe_cell(v) for v in row])
            n += 1
    return n


def import_command(database: str = "neo4j", directory: str = "$DIR") -> str:
    """The exact neo4j-admin (Neo4j 5) command that imports the exported CSVs into an empty database."""
    lines = [f'neo4j-admin database import full "{database}"', "--overwrite-destination=true", "--multiline-fields=true",
             f"--array-delimiter={_ARRAY_DELIMITER_ARG}", "--id-type=string"]
    lines += [f'--{spec.kind}="{directory}/{spec.name}"' for spec in FILES]
    return " \\\n  ".join(lines)


def _import_sh(database: str) -> str:
    return ("#!/usr/bin/env bash\n"
            "# Import this export into an EMPTY Neo4j 5 database (stop the server first, or use a database that does not exist yet):\n"
            "#   NEO4J_HOME=/path/to/neo4j ./import.sh [database]\n"
            "# then start the server (or CREATE DATABASE <name> on Enterprise).\n"
            "set -euo pipefail\n"
            'DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"\n'
            'PATH="${NEO4J_HOME:+$NEO4J_HOME/bin:}$PATH"\n'
            f'DB="${{1:-{database}}}"\n'
            + import_command("$DB") + "\n")


def _cypher_str(s: str) -> str:
    return "'" + s.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _load_cypher(types: list[str], rel_types: list[str], link_types: list[str]) -> str:
    d = "'\\u001F'"
    batch = "IN TRANSACTIONS OF 1000 ROWS"
    out = [
        "// Load this export into a RUNNING Neo4j 5 server. Copy the *.csv files into the server's import directory, then:",
        "//   cypher-shell -u neo4j -p <password> -f load.cypher",
        "// Re-running is safe: every node and relationship is MERGEd on its id.",
        "CREATE CONSTRAINT entity_id IF NOT EXISTS FOR (n:Entity) REQUIRE n.id IS UNIQUE;",
        "CREATE CONSTRAINT document_id IF NOT EXISTS FOR (n:Document) REQUIRE n.id IS UNIQUE;",
        "CREATE CONSTRAINT section_id IF NOT EXISTS FOR (n:Section) REQUIRE n.id IS UNIQUE;",
        "CREATE CONSTRAINT snippet_id IF NOT EXISTS FOR (n:Snippet) REQUIRE n.id IS UNIQUE;",
        "",
        "LOAD CSV WITH HEADERS FROM 'file:///entities.csv' AS row",
        "CALL { WITH row",
        "  MERGE (n:Entity {id: row.`id:ID(Entity)`})",
        "  SET n.name = row.name, n.norm = row.norm, n.type = row.type, n.layer = row.layer,",
        "      n.description = CASE row.description WHEN '' THEN null ELSE row.description END,",
        f"      n.aliases = CASE row.`aliases:string[]` WHEN '' THEN [] ELSE split(row.`aliases:string[]`, {d}) END,",
        "      n.attributes = CASE row.attributes WHEN '' THEN null ELSE row.attributes END",
        f"}} {batch};",
    ]
    for t in types:
        out += [f"MATCH (n:Entity {{type: {_cypher_str(t)}}}) SET n:`{label_for_type(t)}`;"]
    out += [
        "",
        "LOAD CSV WITH HEADERS FROM 'file:///documents.csv' AS row",
        "CALL { WITH row MERGE (n:Document {id: row.`id:ID(Document)`})",
        "  SET n.source = row.source, n.title = row.title, n.kind = row.kind, n.format = row.format, n.licence = row.licence,",
        f"      n.added_at = row.added_at }} {batch};",
        "LOAD CSV WITH HEADERS FROM 'file:///sections.csv' AS row",
        "CALL { WITH row MERGE (n:Section {id: row.`id:ID(Section)`})",
        f"  SET n.title = row.title, n.level = toInteger(row.`level:int`), n.path = split(row.`path:string[]`, {d}),",
        f"      n.ord = toInteger(row.`ord:int`), n.document_id = row.document_id }} {batch};",
        "LOAD CSV WITH HEADERS FROM 'file:///snippets.csv' AS row",
        "CALL { WITH row MERGE (n:Snippet {id: row.`id:ID(Snippet)`})",
        "  SET n.text = row.text, n.n_tokens = toInteger(row.`n_tokens:int`), n.ord = toInteger(row.`ord:int`),",
        f"      n.document_id = row.document_id, n.section_id = row.section_id }} {batch};",
        "",
    ]
    for spec, start, end, typ in ((DOCUMENT_SECTIONS, "Document", "Section", "HAS_SECTION"), (SECTION_SECTIONS, "Section", "Section", "HAS_SECTION"),
                                  (SECTION_SNIPPETS, "Section", "Snippet", "HAS_SNIPPET")):
        out += [f"LOAD CSV WITH HEADERS FROM 'file:///{spec.name}' AS row",
                f"CALL {{ WITH row MATCH (a:{start} {{id: row.`{spec.header[0]}`}}), (b:{end} {{id: row.`{spec.header[1]}`}})",
                f"  MERGE (a)-[:{typ}]->(b) }} {batch};"]
    out.append("")
    for rt in rel_types:
        out += ["LOAD CSV WITH HEADERS FROM 'file:///triples.csv' AS row",
                f"WITH row WHERE row.`:TYPE` = {_cypher_str(rt)}",
                "CALL { WITH row MATCH (h:Entity {id: row.`:START_ID(Entity)`}), (t:Entity {id: row.`:END_ID(Entity)`})",
                f"  MERGE (h)-[r:`{rt}` {{id: row.id}}]->(t)",
                "  SET r.relation = row.relation, r.confidence = toFloat(row.`confidence:float`), r.layer = row.layer, r.origin = row.origin,",
                f"      r.attributes = CASE row.attributes WHEN '' THEN null ELSE row.attributes END }} {batch};"]
    for spec, start, typ in ((SUPPORTS, "Snippet", "SUPPORTS"), (ASSERTS, "Document", "ASSERTS")):
        out += [f"LOAD CSV WITH HEADERS FROM 'file:///{spec.name}' AS row",
                f"CALL {{ WITH row MATCH (s:{start} {{id: row.`{spec.header[0]}`}}), (h:Entity {{id: row.`:END_ID(Entity)`}})",
                f"  MERGE (s)-[r:{typ} {{triple_id: row.triple_id}}]->(h)",
                f"  SET r.relation = row.relation, r.kind = row.kind, r.confidence = toFloat(row.`confidence:float`), r.layer = row.layer }} {batch};"]
    for lt in link_types:
        out += ["LOAD CSV WITH HEADERS FROM 'file:///links.csv' AS row",
                f"WITH row WHERE row.`:TYPE` = {_cypher_str(lt)}",
                "CALL { WITH row MATCH (a:Entity {id: row.`:START_ID(Entity)`}), (b:Entity {id: row.`:END_ID(Entity)`})",
                f"  MERGE (a)-[r:`{lt}`]->(b) SET r.kind = row.kind, r.score = toFloat(row.`score:float`) }} {batch};"]
    return "\n".join(out) + "\n"


def export_neo4j(graph: Graph, out_dir: str | Path, database: str = "neo4j") -> dict[str, int]:
    """Write the graph as Neo4j import CSVs + ``import.sh`` + ``load.cypher`` into ``out_dir``. Returns rows per file."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    counts = {spec.name: _write_csv(out / spec.name, spec, _rows(graph, spec)) for spec in FILES}
    c = graph.conn
    types = [r[0] for r in c.execute("SELECT DISTINCT type FROM entities ORDER BY type")]
    rel_types = sorted({rel_type(r[0]) for r in c.execute("SELECT DISTINCT relation FROM triples")})
    link_types = sorted({rel_type(r[0]) for r in c.execute("SELECT DISTINCT kind FROM links")})
    sh = out / "import.sh"
    atomic_write_text(sh, _import_sh(database))
    sh.chmod(0o755)
    atomic_write_text(out / "load.cypher", _load_cypher(types, rel_types, link_types))
    return counts


#: Export formats by name (``bencao graph export --format``).
EXPORTERS: dict[str, Callable[..., dict[str, int]]] = {"neo4j": export_neo4j}


def export_command(
    graph: Path = typer.Option(..., "--graph", "-g", help="Graph directory."),
    format: str = typer.Option("neo4j", "--format", "-f", help=f"Export format: {', '.join(sorted(EXPORTERS))}."),
    out: Path = typer.Option(..., "--out", "--output", "-o", help="Output directory: CSVs, import.sh, load.cypher (created; files in it are replaced)."),
    database: str = typer.Option("neo4j", "--database", help="Database name written into import.sh."),
) -> None:
    """Export a graph for another system (neo4j: CSVs with neo4j-admin headers, import.sh, load.cypher)."""
    if format not in EXPORTERS:
        raise BencaoError(f"unknown export format {format!r}; known: {', '.join(sorted(EXPORTERS))}")
    g = Graph.open(graph, read_only=True)
    try:
        counts = EXPORTERS[format](g, out, database=database)
    finally:
        g.close()
    for name, n in counts.items():
        typer.echo(f"{name}\t{n}")
    typer.echo(f"wrote {out}: run {Path(out) / 'import.sh'} (neo4j-admin, empty database) or load.cypher (running server)")
