"""Who says each fact of an LLM-free answer, and how the sources agree.

TCM sources disagree by design (神农本草经: 大枣 "味甘，平"; 千金食治: "味甘、辛，热"). A fact line
therefore names its sources and explains its confidence by them — how many sources assert it, and
whether another source gives another value of the same relation — and an attribute the sources
disagree on (nature, flavour, toxicity, meridian, dose) is laid out source by source, each with its
own citation, never as an unattributed pair.

A fact's sources are the documents that assert it (``TripleHit.sources``, every document in the
store's ``triple_sources``); its citation for a source is the ``[n]`` of an evidence passage of that
document it was read from, else the document's title (an ontology's or a catalogue's fact holds no
passage).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from bencao.retrieval.evidence import Evidence, TripleHit, title_cite

#: Relations whose values are one property of the subject, so two values from two sources contradict each
#: other (a nature is 平 or 热); relations of many values (effects, indications) only add up.
ATTRIBUTE_RELATIONS = ("has_nature", "has_flavour", "toxicity", "enters_meridian", "dose", "has_dose", "dosage")
#: Attribute relations of one value per source: another value is another opinion (a flavour may be 甘 and 辛 at once).
SINGLE_VALUED = ("has_nature", "toxicity", "dose", "has_dose", "dosage")

_WORDS = {
    "zh": {"conf": "置信度", "one": "仅见于{s}", "agree": "{k}个来源同载：{s}", "other": "；另有{m}个来源作{v}",
           "differ": "{subject}的{what}，各来源所载不同：", "explain": "置信度：", "item": "{fact} {c:.2f}（{why}）", "sep": "；",
           "src_line": "{title}：{facts}{cite}", "join": "，", "what": "记载"},
    "en": {"conf": "confidence", "one": "1 source: {s}", "agree": "{k} sources agree: {s}", "other": "; {m} other source(s) say {v}",
           "differ": "The sources differ on {subject}'s {what}:", "explain": "Confidence: ", "item": "{fact} {c:.2f} ({why})", "sep": "; ",
           "src_line": "{title}: {facts}{cite}", "join": "; ", "what": "properties"},
}


@dataclass
class Sourced:
    """One fact with its sources: ``[(title, n or None)]`` in the order the documents were added."""

    triple: TripleHit
    sources: list[tuple[str, int | None]]

    @property
    def titles(self) -> list[str]:
        return [t for t, _ in self.sources]

    def cite(self) -> str:
        """`` [2][3]`` (the passages it was read from), else `` [FoodOn]`` (the document that asserts it)."""
        ns = list(dict.fromkeys(n for _, n in self.sources if n is not None))
        if ns:
            return " " + "".join(f"[{n}]" for n in ns)
        return f" [{self.sources[0][0]}]" if self.sources else ""


def sourced(t: TripleHit, ev: Evidence, refs: dict[str, int]) -> Sourced:
    """``t`` with its sources, each cited by an evidence passage of that document when there is one."""
    by_doc: dict[str, int] = {}
    for sid in t.snippet_ids or []:
        s = next((x for x in ev.snippets if x.id == sid), None)
        if s is not None and sid in refs and s.document and s.document not in by_doc:
            by_doc[s.document] = refs[sid]
    titles = list(t.sources) or list(by_doc)
    out = [(title, by_doc.get(title)) for title in titles]
    if not out:  # a passage cites it but its document is not named: keep the citation
        out = [("", refs[sid]) for sid in t.snippet_ids or [] if sid in refs][:1]
    return Sourced(t, out)


def conflicts(facts: list[Sourced]) -> dict[str, dict[str, list[str]]]:
    """Attribute relations on which two sources give different values: relation → source → its values."""
    by_rel: dict[str, dict[str, list[str]]] = {}
    for f in facts:
        if f.triple.relation not in ATTRIBUTE_RELATIONS:
            continue
        for title in f.titles:
            vals = by_rel.setdefault(f.triple.relation, {}).setdefault(title, [])
            if f.triple.tail not in vals:
                vals.append(f.triple.tail)
    return {rel: srcs for rel, srcs in by_rel.items() if len(srcs) > 1 and len({tuple(sorted(v)) for v in srcs.values()}) > 1}


def why(f: Sourced, facts: list[Sourced], lang: str) -> str:
    """How many sources assert ``f`` and whether others give another value of the same relation."""
    w = _WORDS[lang]
    titles = [t for t in f.titles if t]
    if not titles:
        return ""
    names = ("" if lang == "zh" else ", ").join(title_cite(t) for t in titles)
    text = w["one"].format(s=names) if len(titles) == 1 else w["agree"].format(k=len(titles), s=names)
    if f.triple.relation in SINGLE_VALUED:
        others: dict[str, None] = {}
        other_vals: list[str] = []
        for g in facts:
            if g.triple.relation == f.triple.relation and g.triple.tail != f.triple.tail and g.triple.head_id == f.triple.head_id:
                for t in g.titles:
                    if t and t not in titles:
                        others[t] = None
                if g.triple.tail not in other_vals:
                    other_vals.append(g.triple.tail)
        if others:
            text += w["other"].format(m=len(others), v=("、" if lang == "zh" else ", ").join(other_vals))
    return text


def explained(line: str, f: Sourced, facts: list[Sourced], lang: str) -> str:
    """``大枣味甘（置信度 0.60：2个来源同载：《神农本草经》《千金食治》） [2][3]``."""
    w = _WORDS[lang]
    said = why(f, facts, lang)
    if lang == "zh":
        return f"{line}（{w['conf']} {f.triple.confidence:.2f}{'：' + said if said else ''}）{f.cite()}"
    return f"{line} ({w['conf']} {f.triple.confidence:.2f}{'; ' + said if said else ''}){f.cite()}"


def by_source_lines(subject: str, facts: list[Sourced], rels: dict[str, dict[str, list[str]]], render, lang: str) -> list[str]:
    """The facts of the relations the sources disagree on, source by source, each with its citation, then one
    line explaining each fact's confidence. ``render(triple)`` words one fact without its subject."""
    w = _WORDS[lang]
    mine = [f for f in facts if f.triple.relation in rels]
    order = list(dict.fromkeys(t for f in mine for t in f.titles if t))
    if set(rels) == {"has_nature", "has_flavour"}:
        what = "性味" if lang == "zh" else "nature and flavour"
    else:
        labels = _LABELS_ZH if lang == "zh" else _LABELS_EN
        what = ("、" if lang == "zh" else ", ").join(dict.fromkeys(labels.get(r, r) for r in rels))
    lines = [w["differ"].format(subject=subject, what=what or w["what"])]
    for title in order:
        said = [f for f in mine if title in f.titles]
        cites = list(dict.fromkeys(n for f in said for t, n in f.sources if t == title and n is not None))
        cite = " " + "".join(f"[{n}]" for n in cites) if cites else f" [{title}]"
        by_rel: dict[str, list[TripleHit]] = {}
        for f in said:
            by_rel.setdefault(f.triple.relation, []).append(f.triple)
        words = [render(dataclasses.replace(ts[0], tail=("、" if lang == "zh" else ", ").join(t.tail for t in ts))) for ts in by_rel.values()]
        lines.append(w["src_line"].format(title=title_cite(title), facts=w["join"].join(words), cite=cite))
    items = [w["item"].format(fact=render(f.triple), c=f.triple.confidence, why=why(f, facts, lang)) for f in mine]
    lines.append(w["explain"] + w["sep"].join(items))
    return lines


_LABELS_ZH = {"has_nature": "性", "has_flavour": "味", "toxicity": "毒性", "enters_meridian": "归经", "dose": "用量", "has_dose": "用量",
              "dosage": "用量"}
_LABELS_EN = {"has_nature": "nature", "has_flavour": "flavour", "toxicity": "toxicity", "enters_meridian": "meridians", "dose": "dose",
              "has_dose": "dose", "dosage": "dose"}
