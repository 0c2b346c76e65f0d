"""Question–answer input for CoT distillation: the benchmark JSONL format, or a user's own file.

Accepted per line (the benchmark format of docs/evaluation.md): ``{"id", "task": "mcq"|"sd", "question",
"options": {"A": ...}, "answer": ["A"], "lang"}``; or free-form ``{"id"?, "question", "answer": "..."}``.
A record that cannot be used (no answer, an answer letter not among the options, no question) is
returned with ``problem`` set, so the run records it as skipped and goes on; malformed JSON stops
with the file and line named (nothing has been asked yet).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from bencao.io import content_hash, iter_jsonl
from bencao.text import lang_of


@dataclass
class QAItem:
    id: str
    question: str
    options: dict[str, str] = field(default_factory=dict)
    answer_keys: list[str] = field(default_factory=list)  # option letters for choice questions
    answer_text: list[str] = field(default_factory=list)  # the gold answer(s) as text
    lang: str = "zh"
    source: str = ""
    problem: str | None = None  # why the record cannot be used (recorded as a skip)

    @property
    def answer_display(self) -> str:
        if self.options:
            return "；".join(f"{k}. {self.options[k]}" for k in self.answer_keys) if self.lang == "zh" else \
                "; ".join(f"{k}. {self.options[k]}" for k in self.answer_keys)
        return "；".join(self.answer_text) if self.lang == "zh" else "; ".join(self.answer_text)


def read_qa(path: str | Path) -> list[QAItem]:
    items: list[QAItem] = []
    seen: set[str] = set()
    for lineno, rec in iter_jsonl(path):
        question = str(rec.get("question") or rec.get("query") or "").strip()
        rid = str(rec.get("id") or content_hash(question, lineno))
        if rid in seen:
            rid = f"{rid}#L{lineno}"
        seen.add(rid)
        options = rec.get("options") or {}
        if not isinstance(options, dict):
            options = {}
        options = {str(k): str(v) for k, v in options.items()}
        item = QAItem(id=rid, question=question, options=options, lang=str(rec.get("lang") or lang_of(question or "x")),
                      source=str(rec.get("source") or ""))
        ans = rec.get("answer")
        if not question:
            item.problem = f"line {lineno}: no question"
        elif ans in (None, "", []):
            item.problem = f"line {lineno}: no answer"
        elif options:
            keys = [str(a).strip() for a in (ans if isinstance(ans, list) else [ans])]
            bad = [k for k in keys if k not in options]
            if bad:
                item.problem = f"line {lineno}: answer {', '.join(bad)} is not among the options {', '.join(options)}"
            else:
                item.answer_keys = keys
                item.answer_text = [options[k] for k in keys]
        else:
            item.answer_text = [str(a) for a in (ans if isinstance(ans, list) else [ans])]
        items.append(item)
    return items
