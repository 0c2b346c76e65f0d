"""Case terms (TCM MLKG-RAG's case layer): a case record split into the terms it names.

A clinical case is a patient record; what the terminology layer can explain are the **terms** the
record names: symptoms, signs, tongue and pulse, diseases, syndromes (``presents``), the stated
diagnosis (``diagnosed_as``), and the formulas, dishes and herbs of the treatment (``treated_with``).
Each term is an entity of layer ``case`` with a stable id from its type and normalised name
(:func:`term_id`: the same 口干 in two records, or in two case files, is one entity), joined to its
record by a triple citing the record's snippet. `graph link-layers` then links terminology entities
to these terms (by name and alias first, then by embedding), not to whole patient records.

Two extractors fill the same :class:`CaseTerm` list:

- **rules** (at ingestion, always): the case lexicon's words and tongue/pulse patterns plus the
  graph's own names of symptom/disease/syndrome entities (:mod:`case_entities`), and the graph's
  dishes/formulas/substances named in the treatment (alias matching, longest first);
- **LLM** (``bencao graph cases terms`` with an ``llm`` block): one JSON call per record; a term is
  kept only when it is written in the record (normalised substring), so the model cannot add terms
  the record does not name. An unreadable reply leaves that record to its rule terms.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Callable

from bencao.io import content_hash
from bencao.text import has_cjk, norm_key

#: Entity types a treatment text may name (``treated_with``).
TREATMENT_TYPES = ("dish", "formula", "substance", "herb", "food", "supplement_ingredient")
#: The LLM's term kinds → (entity type, relation).
LLM_KINDS = {"symptoms": ("symptom", "presents"), "diseases": ("disease", "presents"), "syndromes": ("syndrome", "presents"),
             "formulas": ("formula", "treated_with"), "herbs": ("herb", "treated_with")}
TERMS_FORMAT = "case-terms"


@dataclass(frozen=True)
class CaseTerm:
    name: str  # as the record writes it
    type: str  # symptom | disease | syndrome | tongue | coating | pulse | formula | dish | herb | substance ...
    relation: str  # presents | diagnosed_as | treated_with


def term_id(name: str, type_: str) -> str:
    """The case-layer entity id of a term: one entity per (type, normalised name), whatever record names it."""
    return "CT" + content_hash("case-term", type_, norm_key(name))


def add_term(b: Any, term: CaseTerm) -> str:
    """The term as an entity of layer ``case`` in builder ``b``; returns its id."""
    return b.entity(term.name, term.type, id=term_id(term.name, term.type), layer="case")


def rule_terms(und: Any, graph: Any, body: str, *, diagnosis: str = "", treatment: str = "", info: Any = None) -> list[CaseTerm]:
    """The record's terms by the LLM-free rules (``und`` a :class:`~case_entities.RuleUnderstander`;
    ``info`` its reading of ``body`` when already made)."""
    info = info if info is not None else und.understand(body)
    out = [CaseTerm(d.text, d.category, "presents") for d in info.disease]
    if diagnosis.strip():
        out.append(CaseTerm(diagnosis.strip(), "disease", "diagnosed_as"))
    if treatment.strip() and graph is not None:
        out += [CaseTerm(m, typ, "treated_with") for m, typ in treatment_terms(graph, treatment)]
    return _unique(out)


def treatment_terms(graph: Any, treatment: str) -> list[tuple[str, str]]:
    """(mention, type) of the graph's dishes, formulas and substances the treatment names, longest match first."""
    from bencao.retrieval.search.mentions import extract_mentions

    out: list[tuple[str, str]] = []
    for m in extract_mentions(graph, treatment, {}, min_cjk_chars=2, limit=20):
        rows = graph.conn.execute("SELECT e.type FROM aliases a JOIN entities e ON e.id = a.entity_id "
                                  "WHERE a.norm=? ORDER BY (a.kind='name') DESC, e.rowid", (norm_key(m),)).fetchall()
        typ = next((r[0] for r in rows if r[0] in TREATMENT_TYPES), None)
        if typ and (m, typ) not in out:
            out.append((m, typ))
    return out


def _unique(terms: list[CaseTerm]) -> list[CaseTerm]:
    seen: set[tuple[str, str, str]] = set()
    out = []
    for t in terms:
        key = (norm_key(t.name), t.type, t.relation)
        if key[0] and key not in seen:
            seen.add(key)
            out.append(t)
    return out


# --------------------------------------------------------------------------- the LLM extractor


def terms_prompt(record: str) -> str:
    zh = has_cjk(record)
    if zh:
        return ("从下面的病例中抽取病例术语，只写病例原文里出现的词，不要改写或补充。只输出 JSON："
                '{"symptoms": [症状、体征、舌象、脉象], "diseases": [疾病], "syndromes": [证型], "formulas": [方剂、药膳], "herbs": [药材、食材]}'
                f"\n病例：{record}")
    return ("Extract the case terms from the clinical record below: only words written in the record, not rephrased, nothing added. "
            'Output only JSON: {"symptoms": [symptoms, signs, tongue, pulse], "diseases": [...], "syndromes": [...], '
            '"formulas": [formulas, dishes], "herbs": [herbs, foods]}'
            f"\nRecord: {record}")


def llm_terms(llm: Callable[[str], str], record: str) -> list[CaseTerm] | None:
    """The terms an LLM reads in ``record``, only those the record writes (None when the reply is unreadable)."""
    from bencao.llm.structured import StructuredError, parse_json

    try:
        obj = parse_json(llm(terms_prompt(record)))
    except StructuredError:
        return None
    if not isinstance(obj, dict) or not any(k in obj for k in LLM_KINDS):
        return None
    text = norm_key(record)
    out = []
    for kind, (typ, rel) in LLM_KINDS.items():
        vals = obj.get(kind) or []
        for v in vals if isinstance(vals, list) else [vals]:
            name = str(v).strip() if isinstance(v, (str, int)) else ""
            if name and norm_key(name) and norm_key(name) in text:
                out.append(CaseTerm(name, typ, rel))
    return _unique(out)


def extract_case_terms(g: Any, llm: Callable[[str], str], *, progress: Callable[[int, int], None] | None = None) -> dict[str, Any]:
    """Read every case record with ``llm`` and add the terms it names as case-layer entities with
    their triples (citing the record's snippet): one derived document, replaced by the next run.
    The rule terms made at ingestion stay; a term both found is one triple with two sources."""
    rows = g.conn.execute("SELECT id, name, attributes FROM entities WHERE type='case' AND layer='case' ORDER BY rowid").fetchall()
    report: dict[str, Any] = {"cases": len(rows), "read": 0, "unreadable": [], "terms": 0, "new_triples": 0, "document": None, "replaced": []}
    found: list[tuple[str, str, str, list[CaseTerm]]] = []  # (case id, case name, snippet id, terms)
    for i, (cid, name, attrs) in enumerate(rows):
        snip = g.conn.execute("SELECT ts.snippet_id FROM triple_sources ts JOIN triples t ON t.id = ts.triple_id "
                              "WHERE t.head_id=? AND ts.snippet_id IS NOT NULL LIMIT 1", (cid,)).fetchone()
        if snip is None:
            report["unreadable"].append(name)
            continue
        terms = llm_terms(llm, g.get_snippet(snip[0])["text"])
        if progress:
            progress(i + 1, len(rows))
        if terms is None:
            report["unreadable"].append(name)
            continue
        report["read"] += 1
        found.append((cid, name, snip[0], terms))
    known = {r[0] for r in g.conn.execute("SELECT id FROM triples WHERE relation IN ('presents', 'diagnosed_as', 'treated_with')")}
    key = content_hash(TERMS_FORMAT, json.dumps([(c, s, [(t.name, t.type, t.relation) for t in ts]) for c, _, s, ts in found], ensure_ascii=False))
    b = g.builder(source="case terms (LLM)", kind="derived", format=TERMS_FORMAT, content_key=key,
                  title=f"case terms of {report['read']} records (LLM)", meta={"cases": report["read"]})
    for cid, name, snip, terms in found:
        case = b.entity(name, "case", id=cid, layer="case")
        for t in terms:
            tid = b.triple(case, t.relation, add_term(b, t), confidence=0.8, layer="book", origin="llm:case-terms", snippet=snip)
            report["terms"] += 1
            report["new_triples"] += tid not in known
    old = [r[0] for r in g.conn.execute("SELECT id FROM documents WHERE format=? AND id != ?", (TERMS_FORMAT, b.document_id))]
    for doc_id in old:
        g.remove_document(doc_id)
    report["replaced"] = old
    if report["terms"]:
        g.commit(b)
        report["document"] = b.document_id
    return report
