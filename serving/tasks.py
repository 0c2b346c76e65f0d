"""What is asked, and how an answer to it is read back: the pipeline's task kinds.

A :class:`Query` is one question with its task — ``qa`` (free question, an answer with citations),
``mcq`` (options, one or more right), ``sd`` (syndrome differentiation: rank ~10 options), ``tf``
(a claim: true or false), ``rec`` (recommendation: a JSON list of items, ranked, with reasons;
from ``candidates`` when the record has them, open-ended otherwise). Every front end builds
Queries — a chat message is a ``qa`` Query unless the request names a task — so a benchmark record
and the same question sent to ``serve`` are the same Query.

``read_prediction(query, text)`` turns a generator's reply into the prediction the metrics read
(answer letters, ranking, true/false, selected items), forgiving about reasoning before the
answer, ``<think>`` blocks, full-width letters and punctuation. A reply with no readable answer
is an abstention, which the metrics count as wrong.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from typing import Any

from bencao.errors import BencaoError
from bencao.text import lang_of, norm_key

TASKS = ("qa", "mcq", "sd", "tf", "rec")


@dataclass
class Query:
    """One question to answer."""

    question: str
    task: str = "qa"
    options: dict[str, str] | None = None  # mcq / sd: {"A": "...", ...}
    candidates: list[str] | None = None  # rec: items to rank (None = open-ended recommendation)
    n_answers: int = 1  # mcq: how many options are right (a hint in the prompt when > 1)
    lang: str | None = None  # zh | en; default from the question's script
    id: str | None = None
    query_triples: list[Any] | None = None  # caller-given query triples (skip the CoT model)

    def __post_init__(self) -> None:
        if not isinstance(self.question, str) or not self.question.strip():
            raise BencaoError("question is empty")
        if self.task not in TASKS:
            raise BencaoError(f"task {self.task!r} is not one of {', '.join(TASKS)}")
        if self.task in ("mcq", "sd") and not self.options:
            raise BencaoError(f"a {self.task} question needs options")
        self.question = self.question.strip()

    @property
    def language(self) -> str:
        if self.lang:
            return "en" if str(self.lang).startswith("en") else "zh"
        return "zh" if lang_of(self.question) == "zh" else "en"

    def option_texts(self) -> list[str]:
        """Texts that retrieval links as well (roles ``option:<i>``): options, or candidates."""
        if self.options:
            return [str(v) for v in self.options.values()]
        return [str(c) for c in self.candidates or []]

    @classmethod
    def from_record(cls, rec: dict[str, Any]) -> "Query":
        """A benchmark / batch record (``evaluation/bench_format.py``): the text asked is its question,
        statement or query; options and candidates come along."""
        task = rec.get("task") or "qa"
        text = rec.get("question") or rec.get("statement") or rec.get("query") or ""
        return cls(question=str(text), task=task, options=rec.get("options") if task in ("mcq", "sd") else None,
                   candidates=list(rec["candidates"]) if task == "rec" and rec.get("candidates") else None,
                   n_answers=len(rec.get("answer") or []) if task == "mcq" and isinstance(rec.get("answer"), list) else 1,
                   lang=rec.get("lang"), id=str(rec["id"]) if rec.get("id") is not None else None)


# --------------------------------------------------------------------------- reply reading

_THINK = re.compile(r"<think>.*?</think>", re.S)
_MARKER = re.compile(r"(?:final answer|answer|答案|正确答案|正确选项|选项|选择|结论)\s*(?:is|are|为|是|应为|应选)?\s*[:：]?\s*", re.I)
_LETTERS = re.compile(r"^\(?[A-Z]\)?(?![A-Za-z])(?:\s*(?:[,，、/&;]|和|及|与|and)?\s*\(?[A-Z]\)?(?![A-Za-z]))*")
_LEAD_LETTER = re.compile(r"^\(?([A-Z])\)?(?:[.．、:：)\n]|\s*[\[【]\s*\d|\s*$)")  # "B", "B.", "(B)", "B [1]"
_TF = re.compile(r"不正确|不对|错误|正确|对|错|是|否|\btrue\b|\bfalse\b|\bincorrect\b|\bcorrect\b|\byes\b|\bno\b", re.I)
_TF_FALSE = {"不正确", "不对", "错误", "错", "否", "false", "incorrect", "no"}


def clean_reply(text: str) -> str:
    """Drop ``<think>`` blocks and fold full-width characters (Ａ → A, ： → :)."""
    text = _THINK.sub(" ", text or "")
    if "<think>" in text:  # unterminated reasoning: keep what precedes it only
        text = text.split("<think>")[0]
    return unicodedata.normalize("NFKC", text).strip()


def _answer_spans(text: str) -> list[str]:
    """Texts after each answer marker, last marker first."""
    return [text[m.end():] for m in reversed(list(_MARKER.finditer(text)))]


def _answer_span(text: str) -> str | None:
    spans = _answer_spans(text)
    return spans[0] if spans else None


def parse_letters(reply: str, options: dict[str, str]) -> list[str]:
    """Option letters in the order the reply gives them; [] when none can be read."""
    text = clean_reply(reply)
    spans = _answer_spans(text)
    for chunk in spans:
        m = _LETTERS.match(chunk.lstrip(" *#\n"))
        if m:
            seen: list[str] = []
            for ch in re.findall(r"[A-Z]", m.group(0)):
                if ch in options and ch not in seen:
                    seen.append(ch)
            if seen:
                return seen
    # No answer line: accept a reply that opens with a lone letter ("B", "B. ...", "(B)").
    m = _LEAD_LETTER.match(text.lstrip(" *#\n"))
    if m and m.group(1) in options:
        return [m.group(1)]
    span = spans[0] if spans else None
    # The reply may name an option's text instead of its letter: accept exactly one match.
    key = norm_key(span if span is not None else text)
    hits = [k for k, v in options.items() if norm_key(v) and norm_key(v) in key]
    return hits if len(hits) == 1 else []


def parse_tf(reply: str) -> bool | None:
    """True / False from the answer line (正确/错误, 对/错, true/false, yes/no); None when unclear."""
    text = clean_reply(reply)
    span = _answer_span(text)
    chunk = span if span is not None else text
    m = _TF.match(chunk.strip(" *#\n.")) if span is None else _TF.search(chunk)
    if not m:
        return None
    return m.group(0).lower() not in _TF_FALSE


def parse_items(reply: str, candidates: list[str]) -> list[str]:
    """Candidates named in the answer, in order of first mention (longest names matched first)."""
    text = clean_reply(reply)
    span = _answer_span(text)
    chunk = norm_key(span if span is not None else text)
    found: list[tuple[int, str]] = []
    taken = [False] * len(chunk)
    for c in sorted(candidates, key=lambda c: -len(norm_key(c))):
        key = norm_key(c)
        if not key:
            continue
        start = chunk.find(key)
        while start >= 0 and any(taken[start:start + len(key)]):
            start = chunk.find(key, start + 1)
        if start >= 0:
            for i in range(start, start + len(key)):
                taken[i] = True
            found.append((start, c))
    return [c for _, c in sorted(found)]


#: The JSON contract of a recommendation (Yaoshi-RAG's answer format).
REC_SCHEMA: dict[str, Any] = {
    "type": "object", "required": ["recommendations"],
    "properties": {
        "recommendations": {"type": "array", "items": {"type": "object", "required": ["item"], "properties": {
            "item": {"type": "string"}, "reason": {"type": "string"}, "citations": {"type": "array", "items": {"type": "integer"}}}}},
        "avoid": {"type": "array", "items": {"type": "object", "required": ["item"], "properties": {
            "item": {"type": "string"}, "reason": {"type": "string"}}}},
    },
}


def parse_recommendation(reply: str) -> dict[str, Any] | None:
    """The recommendation JSON of a reply, validated against :data:`REC_SCHEMA`; None when unreadable."""
    from bencao.llm.structured import StructuredError, parse_and_validate

    try:
        return parse_and_validate(clean_reply(reply), REC_SCHEMA)
    except StructuredError:
        return None


def read_prediction(query: Query, reply: str) -> dict[str, Any]:
    """The prediction dict the metrics read, for one Query and one generator reply."""
    task = query.task
    if task in ("mcq", "sd"):
        letters = parse_letters(reply, query.options or {})
        if task == "sd":
            return {"answer": letters[:1], "ranking": letters, "abstained": not letters}
        return {"answer": letters, "ranking": letters, "abstained": not letters}
    if task == "tf":
        ans = parse_tf(reply)
        return {"answer": ans, "abstained": ans is None}
    if task == "rec":
        rec = parse_recommendation(reply)
        named = [str(r["item"]) for r in rec["recommendations"]] if rec else []
        if query.candidates:
            items = parse_items("、".join(named), query.candidates) if named else parse_items(reply, query.candidates)
            return {"ranking": items, "selected": items, "abstained": False, "recommendation": rec}
        return {"items": named, "text": clean_reply(reply), "abstained": not named, "recommendation": rec}
    text = clean_reply(reply)
    return {"text": text, "abstained": not text}
