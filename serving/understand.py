"""Question understanding: the LLM names the question's entities with their types and the patient's information.

Yaoshi-RAG extracts keywords before linking (its Textbox 1), MLKG-RAG splits a consultation into
patient information (age group, sex, history) and disease information, iDISK2.0-RAG extracts
typed entities. One structured call does all three (``bencao/prompts/understand.*.jinja``, JSON
validated with one repair turn). What the pipeline does with the reply:

- mentions are linked by the retriever beside (``mode: merge``) or instead of (``replace``) the
  dictionary's. A mention the question does not spell out verbatim — the LLM's term for what it
  says, 脾虚证 for 脾胃虚弱 — is linked like any other (``verbatim: false`` in the understanding and
  in the entity's link detail): the linker's candidates, selector, scorer and ``tau`` decide, and
  an invented name that matches nothing abstains there;
- keywords each go through their top ``retrieval.question.keyword_candidates`` (10) candidate
  entities to the linker's selector (Yaoshi-RAG's Textbox 2; ``bencao.retrieval.search.keywords``);
- the patient block filters the case layer's therapy retrieval (MLKG-RAG's patient index).

Without an LLM the dictionary mentions are all there is.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from bencao.retrieval.search.retriever import Mention
from bencao.text import norm_key

SCHEMA: dict[str, Any] = {
    "type": "object", "required": ["entities"],
    "properties": {
        "entities": {"type": "array", "items": {"type": "object", "required": ["mention"], "properties": {
            "mention": {"type": "string"}, "type": {"type": ["string", "null"]}, "role": {"type": ["string", "null"]}}}},
        "keywords": {"type": "array", "items": {"type": "string"}},
        "patient": {"type": ["object", "null"], "properties": {
            "age_group": {"type": ["string", "null"]}, "sex": {"type": ["string", "null"]},
            "history": {"type": "array", "items": {"type": "string"}}}},
    },
}

ROLES = ("question", "patient", "disease")


def decoding_schema(max_entities: int, max_keywords: int = 12, max_chars: int = 24) -> dict[str, Any]:
    """:data:`SCHEMA` as an engine that decodes under a schema is held to: at most ``max_entities`` entities and
    ``max_keywords`` keywords (a small model otherwise lists keywords until its token budget runs out), roles from
    :data:`ROLES`, and names, types and history items of at most ``max_chars`` characters. A vignette of many
    symptoms otherwise ran Qwen2.5-Coder-0.5B past 200 tokens inside the JSON (6 of 14 replies cut)."""
    out = json.loads(json.dumps(SCHEMA))
    ent = out["properties"]["entities"]
    ent["maxItems"] = max(1, max_entities)
    props = ent["items"]["properties"]
    props["mention"]["maxLength"] = max_chars
    # plain types, not ["object", "null"] unions: llama-cpp-python's grammar converter drops the bounds inside a union
    # (a 6-item history came back under maxItems 4)
    props["type"] = {"type": "string", "maxLength": 16}
    props["role"] = {"enum": list(ROLES)}
    out["properties"]["keywords"]["maxItems"] = max(1, max_keywords)
    out["properties"]["keywords"]["items"]["maxLength"] = max_chars
    pat = out["properties"]["patient"]
    pat["type"] = "object"
    for k in ("age_group", "sex"):
        pat["properties"][k] = {"type": "string", "maxLength": 16}
    hist = pat["properties"]["history"]
    hist["maxItems"], hist["items"]["maxLength"] = 4, max_chars
    return out


@dataclass
class Understanding:
    """What the stage says of one question (empty when there is no LLM or its reply was unusable)."""

    mentions: list[Mention] = field(default_factory=list)
    keywords: list[str] = field(default_factory=list)
    patient: dict[str, Any] = field(default_factory=dict)
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"mentions": [{"text": m.text, "type": m.type, "role": m.role, **({} if m.verbatim else {"verbatim": False})}
                             for m in self.mentions], "keywords": self.keywords,
                "patient": self.patient, **({"error": self.error} if self.error else {})}


def _from_reply(obj: dict[str, Any], question: str, limit: int) -> Understanding:
    out = Understanding()
    seen: set[str] = set()
    for e in obj.get("entities") or []:
        text = str(e.get("mention") or "").strip()
        if not text or text in seen:
            continue
        seen.add(text)
        role = e.get("role") if e.get("role") in ROLES else "question"
        # not written so in the question (脾虚证 for 脾胃虚弱): kept and linked like any other, marked
        out.mentions.append(Mention(text=text, type=(str(e["type"]).strip() or None) if e.get("type") else None, role=role,
                                    verbatim=norm_key(text) in norm_key(question)))
    out.mentions = out.mentions[:limit]
    out.keywords = [str(k).strip() for k in obj.get("keywords") or [] if str(k).strip()]
    pat = obj.get("patient") or {}
    out.patient = {k: v for k, v in {"age_group": pat.get("age_group"), "sex": pat.get("sex"),
                                     "history": [str(h) for h in pat.get("history") or [] if str(h).strip()]}.items() if v}
    return out


class QuestionUnderstanding:
    """``understand_many(questions) -> [Understanding]``: one structured request per question, batched."""

    def __init__(self, client: Any, max_entities: int = 8, prompts_dir: str | None = None):
        self.client = client
        self.max_entities = max_entities
        self.prompts_dir = prompts_dir

    def understand_many(self, questions: list[str], langs: list[str]) -> list[Understanding]:
        from bencao.llm.structured import complete_json_many
        from bencao.prompting import render

        batches: dict[str, list[int]] = {}
        for i, lang in enumerate(langs):
            batches.setdefault(lang, []).append(i)
        out: list[Understanding] = [Understanding() for _ in questions]
        for lang, idx in batches.items():
            msgs = [render("understand", lang, prompts_dir=self.prompts_dir, question=questions[i]) for i in idx]
            decode = decoding_schema(self.max_entities)
            for i, res in zip(idx, complete_json_many(self.client, msgs, SCHEMA, lang=lang, decode_schema=decode)):
                out[i] = _from_reply(res.value, questions[i], self.max_entities) if res.ok else Understanding(error=res.error)
        return out
