"""Question–entity pairs for the embedder (TCM MLKG-RAG): explanation → question, positive = the entity.

Sources: entities with a definition/description (FoodOn terms, catalogue items), grouped by their
first ``is_a`` parent; and entities cited by book triples, with the snippet as explanation, grouped
by the snippet's section (same-section in-batch negatives). The explanation is rewritten as a
question by the teacher (``teacher: llm``) or by a template with the entity's names masked
(``teacher: template``). Each pair gets a first negative: another entity of the same group that is
not an alias of the positive (``bencao data negatives`` re-mines them with an embedder).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bencao.config import field, to_dict
from bencao.data_gen.ledger import Ledger
from bencao.data_gen.runner import Done, Skip, load_records, run_items, save_summary
from bencao.data_gen.templates import render
from bencao.io import atomic_write_json, content_hash
from bencao.llm.base import LLMClient, LLMConfig
from bencao.llm.structured import acomplete_json
from bencao.text import lang_of, norm_key

PAIR_COLUMNS = ["anchor", "positive", "negative", "group"]
QUESTION_SCHEMA = {"type": "object", "required": ["question"], "properties": {"question": {"type": "string", "minLength": 4}}}
TEMPLATES = {"zh": "哪一种是：{x}", "en": "Which term is described as follows: {x}"}
MASK = {"zh": "此物", "en": "this"}


@dataclass
class PairsConfig:
    graph: str = field("graphs/sample", help="Graph directory to read terminology entries from.")
    output: str = field("out/pairs", help="Output directory: train.jsonl, eval.jsonl (anchor, positive, negative, group), hf/, README.md.")
    teacher: str = field("template", help="template (no LLM) | llm: who rewrites explanations as questions.")
    llm: LLMConfig = field(default_factory=LLMConfig, help="The teacher LLM (teacher=llm).")
    sources: list[str] = field(default_factory=lambda: ["descriptions", "snippets"], help="descriptions (entity definitions) and/or snippets (book text citing the entity).")
    entity_types: list[str] = field(default_factory=list, help="Only entities of these types (empty: all).")
    min_explanation_chars: int = field(8, help="Shorter explanations are skipped.")
    max_explanation_chars: int = field(300, help="Longer explanations are cut.")
    max_snippets_per_entity: int = field(2, help="Book snippets used per entity.")
    eval_ratio: float = field(0.1, help="Share of entities held out as eval.")
    seed: int = field(0, help="Seed of the entity split.")
    limit: int | None = field(None, help="Only the first N entries.")
    prompts_dir: str | None = field(None, help="Directory of prompt templates overriding the shipped ones.")
    progress: bool = field(True, help="Show a progress bar.")

    __removed_keys__ = {"concurrency": "llm.max_concurrency is the one knob for requests in flight (entries in flight follow it)"}


def _mask(text: str, names: list[str], lang: str) -> str:
    for n in sorted({n for n in names if len(n) >= 2}, key=len, reverse=True):
        text = re.sub(re.escape(n), MASK[lang], text, flags=re.IGNORECASE)
    return text


def collect_entries(graph: Any, cfg: PairsConfig) -> list[dict[str, Any]]:
    """Terminology entries: {id, entity_id, entity, aliases, explanation, group, lang}."""
    entries: list[dict[str, Any]] = []
    types = set(cfg.entity_types)
    if "descriptions" in cfg.sources:
        for e in graph.iter_entities():
            desc = (e.get("description") or "").strip()
            if (types and e["type"] not in types) or len(desc) < cfg.min_explanation_chars:
                continue
            parents = [t["tail_id"] for t in graph.triples_of(e["id"], "out", relation="is_a")]
            entries.append({"id": content_hash(e["id"], "description"), "entity_id": e["id"], "entity": e["name"],
                            "explanation": desc[: cfg.max_explanation_chars], "group": parents[0] if parents else f"type:{e['type']}"})
    if "snippets" in cfg.sources:
        rows = graph.conn.execute(
            "SELECT DISTINCT t.head_id, ts.snippet_id FROM triples t JOIN triple_sources ts ON ts.triple_id = t.id "
            "WHERE ts.snippet_id IS NOT NULL AND t.layer IN ('book', 'imported') ORDER BY t.rowid").fetchall()
        per_entity: dict[str, int] = {}
        for eid, sid in rows:
            if per_entity.get(eid, 0) >= cfg.max_snippets_per_entity:
                continue
            e, s = graph.get_entity(eid), graph.get_snippet(sid)
            if e is None or s is None or (types and e["type"] not in types) or len(s["text"].strip()) < cfg.min_explanation_chars:
                continue
            per_entity[eid] = per_entity.get(eid, 0) + 1
            entries.append({"id": content_hash(eid, sid), "entity_id": eid, "entity": e["name"],
                            "explanation": s["text"].strip()[: cfg.max_explanation_chars], "group": s["section_id"]})
    for en in entries:
        en["aliases"] = [a["alias"] for a in graph.aliases_of(en["entity_id"]) if a["kind"] != "xref"]
        en["lang"] = lang_of(en["explanation"])
    return entries[: cfg.limit] if cfg.limit else entries


def template_question(entry: dict[str, Any]) -> str:
    lang = entry["lang"]
    return TEMPLATES[lang].format(x=_mask(entry["explanation"], [entry["entity"], *entry["aliases"]], lang))


class PairMaker:
    def __init__(self, cfg: PairsConfig, client: LLMClient | None, ledger: Ledger | None):
        self.cfg = cfg
        self.client = ledger.client(client, "pair_question") if client is not None and ledger is not None else None

    async def __call__(self, entry: dict[str, Any]) -> Done | Skip:
        note = None
        if self.client is None:
            question = template_question(entry)
        else:
            msgs = render("pair_question", entry["lang"], self.cfg.prompts_dir, entity=entry["entity"], explanation=entry["explanation"])
            res = await acomplete_json(self.client, msgs, QUESTION_SCHEMA, lang=entry["lang"])
            if not res.ok:
                return Skip(f"pair_question_{res.kind}", res.error or "")
            question = res.value["question"].strip()
            keys = {norm_key(n) for n in [entry["entity"], *entry["aliases"]] if len(n) >= 2}
            if any(k and k in norm_key(question) for k in keys):
                question, note = template_question(entry), "leaked_name_template_fallback"
        return Done([{"anchor": question, "positive": entry["entity"], "group": entry["group"], "entity_id": entry["entity_id"],
                      "aliases": entry["aliases"]}], note=note)


def first_negatives(records: list[dict[str, Any]]) -> None:
    """Give each pair a same-group negative (the next distinct entity of its group, never an alias)."""
    by_group: dict[str, list[dict[str, Any]]] = {}
    for r in records:
        by_group.setdefault(r["group"], []).append(r)
    all_entities = list(dict.fromkeys((r["entity_id"], r["positive"]) for r in records))
    for r in records:
        guard = {norm_key(a) for a in [r["positive"], *r["aliases"]]}
        pool = [x for x in by_group[r["group"]] if x["entity_id"] != r["entity_id"]]
        start = int(content_hash(r["anchor"]), 16)
        cands = [(x["entity_id"], x["positive"]) for x in pool] or all_entities
        neg = ""
        for i in range(len(cands)):
            eid, name = cands[(start + i) % len(cands)]
            if eid != r["entity_id"] and norm_key(name) not in guard:
                neg = name
                break
        r["negative"] = neg


def run_pairs(cfg: PairsConfig, client: LLMClient | None = None) -> dict[str, Any]:
    from bencao.data_gen.dataset import split_by_group, write_dataset
    from bencao.errors import BencaoError, ConfigError
    from bencao.llm.registry import make_client
    from bencao.retrieval.graph.store import Graph

    if cfg.teacher not in ("template", "llm"):
        raise ConfigError(f"teacher: {cfg.teacher!r} is not one of template, llm")
    out = Path(cfg.output)
    out.mkdir(parents=True, exist_ok=True)
    graph = Graph.open(cfg.graph, read_only=True)
    try:
        entries = collect_entries(graph, cfg)
    finally:
        graph.close()
    if not entries:
        raise BencaoError(f"{cfg.graph}: no terminology entries (entities with descriptions or book snippets) to make pairs from")
    ledger = Ledger(out / "ledger.json", cfg.llm.price_prompt_per_mtok, cfg.llm.price_completion_per_mtok) if cfg.teacher == "llm" else None
    if cfg.teacher == "llm":
        client = client or make_client(cfg.llm, default_cache=out / "llm_cache.sqlite")
    maker = PairMaker(cfg, client if cfg.teacher == "llm" else None, ledger)
    summary = run_items([(e["id"], e) for e in entries], maker, out=out, name="pairs", concurrency=2 * cfg.llm.max_concurrency if cfg.teacher == "llm" else 1,
                        progress=cfg.progress, ledger=ledger)
    records = load_records(out, "pairs", order=[e["id"] for e in entries])
    first_negatives(records)
    atomic_write_json(out / "provenance.json", {"columns": PAIR_COLUMNS, "rows": [
        {"anchor": r["anchor"], "entity_id": r["entity_id"], "group": r["group"]} for r in records]})
    train, ev = split_by_group(records, "entity_id", cfg.eval_ratio, cfg.seed)
    counts = write_dataset(out, train, ev, columns=PAIR_COLUMNS, card={
        "title": f"bencao question–entity pairs ({cfg.teacher})",
        "description": "Terminology explanations rewritten as questions (anchor) with the entity as positive, a same-group negative "
                       "that is never an alias of the positive, and the source group (section or ontology parent) for "
                       "same-group in-batch negatives. Split by entity. `provenance.json` maps each row to its entity id.",
        "recipe": to_dict(cfg), "summary": summary.to_dict()})
    summary.extra = {"records": len(records), **counts}
    return save_summary(out, summary, ledger)
