"""The two SFT task forms in conversational ``messages`` format, shared by both teachers.

- ``reasoning``: question → step-by-step reasoning ending in the answer;
- ``triples``: question → the chain-of-thought triples, one ``(head, relation, tail)`` per line.
"""

from __future__ import annotations

from typing import Any

from bencao.data_gen.qa_input import QAItem

SYSTEM = {
    "zh": "你是中医药与食疗领域的专家。请基于知识逐步推理后作答。",
    "en": "You are an expert in traditional medicine, nutrition and food. Reason step by step from knowledge, then answer.",
}
ASK = {
    "reasoning": {"zh": "请逐步推理，并给出答案。", "en": "Reason step by step, then give the answer."},
    "triples": {"zh": "请列出解答本题所需的知识三元组（头实体，关系，尾实体），每行一个。",
                "en": "List the knowledge triples (head, relation, tail) needed to answer, one per line."},
}
ANSWER = {"zh": "答案：", "en": "Answer: "}


def _lang(item: QAItem) -> str:
    return "zh" if item.lang == "zh" else "en"


def question_text(item: QAItem) -> str:
    lines = [item.question]
    if item.options:
        lines += [f"{k}. {v}" for k, v in item.options.items()]
    return "\n".join(lines)


def triple_line(t: dict[str, Any], lang: str) -> str:
    return f"（{t['head']}，{t['relation']}，{t['tail']}）" if lang == "zh" else f"({t['head']}, {t['relation']}, {t['tail']})"


def reasoning_messages(item: QAItem, reasoning: str) -> list[dict[str, str]]:
    lang = _lang(item)
    answer = ANSWER[lang] + item.answer_display
    return [{"role": "system", "content": SYSTEM[lang]},
            {"role": "user", "content": question_text(item) + "\n\n" + ASK["reasoning"][lang]},
            {"role": "assistant", "content": reasoning.rstrip() + "\n\n" + answer}]


def triples_messages(item: QAItem, triples: list[dict[str, Any]]) -> list[dict[str, str]]:
    lang = _lang(item)
    return [{"role": "system", "content": SYSTEM[lang]},
            {"role": "user", "content": question_text(item) + "\n\n" + ASK["triples"][lang]},
            {"role": "assistant", "content": "\n".join(triple_line(t, lang) for t in triples)}]


def sft_records(item: QAItem, *, reasoning: str, triples: list[dict[str, Any]], teacher: str, entities: list[str],
                triple_ids: list[str], split_key: str) -> list[dict[str, Any]]:
    """Both task forms for one question, with the provenance the dataset card and checks rely on."""
    base = {"question_id": item.id, "teacher": teacher, "lang": _lang(item), "entities": entities, "triple_ids": triple_ids,
            "split_key": split_key}
    return [{"id": f"{item.id}::reasoning", "form": "reasoning", "messages": reasoning_messages(item, reasoning), **base},
            {"id": f"{item.id}::triples", "form": "triples", "messages": triples_messages(item, triples), **base}]
