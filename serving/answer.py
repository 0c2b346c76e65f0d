"""The generator's prompts and replies: task templates over typed Evidence, citations parsed back.

``build_messages(query, evidence, cfg)`` renders ``bencao/prompts/generate_<task>.<lang>.jinja``
(qa: a free answer with citations; mcq / sd / tf: a parsable answer line; rec: Yaoshi-RAG's JSON
recommendation) with the evidence laid out in numbered parts: the reasoning paths with their
scores, the triples with their confidence, the attributes of the entities the question and the
paths reach (nature, flavour, effects, contraindications ...) and the source snippets numbered
``[1] 神农本草经 › 卷上 › 大枣``. The numbers are the evidence's own references
(``Evidence.references()``), so ``[n]`` in a reply maps to one snippet id and heading path;
teacher-written reasoning is labelled as generated.

``parse_reply(text, references)`` returns the answer and the citations it used; numbers that name
no reference are reported as ``invalid_citations`` and never shown as sources. A qa reply that
opens with ``NOT_IN_KB`` (iDISK2.0-RAG's "Failed to retrieve ..." rule, asked for whenever the
evidence does not answer the question, not only when it is empty) is an abstention: the answer
says plainly that the knowledge base has nothing (:func:`not_in_kb`), followed — only when
``own_answer`` is configured — by the model's own answer, marked as such.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Iterable

from bencao.config import field
from bencao.prompting import quoted_line
from bencao.retrieval.evidence import Evidence, path_heading
from bencao.serving.context import ContextConfig, Limits, RenderedContext, render_context
from bencao.text import lang_of

#: What a generator writes first when the evidence does not answer the question.
NOT_IN_KB_MARKER = "NOT_IN_KB"


@dataclass
class AnswerConfig:
    """How the generator prompt is assembled and how replies are presented."""

    max_paths: int = field(10, help="Reasoning paths listed in the prompt (best first).")
    max_triples: int = field(30, help="Knowledge-base facts (triples) listed in the prompt (best first).")
    max_entities: int = field(10, help="Entities whose attributes are listed in the prompt.")
    max_snippets: int = field(12, help="Numbered source snippets in the prompt.")
    max_snippet_chars: int = field(600, help="Snippet text is cut to this many characters in the prompt.")
    own_answer: bool = field(False, help="When the knowledge base has nothing, also ask the generator for its own answer, shown marked "
                                         "as not from the knowledge base.")
    closed_book: bool = field(False, help="No retrieval: the generator answers from its own knowledge (a closed-book baseline).")
    append_sources: bool = field(True, help="Append the cited sources (n → book › volume › section) to the answer text of the HTTP reply.")
    language: str = field("auto", help="Prompt and message language: auto (from the question) | zh | en.")
    prompts_dir: str | None = field(None, help="Directory of prompt templates overriding bencao/prompts/generate_*.jinja file by file.")
    context: ContextConfig = field(default_factory=ContextConfig, help="The evidence text the generator reads: one numbered list of "
                                   "facts, paths, entity attributes and passages under a character budget (the text /v1/retrieve "
                                   "returns as context).")
    yes_no_rule: bool = field(True, help="A yes/no question (\"Does ginger help with nausea?\", 生姜能治疗消渴吗) reaches the generator "
                                         "only when the graph holds a fact linking the asked entity to the asked condition (iDISK2.0-RAG's "
                                         "rule, the graph answerer's check); otherwise the answer is 'not in the knowledge base'.")
    example: bool = field(False, help="qa: show the generator one worked example (a short numbered list, a question, an answer that "
                                      "cites it) as a prior turn: small models then answer in cited sentences instead of copying "
                                      "the list.")
    mcq_mode: str = field("auto", help="Multiple-choice and syndrome questions with a generator: letters (each option letter's "
                                       "next-token log-probability after the prompt, as lm-eval-harness scores them; the scores go "
                                       "into the answer) | generate (a written reply whose answer line is parsed) | auto (letters "
                                       "when the generator scores exactly: local-hf, llama-cpp; an OpenAI-compatible endpoint scores "
                                       "from its top_logprobs with letters set explicitly).")

    def __post_init__(self) -> None:
        from bencao.errors import ConfigError

        if self.mcq_mode not in MCQ_MODES:
            raise ConfigError(f"answer.mcq_mode: {self.mcq_mode!r} is not one of {', '.join(MCQ_MODES)}")
        self.context.validate()


MCQ_MODES = ("auto", "letters", "generate")

#: What the reply starts with when option letters are scored (the letter is the next token).
ANSWER_PREFIX = {"zh": "答案：", "en": "Answer: "}


# --------------------------------------------------------------------------- wording

_TEXT = {
    "zh": {
        "not_in_kb": "知识库中没有找到与该问题相关的内容。",
        "own_label": "【模型自身的回答，并非来自知识库，仅供参考】",
        "sources": "来源",
        "generated": "（模型生成的推理，非原文）",
        "unsupported": "（此处原文未见该说法）",
    },
    "en": {
        "not_in_kb": "The knowledge base has nothing on this question.",
        "own_label": "[The model's own answer, not from the knowledge base; for reference only]",
        "sources": "Sources",
        "generated": "(model-generated reasoning, not a source text)",
        "unsupported": "(this passage does not state the claim cited to it)",
    },
}


def language(question: str, cfg: AnswerConfig | None = None) -> str:
    setting = (cfg.language if cfg else "auto") or "auto"
    if setting in _TEXT:
        return setting
    return "zh" if lang_of(question) == "zh" else "en"


def words(lang: str) -> dict[str, str]:
    return _TEXT.get(lang, _TEXT["en"])


def not_in_kb(question: str, cfg: AnswerConfig | None = None) -> str:
    """The plain "nothing in the knowledge base" message, in the question's language."""
    return words(language(question, cfg))["not_in_kb"]


def own_answer_label(question: str, cfg: AnswerConfig | None = None) -> str:
    return words(language(question, cfg))["own_label"]


# --------------------------------------------------------------------------- evidence in the prompt


def references(evidence: Evidence | None) -> list[dict[str, Any]]:
    """The evidence's numbered references with their text: ``[{n, snippet_id, path, heading, text, generated}]``."""
    if evidence is None:
        return []
    by_id = {s.id: s for s in evidence.snippets}
    return [{**r, "text": by_id[r["snippet_id"]].text} for r in evidence.references()]


def prompt_language(query: Any, cfg: AnswerConfig) -> str:
    return cfg.language if cfg.language in _TEXT else query.language


def generator_context(query: Any, evidence: Evidence | None, cfg: AnswerConfig | None = None,
                      budget_chars: int | None = None) -> RenderedContext:
    """The numbered evidence text the generator reads for ``query`` (:func:`bencao.serving.context.render_context`)."""
    cfg = cfg or AnswerConfig()
    return render_context(evidence, cfg.context, prompt_language(query, cfg), budget_chars, context_limits(cfg),
                          options=query.option_texts() if query.options else None)


def context_limits(cfg: AnswerConfig) -> Limits:
    return Limits(facts=cfg.max_triples, paths=cfg.max_paths, entities=cfg.max_entities, passages=cfg.max_snippets,
                  passage_chars=cfg.max_snippet_chars)


def build_messages(query: Any, evidence: Evidence | None, cfg: AnswerConfig | None = None, *,
                   context: RenderedContext | None = None, scoring: bool = False) -> list[dict[str, str]]:
    """System + user messages for the generator: the task's template with the evidence as one numbered list.

    ``query`` is a :class:`bencao.serving.tasks.Query`; ``evidence`` None (closed book) leaves the evidence
    out; ``context`` is the rendered evidence when the caller has it already (its numbers are the
    citations). ``scoring``: the mcq / sd templates end by asking for the letter alone, which is then
    scored as the next token after :data:`ANSWER_PREFIX`.
    """
    from bencao.prompting import render

    cfg = cfg or AnswerConfig()
    lang = prompt_language(query, cfg)
    closed_book = evidence is None and context is None
    if context is None:
        context = render_context(evidence, cfg.context, lang, None, context_limits(cfg)) if evidence is not None else RenderedContext([], 0)
    lines = [quoted_line(it.line(), "evidence") for it in context.items]  # one line each, normalised, look-alike tags defused
    return render(f"generate_{query.task}", lang, prompts_dir=cfg.prompts_dir, question=query.question,
                  options=query.options or {}, candidates=query.candidates or [], n_answers=query.n_answers,
                  closed_book=closed_book, has_evidence=bool(lines), marker=NOT_IN_KB_MARKER, context=lines,
                  example=cfg.example and not closed_book and bool(lines),
                  scoring=scoring, paths=[], triples=[], entities=[], snippets=[])


def own_answer_messages(question: str, cfg: AnswerConfig | None = None) -> list[dict[str, str]]:
    from bencao.prompting import render

    cfg = cfg or AnswerConfig()
    return render("generate_own", language(question, cfg), prompts_dir=cfg.prompts_dir, question=question)


# --------------------------------------------------------------------------- reply parsing

# [1], [1,2], [1-3], [1][2], 【1】, ［1］ (full-width brackets are common in Chinese replies)
_CITE_RE = re.compile(r"[\[【［]\s*(\d+(?:\s*[,，、;；\-–~～]\s*\d+)*)\s*[\]】］]")
_THINK_RE = re.compile(r"<think>.*?</think>", re.DOTALL)


def _numbers(group: str) -> list[int]:
    out: list[int] = []
    for part in re.split(r"\s*[,，、;；]\s*", group):
        m = re.match(r"(\d+)\s*[\-–~～]\s*(\d+)$", part)
        if m:
            a, b = int(m.group(1)), int(m.group(2))
            if 0 < b - a <= 50:
                out.extend(range(a, b + 1))
                continue
        if part.isdigit():
            out.append(int(part))
    return out


@dataclass
class ParsedReply:
    answer: str
    citations: list[dict[str, Any]]
    invalid_citations: list[int]
    not_in_kb: bool = False


def parse_reply(text: str, refs: list[dict[str, Any]]) -> ParsedReply:
    """Split a generator reply into the answer text and the references it cites (in order of use)."""
    answer = _THINK_RE.sub("", text or "").strip()
    flagged = answer.upper().startswith(NOT_IN_KB_MARKER)
    by_n = {int(r["n"]): r for r in refs}
    used: list[int] = []
    invalid: list[int] = []
    for m in _CITE_RE.finditer(answer):
        for n in _numbers(m.group(1)):
            if n in by_n:
                if n not in used:
                    used.append(n)
            elif n not in invalid:
                invalid.append(n)
    return ParsedReply(answer, [citation(by_n[n]) for n in used], invalid, flagged)


def heading(path: Iterable[str] | None) -> str:
    return path_heading([str(p) for p in (path or []) if str(p)])


def citation(ref: dict[str, Any]) -> dict[str, Any]:
    """The public form of one cited reference (a passage; or, from a rendered context, a fact, path or entity)."""
    out = {"n": int(ref["n"]), "snippet_id": ref.get("snippet_id"), "path": list(ref.get("path") or []),
           "heading": ref.get("heading") or heading(ref.get("path")), "text": ref.get("text", ""), "generated": bool(ref.get("generated"))}
    if ref.get("kind"):
        out["kind"] = ref["kind"]
    if ref.get("triple_id"):
        out["triple_id"] = ref["triple_id"]
    return out


def sources_block(question: str, citations: list[dict[str, Any]], cfg: AnswerConfig | None = None) -> str:
    """``Sources:`` then one line per cited reference (``[n] book › volume › section``, generated reasoning marked)."""
    if not citations:
        return ""
    w = words(language(question, cfg))
    return f"{w['sources']}:\n" + "\n".join(
        f"[{c['n']}] {c['heading'] or c['snippet_id']}{' ' + w['generated'] if c.get('generated') else ''}"
        f"{' ' + w['unsupported'] if c.get('supported') is False else ''}" for c in citations)


# --------------------------------------------------------------------------- does the cited text say it?

#: Characters that carry no claim (particles, copulas): left out of a Chinese claim's bigrams.
_ZH_FUNCTION = set("的是能有为可以及和与其之也了而则或即乃亦者所于在把被对就都还又并")
_EN_STOP = frozenset("the and for with that this are was were has have can its it's from into than then they them their which "
                     "what when where who whom how also may not but all any each used use such these those".split())
_CLAUSE_END_RE = re.compile(r"[。！？；;!?\n]|(?<![0-9])\.(?![0-9])")
#: A claim is supported when at least this share of its content (its bigrams, or words in English, beyond the
#: question's own) occurs in the cited text.
SUPPORT_MIN = 0.5


def _claim_units(text: str, lang: str) -> set[str]:
    from bencao.text import norm_key

    t = norm_key(text)
    if lang == "zh":
        runs = re.findall(r"[\u4e00-\u9fff]+", "".join(" " if ch in _ZH_FUNCTION else ch for ch in t))
        return {r[i:i + 2] for r in runs for i in range(len(r) - 1)} | {r for r in runs if len(r) == 1}
    return {w for w in re.findall(r"[a-z][a-z\-]{2,}", t) if w not in _EN_STOP}


def citation_support(answer: str, citations: list[dict[str, Any]], question: str) -> list[int]:
    """Mark each citation ``supported``: does the text it names state the clause that cites it? The clause is the
    answer's text from the last sentence end (or the last citation) up to the ``[n]``; its content is its character
    bigrams (Chinese; particles left out) or words (English) that the question does not already hold; it is supported
    when at least :data:`SUPPORT_MIN` of that content occurs in the cited text (punctuation ignored), or when it has
    none. A lexical check, as ALCE's citation precision is with an NLI model: a paraphrase across scripts can fail it,
    a claim lifted word for word from a passage cannot. Returns the numbers of unsupported citations."""
    from bencao.text import norm_key

    if not citations:
        return []
    lang = "zh" if lang_of(answer) == "zh" else "en"
    asked = _claim_units(question, lang)
    by_n = {int(c["n"]): c for c in citations}
    # Chinese claims are matched with punctuation ignored (大枣，味甘 states 枣味), English words within the text
    texts = {n: re.sub(r"[^\w]", "", norm_key(c.get("text") or "")) if lang == "zh" else norm_key(c.get("text") or "")
             for n, c in by_n.items()}
    verdicts: dict[int, list[bool]] = {}
    start, units = 0, set()
    for m in _CITE_RE.finditer(answer):
        segments = [seg for seg in _CLAUSE_END_RE.split(answer[start:m.start()]) if re.search(r"\w", seg)]
        if segments:  # else "[1][2]" or "。[2]": the claim is the one the previous citation closed
            units = _claim_units(segments[-1], lang) - asked
        for n in _numbers(m.group(1)):
            if n in by_n:
                hit = sum(1 for u in units if u in texts[n])
                verdicts.setdefault(n, []).append(not units or hit / len(units) >= SUPPORT_MIN)
        start = m.end()
    bad = []
    for n, c in by_n.items():
        if n in verdicts:
            c["supported"] = all(verdicts[n])
            if not c["supported"]:
                bad.append(n)
    return bad
