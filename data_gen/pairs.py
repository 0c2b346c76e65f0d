"""Question–entity pairs for the embedder (TCM MLKG-RAG): question → what retrieval should return.

Two teachers:

- ``template`` (default, no LLM): questions made from the graph's own content by the templates of
  :mod:`bencao.data_gen.pair_templates` (facts → "哪味药主治X？" → the herb's entry; composites of an
  entry's facts; attributes; formula ↔ composition; alias ↔ entry; definition ↔ name; heading path ↔
  snippet). Groups climb from the source section to the chapter/volume (or from the ontology parent
  upwards) until they hold ``min_group_entities`` entities, so MLKG's same-group in-batch negatives exist.
  Held out by *entity group*: entities that answer a common question (a union-find over each row's
  answers) are on one side. Counts per template in the summary.
- ``llm`` (production): entity explanations (definitions, book snippets citing the entity) rewritten
  as questions by the teacher (the explanation masked by a template when the reply leaks the name).

Each pair gets a first negative from its group: another row's positive whose entity does not answer
the question and shares no alias with an answer (the miner's guard); ``bencao data negatives``
re-mines them with an embedder.
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
    teacher: str = field("template", help="template (questions from the graph's facts, aliases, definitions and headings; no LLM) | "
                                          "llm (the teacher rewrites entity explanations as questions).")
    llm: LLMConfig = field(default_factory=LLMConfig, help="The teacher LLM (teacher=llm).")
    templates: list[str] = field(default_factory=lambda: ["fact", "composite", "attributes", "formula", "alias", "definition", "heading"],
                                 help="teacher=template: which templates (bencao.data_gen.pair_templates.TEMPLATES); add vignette for "
                                      "symptom vignettes → the formula's or herb's passage (not in the default set).")
    vignette_per_entry: int = field(2, help="template vignette: questions per formula/herb (each a fresh sample of its symptoms; "
                                            "a repeated sample is asked once).")
    vignette_symptoms: int = field(4, help="template vignette: at most this many of the entry's own indication symptoms per question "
                                           "(at least 2; entries with fewer than 2 are not asked).")
    vignette_noise: int = field(2, help="template vignette: 1 to this many symptoms of other entries mixed into each question (0: none).")
    vignette_negatives: int = field(3, help="template vignette: hard negative candidates per row (passages of entries sharing the most "
                                            "asked symptoms; the first one that passes the guard becomes the row's negative).")
    languages: list[str] = field(default_factory=list, help="Keep only rows whose anchor is in these languages (zh, en); empty: all.")
    max_answers: int = field(3, help="teacher=template: a question with more answers than this is not asked (too generic).")
    min_group_entities: int = field(2, help="A group climbs (section → chapter → volume; parent → grandparent) until it holds this many entities.")
    max_per_template: int | None = field(None, help="teacher=template: at most this many rows per template (a deterministic sample).")
    heading_snippets: int = field(1, help="teacher=template: snippets of a section paired with its heading path.")
    positive_chars: int = field(400, help="Positives are cut to this many characters.")
    sources: list[str] = field(default_factory=lambda: ["descriptions", "snippets"], help="teacher=llm: descriptions (entity definitions) and/or snippets (book text citing the entity).")
    entity_types: list[str] = field(default_factory=list, help="Only entities of these types (empty: all).")
    min_explanation_chars: int = field(8, help="Shorter explanations are skipped.")
    max_explanation_chars: int = field(300, help="Longer explanations are cut.")
    max_snippets_per_entity: int = field(2, help="Book snippets used per entity.")
    eval_ratio: float = field(0.1, help="Share of entity groups held out as eval.")
    seed: int = field(0, help="Seed of the entity split.")
    limit: int | None = field(None, help="teacher=llm: only the first N entries; teacher=template: at most N rows over all templates "
                                         "(a deterministic sample by seed).")
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
    """teacher=llm: one explanation → one question (the masked-explanation template when the reply names the entity)."""

    def __init__(self, cfg: PairsConfig, client: LLMClient, ledger: Ledger):
        self.cfg = cfg
        self.client = ledger.client(client, "pair_question")

    async def __call__(self, entry: dict[str, Any]) -> Done | Skip:
        note = None
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


def assign_groups(rows: list[Any], min_entities: int) -> dict[str, str]:
    """Each row's group: the first key of its chain holding ``min_entities`` distinct entities (else its last key)."""
    members: dict[str, set[str]] = {}
    for r in rows:
        for k in r.chain:
            members.setdefault(k, set()).add(r.entity_id)
    return {id(r): next((k for k in r.chain if len(members[k]) >= min_entities), r.chain[-1] if r.chain else f"entity:{r.entity_id}")
            for r in rows}


def entity_groups(rows: list[Any]) -> dict[str, str]:
    """Union-find over the answers of each row: entity → the representative of its group (held out together)."""
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        parent.setdefault(x, x)
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for r in rows:
        root = find(r.entity_id)
        for a in r.answers:
            ra = find(a)
            if ra != root:
                parent[ra] = root
    return {e: find(e) for e in list(parent)}


def guarded_negatives(records: list[dict[str, Any]], norms: dict[str, set[str]]) -> dict[str, int]:
    """Give each row a negative: the positive of another row of its group (else of its language) whose
    entity does not answer the row's question and shares no name with an answer. Returns counts."""
    by_group: dict[str, list[int]] = {}
    by_lang: dict[str, list[int]] = {}
    for i, r in enumerate(records):
        by_group.setdefault(r["group"], []).append(i)
        by_lang.setdefault(r["lang"], []).append(i)
    counts = {"hard": 0, "same_group": 0, "same_language": 0, "none": 0}
    for r in records:
        blocked_names = set().union(*(norms.get(a, set()) for a in r["answers"])) if r["answers"] else set()
        start = int(content_hash(r["anchor"], r["positive"]), 16)
        r["negative"] = ""
        for eid, text in r.get("hard", ()):  # the template's own candidates (vignette: entries sharing symptoms), same guard
            if eid in r["answers"] or text == r["positive"] or norms.get(eid, set()) & blocked_names:
                continue
            r["negative"] = text
            counts["hard"] += 1
            break
        if r["negative"]:
            continue
        for where, pool in (("same_group", by_group[r["group"]]), ("same_language", by_lang[r["lang"]])):
            for k in range(min(len(pool), 200)):
                x = records[pool[(start + k) % len(pool)]]
                if (x["entity_id"] in r["answers"] or x["positive"] == r["positive"]
                        or norms.get(x["entity_id"], set()) & blocked_names):
                    continue
                r["negative"] = x["positive"]
                counts[where] += 1
                break
            if r["negative"]:
                break
        else:
            counts["none"] += 1
    return counts


def template_records(graph: Any, cfg: PairsConfig) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Rows of every configured template, grouped, with guarded negatives and entity-group split keys."""
    from bencao.data_gen.pair_templates import TEMPLATES, Context
    from bencao.errors import ConfigError

    unknown = [t for t in cfg.templates if t not in TEMPLATES]
    if unknown:
        raise ConfigError(f"templates: {', '.join(unknown)} not among {', '.join(TEMPLATES)}")
    ctx = Context.load(graph, cfg.max_answers, cfg.positive_chars, cfg.heading_snippets, seed=cfg.seed,
                       vignette_per_entry=cfg.vignette_per_entry, vignette_symptoms=cfg.vignette_symptoms,
                       vignette_noise=cfg.vignette_noise, vignette_negatives=cfg.vignette_negatives)
    rows: list[Any] = []
    per_template: dict[str, int] = {}
    for name in cfg.templates:
        seen: set[tuple[str, str]] = set()
        got = []
        for r in TEMPLATES[name](ctx):
            if (cfg.languages and r.lang not in cfg.languages) or not r.anchor.strip() or not r.positive.strip() or (r.anchor, r.positive) in seen:
                continue
            seen.add((r.anchor, r.positive))
            got.append(r)
        if cfg.max_per_template is not None and len(got) > cfg.max_per_template:
            got = sorted(got, key=lambda r: content_hash(cfg.seed, r.anchor, r.positive))[: cfg.max_per_template]
        per_template[name] = len(got)
        rows += got
    if cfg.limit is not None and len(rows) > cfg.limit:
        keep = {id(r) for r in sorted(rows, key=lambda r: content_hash(cfg.seed, r.template, r.anchor, r.positive))[: cfg.limit]}
        rows = [r for r in rows if id(r) in keep]
        per_template = {name: sum(1 for r in rows if r.template == name) for name in per_template}
    groups = assign_groups(rows, cfg.min_group_entities)
    split = entity_groups(rows)
    records = [{"anchor": r.anchor, "positive": r.positive, "group": groups[id(r)], "entity_id": r.entity_id, "template": r.template,
                "answers": sorted(r.answers), "lang": r.lang, "split_key": split[r.entity_id], "hard": r.negatives} for r in rows]
    norms = {eid: {norm_key(n) for n in ctx.names(eid)}
             for eid in {a for r in rows for a in (r.entity_id, *r.answers, *(x for x, _ in r.negatives))} if eid in ctx.entities}
    for rec in records:
        rec["answers"] = set(rec["answers"])
    negs = guarded_negatives(records, norms)
    for rec in records:
        rec["answers"] = sorted(rec["answers"])
        del rec["hard"]
    sizes: dict[str, int] = {}
    for rec in records:
        sizes[rec["group"]] = sizes.get(rec["group"], 0) + 1
    stats = {"templates": per_template, "negatives": negs, "groups": len(sizes),
             "rows_in_groups_of_one": sum(1 for n in sizes.values() if n == 1), "entity_groups": len(set(split.values()))}
    return records, stats


def run_pairs(cfg: PairsConfig, client: LLMClient | None = None) -> dict[str, Any]:
    from bencao.data_gen.dataset import split_by_group, write_dataset
    from bencao.errors import BencaoError, ConfigError
    from bencao.llm.registry import make_client
    from bencao.retrieval.graph.store import Graph

    if cfg.teacher not in ("template", "llm"):
        raise ConfigError(f"teacher: {cfg.teacher!r} is not one of template, llm")
    out = Path(cfg.output)
    out.mkdir(parents=True, exist_ok=True)
    if cfg.teacher == "template":
        return _run_template(cfg, out)
    graph = Graph.open(cfg.graph, read_only=True)
    try:
        entries = collect_entries(graph, cfg)
    finally:
        graph.close()
    if not entries:
        raise BencaoError(f"{cfg.graph}: no terminology entries (entities with descriptions or book snippets) to make pairs from")
    ledger = Ledger(out / "ledger.json", cfg.llm.price_prompt_per_mtok, cfg.llm.price_completion_per_mtok)
    client = client or make_client(cfg.llm, default_cache=out / "llm_cache.sqlite")
    maker = PairMaker(cfg, client, ledger)
    summary = run_items([(e["id"], e) for e in entries], maker, out=out, name="pairs", concurrency=2 * cfg.llm.max_concurrency,
                        progress=cfg.progress, ledger=ledger)
    records = load_records(out, "pairs", order=[e["id"] for e in entries])
    if cfg.languages:
        records = [r for r in records if lang_of(r["anchor"]) in cfg.languages]
    first_negatives(records)
    atomic_write_json(out / "provenance.json", {"columns": PAIR_COLUMNS, "rows": [
        {"anchor": r["anchor"], "entity_id": r["entity_id"], "group": r["group"]} for r in records]})
    train, ev = split_by_group(records, "entity_id", cfg.eval_ratio, cfg.seed)
    counts = write_dataset(out, train, ev, columns=PAIR_COLUMNS, card={
        "title": "bencao question–entity pairs (llm)",
        "description": "Terminology explanations rewritten as questions (anchor) with the entity as positive, a same-group negative "
                       "that is never an alias of the positive, and the source group (section or ontology parent) for "
                       "same-group in-batch negatives. Split by entity. `provenance.json` maps each row to its entity id.",
        "recipe": to_dict(cfg), "summary": summary.to_dict()})
    summary.extra = {"records": len(records), **counts}
    return save_summary(out, summary, ledger)


def _run_template(cfg: PairsConfig, out: Path) -> dict[str, Any]:
    import time

    from bencao.data_gen.dataset import split_by_group, write_dataset
    from bencao.errors import BencaoError
    from bencao.retrieval.graph.store import Graph

    t0 = time.time()
    graph = Graph.open(cfg.graph, read_only=True)
    try:
        records, stats = template_records(graph, cfg)
    finally:
        graph.close()
    if not records:
        raise BencaoError(f"{cfg.graph}: no facts, aliases, definitions or headings to make pairs from (templates: {', '.join(cfg.templates)})")
    train, ev = split_by_group(records, "split_key", cfg.eval_ratio, cfg.seed)
    by_template = {name: {"train": 0, "eval": 0} for name in stats["templates"]}
    for split, rows in (("train", train), ("eval", ev)):
        for r in rows:
            by_template[r["template"]][split] += 1
    atomic_write_json(out / "provenance.json", {"columns": PAIR_COLUMNS, "rows": [
        {"split": split, "anchor": r["anchor"], "entity_id": r["entity_id"], "answers": r["answers"], "group": r["group"], "template": r["template"]}
        for split, rows in (("train", train), ("eval", ev)) for r in rows]})
    summary: dict[str, Any] = {"step": "pairs", "teacher": "template", "graph": cfg.graph, "records": len(records), **stats,
                               "by_template": by_template, "languages": _count(r["lang"] for r in records)}
    counts = write_dataset(out, train, ev, columns=PAIR_COLUMNS, card={
        "title": "bencao question–entity pairs (templates over the graph, no LLM)",
        "description": "Questions made from the graph's own facts, aliases, definitions and headings (anchor) with what retrieval "
                       "should return (positive: the entry snippet or the entity's names), a negative from the same group that "
                       "does not answer the question and shares no name with an answer, and the group (section climbed to "
                       "chapter/volume, or ontology parent) for same-group in-batch negatives. Split by entity group. "
                       "`provenance.json` maps each row to its entity, answers and template.",
        "recipe": to_dict(cfg), "summary": summary})
    summary.update(counts, seconds=round(time.time() - t0, 1))
    atomic_write_json(out / "pairs.summary.json", summary)
    return summary


def _count(values: Any) -> dict[str, int]:
    out: dict[str, int] = {}
    for v in values:
        out[v] = out.get(v, 0) + 1
    return out
