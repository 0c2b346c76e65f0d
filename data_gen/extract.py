"""``bencao data extract``: triples per snippet from a teacher LLM, constrained to a selected relation set.

Steps (each through the response cache and the ledger):
1. select the snippets (``documents``, ``sections``, ``limit``; reasoning texts never);
2. the relation set (:mod:`bencao.data_gen.relation_schema`), saved as ``relations.json`` and reused;
3. per snippet (the resumable runner, one fsynced line per snippet): ``extract_triples`` → each
   triple checked on its own against a schema that enumerates the allowed relations (spellings
   merged into a relation are mapped to it; anything else is dropped and counted), kept only when
   head and tail occur in the snippet or its heading path; then ``entity_attributes`` for the food
   and dish entities among the triples and the section's own entity;
4. at the end, ONE derived document (:mod:`bencao.data_gen.extract_graph`) with every kept triple
   (layer ``book``, origin ``llm:<model>``, the snippet as M1 provenance) and the attributes.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bencao.config import field, to_dict
from bencao.data_gen.ledger import Ledger
from bencao.data_gen.relation_schema import RelationSet, fixed_relations, select_relations
from bencao.data_gen.runner import Done, Skip, load_records, run_items, save_summary
from bencao.data_gen.templates import render
from bencao.errors import BencaoError, ConfigError
from bencao.llm.base import LLMClient, LLMConfig
from bencao.llm.structured import StructuredError, acomplete_json, validate
from bencao.text import lang_of, norm_key

log = logging.getLogger(__name__)

#: The reply's envelope; each triple is then validated on its own against :func:`triple_schema`.
TRIPLES_ENVELOPE = {"type": "object", "required": ["triples"], "properties": {"triples": {"type": "array", "items": {"type": "object"}}}}
ATTRIBUTES_SCHEMA = {"type": "object", "required": ["entities"], "properties": {"entities": {"type": "array", "items": {
    "type": "object", "required": ["name", "attributes"],
    "properties": {"name": {"type": "string", "minLength": 1}, "attributes": {"type": "object"}}}}}}

DEFAULT_TYPE_MAP = {
    "食物": "food", "食品": "food", "食材": "food", "果": "food", "谷物": "food", "蔬菜": "food", "菜肴": "dish", "药膳": "dish",
    "食疗方": "dish", "粥": "dish", "方剂": "formula", "药物": "substance", "中药": "substance", "药材": "substance", "药": "substance",
    "症状": "symptom", "病证": "symptom", "疾病": "symptom", "病症": "symptom", "证候": "symptom", "功效": "effect", "作用": "effect",
    "性": "nature", "药性": "nature", "味": "flavour", "性味": "flavour", "归经": "meridian", "经络": "meridian", "脏腑": "anatomy",
    "部位": "anatomy", "产地": "place", "地点": "place", "毒性": "toxicity", "medicine": "substance", "herb": "substance",
    "disease": "symptom", "condition": "symptom",
}


@dataclass
class ExtractConfig:
    graph: str = field("graphs/sample", help="Graph directory: snippets are read from it and the extraction is written into it.")
    output: str = field("out/extract", help="Output directory: relations.json, extract.records.jsonl, cache, ledger, summary.")
    documents: list[str] = field(default_factory=list, help="Documents to extract from: ids, or text found in their source/title. Empty: all books.")
    sections: list[str] = field(default_factory=list, help="Only snippets whose section id is listed or whose heading path contains one of these.")
    limit: int | None = field(None, help="Only the first N selected snippets.")
    llm: LLMConfig = field(default_factory=LLMConfig, help="The teacher LLM.")
    relations: list[str] = field(default_factory=list, help="A fixed relation set (names); skips the teacher's schema selection.")
    schema_sample: int = field(20, help="Snippets sampled for relation candidates (Yaoshi-RAG schema selection).")
    max_relations: int = field(12, help="Relations kept in the set at most.")
    max_candidates: int = field(40, help="Candidate relations (most frequent first) shown to the merge step.")
    use_existing_relations: bool = field(True, help="Show the graph's existing relations to the merge step so their names are reused.")
    max_snippet_chars: int = field(1500, help="Snippet text is cut to this many characters in prompts.")
    max_entity_chars: int = field(40, help="Longer head/tail strings are dropped (bad_triple).")
    max_triples: int = field(12, help="Triples per snippet at most: an engine that decodes under the schema stops there. Without a bound "
                                      "Qwen2.5-Coder-0.5B listed triples until its token budget ran out, and a cut reply is lost (22 of 30 "
                                      "snippets at 384 tokens).")
    default_confidence: float = field(0.7, help="Confidence of a triple whose reply gives none.")
    min_confidence: float = field(0.3, help="Triples below this confidence are dropped (low_confidence).")
    require_in_text: bool = field(True, help="Keep a triple only if head and tail occur in the snippet or its heading path (not_in_text).")
    attributes: bool = field(True, help="Ask for attributes of the food and dish entities of each snippet.")
    attribute_types: list[str] = field(default_factory=lambda: ["food", "dish"], help="Entity types (after type_map) that get attributes.")
    attribute_keys: list[str] = field(default_factory=lambda: ["nature", "flavour", "meridian", "effects", "indications", "contraindications",
                                                                "preparation"], help="Attribute names the teacher may fill.")
    max_attribute_entities: int = field(8, help="Entities per snippet asked about at most.")
    type_map: dict[str, str] = field(default_factory=lambda: dict(DEFAULT_TYPE_MAP), help="Teacher entity types → graph types (others kept as written, lower-cased).")
    write_graph: bool = field(True, help="Write the result into the graph as one derived document (false: files only).")
    seed: int = field(0, help="Seed of the schema-selection sample.")
    prompts_dir: str | None = field(None, help="Directory of prompt templates overriding the shipped ones.")
    progress: bool = field(True, help="Show a progress bar.")

    __removed_keys__ = {"concurrency": "llm.max_concurrency is the one knob for requests in flight (snippets in flight follow it)"}


def triple_schema(relations: list[str], max_chars: int) -> dict[str, Any]:
    """One extracted triple: the relation must be one of the set. The properties are in the prompt's order (head,
    head_type, relation, tail, tail_type, confidence): an engine decoding under the schema writes them in this order,
    and a small model made to write the tail before the relation puts relation names in the tail."""
    ent = {"type": "string", "minLength": 1, "maxLength": max_chars}
    return {"type": "object", "required": ["head", "relation", "tail"],
            "properties": {"head": ent, "head_type": {"type": ["string", "null"]}, "relation": {"enum": list(relations)}, "tail": ent,
                           "tail_type": {"type": ["string", "null"]}, "confidence": {"type": ["number", "string", "null"]}}}


def decoding_schema(relations: list[str], max_chars: int, max_triples: int = 12) -> dict[str, Any]:
    """The reply an engine that decodes under a JSON Schema is held to: at most ``max_triples`` triples in
    :func:`triple_schema`'s form, its relation one of the set, its types short. The reply itself is still validated
    against the envelope and each triple on its own (dropped and counted when wrong), so an endpoint without grammars
    gets the same checks."""
    item = triple_schema(relations, max_chars)
    # a plain type: llama-cpp-python's grammar converter drops a bound inside a ["string", "null"] union
    item["properties"]["head_type"] = item["properties"]["tail_type"] = {"type": "string", "maxLength": 16}
    return {"type": "object", "required": ["triples"],
            "properties": {"triples": {"type": "array", "maxItems": max(1, max_triples), "items": item}}}


def select_snippets(graph: Any, cfg: ExtractConfig) -> list[dict[str, Any]]:
    """The snippets to extract from, in graph order; a filter that matches nothing is an error."""
    docs = [d for d in graph.documents() if d["kind"] not in ("reasoning", "derived")]
    if cfg.documents:
        chosen = []
        for want in cfg.documents:
            hit = [d for d in docs if d["id"] == want or norm_key(want) in norm_key(f"{d['source']} {d.get('title') or ''}")]
            if not hit:
                raise BencaoError(f"{graph.dir}: no document matches {want!r}; list them with `bencao graph stats --documents`")
            chosen += [d for d in hit if d not in chosen]
        docs = chosen
    out: list[dict[str, Any]] = []
    for d in docs:
        for s in graph.iter_snippets(d["id"]):
            if cfg.sections:
                heading = norm_key(" / ".join(s["path"]))
                if not any(s["section_id"] == x or norm_key(x) in heading for x in cfg.sections):
                    continue
            out.append(s)
    if not out:
        what = f"documents {cfg.documents}" if cfg.documents else "the graph"
        raise BencaoError(f"{graph.dir}: no snippet to extract from in {what}" + (f" under sections {cfg.sections}" if cfg.sections else ""))
    return out[: cfg.limit] if cfg.limit else out


def _confidence(value: Any, default: float) -> float | None:
    if value is None or value == "":
        return default
    try:
        c = float(value)
    except (TypeError, ValueError):
        return None
    return c if 0.0 <= c <= 1.0 else None


class SnippetExtractor:
    """``work(snippet) -> Done | Skip`` for the runner."""

    def __init__(self, cfg: ExtractConfig, graph: Any, rels: RelationSet, ledger: Ledger, client: LLMClient):
        self.cfg, self.graph, self.rels = cfg, graph, rels
        self.triples_client = ledger.client(client, "extract_triples")
        self.attr_client = ledger.client(client, "entity_attributes")
        self.canon = rels.canonical()
        self.schema = triple_schema(rels.names, cfg.max_entity_chars)
        self.decode_schema = decoding_schema(rels.names, cfg.max_entity_chars, cfg.max_triples)
        self.types = {norm_key(k): v for k, v in cfg.type_map.items()}
        self.attr_types = set(cfg.attribute_types)
        self.lock = threading.Lock()

    def map_type(self, t: Any) -> str:
        t = " ".join(str(t or "").split())
        return self.types.get(norm_key(t), t.lower()) if t else ""

    def _graph_type(self, name: str) -> str | None:
        with self.lock:
            eid = self.graph.find_entity_id(norm_key(name))
            ent = self.graph.get_entity(eid) if eid else None
        return ent["type"] if ent else None

    def check(self, raw: Any, where: str) -> tuple[dict[str, Any] | None, str | None]:
        """One triple → (clean triple, None) or (None, reason it is dropped)."""
        if not isinstance(raw, dict):
            return None, "bad_triple"
        t = dict(raw)
        rel = self.canon.get(norm_key(str(t.get("relation", ""))))
        if rel is None:
            return None, "unknown_relation"
        t["relation"] = rel
        for k in ("head", "tail"):
            if isinstance(t.get(k), str):
                t[k] = " ".join(t[k].split())
        try:
            validate(t, self.schema)
        except StructuredError:
            return None, "bad_triple"
        if norm_key(t["head"]) == norm_key(t["tail"]):
            return None, "bad_triple"
        conf = _confidence(t.get("confidence"), self.cfg.default_confidence)
        if conf is None:
            return None, "bad_triple"
        if conf < self.cfg.min_confidence:
            return None, "low_confidence"
        if self.cfg.require_in_text and not all(norm_key(t[k]) in where for k in ("head", "tail")):
            return None, "not_in_text"
        return {"head": t["head"], "head_type": self.map_type(t.get("head_type")), "relation": rel, "tail": t["tail"],
                "tail_type": self.map_type(t.get("tail_type")), "confidence": round(conf, 4)}, None

    def attribute_candidates(self, snippet: dict[str, Any], triples: list[dict[str, Any]]) -> list[tuple[str, str]]:
        names: dict[str, tuple[str, str]] = {}
        title = (snippet.get("path") or [""])[-1]
        for name, llm_type in [(title, "")] + [(t[s], t[f"{s}_type"]) for t in triples for s in ("head", "tail")]:
            if not name or norm_key(name) in names:
                continue
            typ = self._graph_type(name) or llm_type
            if typ in self.attr_types:
                names[norm_key(name)] = (name, typ)
        return list(names.values())[: self.cfg.max_attribute_entities]

    async def __call__(self, s: dict[str, Any]) -> Done | Skip:
        cfg = self.cfg
        lang = lang_of(s["text"])
        path = " / ".join(s["path"])
        text = s["text"][: cfg.max_snippet_chars]
        msgs = render("extract_triples", lang, cfg.prompts_dir, relations=self.rels.relations, path=path, text=text)
        res = await acomplete_json(self.triples_client, msgs, TRIPLES_ENVELOPE, lang=lang, decode_schema=self.decode_schema)
        if not res.ok:
            return Skip(f"extract_triples_{res.kind}", res.error or "")
        where = norm_key(f"{path} {s['text']}")
        kept: dict[tuple[str, str, str], dict[str, Any]] = {}
        dropped: Counter[str] = Counter()
        for raw in res.value["triples"]:
            t, why = self.check(raw, where)
            if why:
                dropped[why] += 1
                continue
            key = (norm_key(t["head"]), t["relation"], norm_key(t["tail"]))
            if key not in kept or t["confidence"] > kept[key]["confidence"]:
                kept[key] = t
        triples = list(kept.values())
        attributes: list[dict[str, Any]] = []
        cands = self.attribute_candidates(s, triples) if cfg.attributes else []
        if cands:
            msgs = render("entity_attributes", lang, cfg.prompts_dir, entities=[n for n, _ in cands], keys=cfg.attribute_keys, path=path, text=text)
            ares = await acomplete_json(self.attr_client, msgs, ATTRIBUTES_SCHEMA, lang=lang)
            if not ares.ok:
                return Skip(f"entity_attributes_{ares.kind}", ares.error or "")
            attributes = self.clean_attributes(ares.value["entities"], cands, dropped)
        return Done([{"snippet_id": s["id"], "lang": lang, "relset": self.rels.key, "triples": triples, "attributes": attributes,
                      "dropped": dict(dropped)}], note=None if triples or attributes else "nothing_extracted")

    def clean_attributes(self, entities: list[dict[str, Any]], cands: list[tuple[str, str]], dropped: Counter[str]) -> list[dict[str, Any]]:
        asked = {norm_key(n): (n, t) for n, t in cands}
        keys = {norm_key(k): k for k in self.cfg.attribute_keys}
        out: dict[str, dict[str, Any]] = {}
        for e in entities:
            hit = asked.get(norm_key(e["name"]))
            if hit is None:
                dropped["attribute_unknown_entity"] += 1
                continue
            attrs: dict[str, list[str]] = {}
            for k, v in e["attributes"].items():
                key = keys.get(norm_key(str(k)))
                vals = [" ".join(str(x).split()) for x in (v if isinstance(v, list) else [v]) if isinstance(x, (str, int, float))]
                vals = [x for x in dict.fromkeys(vals) if x]
                if key is None:
                    dropped["attribute_unknown_key"] += 1
                elif vals:
                    attrs.setdefault(key, [])
                    attrs[key] += [x for x in vals if x not in attrs[key]]
            if attrs:
                cur = out.setdefault(hit[0], {"name": hit[0], "type": hit[1], "attributes": {}})
                for k, vals in attrs.items():
                    cur["attributes"][k] = list(dict.fromkeys(cur["attributes"].get(k, []) + vals))
        return list(out.values())


def relation_set(cfg: ExtractConfig, out: Path, snippets: list[dict[str, Any]], graph: Any, client: LLMClient, ledger: Ledger,
                 summary_extra: dict[str, Any]) -> RelationSet:
    """The fixed set, else the saved one, else a fresh teacher selection (saved unless it fell back to the graph)."""
    if cfg.relations:
        rels = fixed_relations(cfg.relations, graph)
        rels.save(out)
        return rels
    saved = RelationSet.load(out)
    if saved is not None:
        summary_extra["relations_reused"] = True
        return saved
    rels, skipped = select_relations(snippets, graph, ledger.client(client, "relation_candidates"), ledger.client(client, "relation_merge"),
                                     sample_size=cfg.schema_sample, max_relations=cfg.max_relations, max_candidates=cfg.max_candidates,
                                     max_chars=cfg.max_snippet_chars, seed=cfg.seed, use_existing=cfg.use_existing_relations,
                                     prompts_dir=cfg.prompts_dir)
    summary_extra["schema_skipped_by_reason"] = skipped
    if rels.selection != "graph":
        rels.save(out)
    for note in rels.notes:
        log.warning("extract: %s", note)
    return rels


def run_extract(cfg: ExtractConfig, client: LLMClient | None = None) -> dict[str, Any]:
    """Run the whole step; returns the summary (also written to ``<output>/extract.summary.json``)."""
    from bencao.data_gen.extract_graph import write_extraction
    from bencao.llm.registry import make_client
    from bencao.retrieval.graph.store import Graph

    if cfg.max_relations < 1 or cfg.schema_sample < 1:
        raise ConfigError("extract: max_relations and schema_sample must be at least 1")
    out = Path(cfg.output)
    out.mkdir(parents=True, exist_ok=True)
    graph = Graph.open(cfg.graph)
    try:
        snippets = select_snippets(graph, cfg)
        client = client or make_client(cfg.llm, default_cache=out / "llm_cache.sqlite")
        ledger = Ledger(out / "ledger.json", cfg.llm.price_prompt_per_mtok, cfg.llm.price_completion_per_mtok)
        extra: dict[str, Any] = {"model": client.model}
        rels = relation_set(cfg, out, snippets, graph, client, ledger, extra)
        extra.update({"relations": rels.names, "relation_selection": rels.selection})
        work = SnippetExtractor(cfg, graph, rels, ledger, client)
        items = [(f"{s['id']}:{rels.key}", s) for s in snippets]
        summary = run_items(items, work, out=out, name="extract", concurrency=2 * cfg.llm.max_concurrency, progress=cfg.progress,
                            ledger=ledger)
        records = load_records(out, "extract", order=[i for i, _ in items])
        dropped: Counter[str] = Counter()
        for r in records:
            dropped.update(r["dropped"])
        extra.update({"snippets": len(records), "triples": sum(len(r["triples"]) for r in records),
                      "attributes": sum(len(r["attributes"]) for r in records), "dropped": dict(dropped)})
        if cfg.write_graph:
            extra["graph"] = write_extraction(graph, out, records, rels, model=client.model, recipe=to_dict(cfg))
        summary.extra = extra
        return save_summary(out, summary, ledger)
    finally:
        graph.close()
