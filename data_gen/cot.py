"""Chain-of-thought distillation (TCM-DiffRAG §2.2.2) with an LLM teacher or the LLM-free kg-paths teacher.

LLM teacher, per (question, gold answer):
1. decompose: the teacher writes the triples the question needs;
2. ground: nearest graph triples and their snippets, plus the question's nearest snippets (and the
   kg-paths between question and answer entities, when there are some);
3. reason: a step-by-step text from that evidence, told not to use the answer as a premise;
4. extract: the triples of the reasoning → the personalized layer, the text stored as a document (M2);
5. judge: the teacher answers from the reasoning alone (conclusion removed); kept only if it matches.
Output (both teachers): question → reasoning and question → CoT triples, split by entity.
"""

from __future__ import annotations

import logging
import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bencao.config import field, to_dict
from bencao.data_gen.grounding import Grounding, make_grounder, resolve_grounding
from bencao.data_gen.kg_paths import path_triples
from bencao.data_gen.kg_teacher import KGPathTeacher, PathSettings, link_and_find_paths
from bencao.data_gen.leakage import QuestionSet, half_of, question_key, read_exclusions, record_distilled
from bencao.data_gen.ledger import Ledger
from bencao.data_gen.linking import AliasLinker
from bencao.data_gen.personal import write_reasoning
from bencao.data_gen.qa_input import QAItem, read_qa
from bencao.data_gen.runner import Done, Skip, load_records, run_items, save_summary
from bencao.data_gen.sft_format import sft_records
from bencao.data_gen.templates import render
from bencao.llm.base import LLMClient, LLMConfig
from bencao.llm import aio
from bencao.llm.structured import acomplete_json
from bencao.text import lang_of, norm_key

log = logging.getLogger(__name__)

TRIPLES_SCHEMA = {"type": "object", "required": ["triples"], "properties": {"triples": {"type": "array", "items": {
    "type": "object", "required": ["head", "relation", "tail"],
    "properties": {"head": {"type": "string", "minLength": 1}, "relation": {"type": "string", "minLength": 1},
                   "tail": {"type": "string", "minLength": 1}}}}}}
REASON_SCHEMA = {"type": "object", "required": ["reasoning", "conclusion"],
                 "properties": {"reasoning": {"type": "string", "minLength": 1}, "conclusion": {"type": "string"}}}
JUDGE_SCHEMA = {"type": "object", "required": ["answer"],
                "properties": {"answer": {"anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]}}}
SFT_COLUMNS = ["id", "question_id", "form", "messages", "teacher", "lang", "entities", "triple_ids", "split_key"]


@dataclass
class PathConfig:
    max_hops: int = field(3, help="Longest graph path (edges) between a question entity and an answer entity.")
    paths_per_pair: int = field(2, help="Shortest paths kept per (question entity, answer entity) pair.")
    max_paths: int = field(6, help="Paths kept per question in all, shortest and most confident first.")
    max_question_entities: int = field(8, help="Question entities linked at most.")
    hub_degree: int = field(100, help="An entity with more triples than this (a catalogue, an is_a root) may end a path but never join two "
                                      "entities (retrieval's paths.hub_degree); 0 = off.")
    hub_relation_fanin: float = field(20.0, help="A relation with more triples per distinct tail than this (has_flavour, has_nature, "
                                                 "listed_in) is a hub relation: its values never join two entities; 0 = off.")
    hub_relations: list[str] = field(default_factory=list, help="Hub relations named by hand, beside the detected ones.")


@dataclass
class CotDistillConfig:
    graph: str = field("graphs/sample", help="Graph directory (read; the llm teacher also writes the personalized layer).")
    input: str = field("", help="Questions with gold answers: benchmark JSONL (mcq/sd) or {question, answer} lines.")
    exclude: list[str] = field(default_factory=list, help="Files of questions never to distil (benchmark JSONL, or {id} / {question} lines): "
                                                          "matched by id and by normalised question text (bencao.data_gen.leakage).")
    half: str | None = field(None, help="Keep only the input questions whose id hashes into this half (a | b; bench/eval_llm.py "
                                        "--half): every question of the other half is excluded by id and by question text, so a "
                                        "duplicate of a held-out question is never distilled either. null = every question.")
    output: str = field("out/cot", help="Output directory: train.jsonl, eval.jsonl, hf/, README.md, ledger, cache, logs.")
    teacher: str = field("kg-paths", help="kg-paths (no LLM) | llm.")
    llm: LLMConfig = field(default_factory=LLMConfig, help="The teacher LLM (teacher=llm).")
    paths: PathConfig = field(default_factory=PathConfig, help="kg-paths settings (also used to ground the llm teacher).")
    grounding: str = field("auto", help="Grounding of the llm teacher: auto (retriever when the graph has indexes, else graph) | retriever | graph.")
    retrieval_config: str | None = field(None, help="grounding=retriever: retrieval recipe (configs/retrieval/*.yaml); default: the index build's.")
    retrieval_overrides: list[str] = field(default_factory=list, help="grounding=retriever: key=value overrides of the retrieval recipe.")
    k_triples: int = field(8, help="Graph triples given to the teacher as evidence.")
    k_snippets: int = field(3, help="Question-nearest snippets given to the teacher as evidence.")
    languages: list[str] = field(default_factory=lambda: ["zh", "en"], help="Question languages accepted; others are skipped.")
    personal_confidence: float = field(0.6, help="Confidence of personalized-layer triples from reasoning texts.")
    write_personal: bool = field(True, help="Store reasoning texts and their triples in the graph (layer personal).")
    eval_ratio: float = field(0.1, help="Share of entity groups held out as eval.")
    seed: int = field(0, help="Seed of the entity split.")
    limit: int | None = field(None, help="Only the first N questions.")
    prompts_dir: str | None = field(None, help="Directory of prompt templates overriding the shipped ones.")
    progress: bool = field(True, help="Show a progress bar.")

    __removed_keys__ = {"concurrency": "llm.max_concurrency is the one knob for requests in flight (questions in flight follow it)"}


def answers_match(item: QAItem, predicted: Any) -> bool:
    """Choice questions: the same set of letters. Free answers: the same matching key, or containment."""
    preds = predicted if isinstance(predicted, list) else [predicted]
    if item.options:
        letters = set()
        for p in preds:
            letters |= set(re.findall(r"(?<![A-Za-z])([A-Z])(?![A-Za-z])", str(p).upper()))
        return letters == set(k.upper() for k in item.answer_keys)
    pred = norm_key(" ".join(str(p) for p in preds))
    gold = [norm_key(a) for a in item.answer_text]
    return bool(pred) and any(g == pred or (len(g) >= 2 and g in pred) or (len(pred) >= 2 and pred in g) for g in gold)


class LLMTeacher:
    def __init__(self, cfg: CotDistillConfig, graph: Any, client: LLMClient, ledger: Ledger):
        self.cfg, self.graph = cfg, graph
        self.name = f"llm:{client.model}"
        self.model = client.model
        self.clients = {step: ledger.client(client, step) for step in ("cot_decompose", "cot_reason", "cot_extract", "cot_judge")}
        self.lock = threading.Lock()
        self.linker = AliasLinker(graph)
        self.settings = PathSettings(**to_dict(cfg.paths))
        self.finder = self.settings.finder(graph, layers=("book", "imported", "completed"))
        self.grounding = resolve_grounding(cfg.grounding, graph)
        self.ground = make_grounder(self.grounding, graph, linker=self.linker, k_triples=cfg.k_triples, k_snippets=cfg.k_snippets, lock=self.lock,
                                    retrieval_config=cfg.retrieval_config, retrieval_overrides=cfg.retrieval_overrides)

    async def _ask(self, step: str, lang: str, schema: dict, **variables: Any) -> Any:
        res = await acomplete_json(self.clients[step], render(step, lang, self.cfg.prompts_dir, **variables), schema, lang=lang)
        if not res.ok:
            return Skip(f"{step}_{res.kind}", res.error or "")
        return res.value

    def evidence(self, item: QAItem, query_triples: list[dict[str, Any]]) -> Grounding:
        ev = self.ground(item.question, query_triples)
        with self.lock:
            lp = link_and_find_paths(item, self.linker, self.finder, self.settings)
            if not isinstance(lp, Skip):
                known = {t["id"] for t in ev.triples}
                ev.triples = [t for t in path_triples(lp.paths, self.graph) if t["id"] not in known] + ev.triples
        return ev

    async def __call__(self, item: QAItem) -> Done | Skip:
        if item.problem:
            return Skip("bad_record", item.problem)
        lang = lang_of(item.question)
        if self.cfg.languages and lang not in self.cfg.languages:
            return Skip("unexpected_language", f"question looks {lang}; accepted: {', '.join(self.cfg.languages)}")
        common = {"question": item.question, "options": item.options}
        dec = await self._ask("cot_decompose", lang, TRIPLES_SCHEMA, answer=item.answer_display, **common)
        if isinstance(dec, Skip):
            return dec
        ev = await aio.to_thread(self.evidence, item, dec["triples"])  # graph/retriever work off the LLM loop
        rs = await self._ask("cot_reason", lang, REASON_SCHEMA, answer=item.answer_display, triples=ev.triples, snippets=ev.snippets, **common)
        if isinstance(rs, Skip):
            return rs
        reasoning = rs["reasoning"].strip()
        judged = await self._ask("cot_judge", lang, JUDGE_SCHEMA, reasoning=reasoning, **common)
        if isinstance(judged, Skip):
            return judged
        if not answers_match(item, judged["answer"]):
            return Skip("judge_mismatch", f"answer from the reasoning {judged['answer']!r} ≠ gold {item.answer_display!r}")
        ext = await self._ask("cot_extract", lang, TRIPLES_SCHEMA, reasoning=reasoning)
        if isinstance(ext, Skip):
            return ext
        triples = [{k: str(t[k]).strip() for k in ("head", "relation", "tail")} for t in ext["triples"]]
        triples = [t for t in triples if all(t.values())]
        if not triples:
            return Skip("cot_extract_empty", "no triples in the reasoning")
        tids: list[str] = []
        eids: list[str] = []
        if self.cfg.write_personal:
            with self.lock:
                _, tids, eids = write_reasoning(self.graph, question_id=item.id, question=item.question, reasoning=reasoning, triples=triples,
                                                model=self.model, confidence=self.cfg.personal_confidence,
                                                question_key=question_key(item.question, item.options))
        with self.lock:
            ans_ents = [m.entity_id for a in item.answer_text for m in self.linker.link(a)]
        split_key = (ans_ents or eids or [item.id])[0]
        return Done(sft_records(item, reasoning=reasoning, triples=triples, teacher=self.name,
                                entities=list(dict.fromkeys(ans_ents + eids)), triple_ids=tids, split_key=split_key))


def run_cot(cfg: CotDistillConfig, client: LLMClient | None = None) -> dict[str, Any]:
    """Run the whole step; returns the summary (also written to ``<output>/cot.summary.json``)."""
    from bencao.data_gen.dataset import split_by_group, write_dataset
    from bencao.errors import ConfigError
    from bencao.llm.registry import make_client
    from bencao.retrieval.graph.store import Graph
    from bencao.retrieval.index import refresh_indexes

    if not cfg.input:
        raise ConfigError("cot: no input file (--input or input=...)")
    out = Path(cfg.output)
    out.mkdir(parents=True, exist_ok=True)
    items = read_qa(cfg.input)[: cfg.limit] if cfg.limit else read_qa(cfg.input)
    excluded: list[str] = []
    if cfg.half not in (None, "a", "b"):
        raise ConfigError(f"cot: half must be a, b or null, not {cfg.half!r}")
    if cfg.exclude or cfg.half:
        never = read_exclusions(cfg.exclude) if cfg.exclude else QuestionSet()
        if cfg.half:
            for it in items:
                if half_of(it.id) != cfg.half:
                    never.add(it.id, it.question, it.options)
        excluded = [it.id for it in items if never.match(it.id, it.question, it.options)]
        gone = set(excluded)
        items = [it for it in items if it.id not in gone]
        log.info("cot: %d of %d questions excluded by %s", len(excluded), len(excluded) + len(items),
                 ", ".join([*cfg.exclude, *([f"half {cfg.half}"] if cfg.half else [])]))
    graph = Graph.open(cfg.graph)
    ledger = Ledger(out / "ledger.json", cfg.llm.price_prompt_per_mtok, cfg.llm.price_completion_per_mtok)
    try:
        if cfg.teacher == "kg-paths":
            teacher: Any = KGPathTeacher(graph, PathSettings(**to_dict(cfg.paths)))
            concurrency = 1  # CPU-bound graph work over one connection, item after item
        elif cfg.teacher == "llm":
            client = client or make_client(cfg.llm, default_cache=out / "llm_cache.sqlite")
            teacher = LLMTeacher(cfg, graph, client, ledger)
            concurrency = 2 * cfg.llm.max_concurrency
        else:
            raise ConfigError(f"teacher: {cfg.teacher!r} is not one of kg-paths, llm")
        summary = run_items([(it.id, it) for it in items], teacher, out=out, name="cot", concurrency=concurrency, progress=cfg.progress,
                            ledger=ledger if cfg.teacher == "llm" else None)
        refresh_indexes(graph)  # the personal layer's reasoning documents and triples are retrievable at once
        records = load_records(out, "cot", order=[it.id for it in items])
        train, ev = split_by_group(records, "split_key", cfg.eval_ratio, cfg.seed)
        summary.extra = {"teacher": teacher.name, "records": len(records)}
        if cfg.exclude or cfg.half:
            summary.extra["excluded"] = {"files": list(cfg.exclude), "half_kept": cfg.half, "questions": len(excluded), "ids": excluded[:50]}
        if cfg.teacher == "llm":
            summary.extra["grounding"] = teacher.grounding
        counts = write_dataset(out, train, ev, columns=SFT_COLUMNS, card={
            "title": f"bencao CoT distillation ({teacher.name})",
            "description": "Questions with gold answers turned into two SFT task forms in conversational `messages` format: "
                           "question → step-by-step reasoning (form `reasoning`) and question → chain-of-thought triples (form `triples`). "
                           "Split into train/eval by entity (`split_key`).",
            "recipe": to_dict(cfg), "summary": summary.to_dict()})
        summary.extra.update(counts)
        if cfg.teacher == "llm" and cfg.write_personal:
            # the manifest names every question whose reasoning is now in the graph: eval flags or refuses them
            summary.extra["distilled"] = len(record_distilled(graph, "cot", {"teacher": teacher.name, "records": len(records)})["ids"])
        return save_summary(out, summary, ledger if cfg.teacher == "llm" else None)
    finally:
        graph.close()
