"""Answers with numbered citations: the generator prompt built from Evidence, and the reply parsed.

``build_messages(question, evidence, cfg)`` lays out the task, the question, the reasoning paths
with their scores, the triples with their confidence, entity attributes (nature, effects,
contraindications ...) and the source snippets numbered ``[1] 神农本草经 › 卷上 › 大枣``. The numbers
are the evidence's own references (``Evidence.references()``), so ``[n]`` in a reply maps to one
snippet id and heading path.

``parse_reply(text, references)`` returns the answer and the citations it used; numbers that name
no reference are reported as ``invalid_citations`` and never shown as sources.

With no evidence the answer says plainly that the knowledge base has nothing
(:func:`not_in_kb`); only when ``own_answer`` is configured does it add the model's own answer,
marked as such (iDISK2.0-RAG's fallback).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Iterable

from bencao.config import field
from bencao.text import lang_of


@dataclass
class AnswerConfig:
    """How the generator prompt is assembled and how replies are presented."""

    max_paths: int = field(10, help="Reasoning paths listed in the prompt (best first).")
    max_triples: int = field(30, help="Triples listed in the prompt (best first).")
    max_entities: int = field(10, help="Entities whose attributes are listed in the prompt.")
    max_snippets: int = field(12, help="Numbered source snippets in the prompt.")
    max_snippet_chars: int = field(600, help="Snippet text is cut to this many characters in the prompt.")
    own_answer: bool = field(False, help="With no evidence, also ask the generator for its own answer, shown marked as not from the knowledge base.")
    append_sources: bool = field(True, help="Append the cited sources (n → book › volume › section) to the answer text of the HTTP reply.")
    language: str = field("auto", help="Prompt and message language: auto (from the question) | zh | en.")


# --------------------------------------------------------------------------- wording

_TEXT = {
    "zh": {
        "system": "你是中医药、药食同源、食品与膳食补充剂领域的知识助手。只依据给出的证据回答；每个论断后用方括号编号标注所依据的证据，如 [1] 或 [2][3]。证据不足以回答时，明确说明知识库中没有相关内容，不要编造。",
        "task": "任务：根据下列知识图谱证据回答问题，引用证据编号。",
        "question": "问题",
        "paths": "推理路径（分数越高越可信）",
        "triples": "三元组（置信度）",
        "entities": "实体属性",
        "snippets": "证据原文",
        "answer": "回答",
        "not_in_kb": "知识库中没有找到与该问题相关的内容。",
        "own_label": "【模型自身的回答，并非来自知识库，仅供参考】",
        "own_system": "你是中医药与营养领域的助手。知识库中没有找到相关内容；请凭你自己的知识简要回答，并说明不确定之处。",
        "sources": "来源",
    },
    "en": {
        "system": "You are a knowledge assistant for Traditional Chinese Medicine, medicine-food homology, foods and dietary supplements. Answer only from the evidence given; after each claim cite the evidence numbers in square brackets, e.g. [1] or [2][3]. If the evidence does not answer the question, say plainly that the knowledge base has nothing on it; never invent.",
        "task": "Task: answer the question from the knowledge-graph evidence below, citing evidence numbers.",
        "question": "Question",
        "paths": "Reasoning paths (higher score = more reliable)",
        "triples": "Triples (confidence)",
        "entities": "Entity attributes",
        "snippets": "Source snippets",
        "answer": "Answer",
        "not_in_kb": "The knowledge base has nothing on this question.",
        "own_label": "[The model's own answer, not from the knowledge base; for reference only]",
        "own_system": "You are an assistant for TCM and nutrition. The knowledge base has nothing on this question; answer briefly from your own knowledge and say what is uncertain.",
        "sources": "Sources",
    },
}


def language(question: str, cfg: AnswerConfig | None = None) -> str:
    setting = (cfg.language if cfg else "auto") or "auto"
    if setting in _TEXT:
        return setting
    return lang_of(question)


def words(lang: str) -> dict[str, str]:
    return _TEXT.get(lang, _TEXT["en"])


def not_in_kb(question: str, cfg: AnswerConfig | None = None) -> str:
    """The plain "nothing in the knowledge base" message, in the question's language."""
    return words(language(question, cfg))["not_in_kb"]


def own_answer_label(question: str, cfg: AnswerConfig | None = None) -> str:
    return words(language(question, cfg))["own_label"]


# --------------------------------------------------------------------------- evidence access


def _get(obj: Any, name: str, default: Any = None) -> Any:
    if isinstance(obj, dict):
        return obj.get(name, default)
    return getattr(obj, name, default)


def references(evidence: Any) -> list[dict[str, Any]]:
    """The evidence's numbered references as ``[{n, snippet_id, path, text, ...}]``, ordered by n.

    ``Evidence.references()`` numbers the snippets; the snippet text is joined in from
    ``evidence.snippets`` so a citation can be shown without another look-up.
    """
    if evidence is None:
        return []
    refs_fn = getattr(evidence, "references", None)
    raw = refs_fn() if callable(refs_fn) else _get(evidence, "references", None)
    snippets = list(_get(evidence, "snippets", None) or [])
    by_id = {str(_get(s, "id")): s for s in snippets if _get(s, "id") is not None}
    out: list[dict[str, Any]] = []
    if raw is None:
        raw = [{"n": i, "snippet_id": _get(s, "id"), "path": _get(s, "path")} for i, s in enumerate(snippets, start=1)]
    items: Iterable[Any] = raw.items() if isinstance(raw, dict) else enumerate(raw, start=1)
    for key, ref in items:
        ref = dict(ref) if isinstance(ref, dict) else {"snippet_id": ref}
        n = int(ref.get("n", key))
        sid = ref.get("snippet_id", ref.get("id"))
        snip = by_id.get(str(sid), {})
        out.append({
            **ref,
            "n": n,
            "snippet_id": sid,
            "path": list(ref.get("path") or _get(snip, "path") or []),
            "text": ref.get("text") or _get(snip, "text") or "",
        })
    out.sort(key=lambda r: r["n"])
    return out


def is_empty(evidence: Any) -> bool:
    if evidence is None:
        return True
    fn = getattr(evidence, "is_empty", None)
    if callable(fn):
        return bool(fn())
    return not any(_get(evidence, k) for k in ("entities", "triples", "paths", "snippets"))


def evidence_dict(evidence: Any) -> dict[str, Any] | None:
    if evidence is None:
        return None
    if isinstance(evidence, dict):
        return evidence
    fn = getattr(evidence, "to_dict", None)
    return fn() if callable(fn) else None


def _score(x: Any) -> float | None:
    for key in ("score", "path_score", "confidence"):
        v = _get(x, key)
        if isinstance(v, (int, float)):
            return float(v)
    return None


def path_text(path: Any) -> str:
    """One reasoning path as ``大枣 —has_flavour→ 甘 —...→ ...``."""
    if isinstance(path, str):
        return path
    text = _get(path, "text")
    if isinstance(text, str) and text:
        return text
    hops = _get(path, "triples") or _get(path, "hops") or _get(path, "edges") or []
    parts: list[str] = []
    for h in hops:
        head, rel, tail = _triple_parts(h)
        if not parts:
            parts.append(head)
        parts.append(f"—{rel}→ {tail}")
    if parts:
        return " ".join(parts)
    nodes = _get(path, "nodes") or _get(path, "entities") or []
    return " → ".join(str(_get(n, "name", n)) for n in nodes)


def _triple_parts(t: Any) -> tuple[str, str, str]:
    if isinstance(t, (list, tuple)) and len(t) == 3:
        return str(t[0]), str(t[1]), str(t[2])
    head = _get(t, "head") or _get(t, "head_name") or _get(t, "head_id") or "?"
    tail = _get(t, "tail") or _get(t, "tail_name") or _get(t, "tail_id") or "?"
    return str(head), str(_get(t, "relation", "?")), str(tail)


def triple_text(t: Any) -> str:
    head, rel, tail = _triple_parts(t)
    return f"({head}, {rel}, {tail})"


def heading(path: Iterable[str] | None) -> str:
    return " › ".join(str(p) for p in (path or []) if str(p))


def _fmt_attr(value: Any) -> str:
    if isinstance(value, list):
        return "、".join(_fmt_attr(v) for v in value)
    if isinstance(value, dict):
        return "; ".join(f"{k}: {_fmt_attr(v)}" for k, v in value.items())
    return str(value)


# --------------------------------------------------------------------------- prompt


def build_messages(question: str, evidence: Any, cfg: AnswerConfig | None = None) -> list[dict[str, str]]:
    """System + user messages for the generator: task, question, paths, triples, attributes, snippets."""
    cfg = cfg or AnswerConfig()
    w = words(language(question, cfg))
    lines = [w["task"], "", f"{w['question']}：{question}" if language(question, cfg) == "zh" else f"{w['question']}: {question}"]

    paths = list(_get(evidence, "paths") or [])[: cfg.max_paths]
    if paths:
        lines += ["", f"{w['paths']}:"]
        for i, p in enumerate(paths, start=1):
            s = _score(p)
            lines.append(f"P{i}. {path_text(p)}" + (f" (score {s:.3f})" if s is not None else ""))

    triples = list(_get(evidence, "triples") or [])[: cfg.max_triples]
    if triples:
        lines += ["", f"{w['triples']}:"]
        for t in triples:
            c = _get(t, "confidence")
            lines.append(f"- {triple_text(t)}" + (f" {float(c):.2f}" if isinstance(c, (int, float)) else ""))

    ents = [e for e in list(_get(evidence, "entities") or [])[: cfg.max_entities] if _get(e, "attributes") or _get(e, "description")]
    if ents:
        lines += ["", f"{w['entities']}:"]
        for e in ents:
            name = _get(e, "name") or _get(e, "id")
            typ = _get(e, "type")
            attrs = _get(e, "attributes") or {}
            bits = [f"{k}: {_fmt_attr(v)}" for k, v in attrs.items() if v not in (None, "", [], {})]
            desc = _get(e, "description")
            if desc:
                bits.append(str(desc)[:300])
            lines.append(f"- {name}" + (f" ({typ})" if typ else "") + ": " + "; ".join(bits))

    refs = references(evidence)[: cfg.max_snippets]
    if refs:
        lines += ["", f"{w['snippets']}:"]
        for r in refs:
            text = " ".join(str(r["text"]).split())
            if len(text) > cfg.max_snippet_chars:
                text = text[: cfg.max_snippet_chars] + "…"
            lines.append(f"[{r['n']}] {heading(r['path'])}: {text}")

    lines += ["", f"{w['answer']}:"]
    return [{"role": "system", "content": w["system"]}, {"role": "user", "content": "\n".join(lines)}]


def own_answer_messages(question: str, cfg: AnswerConfig | None = None) -> list[dict[str, str]]:
    w = words(language(question, cfg))
    return [{"role": "system", "content": w["own_system"]}, {"role": "user", "content": question}]


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


def parse_reply(text: str, refs: list[dict[str, Any]]) -> ParsedReply:
    """Split a generator reply into the answer text and the references it cites (in order of use)."""
    answer = _THINK_RE.sub("", text or "").strip()
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
    return ParsedReply(answer, [citation(by_n[n]) for n in used], invalid)


def citation(ref: dict[str, Any]) -> dict[str, Any]:
    """The public form of one cited reference."""
    return {"n": int(ref["n"]), "snippet_id": ref.get("snippet_id"), "path": list(ref.get("path") or []), "heading": heading(ref.get("path")),
            "text": ref.get("text", "")}


def sources_block(question: str, citations: list[dict[str, Any]], cfg: AnswerConfig | None = None) -> str:
    """``Sources:`` then one line per cited reference (``[n] book › volume › section``)."""
    if not citations:
        return ""
    w = words(language(question, cfg))
    return f"{w['sources']}:\n" + "\n".join(f"[{c['n']}] {c['heading'] or c['snippet_id']}" for c in citations)
