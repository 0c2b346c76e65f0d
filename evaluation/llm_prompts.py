"""Prompts for the ``llm`` system and parsers that read the model's answer back.

The prompt gives the question and options (and the numbered evidence when retrieval is on) and asks
for a fixed answer line (``答案：B`` / ``Answer: B``). The parsers are forgiving about the rest of
the reply: reasoning before the answer, ``<think>`` blocks, full-width letters and punctuation.
A reply with no readable answer parses to an abstention, which the metrics count as wrong.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Any

from bencao.text import norm_key

_THINK = re.compile(r"<think>.*?</think>", re.S)
_MARKER = re.compile(r"(?:final answer|answer|答案|正确答案|正确选项|选项|选择|结论)\s*(?:is|are|为|是|应为|应选)?\s*[:：]?\s*", re.I)
_LETTERS = re.compile(r"^\(?[A-Z]\)?(?![A-Za-z])(?:\s*(?:[,，、/&;]|和|及|与|and)?\s*\(?[A-Z]\)?(?![A-Za-z]))*")
_LEAD_LETTER = re.compile(r"^\(?([A-Z])\)?(?:[.．、:：)\n]|$)")
_TF = re.compile(r"不正确|不对|错误|正确|对|错|是|否|\btrue\b|\bfalse\b|\bincorrect\b|\bcorrect\b|\byes\b|\bno\b", re.I)
_TF_FALSE = {"不正确", "不对", "错误", "错", "否", "false", "incorrect", "no"}

SYSTEM_PROMPT = {
    "zh": "你是中医药与食品营养领域的专家。请依据提供的资料（若有）和专业知识作答，并按要求给出最后一行答案。",
    "en": "You are an expert in traditional Chinese medicine, food and nutrition. Answer using the given evidence (if any) and your knowledge, and end with the answer line requested.",
}


def clean_reply(text: str) -> str:
    """Drop ``<think>`` blocks and fold full-width characters (Ａ → A, ： → :)."""
    text = _THINK.sub(" ", text or "")
    if "<think>" in text:  # unterminated reasoning: keep what follows the last closing tag only
        text = text.split("<think>")[0]
    return unicodedata.normalize("NFKC", text).strip()


def _lang(rec: dict[str, Any]) -> str:
    return "en" if str(rec.get("lang", "zh")).startswith("en") else "zh"


def build_messages(rec: dict[str, Any], evidence: str | None = None) -> list[dict[str, str]]:
    """Chat messages for one benchmark record (mcq, sd, tf, rec, qa)."""
    lang = _lang(rec)
    zh = lang == "zh"
    parts: list[str] = []
    if evidence:
        parts.append(("参考资料：\n" if zh else "Evidence:\n") + evidence.strip())
    task = rec["task"]
    if task in ("mcq", "sd"):
        opts = "\n".join(f"{k}. {v}" for k, v in rec["options"].items())
        parts.append(("问题：" if zh else "Question: ") + rec["question"] + "\n" + opts)
        if task == "sd":
            parts.append("请按可能性从高到低排列所有选项，最后一行写“答案：”加字母序列，例如“答案：C, A, B”。" if zh else
                         "Rank all options from most to least likely and end with a line 'Answer:' followed by the letters, e.g. 'Answer: C, A, B'.")
        elif len(rec["answer"]) > 1:
            parts.append("本题可能有多个正确选项。最后一行写“答案：”加所有正确选项的字母，例如“答案：A, C”。" if zh else
                         "More than one option may be correct. End with a line 'Answer:' followed by all correct letters, e.g. 'Answer: A, C'.")
        else:
            parts.append("最后一行写“答案：”加一个选项字母，例如“答案：B”。" if zh else
                         "End with a line 'Answer:' followed by one letter, e.g. 'Answer: B'.")
    elif task == "tf":
        parts.append(("判断下列说法是否正确：" if zh else "Is this statement true or false? ") + rec["statement"])
        parts.append("最后一行写“答案：正确”或“答案：错误”。" if zh else "End with a line 'Answer: true' or 'Answer: false'.")
    elif task == "rec" and "candidates" not in rec:  # open-ended: a free answer; the runner links the foods in it
        parts.append((f"针对“{rec['query']}”，推荐适宜的食物或食疗方，并简要说明理由。" if zh else
                      f"For '{rec['query']}', recommend suitable foods or dishes and briefly say why."))
    elif task == "rec":
        cands = "、".join(rec["candidates"]) if zh else ", ".join(rec["candidates"])
        parts.append((f"针对“{rec['query']}”，从下列候选中选出适宜的项目：{cands}" if zh else
                      f"For '{rec['query']}', choose the suitable items among: {cands}"))
        parts.append("最后一行写“答案：”加适宜项目的名称，按适宜程度从高到低，用顿号分隔；都不适宜则写“答案：无”。" if zh else
                     "End with a line 'Answer:' followed by the suitable items, best first, separated by commas; 'Answer: none' if none is suitable.")
    elif task == "qa":
        parts.append(("问题：" if zh else "Question: ") + rec["question"])
    else:
        raise ValueError(f"the llm prompt does not cover task {task!r}")
    return [{"role": "system", "content": SYSTEM_PROMPT[lang]}, {"role": "user", "content": "\n\n".join(parts)}]


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


def parse_reply(rec: dict[str, Any], reply: str) -> dict[str, Any]:
    """The prediction dict the metrics read, for one record and one model reply."""
    task = rec["task"]
    if task in ("mcq", "sd"):
        letters = parse_letters(reply, rec["options"])
        if task == "sd":
            return {"answer": letters[:1], "ranking": letters, "abstained": not letters}
        return {"answer": letters, "ranking": letters, "abstained": not letters}
    if task == "tf":
        ans = parse_tf(reply)
        return {"answer": ans, "abstained": ans is None}
    if task == "rec" and "candidates" not in rec:
        text = clean_reply(reply)
        return {"text": text, "abstained": not text}
    if task == "rec":
        items = parse_items(reply, rec["candidates"])
        return {"ranking": items, "selected": items, "abstained": False}
    if task == "qa":
        text = clean_reply(reply)
        return {"text": text, "abstained": not text}
    raise ValueError(f"no parser for task {task!r}")
