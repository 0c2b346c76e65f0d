"""The CoT model in the loop: the question decomposed into triples that drive micro retrieval.

TCM-DiffRAG §2.2.3: a fine-tuned chain-of-thought model reasons about the question and names the
knowledge it needs as (head, relation, tail) triples; retrieval then looks for the graph triples
nearest to those and their snippets. The model is configured like every other LLM use
(:class:`bencao.llm.LLMConfig`): ``backend: local-hf`` with a local path (transformers, batched) or
``backend: openai`` with an endpoint. Without a CoT model retrieval works from the question alone.

``parse_triples(text)`` accepts what such models write: a JSON list (``[["大枣","性味","甘"]]`` or
``[{"head":..., "relation":..., "tail":...}]``, possibly inside a code fence or after the
reasoning), or one triple per line as ``(h, r, t)`` / ``（h，r，t）`` (the SFT training form),
``h | r | t`` or ``h -> r -> t``.

``form: json`` asks for ``{"triples": [{"head", "relation", "tail"}]}`` instead, validated against a JSON Schema
and decoded under it where the engine can (``llm.json_schema: true``: llama.cpp's server, vLLM): a small general
model that never writes the line form (Qwen2.5-Coder-0.5B wrote 0 parsable replies of 10) then writes triples.
``form: text`` (the default) asks exactly as the SFT data's ``triples`` form does, for a model fine-tuned on it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from bencao.config import field
from bencao.llm import LLMConfig
from bencao.text import lang_of


@dataclass
class CotConfig:
    """The CoT model that turns a question into query triples (off unless ``llm`` is set)."""

    llm: LLMConfig | None = field(None, help="The CoT model (bencao.llm LLMConfig: backend local-hf + a local path, or openai + base_url); null = no CoT model.")
    max_triples: int = field(8, help="Query triples kept from one reply.")
    form: str = field("text", help="text: the SFT data's triples prompt, one (h, r, t) per line (a model fine-tuned on it); "
                                   "json: a JSON object of triples, schema-validated and decoded under the schema where the engine can "
                                   "(a general small model).")

    def __post_init__(self) -> None:
        if self.form not in ("text", "json"):
            raise ValueError(f"cot.form: {self.form!r} is not one of text, json")


#: The ``form: json`` reply: query triples, the asked part of a triple as "?".
TRIPLES_SCHEMA: dict[str, Any] = {
    "type": "object", "required": ["triples"], "additionalProperties": False,
    "properties": {"triples": {"type": "array", "minItems": 1, "items": {
        "type": "object", "required": ["head", "relation", "tail"], "additionalProperties": False,
        "properties": {"head": {"type": "string", "minLength": 1, "maxLength": 40},
                       "relation": {"type": "string", "minLength": 1, "maxLength": 24},
                       "tail": {"type": "string", "minLength": 1, "maxLength": 40}}}}},
}
ASK_JSON = {
    "zh": ('请列出解答本题所需的知识三元组（头实体，关系，尾实体），问到的部分写“?”。只输出 JSON：'
           '{"triples": [{"head": "大枣", "relation": "性味", "tail": "?"}]}'),
    "en": ('List the knowledge triples (head, relation, tail) needed to answer, the asked part as "?". Reply with JSON only: '
           '{"triples": [{"head": "jujube", "relation": "flavour", "tail": "?"}]}'),
}


def cot_messages(question: str, form: str = "text") -> list[dict[str, str]]:
    """The prompt of the CoT model's ``triples`` training form (``bencao.data_gen.sft_format``), so a
    model fine-tuned on that data is asked exactly as it was trained; ``form="json"``: the JSON form."""
    from bencao.data_gen.sft_format import ASK, SYSTEM

    lang = "zh" if lang_of(question) == "zh" else "en"
    ask = ASK_JSON[lang] if form == "json" else ASK["triples"][lang]
    return [{"role": "system", "content": SYSTEM[lang]}, {"role": "user", "content": question + "\n\n" + ask}]


_FENCE_RE = re.compile(r"```(?:json)?\s*(.*?)```", re.DOTALL)
_LINE_RES = (
    re.compile(r"^[\s\-*\d.)]*[(（]\s*([^,，()（）]+?)\s*[,，]\s*([^,，()（）]+?)\s*[,，]\s*([^()（）]+?)\s*[)）]\s*$"),
    re.compile(r"^[\s\-*\d.)]*([^|]+?)\s*\|\s*([^|]+?)\s*\|\s*([^|]+?)\s*$"),
    re.compile(r"^[\s\-*\d.)]*(.+?)\s*(?:->|→)\s*(.+?)\s*(?:->|→)\s*(.+?)\s*$"),
)


def _as_triple(x: Any) -> tuple[str, str, str] | None:
    if isinstance(x, (list, tuple)) and len(x) == 3:
        parts = [str(p).strip() for p in x]
    elif isinstance(x, dict):
        parts = [str(x.get(k, "")).strip() for k in ("head", "relation", "tail")]
    else:
        return None
    if not parts[1] or (parts[0] in ("", "?") and parts[2] in ("", "?")):
        return None
    return parts[0], parts[1], parts[2]


def _json_candidates(text: str) -> list[Any]:
    out = []
    blocks = _FENCE_RE.findall(text) + [text]
    for block in blocks:
        # the last bracketed JSON array in the block
        for start in [m.start() for m in re.finditer(r"\[", block)]:
            depth = 0
            for i in range(start, len(block)):
                ch = block[i]
                if ch == "[":
                    depth += 1
                elif ch == "]":
                    depth -= 1
                    if depth == 0:
                        try:
                            out.append(json.loads(block[start : i + 1]))
                        except json.JSONDecodeError:
                            pass
                        break
    return out


def parse_triples(text: str, limit: int = 8) -> list[dict[str, str]]:
    """Query triples from a CoT reply, in order, without duplicates: ``[{head, relation, tail}]``."""
    text = re.sub(r"<think>|</think>", "\n", text or "")
    found: list[tuple[str, str, str]] = []
    for cand in _json_candidates(text):
        if isinstance(cand, list):
            items = cand if cand and isinstance(cand[0], (list, dict)) else [cand]
            for x in items:
                t = _as_triple(x)
                if t and t not in found:
                    found.append(t)
    if not found:
        for line in text.splitlines():
            for rx in _LINE_RES:
                m = rx.match(line.strip())
                if m:
                    t = _as_triple(list(m.groups()))
                    if t and t not in found:
                        found.append(t)
                    break
    return [{"head": h, "relation": r, "tail": t} for h, r, t in found[:limit]]


class CotDecomposer:
    """Asks the CoT model for the triples a question needs (one request per question, batched)."""

    def __init__(self, client: Any, cfg: CotConfig):
        self.client = client
        self.cfg = cfg

    @classmethod
    def from_config(cls, cfg: CotConfig, default_cache: str | None = None) -> "CotDecomposer | None":
        if cfg.llm is None:
            return None
        from bencao.llm import make_client

        return cls(make_client(cfg.llm, default_cache=default_cache), cfg)

    def decompose(self, question: str) -> dict[str, Any]:
        return self.decompose_many([question])[0]

    def decompose_many(self, questions: list[str]) -> list[dict[str, Any]]:
        """``[{triples, reasoning, error}]`` per question; a failed request leaves ``triples`` empty."""
        from bencao.llm import LLMError

        if self.cfg.form == "json":
            return self._decompose_json(questions)
        replies = self.client.complete_many([cot_messages(q) for q in questions])
        out = []
        for r in replies:
            if isinstance(r, LLMError):
                out.append({"triples": [], "reasoning": "", "error": str(r)})
            else:
                out.append({"triples": parse_triples(r.text, self.cfg.max_triples), "reasoning": r.text, "error": None})
        return out

    def _decompose_json(self, questions: list[str]) -> list[dict[str, Any]]:
        from bencao.llm.structured import complete_json_many

        decode = {**TRIPLES_SCHEMA, "properties": {"triples": {**TRIPLES_SCHEMA["properties"]["triples"], "maxItems": self.cfg.max_triples}}}
        lang = "zh" if questions and lang_of(questions[0]) == "zh" else "en"  # the repair prompt's language
        out = []
        for res in complete_json_many(self.client, [cot_messages(q, "json") for q in questions], TRIPLES_SCHEMA, lang=lang,
                                      decode_schema=decode):
            text = res.completions[-1].text if res.completions else ""
            if not res.ok:
                out.append({"triples": [], "reasoning": text, "error": res.error})
                continue
            triples = [t for t in (_as_triple(x) for x in res.value["triples"]) if t]
            seen = list(dict.fromkeys(triples))[: self.cfg.max_triples]
            out.append({"triples": [{"head": h, "relation": r, "tail": t} for h, r, t in seen], "reasoning": text, "error": None})
        return out
