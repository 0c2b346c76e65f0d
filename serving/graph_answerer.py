"""LLM-free answers grounded in the graph: multiple choice, true/false, ranking, short answers.

The answerer is handed the ``Evidence`` the pipeline retrieved (it never retrieves itself), and
every score comes from it, so each answer can be checked:

- an option / candidate is *supported* by (a) being a linked entity of the evidence that a path or
  triple connects to a question entity (PathScore, triple confidence), (b) snippet support: the
  share of its content tokens found in an evidence snippet that also contains a question keyword,
  weighted by that snippet's rank, and (c) retrieval support (the classic IR solver): the best BM25
  of question + option over the passages that hold the option, relative to the best option's;
- below ``min_support`` the answerer abstains ("not in the knowledge base").

A free-text answer lists first the facts whose relation the question asks for (``intents``: a
keyword → relations table, Chinese and English, e.g. 性味 → has_flavour, has_nature), then the
other facts by PathScore and confidence, in the question's language: a Chinese question gets
Chinese sentences (``relation_templates``: has_flavour → "{h}味{t}"), an English one English.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from bencao.deadline import check_deadline
from bencao.config import field
from bencao.errors import BencaoError
from bencao.retrieval.evidence import Evidence, LinkedEntity, PathHit, TripleHit, path_heading, title_cite
from bencao.serving.attribution import ATTRIBUTE_RELATIONS, by_source_lines, conflicts, explained, sourced
from bencao.serving.question_shape import CONDITION_TYPES, condition_text, is_yes_no, names_match
from bencao.serving.screening import addressed_to_reader
from bencao.retrieval.index.lexical import analyze
from bencao.retrieval.name_variants import PARTS, variant_keys
from bencao.retrieval.search.entries import entry_heading, heading_keys
from bencao.text import has_cjk, lang_of, norm_key, split_sentences

_NEGATIONS_EN = {"not", "no", "never", "cannot", "without", "neither", "nor"}
_NEGATIONS_ZH = ("不", "无", "非", "勿", "忌", "禁", "未", "莫")


#: What a question asks for → the relations that answer it (relations absent from a graph are harmless).
DEFAULT_INTENTS: dict[str, list[str]] = {
    "性味": ["has_flavour", "has_nature"], "气味": ["has_flavour", "has_nature"], "味": ["has_flavour"], "性": ["has_nature"],
    "主治": ["treats", "has_effect"], "治": ["treats", "has_effect"], "功效": ["has_effect", "treats"], "功能": ["has_effect", "treats"],
    "作用": ["has_effect", "treats"], "禁忌": ["contraindications"], "不宜": ["contraindications"], "忌": ["contraindications"],
    "毒": ["toxicity"], "配料": ["has_ingredient"], "成分": ["has_ingredient"], "组成": ["has_ingredient"], "归经": ["enters_meridian"],
    "flavour": ["has_flavour"], "flavor": ["has_flavour"], "taste": ["has_flavour"], "nature": ["has_nature"],
    "property": ["has_flavour", "has_nature"], "properties": ["has_flavour", "has_nature"],
    "treat": ["treats", "has_effect"], "indication": ["treats"], "effect": ["has_effect", "treats"], "benefit": ["has_effect"],
    "contraindicat": ["contraindications"], "avoid": ["contraindications"], "toxic": ["toxicity"], "ingredient": ["has_ingredient"],
}

#: How a fact reads in each language; ``{h}`` head, ``{t}`` tail. Relations without an entry read "h —relation→ t".
DEFAULT_TEMPLATES: dict[str, dict[str, str]] = {
    "zh": {"has_flavour": "{h}味{t}", "has_nature": "{h}性{t}", "treats": "{h}主治{t}", "has_effect": "{h}的功效：{t}",
           "toxicity": "{h}：{t}", "has_ingredient": "{h}的配料有{t}", "listed_in": "{h}列入{t}", "is_a": "{h}属于{t}",
           "variant_of": "{h}是{t}的一种", "contraindications": "{h}禁忌：{t}", "enters_meridian": "{h}归{t}经",
           "is_effective_for": "{h}对{t}有效", "alias_of": "{h}又名{t}"},
    "en": {"has_flavour": "{h} has flavour {t}", "has_nature": "{h} has nature {t}", "treats": "{h} treats {t}",
           "has_effect": "{h} has effect {t}", "toxicity": "{h}: {t}", "has_ingredient": "{h} has ingredient {t}",
           "listed_in": "{h} is listed in {t}", "is_a": "{h} is a {t}", "variant_of": "{h} is a kind of {t}",
           "contraindications": "{h}: contraindication {t}", "enters_meridian": "{h} enters the {t} meridian",
           "is_effective_for": "{h} is effective for {t}"},
}

#: Words by which a sentence speaks of a relation: a quoted sentence must hold one of the asked relations' cues (or
#: the value of an asked fact). Chinese cues match anywhere (folded to simplified); English ones the start of a word.
DEFAULT_RELATION_CUES: dict[str, list[str]] = {
    "has_flavour": [*(f"味{c}" for c in "甘苦辛咸酸淡涩"), "气味", "flavo", "taste", "sweet", "bitter", "pungent", "salty", "sour"],
    "has_nature": [*(f"{p}{c}" for p in "性气" for c in "寒热温凉平冷"), "nature", "warm", "cold", "cool", "hot", "neutral"],
    "treats": ["主", "治", "疗", "疾", "病", "痛", "愈", "treat", "cure", "reliev", "heal", "remed"],
    "has_effect": ["主", "补", "益", "安", "养", "功", "效", "利", "除", "止", "久服", "effect", "benefi", "help", "support", "tonif", "used"],
    "toxicity": ["毒", "toxic", "poison"], "contraindications": ["忌", "禁", "勿", "不可", "不宜", "慎", "avoid", "contraindicat"],
    "enters_meridian": ["归经", "经络", *(f"入{c}" for c in "手足心肝脾肺肾胃胆"), "meridian", "channel"], "has_ingredient": ["用", "配", "和", "ingredient", "contain", "made"],
}

#: Short relation labels for reasoning paths (``A —label→ B``).
DEFAULT_LABELS: dict[str, dict[str, str]] = {
    "zh": {"has_flavour": "味", "has_nature": "性", "treats": "主治", "has_effect": "功效", "toxicity": "毒性", "has_ingredient": "配料",
           "listed_in": "列入", "is_a": "属于", "variant_of": "种属", "contraindications": "禁忌", "enters_meridian": "归经",
           "is_effective_for": "有效于"},
    "en": {},
}

_WORDS = {
    "zh": {"not_in_kb": "知识库中没有找到与该问题相关的内容。", "confidence": "置信度", "sep": "：", "path": "推理路径",
           "related": "相关内容（并非对该问题的回答）：", "found": "知识库中的相关记载："},
    "en": {"not_in_kb": "The knowledge base has nothing on this question.", "confidence": "confidence", "sep": ": ", "path": "path",
           "related": "Related (not an answer to the question):", "found": "What the knowledge base says:"},
}


@dataclass
class AnswererConfig:
    w_graph: float = field(0.5, help="Weight of graph support (paths/triples linking option and question entities).")
    w_text: float = field(0.5, help="Weight of snippet support (option tokens co-occurring with question keywords).")
    w_ir: float = field(0.5, help="Weight of retrieval support: the option's best BM25 of question + option over passages that hold "
                                  "it (Evidence.option_support), relative to the best option's (the classic IR solver).")
    min_support: float = field(0.05, help="Below this best score the answerer abstains.")
    multi_ratio: float = field(1.0, help="Multiple-choice: options scoring ≥ ratio × best are all answered (1.0 = ties only).")
    tf_true: float = field(0.6, help="True/false: support at or above this is True.")
    tf_false: float = field(0.3, help="True/false: support below this (with evidence present) is False; between → abstain.")
    select_ratio: float = field(0.5, help="Ranking: candidates scoring ≥ ratio × best are 'selected'.")
    answer_support: float = field(0.34, help="Free-form answer: below this sentence support (share of the question's content words in the "
                                             "best quoted sentence), weak evidence is not passed off as an answer — the answer is "
                                             "'not in the knowledge base' when the question relates entities the evidence does not "
                                             "relate, or asks for a relation none of its entities has a fact of.")
    max_sentences: int = field(3, help="Sentences quoted in a free-form answer (and facts listed when the question names no relation).")
    max_intent_facts: int = field(6, help="Free-form answer: most facts of the relation(s) the question asks for.")
    intents: dict[str, list[str]] = field(default_factory=lambda: dict(DEFAULT_INTENTS),
                                          help="Question keyword → relations whose facts a free-form answer lists first, in this order. "
                                               "Chinese keywords match anywhere in the question (traditional folded to simplified); "
                                               "English ones match the start of a word ('treat' → treats, treatment).")
    relation_templates: dict[str, dict[str, str]] = field(default_factory=lambda: {k: dict(v) for k, v in DEFAULT_TEMPLATES.items()},
                                                          help="Per language (zh, en): relation → sentence template with {h} and {t}.")
    relation_labels: dict[str, dict[str, str]] = field(default_factory=lambda: {k: dict(v) for k, v in DEFAULT_LABELS.items()},
                                                       help="Per language: relation → the short label shown in reasoning paths.")
    relation_cues: dict[str, list[str]] = field(default_factory=lambda: {k: list(v) for k, v in DEFAULT_RELATION_CUES.items()},
                                                help="Relation → words by which a sentence speaks of it: when the question asks for relations "
                                                     "(intents), a quoted sentence must hold a cue of one of them or the value of an asked fact.")
    stopwords: list[str] = field(default_factory=list, help="Question words that never count as keywords (besides the retrieval "
                                                            "recipe's question.stopwords).")
    exception_rule: bool = field(True, help="Exception questions ('下列哪项不属于…', 'all of the following EXCEPT', recognised by "
                                            "exception_cues) get the single-answer option the evidence supports least — when the evidence "
                                            "supports at least half of the options; with less, the least supported option says nothing.")
    exception_cues: list[str] = field(default_factory=lambda: ["不是", "不属于", "不包括", "不正确", "错误的是", "除外", "以外", "除了",
                                                               "无关", "不符合", "不会", "不应", "不出现", "except", "not true", "incorrect",
                                                               "false"],
                                      help="Cues of an exception question (matched case-folded anywhere in the question).")


def _content_tokens(text: str, stop: frozenset[str] = frozenset()) -> list[str]:
    toks = [t for t in analyze(text) if t not in stop]
    return [t for t in toks if has_cjk(t) or len(t) > 2]


class GraphAnswerer:
    """Scores options, claims and candidates, and writes short answers, from a given :class:`Evidence`."""

    def __init__(self, config: AnswererConfig | None = None, stopwords: list[str] | tuple[str, ...] = ()):
        self.cfg = config or AnswererConfig()
        self.stop = frozenset([*stopwords, *self.cfg.stopwords])

    # ------------------------------------------------------------------ wording
    def lang(self, question: str) -> str:
        return "zh" if lang_of(question) == "zh" else "en"

    def fact(self, t: TripleHit, lang: str, subject: bool = True) -> str:
        """One fact in words (``subject=False``: without its head, as in a source's line: 味甘, 性平)."""
        tmpl = self.cfg.relation_templates.get(lang, {}).get(t.relation)
        if not subject:
            return (tmpl.format(h="", t=t.tail) if tmpl else f"{t.relation} {t.tail}").strip(" ：:")
        return tmpl.format(h=t.head, t=t.tail) if tmpl else f"{t.head} —{t.relation}→ {t.tail}"

    def path_text(self, p: PathHit, lang: str) -> str:
        labels = self.cfg.relation_labels.get(lang, {})
        out = p.names[0]
        for step, name in zip(p.relations, p.names[1:]):
            rel = step.lstrip("~")
            label = labels.get(rel, rel)
            out += f" ←{label}— {name}" if step.startswith("~") else f" —{label}→ {name}"
        return out

    def not_in_kb(self, question: str) -> str:
        return _WORDS[self.lang(question)]["not_in_kb"]

    # ------------------------------------------------------------------ scoring
    def _graph_support(self, ev: Evidence, role: str) -> float:
        """Best PathScore-derived or triple-confidence support of entities linked for ``role``."""
        ids = {e.id for e in ev.entities if role in e.roles}
        q_ids = {e.id for e in ev.entities if "question" in e.roles or "disease" in e.roles}
        if not ids:
            return 0.0
        best = 0.0
        max_path = max((p.score for p in ev.paths), default=0.0) or 1.0
        for p in ev.paths:
            ends = {p.entities[0], p.entities[-1]}
            if ends & ids and ends & q_ids and not (ids >= ends):
                best = max(best, 0.5 + 0.5 * p.score / max_path)
        for t in ev.triples:
            pair = {t.head_id, t.tail_id}
            if pair & ids and pair & q_ids and not (ids >= pair):
                best = max(best, 0.5 * float(t.confidence) + 0.4)
        conf = max(e.confidence for e in ev.entities if e.id in ids)
        return min(1.0, best) * conf if best else 0.1 * conf

    def _text_support(self, ev: Evidence, text: str, q_tokens: set[str]) -> float:
        toks = set(_content_tokens(text, self.stop))
        if not toks:
            return 0.0
        best = 0.0
        for rank, s in enumerate(ev.snippets):
            s_toks = set(analyze(s.text))
            cover = len(toks & s_toks) / len(toks)
            if not cover:
                continue
            q_hit = 1.0 if not q_tokens or q_tokens & s_toks else 0.5
            best = max(best, cover * q_hit / (1.0 + 0.1 * rank))
        for line in [t.text() for t in ev.triples] + [e.description or "" for e in ev.entities]:
            l_toks = set(analyze(line))
            cover = len(toks & l_toks) / len(toks)
            if cover and (not q_tokens or q_tokens & l_toks):
                best = max(best, 0.8 * cover)
        return best

    def score_options(self, question: str, texts: list[str], ev: Evidence) -> list[float]:
        """Support of each option text (linked as role ``option:<i>`` by retrieval): graph, snippet and retrieval support."""
        q_tokens = set(_content_tokens(question, self.stop))
        ir = list(ev.option_support) if len(ev.option_support) == len(texts) else [0.0] * len(texts)
        top_ir = max(ir, default=0.0)
        out = []
        for i, t in enumerate(texts):
            check_deadline("scoring the options")
            out.append(round(self.cfg.w_graph * self._graph_support(ev, f"option:{i}") + self.cfg.w_text * self._text_support(ev, t, q_tokens)
                             + (self.cfg.w_ir * ir[i] / top_ir if top_ir > 0 else 0.0), 6))
        return out

    # ------------------------------------------------------------------ tasks
    def is_exception_question(self, question: str) -> bool:
        """'下列哪项不属于…', 'all of the following EXCEPT': the answer is the option the evidence does not support."""
        q = norm_key(question)
        return any(norm_key(c) in q for c in self.cfg.exception_cues if c.strip())

    def answer_mcq(self, question: str, options: dict[str, str], ev: Evidence, n_answers: int = 1) -> dict[str, Any]:
        if not options:
            raise BencaoError("multiple-choice question has no options")
        letters = list(options)
        scores = self.score_options(question, [str(options[k]) for k in letters], ev)
        by = dict(zip(letters, scores))
        best = max(by.values())
        abstained = best < self.cfg.min_support
        covered = sum(v >= self.cfg.min_support for v in by.values()) * 2 >= len(by)
        exception = self.cfg.exception_rule and n_answers == 1 and covered and self.is_exception_question(question)
        if exception:  # the least supported option is the exception the question asks for
            ranking = sorted(letters, key=lambda k: (by[k], letters.index(k)))
            answer = [] if abstained else ranking[:1]
        else:
            ranking = sorted(letters, key=lambda k: (-by[k], letters.index(k)))
            answer = [] if abstained else [k for k in ranking if by[k] >= self.cfg.multi_ratio * best and by[k] > 0]
        return {"answer": answer, "ranking": ranking, "scores": by, "abstained": abstained, "exception": exception}

    def answer_tf(self, statement: str, ev: Evidence) -> dict[str, Any]:
        toks = set(_content_tokens(statement, self.stop))
        if ev.is_empty() or not toks:
            return {"answer": None, "score": 0.0, "abstained": True}
        best, best_line = 0.0, ""
        lines = [s.text for s in ev.snippets] + [t.text() for t in ev.triples] + [p.text for p in ev.paths]
        for line in lines:
            for sent in split_sentences(line) or [line]:
                cover = len(toks & set(analyze(sent))) / len(toks)
                if cover > best:
                    best, best_line = cover, sent
        if _negated(statement) != _negated(best_line) and best >= self.cfg.tf_true:
            best = 1.0 - best  # the evidence says the opposite
        if best >= self.cfg.tf_true:
            ans: bool | None = True
        elif best < self.cfg.tf_false:
            ans = False
        else:
            ans = None
        return {"answer": ans, "score": round(best, 4), "abstained": ans is None}

    def rank_candidates(self, query: str, candidates: list[str], ev: Evidence) -> dict[str, Any]:
        if not candidates:
            raise BencaoError("no candidates to rank")
        scores = self.score_options(query, list(candidates), ev)
        order = sorted(range(len(candidates)), key=lambda i: (-scores[i], i))
        top = scores[order[0]]
        abstained = top < self.cfg.min_support
        selected = [] if abstained else [candidates[i] for i in order if scores[i] >= self.cfg.select_ratio * top and scores[i] > 0]
        return {"ranking": [candidates[i] for i in order], "scores": {c: s for c, s in zip(candidates, scores)}, "selected": selected,
                "abstained": abstained}

    def recommend(self, query: str, ev: Evidence, limit: int = 10) -> dict[str, Any]:
        """Open-ended recommendation: the foods/dishes/herbs the evidence's paths reach, best path first."""
        items: list[str] = []
        for e in sorted((e for e in ev.entities if "path" in e.roles), key=lambda e: -e.score):
            if e.name and e.name not in items:
                items.append(e.name)
        return {"items": items[:limit], "abstained": not items}

    def answer(self, question: str, ev: Evidence) -> dict[str, Any]:
        """A short answer in the question's language, every line a fact with its sources and citation, or "not
        in the knowledge base" (with what was found offered as related, marked as not an answer).

        A yes/no question ("生姜能治疗消渴吗", "Does ginger help with nausea?") is answered only from a fact
        that links the asked entity (or an entity linked to it as the same thing) to the asked condition: a
        triple, a reasoning path the answer shows, or a sentence of the entity's own entry that names the
        condition (:meth:`answer_yes_no`). Other questions list the facts of the relation asked first; an
        attribute the sources disagree on (nature, flavour, toxicity) is given source by source. Sentences
        are quoted only when they name the asked entity, share the question's words and do not address
        the reader (:func:`~bencao.serving.screening.addressed_to_reader`)."""
        lang = self.lang(question)
        w = _WORDS[lang]
        refs = {r["snippet_id"]: r["n"] for r in ev.references()}
        groups = self.asked_groups(ev, question)
        if groups and is_yes_no(question):
            res = self.answer_yes_no(question, ev, groups, refs)
            if res is not None:
                return res
        asked = [e for grp in groups for e in grp]
        names = [norm_key(x) for e in asked for x in (e.name, e.mention) if x]
        q_tokens = set(_content_tokens(self._as_named(question, groups), self.stop))
        asked_rels = self.intent_relations(question)
        cues = [c for r in asked_rels for c in self.cfg.relation_cues.get(r, [])]
        cues += [t.tail for t in ev.triples if t.relation in asked_rels and len(t.tail) > 1]  # 甘 alone is in 甘草
        scored = [(cover + 0.01 * score, f"{sent}{cite}") for cover, score, sent, cite in self._sentences(ev, q_tokens, names, refs, lang=lang)
                  if not asked_rels or _holds_cue(sent, cues)]  # about the asked relation too, not only the asked entity
        support = max([c for c, _ in scored], default=0.0)
        path_lines = [self.path_text(p, lang) for p in ev.paths[:2] if p.connects]
        weak = support < max(self.cfg.min_support, self.cfg.answer_support) and not path_lines
        why = "no evidence" if ev.is_empty() else "nothing linked" if weak and not ev.entities else self.unrelated(question, ev, quoted=bool(scored)) if weak else None
        if why:
            return self._abstain(question, ev, groups, refs, why, support)
        parts: list[str] = []
        if asked or ev.entities:
            grp = groups[0] if groups else [ev.entities[0]]
            e = grp[0]
            if e.description and not addressed_to_reader(e.description):
                parts.append(f"{e.name}{w['sep']}{e.description}")
            facts, n_asked = self.order_facts(question, ev, {x.id for x in grp})
            shown = facts[: max(self.cfg.max_sentences, min(n_asked, self.cfg.max_intent_facts))]
            n_first = min(n_asked, len(shown))
            subject = e.name or e.mention or ""
            asked_lines = self.fact_lines(shown[:n_first], ev, refs, lang, subject=subject)
            rest_lines = self.fact_lines(shown[n_first:], ev, refs, lang, subject=subject, all_facts=shown)
            parts = asked_lines + parts + rest_lines  # the asked facts before the description
            named = self.name_line(e, lang)
            if named:
                parts.insert(0, named)
        parts += path_lines
        parts += [t for _, t in sorted(scored, key=lambda x: -x[0])[: self.cfg.max_sentences]]
        if not parts:
            parts = [self.fact(t, lang) + sourced(t, ev, refs).cite() for t in ev.triples[:3]] or [path_heading(s.path) for s in ev.snippets[:2]]
        return {"answer": "\n".join(dict.fromkeys(parts)), "abstained": False, "support": round(support, 4)}

    # ------------------------------------------------------------------ pieces of an answer
    @staticmethod
    def name_line(e: LinkedEntity, lang: str) -> str | None:
        """How a classical or variant name was read: "薯蓣：即山药（别名，见《食疗本草》）", or None when the question
        used the entity's own name."""
        m = (e.link or {}).get("matched") or {}
        if not m or not e.mention or not e.name or norm_key(e.mention) == norm_key(e.name):
            return None
        if m.get("via") in (None, "exact") and not has_cjk(e.mention):
            return None  # "lemon" for FoodOn's "lemon (whole, raw)": its own synonym, nothing to explain
        via = m.get("via") or "exact"
        doc = title_cite(m.get("document") or "")
        if via == "the entry of a part":  # 栝楼 → 神农本草经's 栝蒌根
            return (f"{e.mention}：见{e.name}（书中以其部位立条{'，见' + doc if doc else ''}）" if lang == "zh"
                    else f"{e.mention}: see {e.name} (the entry of a part of it{', in ' + doc if doc else ''})")
        variant = via != "exact"
        if lang == "zh":
            return f"{e.mention}：即{e.name}（{'异写' if variant else '别名'}{'，见' + doc if doc else ''}）"
        return f"{e.mention}: {e.name} ({'a variant writing' if variant else 'another name'}{', in ' + doc if doc else ''})"

    @staticmethod
    def _as_named(question: str, groups: list[list[LinkedEntity]]) -> str:
        """The question with each mention written as the entity it was linked to (栝楼 → 栝蒌, 薯蓣 → 山药), so a
        passage in the graph's spelling shares its words."""
        q = norm_key(question)
        for grp in groups:
            e = grp[0]
            if e.mention and e.name and norm_key(e.mention) != norm_key(e.name):
                q = q.replace(norm_key(e.mention), f" {norm_key(e.mention)} {norm_key(e.name)} ")
        return q

    def asked_groups(self, ev: Evidence, question: str = "") -> list[list[LinkedEntity]]:
        """The things the question asks about, in question order: each the entity linked to one mention with
        the entities linked to it as the same thing (same-as / cross-layer links share its mention)."""
        asked = [e for e in ev.entities if "question" in e.roles or "disease" in e.roles]
        q = norm_key(question)
        groups: dict[str, list[LinkedEntity]] = {}
        for e in asked:
            key = norm_key(e.mention or e.name or e.id)
            groups.setdefault(key, []).append(e)
        for grp in groups.values():
            grp.sort(key=lambda e: "layer-link" in e.via)  # the entity the mention was linked to first, its equivalents after
        return sorted(groups.values(), key=lambda grp: (q.find(norm_key(grp[0].mention or "")) % (len(q) + 1) if q else 0))

    def fact_lines(self, facts: list[TripleHit], ev: Evidence, refs: dict[str, int], lang: str, subject: str = "",
                   all_facts: list[TripleHit] | None = None) -> list[str]:
        """Each fact with its confidence explained by its sources (how many, how they agree) and its citation;
        attribute facts the sources disagree on, source by source."""
        pool = [sourced(t, ev, refs) for t in (all_facts or facts)]
        mine = [sourced(t, ev, refs) for t in facts]
        split = conflicts(mine)
        out: list[str] = []
        if split:
            out += by_source_lines(subject, mine, split, lambda t: self.fact(t, lang, subject=False), lang)
        out += [explained(self.fact(f.triple, lang), f, pool, lang) for f in mine if f.triple.relation not in split]
        return out

    def _sentences(self, ev: Evidence, q_tokens: set[str], names: list[str], refs: dict[str, int],
                   condition: str | None = None, lang: str = "zh") -> list[tuple[float, float, str, str]]:
        """(cover, passage score, sentence, citation) of the evidence sentences that may be quoted: they name an
        asked entity (``names``) or sit in its own entry (a passage headed by its name or a part of it: 栝蒌根,
        quoted after that heading), share the question's words (for a yes/no question: name its
        ``condition``), and neither they nor their passage address the reader."""
        out = []
        for s in ev.snippets:
            if addressed_to_reader(s.text):
                continue  # a passage that addresses the reader or the answerer is data, never an answer line (nor any sentence of it)
            heads = heading_keys(s.path[-1]) if s.path else []
            spelt = [k for n in names if n for k in (n, *variant_keys(n))]  # 栝楼's entry is headed 栝蒌（瓜蒌）
            own = any(h == n or (len(h) == len(n) + 1 and h.startswith(n) and h[-1] in PARTS) for h in heads for n in spelt)
            heading = entry_heading(s.path[-1]) if own else ""
            for sent in split_sentences(s.text):
                key = norm_key(sent)
                named = any(n in key for n in names)
                if not (named or own):
                    continue  # quote only sentences about the entities asked for
                if condition is not None and not any(v in key for v in _condition_keys(condition)):
                    continue
                if addressed_to_reader(sent):
                    continue
                text = sent if named else f"{heading}{_WORDS[lang]['sep']}{sent.strip()}"  # 栝蒌根：味苦，寒。主消渴…
                st = set(analyze(text))
                cover = len(q_tokens & st) / len(q_tokens) if q_tokens else 0.0
                if (cover or condition is not None) and len(key) > max((len(n) for n in names), default=0) + 1:
                    out.append((cover, s.score, text, f" [{refs[s.id]}]"))
        return out

    def _abstain(self, question: str, ev: Evidence, groups: list[list[LinkedEntity]], refs: dict[str, int], why: str,
                 support: float = 0.0) -> dict[str, Any]:
        """"Not in the knowledge base", then what was found about the asked entity, marked as related only."""
        lang = self.lang(question)
        w = _WORDS[lang]
        related: list[str] = []
        if groups:
            grp = groups[0]
            facts, _ = self.order_facts(question, ev, {e.id for e in grp})
            related = self.fact_lines(facts[: self.cfg.max_sentences], ev, refs, lang, subject=grp[0].name or "")
        answer = w["not_in_kb"] + (f"\n{w['related']}\n" + "\n".join(related) if related else "")
        return {"answer": answer, "abstained": True, "support": round(support, 4), "reason": why, "related": related}

    def answer_yes_no(self, question: str, ev: Evidence, groups: list[list[LinkedEntity]], refs: dict[str, int]) -> dict[str, Any] | None:
        """iDISK's rule for a yes/no question: the facts that link the subject to the asked condition, or "not in
        the knowledge base" with the subject's facts offered as related. None when the question names no
        condition (it is answered as an open question)."""
        lang = self.lang(question)
        w = _WORDS[lang]
        # the subject is what the question names first ("Is honey a syrup?", "生姜能治疗消渴吗"), unless that is a disorder
        # and something else is named too ("消渴能用生姜治吗")
        first = groups[0][0].type or ""
        subj_i = next((i for i, grp in enumerate(groups) if (grp[0].type or "") not in CONDITION_TYPES), 0) if first in CONDITION_TYPES else 0
        subject = groups[subj_i]
        ids = {e.id for e in subject}
        mentions = [x for e in subject for x in (e.mention, e.name) if x]
        # the food as bought is linked ("lemon (whole, raw)"); its parent named as the question names it ("lemon") is the same thing
        said = {norm_key(e.mention) for e in subject if e.mention}
        ids |= {t.tail_id for t in ev.triples if t.relation == "is_a" and t.head_id in ids and norm_key(t.tail) in said}
        cond = condition_text(question, mentions, self.stop)
        cond_ids = {e.id for i, grp in enumerate(groups) if i != subj_i for e in grp if norm_key(e.mention or "") in norm_key(question)}
        asked_rels = set(self.intent_relations(question))
        attr_asked = asked_rels & set(ATTRIBUTE_RELATIONS)
        if not cond and not cond_ids and not attr_asked:
            return None

        def names_it(eid: str, name: str) -> bool:
            return eid in cond_ids or (bool(cond) and names_match(cond, name))

        facts = []
        for t in ev.triples:
            if t.head_id in ids and (names_it(t.tail_id, t.tail) or t.relation in attr_asked):
                facts.append(t)
            elif t.tail_id in ids and names_it(t.head_id, t.head):
                facts.append(t)
        facts.sort(key=lambda t: (t.relation not in asked_rels, -float(t.confidence)))
        paths = [p for p in ev.paths if len(p.entities) > 2 and (  # the path shown ends at the condition
            (p.entities[0] in ids and names_it(p.entities[-1], p.names[-1])) or (p.entities[-1] in ids and names_it(p.entities[0], p.names[0])))]
        q_tokens = set(_content_tokens(question, self.stop))
        names = [norm_key(x) for x in mentions]
        sentences = sorted(self._sentences(ev, q_tokens, names, refs, lang=lang, condition=cond or " ".join(
            e.name or "" for grp in groups for e in grp if e.id in cond_ids)), key=lambda x: (-x[0], -x[1])) if (cond or cond_ids) else []
        if not (facts or paths or sentences):
            what = cond or "、".join(e.name or "" for grp in groups for e in grp if e.id in cond_ids)
            return self._abstain(question, ev, [subject], refs, f"no fact links {subject[0].name or subject[0].mention} to {what!r}")
        lines = [w["found"]]
        named = self.name_line(subject[0], lang)
        if named:
            lines.append(named)
        lines += self.fact_lines(facts[: self.cfg.max_intent_facts], ev, refs, lang, subject=subject[0].name or "")
        lines += [self.path_text(p, lang) for p in paths[:2]]
        lines += [f"{sent}{cite}" for _c, _s, sent, cite in sentences[: self.cfg.max_sentences]]
        return {"answer": "\n".join(dict.fromkeys(lines)), "abstained": False, "support": 1.0 if facts or paths else 0.5}

    def unrelated(self, question: str, ev: Evidence, quoted: bool = False) -> str | None:
        """Why the evidence does not answer what was asked, or None: the question relates two or more entities
        ('Does durian lower blood pressure?') and nothing in the evidence relates them (no triple between
        them, no sentence naming two of them) while they lack facts of the relation asked; or it asks for a
        relation ('What does honey treat?') that none of its entities has a fact of and no passage about them
        shares a word with the question (``quoted``: some sentence does)."""
        qents = {e.id: e for e in ev.entities if "question" in e.roles}
        asked = set(self.intent_relations(question))
        with_asked = {i for i in qents for t in ev.triples if t.relation in asked and i in (t.head_id, t.tail_id)}
        if asked and not with_asked and not quoted:
            return "no fact of the relation asked"
        mentions = {i: [norm_key(x) for x in (e.mention, e.name) if x] for i, e in qents.items()}
        keys = sorted((m for ms in mentions.values() for m in ms), key=len)
        # one phrase linked twice (大枣 inside 大枣汤) is one entity of the question, not two
        distinct = [i for i, ms in mentions.items() if not all(any(m != k and m in k for k in keys) for m in ms)]
        if len(distinct) < 2 or (asked and with_asked >= set(distinct)):
            return None
        ids = set(distinct)
        if any(t.head_id in ids and t.tail_id in ids for t in ev.triples):
            return None
        for s in ev.snippets:  # a sentence naming two of them relates them; a passage merely holding both does not
            for sent in split_sentences(s.text):
                text = norm_key(sent)
                if sum(any(m and m in text for m in mentions[i]) for i in distinct) >= 2:
                    return None
        return "nothing in the evidence relates the entities asked about"

    def intent_relations(self, question: str) -> list[str]:
        """The relations the question asks for, from the ``intents`` keyword table (in table order)."""
        q = norm_key(question)
        words = re.findall(r"[a-z]+", q)
        out: list[str] = []
        for kw, rels in self.cfg.intents.items():
            k = norm_key(kw)
            if k and ((k in q) if has_cjk(k) else any(w.startswith(k) for w in words)):
                out += [r for r in rels if r not in out]
        return out

    def order_facts(self, question: str, ev: Evidence, entity_ids: str | set[str]) -> tuple[list[TripleHit], int]:
        """Triples of the asked entity (``entity_ids``: it and the entities linked to it as the same thing): those
        of the asked relations first (table order), then by PathScore and confidence; returns them and how
        many were asked for."""
        ids = {entity_ids} if isinstance(entity_ids, str) else set(entity_ids)
        asked = self.intent_relations(question)
        rank = {r: i for i, r in enumerate(asked)}
        path_score: dict[str, float] = {}
        for p in ev.paths:
            for tid in p.triple_ids:
                path_score[tid] = max(path_score.get(tid, 0.0), float(p.score))
        facts = [t for t in ev.triples if t.head_id in ids or t.tail_id in ids]
        facts.sort(key=lambda t: (rank.get(t.relation, len(rank)), -path_score.get(t.id, 0.0), -float(t.confidence), -float(t.score or 0.0)))
        return facts, sum(t.relation in rank for t in facts)


def _holds_cue(sentence: str, cues: list[str]) -> bool:
    """Does ``sentence`` hold one of ``cues`` (Chinese anywhere, English at the start of a word)?"""
    key = norm_key(sentence)
    words = re.findall(r"[a-z]+", key)
    for c in cues:
        k = norm_key(c)
        if k and ((k in key) if has_cjk(k) else any(w.startswith(k) for w in words)):
            return True
    return False


def _condition_keys(condition: str) -> list[str]:
    """Matching keys of the asked condition in a sentence: the condition and its words (English), or it without
    the verb it may be written with (Chinese 止呕 → 呕)."""
    c = norm_key(condition)
    if has_cjk(c):
        return [v for v in dict.fromkeys([c, *(c[len(x):] for x in ("止", "除", "治", "疗", "解", "去") if c.startswith(x) and len(c) > len(x))]) if v]
    return [c] if c else []


def instruction_shaped(text: str) -> bool:
    """Does ``text`` address whoever reads or answers it rather than state something about its subject?
    (:func:`bencao.serving.screening.addressed_to_reader`: screened after Unicode normalisation.)"""
    return addressed_to_reader(text)


def _negated(text: str) -> bool:
    if has_cjk(text):
        return any(n in text for n in _NEGATIONS_ZH)
    return bool(_NEGATIONS_EN & set(text.lower().replace("n't", " not").split()))
