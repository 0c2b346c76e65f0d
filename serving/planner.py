"""Yaoshi-RAG's relation-path planner: the LLM proposes relation sequences from the graph's relation list.

Shown the graph's relations (name, head and tail types, description) and two worked examples, the
LLM answers which relation sequences lead from the question's entities to its answer
(``bencao/prompts/plan_paths.*.jinja``; ``~r`` walks ``r`` backwards). Every step is checked
against the graph's relations; sequences with an unknown relation are dropped (and counted).
The retriever follows the planned sequences beside the mined frequent ones (``mode: beside``) or
instead of them (``instead``); planned paths may pass through hub entities, which mined ones may not.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

SCHEMA: dict[str, Any] = {
    "type": "object", "required": ["paths"],
    "properties": {"paths": {"type": "array", "items": {"type": "array", "items": {"type": "string"}}},
                   "rationale": {"type": "string"}},
}


def decoding_schema(relations: list[str], max_paths: int, max_hops: int) -> dict[str, Any]:
    """What an engine that decodes under a JSON Schema is held to: only the graph's relations (``~`` for backwards),
    at most ``max_paths`` sequences of 1..``max_hops`` steps. A small model otherwise copies the prompt's
    placeholders (关系1) or repeats one step until its token budget runs out. Replies are still checked against
    :data:`SCHEMA` and step by step, so an endpoint without grammars is handled as before."""
    steps = sorted(relations) + ["~" + r for r in sorted(relations)]
    return {"type": "object", "required": ["paths"],
            "properties": {"paths": {"type": "array", "maxItems": max(1, max_paths),
                                     "items": {"type": "array", "minItems": 1, "maxItems": max(1, max_hops), "items": {"enum": steps}}},
                           "rationale": {"type": "string"}}}


@dataclass
class Plan:
    paths: list[tuple[str, ...]] = field(default_factory=list)
    dropped: list[list[str]] = field(default_factory=list)  # sequences naming a relation the graph lacks
    rationale: str = ""
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"paths": [list(p) for p in self.paths], "dropped": self.dropped, "rationale": self.rationale,
                **({"error": self.error} if self.error else {})}


def check_sequence(seq: list[str], relations: set[str], max_hops: int) -> tuple[str, ...] | None:
    steps = [str(s).strip() for s in seq if str(s).strip()]
    if not steps or len(steps) > max_hops:
        return None
    if any(s.lstrip("~") not in relations for s in steps):
        return None
    return tuple(steps)


class PathPlanner:
    """``plan_many(questions, entities) -> [Plan]``: one structured request per question, batched."""

    def __init__(self, client: Any, relations: list[dict[str, Any]], *, max_paths: int = 4, max_hops: int = 3,
                 prompts_dir: str | None = None):
        self.client = client
        self.relations = relations
        self.names = {r["name"] for r in relations}
        self.max_paths = max_paths
        self.max_hops = max_hops
        self.prompts_dir = prompts_dir

    def plan_many(self, questions: list[str], langs: list[str], entities: list[list[dict[str, Any]]]) -> list[Plan]:
        from bencao.llm.structured import complete_json_many
        from bencao.prompting import render

        out: list[Plan] = [Plan() for _ in questions]
        by_lang: dict[str, list[int]] = {}
        for i, lang in enumerate(langs):
            by_lang.setdefault(lang, []).append(i)
        for lang, idx in by_lang.items():
            msgs = [render("plan_paths", lang, prompts_dir=self.prompts_dir, question=questions[i], entities=entities[i],
                           relations=self.relations, max_paths=self.max_paths, max_hops=self.max_hops) for i in idx]
            decode = decoding_schema(sorted(self.names), self.max_paths, self.max_hops)
            for i, res in zip(idx, complete_json_many(self.client, msgs, SCHEMA, lang=lang, decode_schema=decode)):
                if not res.ok:
                    out[i] = Plan(error=res.error)
                    continue
                plan = Plan(rationale=str(res.value.get("rationale") or ""))
                for seq in res.value["paths"]:
                    ok = check_sequence(seq, self.names, self.max_hops)
                    if ok is None:
                        plan.dropped.append([str(s) for s in seq])
                    elif ok not in plan.paths:
                        plan.paths.append(ok)
                plan.paths = plan.paths[: self.max_paths]
                out[i] = plan
        return out
