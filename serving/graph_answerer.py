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
from bencao.retrieval.evidence import Evidence, PathHit, TripleHit, path_heading
from bencao.retrieval.index.lexical import analyze
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

#: Short relation labels for reasoning paths (``A —label→ B``).
DEFAULT_LABELS: dict[str, dict[str, str]] = {
    "zh": {"has_flavour": "味", "has_nature": "性", "treats": "主治", "has_effect": "功效", "toxicity": "毒性", "has_ingredient": "配料",
           "listed_in": "列入", "is_a": "属于", "variant_of": "种属", "contraindications": "禁忌", "enters_meridian": "归经",
           "is_effective_for": "有效于"},
    "en": {},
}

_WORDS = {
    "zh": {"not_in_kb": "知识库中没有找到与该问题相关的内容。", "confidence": "置信度", "sep": "：", "path": "推理路径"},
    "en": {"not_in_kb": "The knowledge base has nothing on this question.", "confidence": "confidence", "sep": ": ", "path": "path"},
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

    def fact(self, t: TripleHit, lang: str) -> str:
        tmpl = self.cfg.relation_templates.get(lang, {}).get(t.relation)
        return tmpl.format(h=t.head, t=t.tail) if tmpl else f"{t.head} —{t.relation}→ {t.tail}"

    @staticmethod
    def _cite(t: TripleHit, refs: dict[str, int]) -> str:
        """`` [n]``: the evidence passage the fact was read from, when it is among the references; else, for a
        fact no passage holds (an ontology's, a KB's), `` [title]`` of the document that asserts it."""
        n = next((refs[sid] for sid in (t.snippet_ids or []) if sid in refs), None)
        if n is not None:
            return f" [{n}]"
        return f" [{t.sources[0]}]" if t.sources else ""

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
        """A short extractive answer with [n] citations, or "not in the knowledge base", in the question's language."""
        lang = self.lang(question)
        w = _WORDS[lang]
        q_tokens = set(_content_tokens(question, self.stop))
        refs = {r["snippet_id"]: r["n"] for r in ev.references()}
        asked = [e for e in ev.entities if "question" in e.roles or "disease" in e.roles]
        names = [norm_key(x) for e in asked for x in (e.name, e.mention) if x]
        scored: list[tuple[float, str]] = []
        for s in ev.snippets:
            if instruction_shaped(s.text):
                continue  # a passage that addresses the reader or the answerer is data, never an answer line (nor any sentence of it)
            for sent in split_sentences(s.text):
                if names and not any(n in norm_key(sent) for n in names):
                    continue  # quote only sentences about the entities asked for
                st = set(analyze(sent))
                cover = len(q_tokens & st) / len(q_tokens) if q_tokens else 0.0
                if cover and len(norm_key(sent)) > max((len(n) for n in names), default=0) + 1:
                    scored.append((cover + 0.01 * s.score, f"{sent} [{refs[s.id]}]"))
        support = max([c for c, _ in scored], default=0.0)
        path_lines = [self.path_text(p, lang) for p in ev.paths[:2] if p.connects]
        weak = support < max(self.cfg.min_support, self.cfg.answer_support) and not path_lines
        why = "no evidence" if ev.is_empty() else "nothing linked" if weak and not ev.entities else self.unrelated(question, ev, quoted=bool(scored)) if weak else None
        if why:
            return {"answer": w["not_in_kb"], "abstained": True, "support": round(support, 4), "reason": why}
        parts: list[str] = []
        if asked or ev.entities:
            e = (asked or ev.entities)[0]
            if e.description and not instruction_shaped(e.description):
                parts.append(f"{e.name}{w['sep']}{e.description}")
            facts, n_asked = self.order_facts(question, ev, e.id)
            shown = facts[: max(self.cfg.max_sentences, min(n_asked, self.cfg.max_intent_facts))]
            lines = [(f"{self.fact(t, lang)}（{w['confidence']} {t.confidence:.2f}）" if lang == "zh"
                      else f"{self.fact(t, lang)} ({w['confidence']} {t.confidence:.2f})") + self._cite(t, refs) for t in shown]
            parts = lines[: min(n_asked, len(lines))] + parts + lines[min(n_asked, len(lines)):]  # the asked facts before the description
        parts += path_lines
        parts += [t for _, t in sorted(scored, key=lambda x: -x[0])[: self.cfg.max_sentences]]
        if not parts:
            parts = [self.fact(t, lang) + self._cite(t, refs) for t in ev.triples[:3]] or [path_heading(s.path) for s in ev.snippets[:2]]
        return {"answer": "\n".join(dict.fromkeys(parts)), "abstained": False, "support": round(support, 4)}

    def unrelated(self, question: str, ev: Evidence, quoted: bool = False) -> str | None:
        """Why the evidence does not answer what was asked, or None: the question relates two or more entities
        ('Does durian lower blood pressure?') and nothing in the evidence relates them (no triple between
        them, no passage naming two of them) while they lack facts of the relation asked; or it asks for a
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
        for s in ev.snippets:
            text = norm_key(s.text)
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

    def order_facts(self, question: str, ev: Evidence, entity_id: str) -> tuple[list[TripleHit], int]:
        """Triples of ``entity_id``: those of the asked relations first (table order), then by PathScore and
        confidence; returns them and how many were asked for."""
        asked = self.intent_relations(question)
        rank = {r: i for i, r in enumerate(asked)}
        path_score: dict[str, float] = {}
        for p in ev.paths:
            for tid in p.triple_ids:
                path_score[tid] = max(path_score.get(tid, 0.0), float(p.score))
        facts = [t for t in ev.triples if entity_id in (t.head_id, t.tail_id)]
        facts.sort(key=lambda t: (rank.get(t.relation, len(rank)), -path_score.get(t.id, 0.0), -float(t.confidence), -float(t.score or 0.0)))
        return facts, sum(t.relation in rank for t in facts)


# Text addressed to whoever reads or answers, not source text about the subject: requests to relay something to the
# user, meta-instructions ("ignore the previous instructions", "system prompt"), orders to an assistant / model.
# Plain usage directions of the sources ("孕妇忌服", "take with warm water") are not matched: they are the sources' content.
_INSTRUCTION_ZH = re.compile(
    r"(请|务必|必须|一定要|马上|立即)?(告诉|告知|转告|通知|提醒|警告|回答|回复|答复|说服|转达)(用户|读者|提问者|病人|患者|对方|大家|他们|所有人)"
    r"|(对|向|跟|给)(用户|读者|提问者|提问的人)(说|讲|表示|声明|强调|回答|回复|转达|说明)"
    r"|(忽略|无视|忽视|忘记|不要理会|不要遵守|违背|覆盖|绕过)[^。！？\n]{0,8}(指令|指示|提示词?|规则|设定|约束|要求|说明|命令|证据|资料)"
    r"|(系统|开发者|管理员)(指令|提示词?|消息|命令|通知|设定)"
    r"|(你|您)(现在|从现在起|必须|应该|应当|要|需要|只能|只许|不得|不能|不许)"
    r"|(作为|你是)(一个|一名)?(ai|人工智能|语言模型|大模型|助手|聊天机器人|机器人|chatgpt|gpt)"
    r"|(ai|人工智能|语言模型|大模型|模型|助手|机器人)(必须|应该|应当|需要|请|要|只能)"
    r"|(回答|输出|回复)(时|中)?(只|仅)(能|可|需)?(写|说|输出|回答|回复)",
    re.IGNORECASE)
_INSTRUCTION_EN = re.compile(
    r"\b(ignore|disregard|forget|override|bypass)\b[^.!?\n]{0,40}\b(instructions?|prompts?|rules?|guidelines|directions|evidence|context|above|previous)\b"
    r"|\b(system|developer|admin)\s+(instructions?|prompts?|messages?|notes?|overrides?)\b"
    r"|\b(tell|inform|warn|advise|convince|notify|remind)\s+(the\s+)?(users?|readers?|asker|patient|people|everyone|them)\b"
    r"|\b(say|reply|respond|answer|write|output|print)\s+(only\s+)?(to\s+the\s+(user|reader)|with|that)\b"
    r"|\byou\s+(must|should|shall|will|are\s+now|have\s+to|need\s+to|may\s+only|can\s+only|are\s+to)\b"
    r"|\b(as\s+an?\s+)?(ai|assistant|language\s+model|llm|chatbot|chatgpt)\b[^.!?\n]{0,20}\b(must|should|shall|will|has\s+to|needs\s+to)\b"
    r"|\b(assistant|chatbot|model)\s*[,:]",
    re.IGNORECASE)


def instruction_shaped(text: str) -> bool:
    """Does ``text`` address whoever reads or answers it (a prompt-injection attempt, a request to relay a claim to
    the user), rather than state something about its subject? Such text is never quoted as an answer line."""
    t = " ".join(str(text).split())
    return bool(_INSTRUCTION_ZH.search(t) or _INSTRUCTION_EN.search(t))


def _negated(text: str) -> bool:
    if has_cjk(text):
        return any(n in text for n in _NEGATIONS_ZH)
    return bool(_NEGATIONS_EN & set(text.lower().replace("n't", " not").split()))
