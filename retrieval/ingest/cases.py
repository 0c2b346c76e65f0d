"""Clinical consultation records (MLKG-RAG's case layer) and the disease classification tree.

``cases-jsonl`` / ``cases-csv``: one record per patient, one chunk per patient.

- fields: ``case_id`` (or ``id``, required); ``text`` (the case narrative) and/or ``dialogue`` (a
  list of turns: strings or ``{role, content}``; CSV: one text cell); patient attributes
  ``age_group`` (a lexicon key or word: 老年, elderly, 小儿 ...), ``age`` (years; gives the age group
  when none is stated), ``sex`` (男/女, M/F, male/female), ``history`` (a list, or a string split
  on 、，,；;|); optional ``diagnosis`` and ``treatment``. Attributes missing from the record are read
  from the text by the LLM-free rules of :mod:`bencao.retrieval.search.case_entities`.
- macro: collection (the file) → one section per case → ONE snippet holding the whole case
  (patient line, dialogue or text, diagnosis, treatment).
- micro: a ``case`` entity (layer ``case``; attributes ``case_id``, ``age_group``, ``sex``, ``age``,
  ``history``, ``diagnosis``, ``treatment``: the patient index reads them) and its **case terms**
  (:mod:`bencao.retrieval.search.case_terms`), each an entity of layer ``case`` shared by every
  record naming it: the **disease information** (symptoms, signs, tongue, pulse, diseases, found by
  the lexicon and the graph's own names) as ``presents`` triples (0.8, the rules' confidence), the
  stated diagnosis as ``diagnosed_as`` (1.0), the dishes/formulas/substances the treatment names as
  ``treated_with`` (0.9), all with the case snippet as provenance. Past history is patient
  information, not disease information. The terminology reaches the terms through
  ``bencao graph link-layers`` (exact names first, then embeddings).
- options: ``lexicon`` (a case lexicon YAML replacing the built-in one key by key), ``title``.

``disease-tree`` (YAML or CSV): a two-level disease classification (GB/T 16751.1-style first and
second level) the user supplies. YAML: ``{name, classes: [{name, code, keywords, children: [...]}]}``;
CSV: columns ``level1, level2`` (+ ``level1_code, level2_code, keywords`` with ``|``-separated
keywords of the level-2 class). Each class is a ``disease_class`` entity (layer ``classification``,
attributes ``level``, ``code``, ``keywords``, ``tree``; the code an ``xref`` alias); each second-level
class ``is_a`` its first-level class (1.0, ``imported``). ``bencao graph cases classify`` then files
every case under one leaf.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Any

from bencao.errors import InputError
from bencao.io import check_name, content_hash, iter_jsonl, read_text, set_record
from bencao.retrieval.graph.store import DocumentBuilder
from bencao.retrieval.ingest.csv_table import CsvTable
from bencao.retrieval.ingest.registry import register
from bencao.text import has_cjk

PRESENTS_CONFIDENCE = 0.8
#: relation → (confidence, triple layer, origin) of a rule term's triple
_TERM_TRIPLE = {"presents": (PRESENTS_CONFIDENCE, "book", "rules:case"), "diagnosed_as": (1.0, "imported", "cases"),
                "treated_with": (0.9, "imported", "cases")}
_LIST_SPLIT = re.compile(r"[、，,；;|]")


def _lexicon_key(path: Path, options: dict[str, Any]) -> str:
    lex = options.get("lexicon")
    if not lex:
        return ""
    p = Path(str(lex))
    if not p.is_file():
        raise InputError(path, f"lexicon file not found: {p} (option lexicon)")
    return hashlib.sha1(p.read_bytes()).hexdigest()


def _as_list(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, list):
        return [str(v).strip() for v in value if str(v).strip()]
    return [v.strip() for v in _LIST_SPLIT.split(str(value)) if v.strip()]


def _dialogue_text(path: Path, where: str, dialogue: Any) -> str:
    if isinstance(dialogue, str):
        return dialogue.strip()
    if not isinstance(dialogue, list):
        raise InputError(path, "'dialogue' must be a list of turns (strings or {role, content})", record=where)
    lines = []
    for turn in dialogue:
        if isinstance(turn, str):
            lines.append(turn.strip())
        elif isinstance(turn, dict) and isinstance(turn.get("content") or turn.get("text"), str):
            role = str(turn.get("role") or turn.get("speaker") or "").strip()
            body = str(turn.get("content") or turn.get("text")).strip()
            lines.append(f"{role}：{body}" if role else body)
        else:
            raise InputError(path, "a dialogue turn must be a string or an object with 'content'", record=where)
    return "\n".join(x for x in lines if x)


_SEX_LABEL = {"male": ("男", "male"), "female": ("女", "female")}
_AGE_LABEL = {"infant": "婴幼儿", "child": "儿童", "adolescent": "青少年", "young_adult": "青年", "middle_aged": "中年", "elderly": "老年"}


def _patient_line(case_id: str, attrs: dict[str, Any], zh: bool) -> str:
    parts = []
    if attrs.get("sex"):
        parts.append(_SEX_LABEL.get(attrs["sex"], (attrs["sex"], attrs["sex"]))[0 if zh else 1])
    if attrs.get("age_group"):
        parts.append(_AGE_LABEL.get(attrs["age_group"], attrs["age_group"]) if zh else attrs["age_group"].replace("_", " "))
    if attrs.get("age") is not None:
        parts.append(f"{attrs['age']}岁" if zh else f"{attrs['age']} years")
    head = f"病例 {case_id}" if zh else f"Case {case_id}"
    hist = ("；既往：" if zh else "; history: ") + ("、" if zh else ", ").join(attrs["history"]) if attrs.get("history") else ""
    return f"{head}（{'，'.join(parts)}{hist}）" if zh else f"{head} ({', '.join(parts)}{hist})"


def _load_cases(b: DocumentBuilder, path: Path, options: dict[str, Any], rows: list[tuple[str, dict[str, Any]]]) -> None:
    from bencao.retrieval.search.case_entities import RuleUnderstander
    from bencao.retrieval.search.case_terms import add_term, rule_terms

    und = RuleUnderstander(b.graph, options.get("lexicon"))
    lex = und.lex
    b.relation("presents", "the case presents the symptom, sign or disease", "case", "symptom")
    b.relation("diagnosed_as", "the case was diagnosed as the disease", "case", "disease")
    b.relation("treated_with", "the case was treated with the dish, formula or substance", "case", "dish")
    root = b.section(str(options.get("title") or b.title or path.stem))
    seen: dict[str, str] = {}
    counts = {"cases": 0, "presents": 0, "diagnosed_as": 0, "treated_with": 0}
    for where, rec in rows:
        raw_id = rec.get("case_id") if rec.get("case_id") not in (None, "") else rec.get("id")
        if isinstance(raw_id, bool) or not isinstance(raw_id, (str, int, type(None))):
            raise InputError(path, f"'case_id' must be a string or an integer, not {type(raw_id).__name__} {str(raw_id)[:40]!r}", record=where)
        case_id = str(raw_id if raw_id is not None else "").strip()  # 0 is an id like any other
        if not case_id:
            raise InputError(path, "missing 'case_id' (or 'id')", record=where)
        if case_id in seen:
            raise InputError(path, f"duplicate case_id {case_id!r} (first at {seen[case_id]})", record=where)
        seen[case_id] = where
        parts = []
        if rec.get("text") not in (None, ""):
            if not isinstance(rec["text"], str):
                raise InputError(path, "'text' must be a string", record=where)
            parts.append(rec["text"].strip())
        if rec.get("dialogue") not in (None, "", []):
            parts.append(_dialogue_text(path, where, rec["dialogue"]))
        body = "\n".join(p for p in parts if p)
        if not body:
            raise InputError(path, f"case {case_id!r} has neither 'text' nor 'dialogue'", record=where)
        for key in ("diagnosis", "treatment", "age_group", "sex"):
            if rec.get(key) is not None and not isinstance(rec[key], (str, int)):
                raise InputError(path, f"'{key}' must be a string", record=where)
        info = und.understand(body)
        attrs: dict[str, Any] = {"case_id": case_id}
        sex = lex.sex_key(rec.get("sex")) if rec.get("sex") not in (None, "") else info.patient.sex
        if rec.get("sex") not in (None, "") and sex is None:
            raise InputError(path, f"sex {rec['sex']!r} is not a sex the lexicon knows (男/女, M/F, male/female)", record=where)
        age = rec.get("age")
        if age not in (None, ""):
            try:
                age = int(str(age).strip().rstrip("岁"))
            except ValueError:
                raise InputError(path, f"age {rec['age']!r} is not a number of years", record=where) from None
        else:
            age = info.patient.age
        group = lex.age_group_key(rec.get("age_group")) if rec.get("age_group") not in (None, "") else None
        if rec.get("age_group") not in (None, "") and group is None:
            group = str(rec["age_group"]).strip()  # the data's own grouping, kept as written
        group = group or (lex.age_group_of(age) if age is not None else None) or info.patient.age_group
        history = _as_list(rec.get("history")) if rec.get("history") not in (None, "", []) else info.patient.history
        for k, v in (("sex", sex), ("age", age), ("age_group", group), ("history", history)):
            if v not in (None, [], ""):
                attrs[k] = v
        diagnosis = str(rec.get("diagnosis") or "").strip()
        treatment = str(rec.get("treatment") or "").strip()
        attrs["complaint"] = body[:500]  # what classification falls back on when no disease name was recognised
        if diagnosis:
            attrs["diagnosis"] = diagnosis
        if treatment:
            attrs["treatment"] = treatment
        zh = has_cjk(body)
        lines = [_patient_line(case_id, attrs, zh), body]
        if diagnosis:
            lines.append(("诊断：" if zh else "Diagnosis: ") + diagnosis)
        if treatment:
            lines.append(("治疗：" if zh else "Treatment: ") + treatment)
        sec = b.section(f"病例 {case_id}" if zh else f"Case {case_id}", parent=root, meta={"case_id": case_id})
        snip = b.snippet(sec, "\n".join(lines))
        disease = [d for d in info.disease]
        desc = "；".join(dict.fromkeys(d.text for d in disease)) if zh else "; ".join(dict.fromkeys(d.text for d in disease))
        case = b.entity(f"病例 {case_id}" if zh else f"case {case_id}", "case", id="CASE" + content_hash(b.document_id, case_id),
                        layer="case", attributes=attrs, description=(diagnosis + ("：" if zh else ": ") if diagnosis else "") + desc or None)
        for term in rule_terms(und, b.graph, body, diagnosis=diagnosis, treatment=treatment, info=info):
            conf, layer, origin = _TERM_TRIPLE[term.relation]
            b.triple(case, term.relation, add_term(b, term), confidence=conf, layer=layer, origin=origin, snippet=snip)
            counts[term.relation] += 1
        counts["cases"] += 1
    b.meta.update(counts)


@register("cases-jsonl", kind="case", options=("lexicon", "title"), extra_key=_lexicon_key,
          description="clinical cases JSONL (MLKG-RAG): case_id, text/dialogue, age_group, sex, history, diagnosis, treatment; one chunk per patient")
def load_cases_jsonl(b: DocumentBuilder, path: Path, options: dict[str, Any]) -> None:
    _load_cases(b, path, options, [(f"line {n}", rec) for n, rec in iter_jsonl(path)])


@register("cases-csv", kind="case", options=("lexicon", "title"), extra_key=_lexicon_key,
          description="clinical cases CSV: columns case_id (or id), text or dialogue, age_group, age, sex, history, diagnosis, treatment")
def load_cases_csv(b: DocumentBuilder, path: Path, options: dict[str, Any]) -> None:
    table = CsvTable(path)
    if not {"case_id", "id"} & set(table.header):
        raise InputError(path, f"missing column 'case_id' (or 'id'); the header has: {', '.join(table.header)}", record="line 1")
    if not {"text", "dialogue"} & set(table.header):
        raise InputError(path, f"missing column 'text' (or 'dialogue'); the header has: {', '.join(table.header)}", record="line 1")
    rows = [(row.where, {k: (v if v.strip() else None) for k, v in row.values.items()}) for row in table.rows()]
    if not rows:
        raise InputError(path, "no rows")
    _load_cases(b, path, options, rows)


# --------------------------------------------------------------------------- the disease tree


def _tree_classes(path: Path) -> tuple[str, list[dict[str, Any]]]:
    name = path.name[:-3] if path.name.endswith(".gz") else path.name
    if name.endswith(".csv"):
        table = CsvTable(path)
        table.require({"level1": "level1", "level2": "level2"})
        roots: dict[str, dict[str, Any]] = {}
        for row in table.rows():
            v = row.values
            l1, l2 = v["level1"].strip(), v["level2"].strip()
            if not l1:
                raise InputError(path, "empty level1", record=row.where)
            root = roots.setdefault(l1, {"name": l1, "code": v.get("level1_code", "").strip(), "keywords": [], "children": []})
            if l2:
                root["children"].append({"name": l2, "code": v.get("level2_code", "").strip(),
                                         "keywords": [k.strip() for k in v.get("keywords", "").split("|") if k.strip()]})
        return path.stem, list(roots.values())
    from bencao.config import YamlRefused, parse_yaml

    try:  # depth and alias-expansion budgets: a 600-byte alias bomb is refused, not walked
        data = parse_yaml(read_text(path, guess=False))  # structured data: UTF-8, or the encoding option
    except YamlRefused as exc:
        raise InputError(path, exc.problem, record=f"line {exc.line}" if exc.line else None) from None
    if not isinstance(data, dict) or not isinstance(data.get("classes"), list):
        raise InputError(path, "expected a mapping with a 'classes' list (each {name, code, keywords, children})")
    return str(data.get("name") or path.stem), data["classes"]


def _check_class(path: Path, c: Any, where: str) -> dict[str, Any]:
    set_record(where)
    if not isinstance(c, dict) or not isinstance(c.get("name"), str) or not c["name"].strip():
        raise InputError(path, "every class needs a non-empty 'name'", record=where)
    c = dict(c, name=check_name(c["name"], "class name"))  # no control characters, within max_name_chars
    kw = c.get("keywords") or []
    if not isinstance(kw, list) or not all(isinstance(k, str) for k in kw):
        raise InputError(path, f"class {c['name']!r}: 'keywords' must be a list of strings", record=where)
    return c


@register("disease-tree", kind="ontology", description="two-level disease classification tree (YAML or CSV level1,level2,keywords): disease_class entities, level2 is_a level1")
def load_disease_tree(b: DocumentBuilder, path: Path, options: dict[str, Any]) -> None:
    tree, classes = _tree_classes(path)
    if b.title == path.stem or not b.title:
        b.title = tree  # the tree's own name, not the file name
    b.relation("is_a", "subclass of (classification tree)")
    n1 = n2 = 0
    for i, c1 in enumerate(classes):
        c1 = _check_class(path, c1, f"class {i}")

        def add(c: dict[str, Any], level: int, parent: str | None) -> str:
            code = str(c.get("code") or "").strip()
            attrs = {"level": level, "tree": tree, **({"code": code} if code else {}),
                     **({"keywords": [k.strip() for k in c.get("keywords") or [] if k.strip()]} if c.get("keywords") else {})}
            eid = "DC" + content_hash(tree, *(x for x in (parent, c["name"].strip()) if x))
            return b.entity(c["name"].strip(), "disease_class", id=eid, layer="classification", attributes=attrs,
                            description=str(c.get("description") or "").strip() or None, aliases=[(code, "xref")] if code else ())

        top = add(c1, 1, None)
        n1 += 1
        children = c1.get("children") or []
        if not isinstance(children, list):
            raise InputError(path, f"class {c1['name']!r}: 'children' must be a list", record=f"class {i}")
        for j, c2 in enumerate(children):
            c2 = _check_class(path, c2, f"class {i}.{j}")
            leaf = add(c2, 2, c1["name"].strip())
            b.triple(leaf, "is_a", top, confidence=1.0, layer="imported", origin="disease-tree")
            n2 += 1
    if not n1:
        raise InputError(path, "no classes")
    b.meta.update({"tree": tree, "level1": n1, "level2": n2})
