"""Question–entity pairs from the graph's own content, without an LLM.

Each template turns stored facts into (question, positive) rows; the positive is what retrieval
should return for the question:

- ``fact``: "哪味药主治头眩胸胀？" / "哪味药有益气的功效？" from ``treats`` / ``has_effect`` triples →
  the answer's entry (the snippet the fact was read from, as the snippet index holds it: heading
  path + text; the entity's name, aliases and description when the fact has no snippet). Only
  specific questions: a (relation, tail) with at most ``max_answers`` heads (every head is an answer;
  "哪味药主治寒热？" with 40 answers teaches nothing).
- ``composite``: two or three facts of one entity in one question ("味辛，主治头眩、咳逆的是哪味药？"; the rarest
  facts of the entity) →
  its entry; the answers are every entity holding all of them.
- ``attributes``: "半夏的性味、主治是什么？" → the entry (name → entry).
- ``formula``: "由赤小豆、鲤鱼组成的是哪个食疗方？" (``has_ingredient``) and "鲤鱼汤由哪些材料组成？" → its entry.
- ``alias``: a synonym, variant or label name → the entity's entry without that alias (FoodOn
  "yoghourt" → "yogurt; yoghurt; ... . A fermented milk product ..."; 一名X → the herb).
- ``definition``: "Which term is described as follows: <definition, names masked>" → name and aliases.
- ``heading``: a section's heading path → its first snippets' text (without the heading).
- ``vignette`` (not in the default set): the questions users ask of a corpus of formularies and
  materia medica — a formula's or herb's indication symptoms (its ``treats`` tails: 2 to
  ``vignette_symptoms`` of them, sampled and shuffled, with 1 to ``vignette_noise`` symptoms of other
  entries mixed in) in a clinical-vignette frame ("症见咳嗽痰盛，头痛目眩，胸膈烦满。治疗应首选的方剂是（  ）。")
  → the book passage those ``treats`` triples were read from (the snippet sourcing most of the asked
  symptoms). The answers are every entry whose indications hold all the asked (not the mixed-in)
  symptoms; up to ``vignette_negatives`` hard negatives per row: the passages of entries sharing the
  most asked symptoms, never an answer, an entity named like an answer, or a passage of the positive.

Every row carries ``entity_id`` (the positive's entity, or the section for ``heading``), ``answers``
(every entity that answers the question: never a negative) and a group: the source section, climbed
to the volume/chapter (or the ontology parent to the grandparent) until it holds ``min_group_entities``
distinct entities, so same-group in-batch negatives exist (MLKG); ``heading`` rows group by the parent
section.
"""

from __future__ import annotations

import json
import random
import re
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from bencao.io import content_hash
from bencao.text import has_cjk, lang_of, norm_key

#: Question forms per relation and language; {noun} is the head's kind, {t} the tail.
FACT_QUESTIONS = {
    "treats": {"zh": "{noun}主治{t}？", "en": "Which {noun} treats {t}?"},
    "has_effect": {"zh": "{noun}有{t}的功效？", "en": "Which {noun} has the effect {t}?"},
}
NOUNS = {"zh": {"dish": "哪个食疗方", "recipe": "哪个食疗方", "formula": "哪个方剂", "food": "哪种食物", "_": "哪味药"},
         "en": {"dish": "dish", "recipe": "dish", "formula": "formula", "food": "food", "_": "one"}}
COMPOSITE_PARTS = {"has_flavour": {"zh": "味{t}"}, "has_nature": {"zh": "性{t}"}, "treats": {"zh": "主治{t}"}, "has_effect": {"zh": "能{t}"}}
COMPOSITE_QUESTION = {"zh": "{parts}的是{noun}？"}
ATTRIBUTE_QUESTION = {"zh": "{h}的{aspects}是什么？", "en": "What are the {aspects} of {h}?"}
ASPECTS = {"zh": {"has_flavour": "性味", "has_nature": "性味", "treats": "主治", "has_effect": "功效", "toxicity": "毒性"},
           "en": {"has_flavour": "flavour", "has_nature": "nature", "treats": "indications", "has_effect": "effects", "toxicity": "toxicity"}}
FORMULA_QUESTIONS = {"zh": ("由{parts}组成的是{noun}？", "{h}由哪些材料组成？"), "en": ("Which {noun} is made of {parts}?", "What is {h} made of?")}
DEFINITION_QUESTION = {"zh": "哪一种是：{x}", "en": "Which term is described as follows: {x}"}
MASK = {"zh": "此物", "en": "this"}
ALIAS_KINDS = ("synonym", "book_synonym", "book_variant", "variant", "label_name", "traditional")  # book_*: a book's 一名, 旧作 … (retrieval.ingest.substances)
#: Vignette frames: an opening holding the symptoms, then the ask by the head's kind (the shapes of exam vignettes).
VIGNETTE_OPENINGS = ("症见{s}。", "患者{s}。", "{s}。", "病人{s}，", "证见{s}，")
VIGNETTE_ASKS = {"formula": ("主方为（  ）。", "治疗应首选的方剂是（  ）。", "宜用何方？", "当选用哪个方剂？", "治宜选用（  ）。"),
                 "dish": ("宜用哪个食疗方？", "可选用的食疗方是（  ）。"),
                 "_": ("宜用哪味药？", "治疗应首选的药物是（  ）。", "可选用何药？", "当用何药治之？")}
VIGNETTE_SEPS = ("，", "、")
_IDLIKE = re.compile(r"^(https?://|[A-Za-z]+[_:]\d+$|C\d{7}$)")


@dataclass
class PairRow:
    anchor: str
    positive: str
    template: str
    entity_id: str
    answers: frozenset[str]
    chain: tuple[str, ...] = ()  # candidate groups, most specific first (section → chapter → volume → book; parent → grandparent → type)
    lang: str = "zh"
    negatives: tuple[tuple[str, str], ...] = ()  # hard negative candidates (entity, passage), best first (vignette)


@dataclass
class Context:
    """What every template reads, loaded once: names, aliases, descriptions, facts with their first snippet."""

    graph: Any
    max_answers: int
    positive_chars: int
    heading_snippets: int
    entities: dict[str, dict[str, Any]] = field(default_factory=dict)
    aliases: dict[str, list[tuple[str, str]]] = field(default_factory=dict)  # entity → [(alias, kind)], xrefs left out
    facts: dict[str, list[tuple[str, str, str | None]]] = field(default_factory=dict)  # relation → [(head, tail, snippet)]
    snippets: dict[str, dict[str, Any]] = field(default_factory=dict)
    section_parent: dict[str, str | None] = field(default_factory=dict)
    parents: dict[str, str] = field(default_factory=dict)  # entity → its first is_a parent
    seed: int = 0
    vignette_per_entry: int = 2
    vignette_symptoms: int = 4
    vignette_noise: int = 2
    vignette_negatives: int = 3

    @classmethod
    def load(cls, graph: Any, max_answers: int, positive_chars: int, heading_snippets: int, **options: Any) -> "Context":
        """``options``: seed and the vignette_* knobs (PairsConfig)."""
        ctx = cls(graph, max_answers, positive_chars, heading_snippets, **options)
        for e in graph.iter_entities():
            ctx.entities[e["id"]] = {"name": e["name"], "type": e["type"], "description": (e.get("description") or "").strip()}
        for _norm, eid, alias, kind in graph.iter_aliases():
            if kind != "xref" and not _IDLIKE.match(alias):
                lst = ctx.aliases.setdefault(eid, [])
                if all(a != alias for a, _ in lst):
                    lst.append((alias, kind))
        first: dict[str, str] = {}
        for tid, sid in graph.conn.execute("SELECT triple_id, snippet_id FROM triple_sources WHERE snippet_id IS NOT NULL ORDER BY rowid"):
            first.setdefault(tid, sid)
        for tid, h, rel, t, layer in graph.conn.execute("SELECT id, head_id, relation, tail_id, layer FROM triples ORDER BY rowid"):
            if layer in ("book", "imported", "completed"):
                ctx.facts.setdefault(rel, []).append((h, t, first.get(tid)))
        wanted = {s for fs in ctx.facts.values() for _, _, s in fs if s}
        ctx.snippets = graph.get_snippets(list(wanted)) if wanted else {}
        for sid, pid in graph.conn.execute("SELECT id, parent_id FROM sections"):
            ctx.section_parent[sid] = pid
        for h, t, _ in ctx.facts.get("is_a", []):
            ctx.parents.setdefault(h, t)
        return ctx

    def section_chain(self, section_id: str | None) -> tuple[str, ...]:
        """The section and its ancestors up to the book, as group keys."""
        out: list[str] = []
        while section_id and len(out) < 12:
            out.append(f"section:{section_id}")
            section_id = self.section_parent.get(section_id)
        return tuple(out)

    def entity_chain(self, eid: str) -> tuple[str, ...]:
        """The entity's is_a parent, grandparent and great-grandparent, then its type, as group keys."""
        out: list[str] = []
        cur = self.parents.get(eid)
        while cur and len(out) < 3 and f"parent:{cur}" not in out:
            out.append(f"parent:{cur}")
            cur = self.parents.get(cur)
        return (*out, f"type:{self.entities[eid]['type']}")

    def chain(self, eid: str, section_id: str | None) -> tuple[str, ...]:
        return self.section_chain(section_id) if section_id else self.entity_chain(eid)

    def name(self, eid: str) -> str:
        return self.entities[eid]["name"]

    def names(self, eid: str) -> list[str]:
        return [self.name(eid), *[a for a, _ in self.aliases.get(eid, []) if a != self.name(eid)]]

    def entity_text(self, eid: str, drop: str | None = None, description: bool = True) -> str:
        """The entity as the entity index holds it (name; aliases. description), ``drop`` left out."""
        e = self.entities[eid]
        key = norm_key(drop) if drop else None
        names = [n for n in self.names(eid)[1:] if norm_key(n) != key][:12]
        head = e["name"] if norm_key(e["name"]) != key else (names.pop(0) if names else e["name"])
        text = head + ("; " + "; ".join(names) if names else "")
        if description and e["description"]:
            text += ". " + e["description"]
        return text[: self.positive_chars]

    def entry(self, eid: str, snippet_id: str | None) -> tuple[str, str | None]:
        """(positive text, its section): the fact's snippet as the snippet index holds it (heading path, then the
        text — from a little before the entity's name when the name lies beyond the cut), else the entity text."""
        s = self.snippets.get(snippet_id) if snippet_id else None
        if s is None:
            return self.entity_text(eid), None
        head = " › ".join(s["path"] or []) + "\n"
        room = max(50, self.positive_chars - len(head))
        text = s["text"]
        at = min((i for i in (text.find(n) for n in self.names(eid) if len(n) >= 2 or has_cjk(n)) if i >= 0), default=0)
        start = 0 if at + 40 <= room else max(0, at - 20)
        return head + text[start : start + room], s["section_id"]

    def noun(self, eid: str, lang: str) -> str:
        return NOUNS[lang].get(self.entities[eid]["type"], NOUNS[lang]["_"])


def _lang(text: str) -> str:
    return lang_of(text)


def _answers_by_tail(facts: list[tuple[str, str, str | None]]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = defaultdict(set)
    for h, t, _ in facts:
        out[t].add(h)
    return out


def fact_rows(ctx: Context) -> Iterator[PairRow]:
    for rel, forms in FACT_QUESTIONS.items():
        facts = ctx.facts.get(rel, [])
        heads = _answers_by_tail(facts)
        seen: set[tuple[str, str]] = set()
        for h, t, sid in facts:
            if len(heads[t]) > ctx.max_answers or (h, t) in seen:
                continue
            seen.add((h, t))
            lang = _lang(ctx.name(t))
            anchor = forms[lang].format(noun=ctx.noun(h, lang), t=ctx.name(t))
            pos, sec = ctx.entry(h, sid)
            yield PairRow(anchor, pos, "fact", h, frozenset(heads[t]), ctx.chain(h, sec), lang)


def composite_rows(ctx: Context) -> Iterator[PairRow]:
    """Two or three facts of one head (flavour/nature first, then indications/effects) → its entry."""
    by_head: dict[str, list[tuple[str, str, str | None]]] = defaultdict(list)
    holders: dict[tuple[str, str], set[str]] = defaultdict(set)
    for rel in COMPOSITE_PARTS:
        for h, t, sid in ctx.facts.get(rel, []):
            if (rel, t) not in {(r, x) for r, x, _ in by_head[h]}:
                by_head[h].append((rel, t, sid))
            holders[(rel, t)].add(h)
    order = {r: i for i, r in enumerate(COMPOSITE_PARTS)}
    for h, facts in by_head.items():
        if _lang(ctx.name(h)) != "zh" or len(facts) < 2:
            continue
        # the rarest facts say most about the head: keep up to three, in the template's order
        chosen = sorted(sorted(facts, key=lambda f: (len(holders[(f[0], f[1])]), f[1]))[:3], key=lambda f: order[f[0]])
        answers = set.intersection(*(holders[(r, t)] for r, t, _ in chosen))
        if len(answers) > ctx.max_answers:
            continue
        by_rel: dict[str, list[str]] = {}
        for r, t, _ in chosen:
            by_rel.setdefault(r, []).append(ctx.name(t))
        parts = "，".join(COMPOSITE_PARTS[r]["zh"].format(t="、".join(ts)) for r, ts in by_rel.items())  # 味辛，主治头眩、咳逆
        anchor = COMPOSITE_QUESTION["zh"].format(parts=parts, noun=ctx.noun(h, "zh"))
        sid = next((s for _, _, s in chosen if s), None)
        pos, sec = ctx.entry(h, sid)
        yield PairRow(anchor, pos, "composite", h, frozenset(answers), ctx.chain(h, sec), "zh")


def attribute_rows(ctx: Context) -> Iterator[PairRow]:
    """"X的性味、主治是什么？" → X's entry (a name query)."""
    aspects: dict[str, dict[str, str | None]] = defaultdict(dict)
    for rel in ASPECTS["zh"]:
        for h, _t, sid in ctx.facts.get(rel, []):
            aspects[h].setdefault(rel, sid)
    for h, rels in aspects.items():
        lang = _lang(ctx.name(h))
        words = list(dict.fromkeys(ASPECTS[lang][r] for r in ASPECTS[lang] if r in rels))
        anchor = ATTRIBUTE_QUESTION[lang].format(h=ctx.name(h), aspects=("、" if lang == "zh" else ", ").join(words))
        sid = next((s for s in rels.values() if s), None)
        pos, sec = ctx.entry(h, sid)
        yield PairRow(anchor, pos, "attributes", h, frozenset({h}), ctx.chain(h, sec), lang)


def formula_rows(ctx: Context) -> Iterator[PairRow]:
    parts: dict[str, list[str]] = defaultdict(list)
    sids: dict[str, str | None] = {}
    for h, t, sid in ctx.facts.get("has_ingredient", []):
        if t not in parts[h]:
            parts[h].append(t)
        sids.setdefault(h, sid)
    by_set: dict[frozenset[str], set[str]] = defaultdict(set)
    for h, ts in parts.items():
        by_set[frozenset(ts[:4])].add(h)
    for h, ts in parts.items():
        lang = _lang(ctx.name(h))
        sep = "、" if lang == "zh" else ", "
        pos, sec = ctx.entry(h, sids[h])
        by_parts, what = FORMULA_QUESTIONS[lang]
        if len(ts) >= 2:
            noun = ctx.noun(h, lang)
            yield PairRow(by_parts.format(parts=sep.join(ctx.name(t) for t in ts[:4]), noun=noun), pos, "formula", h,
                          frozenset(by_set[frozenset(ts[:4])]), ctx.chain(h, sec), lang)
        yield PairRow(what.format(h=ctx.name(h)), pos, "formula", h, frozenset({h}), ctx.chain(h, sec), lang)


def alias_rows(ctx: Context) -> Iterator[PairRow]:
    by_norm: dict[str, set[str]] = defaultdict(set)
    for eid, lst in ctx.aliases.items():
        for a, _ in lst:
            by_norm[norm_key(a)].add(eid)
    for eid, lst in ctx.aliases.items():
        if eid not in ctx.entities:
            continue
        for alias, kind in lst:
            if kind not in ALIAS_KINDS or norm_key(alias) == norm_key(ctx.name(eid)) or len(norm_key(alias)) < 2:
                continue
            answers = by_norm[norm_key(alias)]
            if len(answers) > ctx.max_answers:
                continue
            yield PairRow(alias, ctx.entity_text(eid, drop=alias), "alias", eid, frozenset(answers), ctx.chain(eid, None), _lang(alias))


def _mask(text: str, names: list[str], lang: str) -> str:
    for n in sorted({n for n in names if len(n) >= 2}, key=len, reverse=True):
        text = re.sub(re.escape(n), MASK[lang], text, flags=re.IGNORECASE)
    return text


def definition_rows(ctx: Context, min_chars: int = 8, max_chars: int = 300) -> Iterator[PairRow]:
    for eid, e in ctx.entities.items():
        desc = e["description"]
        if len(desc) < min_chars:
            continue
        lang = _lang(desc)
        anchor = DEFINITION_QUESTION[lang].format(x=_mask(desc[:max_chars], ctx.names(eid), lang))
        yield PairRow(anchor, ctx.entity_text(eid, description=False), "definition", eid, frozenset({eid}), ctx.chain(eid, None), lang)


def heading_rows(ctx: Context) -> Iterator[PairRow]:
    """A section's heading path → the text of its first ``heading_snippets`` snippets (grouped by the parent section)."""
    g = ctx.graph
    kinds = {d: k for d, k in g.conn.execute("SELECT id, kind FROM documents")}
    cur_sec, taken, pieces, path = None, 0, [], None

    def flush() -> Iterator[PairRow]:
        if cur_sec and pieces and path and len(path) > 1:
            body = "".join(pieces)[: ctx.positive_chars]
            # the section itself holds one "entity" (itself): its siblings under the parent are the group
            yield PairRow(" › ".join(path), body, "heading", cur_sec, frozenset({cur_sec}), ctx.section_chain(cur_sec)[1:], _lang(body))

    sql = ("SELECT p.section_id, p.text, s.path, p.document_id FROM snippets p JOIN sections s ON s.id = p.section_id "
           "ORDER BY p.section_id, p.ord")
    for sid, text, spath, did in g.conn.execute(sql):
        if kinds.get(did) not in ("book",):
            continue
        if sid != cur_sec:
            yield from flush()
            cur_sec, taken, pieces, path = sid, 0, [], json.loads(spath)
        if taken < ctx.heading_snippets:
            pieces.append(text)
            taken += 1
    yield from flush()


def _treats_sources(ctx: Context) -> dict[str, dict[str, list[str]]]:
    """head → symptom → every book snippet its ``treats`` triple was read from (loaded into ``ctx.snippets``)."""
    out: dict[str, dict[str, list[str]]] = defaultdict(dict)
    sql = ("SELECT t.head_id, t.tail_id, ts.snippet_id FROM triples t JOIN triple_sources ts ON ts.triple_id = t.id "
           "WHERE t.relation = 'treats' AND ts.snippet_id IS NOT NULL AND t.layer IN ('book', 'imported', 'completed') "
           "ORDER BY t.rowid, ts.rowid")
    for h, t, sid in ctx.graph.conn.execute(sql):
        lst = out[h].setdefault(t, [])
        if sid not in lst:
            lst.append(sid)
    missing = list({sid for by in out.values() for lst in by.values() for sid in lst} - set(ctx.snippets))
    for i in range(0, len(missing), 5000):
        ctx.snippets.update(ctx.graph.get_snippets(missing[i : i + 5000]))
    return out


def _best_snippet(sources: dict[str, list[str]], symptoms: list[str], snippets: dict[str, Any]) -> str | None:
    """The snippet sourcing most of ``symptoms`` (first seen on a tie)."""
    votes: dict[str, int] = {}
    for t in symptoms:
        for sid in sources.get(t, []):
            if sid in snippets:
                votes[sid] = votes.get(sid, 0) + 1
    return max(votes, key=lambda s: votes[s]) if votes else None


def vignette_rows(ctx: Context) -> Iterator[PairRow]:
    """Indication symptoms (sampled, shuffled, others' symptoms mixed in) in a vignette frame → the entry's passage."""
    facts = [(h, t) for h, t, _ in ctx.facts.get("treats", []) if h in ctx.entities and t in ctx.entities]
    if not facts:
        return
    symptoms: dict[str, list[str]] = defaultdict(list)
    holders: dict[str, set[str]] = defaultdict(set)
    for h, t in facts:
        if t not in symptoms[h]:
            symptoms[h].append(t)
        holders[t].add(h)
    sources = _treats_sources(ctx)
    names = {eid: {norm_key(n) for n in ctx.names(eid)} for eid in symptoms}
    for h, own_all in symptoms.items():
        if len(own_all) < 2 or h not in sources or _lang(ctx.name(h)) != "zh":
            continue
        own_sids = {sid for lst in sources[h].values() for sid in lst}
        own_keys = {norm_key(ctx.name(x)) for x in own_all}
        kind = ctx.entities[h]["type"]
        asks = VIGNETTE_ASKS.get(kind, VIGNETTE_ASKS["_"])
        seen: set[tuple[str, ...]] = set()
        for i in range(ctx.vignette_per_entry):
            rng = random.Random(content_hash(ctx.seed, "vignette", h, i))
            own = rng.sample(own_all, rng.randint(2, max(2, min(ctx.vignette_symptoms, len(own_all)))))
            if tuple(sorted(own)) in seen:
                continue
            seen.add(tuple(sorted(own)))
            answers = set.intersection(*(holders[t] for t in own))
            if len(answers) > ctx.max_answers:
                continue
            sid = _best_snippet(sources[h], own, ctx.snippets)
            if sid is None:
                continue
            noise: list[str] = []
            for _ in range(rng.randint(1, ctx.vignette_noise) if ctx.vignette_noise > 0 else 0):
                for _try in range(20):  # a symptom of another entry, drawn by how often the books give it
                    t = facts[rng.randrange(len(facts))][1]
                    if t not in own_all and t not in noise and norm_key(ctx.name(t)) not in own_keys:
                        noise.append(t)
                        break
            words = [ctx.name(t) for t in own + noise]
            rng.shuffle(words)
            anchor = rng.choice(VIGNETTE_OPENINGS).format(s=rng.choice(VIGNETTE_SEPS).join(words)) + rng.choice(asks)
            pos, sec = ctx.entry(h, sid)
            blocked = set().union(*(names.get(a, {norm_key(ctx.name(a))}) for a in answers))
            shared: dict[str, int] = {}
            for t in own:
                for x in holders[t]:
                    if x not in answers:
                        shared[x] = shared.get(x, 0) + 1
            negs: list[tuple[str, str]] = []
            buckets: dict[int, list[str]] = defaultdict(list)
            for x in sorted(shared):
                buckets[shared[x]].append(x)
            order: list[str] = []
            for n in sorted(buckets, reverse=True):  # most shared symptoms first, a seeded order within a count
                rng.shuffle(buckets[n])
                order += buckets[n]
            for x in order:
                if len(negs) >= ctx.vignette_negatives:
                    break
                if names.get(x, set()) & blocked:
                    continue
                xsid = _best_snippet(sources.get(x, {}), [t for t in own if x in holders[t]], ctx.snippets)
                if xsid is None or xsid in own_sids:
                    continue
                text, _ = ctx.entry(x, xsid)
                if text != pos:
                    negs.append((x, text))
            yield PairRow(anchor, pos, "vignette", h, frozenset(answers), ctx.chain(h, sec), "zh", tuple(negs))


TEMPLATES: dict[str, Callable[[Context], Iterator[PairRow]]] = {
    "fact": fact_rows, "composite": composite_rows, "attributes": attribute_rows, "formula": formula_rows,
    "alias": alias_rows, "definition": definition_rows, "heading": heading_rows, "vignette": vignette_rows,
}
