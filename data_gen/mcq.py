"""Multiple-choice SFT data in the prompt the evaluation scores: graph facts → questions, benchmark questions → letters.

``bencao data mcq`` writes conversational records whose system and user turns are exactly what the generator
reads when it scores a multiple-choice question (``bencao.serving.answer.build_messages(..., scoring=True)``,
the ``generate_mcq`` / ``generate_sd`` templates) and whose assistant turn is ``答案：B`` — the prefix the
letter scorer prefills and the letter it reads next. A model trained on them is asked exactly as it is scored.

Three sources, each optional:

- **graph items** (``relations``): for a fact ``(X, has_effect, 补中益气)`` the question ``山药的功效是？``, the
  true tail and ``n_options − 1`` distractors of the same relation's tails that are *not* true of X (nor
  share a name with, nor contain, nor are contained in a true tail); reversed for ``reverse_relations``
  (``下列哪一项具有“补中益气”的功效？`` with heads that lack the fact). Answer letters are balanced.
  A ``context_ratio`` share gets a numbered evidence list as bencao serves it (facts with their books:
  the head's facts, the correct one with probability ``context_hit``, and a distractor's facts).
- **benchmark items** (``input``): mcq / sd records with one gold letter, kept only in ``half`` (the split
  ``bench/eval_llm.py --half`` uses); every record of the other half is a leakage exclusion (by id and by
  question text), and so is every question of ``exclude``. ``input_context: served`` adds each question
  again with the context the graph's serving recipe returns for it (``/v1/retrieve``'s, ``budget_chars``).
- **mixed-in datasets** (``mix``): other SFT outputs (``bencao data cot``'s ``train.jsonl``/``eval.jsonl``),
  copied into the same split.

The prompt is the served one, read from ``bencao.serving`` at run time (a lazy import: serving never imports
this module), so training and scoring cannot drift apart.
"""

from __future__ import annotations

import json
import logging
import random
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from bencao.config import field, to_dict
from bencao.errors import ConfigError, InputError
from bencao.io import content_hash, iter_jsonl
from bencao.text import has_cjk, norm_key

log = logging.getLogger(__name__)

COLUMNS = ["id", "form", "source", "messages", "split_key"]
LETTERS = "ABCDEFGH"

#: Question templates per relation: ``forward`` asks for the tail of a head, ``reverse`` for the head of a tail.
TEMPLATES: dict[str, dict[str, str]] = {
    "has_effect": {"forward": "{h}的功效是？", "reverse": "下列哪一项具有“{t}”的功效？"},
    "treats": {"forward": "{h}主治下列哪一项？", "reverse": "下列哪一项主治“{t}”？"},
    "has_flavour": {"forward": "{h}的味是？"},
    "has_nature": {"forward": "{h}的药性是？"},
    "enters_meridian": {"forward": "{h}归哪一经？"},
    "toxicity": {"forward": "{h}的毒性是？"},
    "has_ingredient": {"forward": "{h}的组成中有下列哪一味？", "reverse": "下列哪一方的组成中有{t}？"},
}


@dataclass
class McqConfig:
    graph: str = field("graphs/sample", help="Graph directory, read only: its facts become questions; input_context=served retrieves from it.")
    output: str = field("out/sft-data/mcq", help="Output directory: train.jsonl, eval.jsonl, hf/, README.md, mcq.summary.json.")
    relations: list[str] = field(default_factory=lambda: ["has_effect", "treats", "has_flavour", "has_nature", "enters_meridian",
                                                          "has_ingredient"],
                                 help=f"Relations whose facts become questions (templates for: {', '.join(TEMPLATES)}); [] = no graph items.")
    reverse_relations: list[str] = field(default_factory=lambda: ["has_effect", "treats"],
                                         help="Relations also asked the other way round (which head has this tail?).")
    per_relation: int = field(150, help="Graph questions per relation and direction.")
    n_options: list[int] = field(default_factory=lambda: [4, 5], help="Option counts, used in turn (TCMBench has 5, CMMLU 4).")
    min_name_chars: int = field(2, help="Entity names shorter than this are never a head, answer or distractor.")
    max_name_chars: int = field(12, help="Entity names longer than this (a whole indication clause) are never used.")
    min_confidence: float = field(0.5, help="Facts below this confidence are neither asked nor used to rule a distractor in.")
    layers: list[str] = field(default_factory=lambda: ["book", "imported", "completed"], help="Triple layers asked (facts of every layer "
                                                                                                  "rule distractors out).")
    context_ratio: float = field(0.3, help="Share of graph questions given an evidence list (facts with their books) before the question.")
    context_hit: float = field(0.7, help="Probability that such a list holds the asked fact (served evidence does not always).")
    context_facts: int = field(8, help="Facts in such a list at most.")
    input: list[str] = field(default_factory=list, help="Benchmark JSONL files (mcq/sd with gold letters) whose questions become items.")
    half: str | None = field("a", help="Keep the input records whose id hashes into this half (a | b; bench/eval_llm.py --half): the "
                                       "other half is excluded by id and by question text. null = every record (then rely on exclude).")
    exclude: list[str] = field(default_factory=list, help="Files of questions never to use (benchmark JSONL, or {id} / {question} lines).")
    input_context: str = field("none", help="none | served: each input question also once with the context the graph's serving recipe "
                                            "serves for the question alone (what eval_llm.py's bencao condition reads).")
    served_ratio: float = field(1.0, help="input_context=served: the share of input questions (chosen by a hash of the id) given "
                                          "the served context too; such rows are several times longer than closed-book ones.")
    serving_config: str | None = field(None, help="input_context=served: serving recipe (default: the one the graph recorded).")
    budget_chars: int = field(1000, help="input_context=served and graph evidence lists: characters of evidence at most.")
    mix: list[str] = field(default_factory=list, help="Directories of other SFT data (train.jsonl, eval.jsonl with messages, e.g. "
                                                      "`bencao data cot` output) copied into the same splits.")
    eval_ratio: float = field(0.05, help="Share of graph heads (and of input questions) held out as eval.")
    seed: int = field(0, help="Seed of sampling, option order and the split.")


# --------------------------------------------------------------------------- the prompt (the served one)


def scoring_messages(question: str, options: dict[str, str], answer: str, task: str = "mcq", context_lines: list[str] | None = None,
                     n_answers: int = 1) -> list[dict[str, str]]:
    """System + user turns exactly as ``build_messages(..., scoring=True)`` renders them, then ``答案：<letter>``."""
    from bencao.serving.answer import ANSWER_PREFIX, AnswerConfig, build_messages, prompt_language
    from bencao.serving.context import RenderedContext
    from bencao.serving.tasks import Query

    q = Query(question=question, task=task, options=dict(options), n_answers=n_answers)
    cfg = AnswerConfig()
    ctx = RenderedContext.from_text("\n".join(context_lines)) if context_lines else None
    msgs = build_messages(q, None, cfg, context=ctx, scoring=True)
    return msgs + [{"role": "assistant", "content": ANSWER_PREFIX[prompt_language(q, cfg)] + answer}]


def fact_lines(triples: list[dict[str, Any]], books: dict[str, list[str]]) -> list[str]:
    """Numbered fact lines as the served context writes them (``serving.context``: sentence〔books〕)."""
    from bencao.retrieval.evidence import TripleHit
    from bencao.serving.context import fact_sentence

    out = []
    for i, t in enumerate(triples, 1):
        hit = TripleHit.from_row(t)
        where = "、".join(books.get(t["id"], [])[:2])
        out.append(f"[{i}] {fact_sentence(hit, 'zh')}" + (f"〔{where}〕" if where else ""))
    return out


# --------------------------------------------------------------------------- graph items


class FactTable:
    """The facts of one relation: head → true tails, tail → true heads, names, and how often each is used."""

    def __init__(self, graph: Any, relation: str, cfg: McqConfig):
        self.relation = relation
        self.tails: dict[str, set[str]] = {}
        self.heads: dict[str, set[str]] = {}
        self.asked: list[dict[str, Any]] = []
        self.name: dict[str, str] = {}
        self.type: dict[str, str] = {}
        for t in graph.iter_triples(relation=relation):
            self.type[t["head_id"]], self.type[t["tail_id"]] = t.get("head_type") or "", t.get("tail_type") or ""
            self.tails.setdefault(t["head_id"], set()).add(t["tail_id"])
            self.heads.setdefault(t["tail_id"], set()).add(t["head_id"])
            self.name[t["head_id"]], self.name[t["tail_id"]] = t.get("head") or t["head_id"], t.get("tail") or t["tail_id"]
            if t["layer"] in cfg.layers and float(t["confidence"]) >= cfg.min_confidence:
                self.asked.append(t)
        self.key = {e: norm_key(n) for e, n in self.name.items()}
        self._pools: dict[tuple[str, str], tuple[list[str], list[float]]] = {}

    def pool(self, side: str, etype: str, usable: Any) -> tuple[list[str], list[float]]:
        """Entities of ``etype`` on ``side`` (tail | head) with usable names, and cumulative weights √(facts they are in)."""
        if (side, etype) not in self._pools:
            uses = self.heads if side == "tail" else self.tails
            cands = [e for e in uses if self.type.get(e) == etype and usable(self.name[e])]
            cum, total = [], 0.0
            for e in cands:
                total += len(uses[e]) ** 0.5
                cum.append(total)
            self._pools[(side, etype)] = (cands, cum)
        return self._pools[(side, etype)]


#: Relations whose tails are short values (甘, 温, 肝, 有毒): a one-character tail is a name.
VALUE_RELATIONS = ("has_flavour", "has_nature", "enters_meridian", "toxicity")


def _usable(name: str, cfg: McqConfig, min_chars: int | None = None) -> bool:
    lo = cfg.min_name_chars if min_chars is None else min_chars
    return has_cjk(name) and lo <= len(name) <= cfg.max_name_chars and not any(c in name for c in "，。；：、,;:()（）")


def _clash(a: str, b: str, min_chars: int = 2) -> bool:
    return a == b or (len(a) >= min_chars and a in b) or (len(b) >= min_chars and b in a)


def _distractors(rng: random.Random, side: str, true_ids: set[str], table: FactTable, n: int, cfg: McqConfig, etype: str,
                 min_chars: int | None = None) -> list[str] | None:
    """``n`` entities of type ``etype`` from the ``side`` (tail | head) of the relation, drawn by the square root of
    their use, none true, none sharing or containing a true name or each other's."""
    cands, cum = table.pool(side, etype, lambda name: _usable(name, cfg, min_chars))
    key = table.key
    true_keys = [key[e] for e in true_ids if e in key]
    if len(cands) - len(true_ids) < n:
        return None
    clash_min = 1 if min_chars == 1 else 2
    picked: list[str] = []
    for e in rng.choices(cands, cum_weights=cum, k=20 * n):
        if e in true_ids or e in picked:
            continue
        k = key[e]
        if any(_clash(k, tk, clash_min) for tk in true_keys) or any(_clash(k, key[p], clash_min) for p in picked):
            continue
        picked.append(e)
        if len(picked) == n:
            return picked
    return None


def graph_items(graph: Any, cfg: McqConfig, rng: random.Random) -> Iterator[dict[str, Any]]:
    """Graph questions, relation by relation: ``{id, form, source, split_key, question, options, answer, triple, context}``."""
    unknown = [r for r in cfg.relations if r not in TEMPLATES]
    if unknown:
        raise ConfigError(f"mcq: relations {unknown} have no question template (known: {', '.join(TEMPLATES)})")
    k = 0
    turns: Counter = Counter()  # per option count: questions made so far, so answer letters cycle evenly
    for rel in cfg.relations:
        tail_min = 1 if rel in VALUE_RELATIONS else None
        table = FactTable(graph, rel, cfg)
        directions = ["forward"] + (["reverse"] if rel in cfg.reverse_relations and "reverse" in TEMPLATES[rel] else [])
        for direction in directions:
            facts = [t for t in table.asked if _usable(table.name[t["head_id"]], cfg) and _usable(table.name[t["tail_id"]], cfg, tail_min)]
            rng.shuffle(facts)
            made, seen = 0, set()
            for t in facts:
                if made >= cfg.per_relation:
                    break
                h, tl = t["head_id"], t["tail_id"]
                ask = h if direction == "forward" else tl
                if ask in seen:
                    continue  # one question per asked entity and direction: breadth over depth
                n_opt = cfg.n_options[k % len(cfg.n_options)]
                if direction == "forward":
                    wrong = _distractors(rng, "tail", table.tails[h], table, n_opt - 1, cfg, table.type[tl], tail_min)
                    right = tl
                else:
                    wrong = _distractors(rng, "head", table.heads[tl], table, n_opt - 1, cfg, table.type[h])
                    right = h
                if wrong is None:
                    continue
                seen.add(ask)
                letter = LETTERS[turns[n_opt] % n_opt]  # balanced answer letters
                turns[n_opt] += 1
                names = [table.name[e] for e in wrong]
                rng.shuffle(names)
                names.insert(LETTERS.index(letter), table.name[right])
                options = {LETTERS[i]: v for i, v in enumerate(names)}
                question = TEMPLATES[rel][direction].format(h=table.name[h], t=table.name[tl])
                k += 1
                made += 1
                yield {"id": "mcq-" + content_hash(rel, direction, h, tl), "form": "mcq", "source": f"graph:{rel}:{direction}",
                       "split_key": ask, "question": question, "options": options, "answer": letter, "triple": t,
                       "distractors": wrong}


def evidence_list(graph: Any, item: dict[str, Any], cfg: McqConfig, rng: random.Random) -> list[str]:
    """The asked entity's facts (the asked one with probability ``context_hit``) and a distractor's, shuffled, numbered."""
    t = item["triple"]
    asked = item["split_key"]
    own = [x for x in graph.triples_of(asked, "both", limit=40) if x["id"] != t["id"]]
    other = graph.triples_of(rng.choice(item["distractors"]), "both", limit=10)
    short = lambda x: len(x.get("head") or "") <= cfg.max_name_chars and len(x.get("tail") or "") <= 2 * cfg.max_name_chars  # noqa: E731
    pool = [x for x in own if short(x)][: cfg.context_facts] + [x for x in other if short(x)][:3]
    rng.shuffle(pool)
    pool = pool[: cfg.context_facts - 1]
    if rng.random() < cfg.context_hit:
        pool.insert(rng.randrange(len(pool) + 1), t)
    books = graph.documents_of_triples([x["id"] for x in pool])
    lines = fact_lines(pool, books)
    while lines and len("\n".join(lines)) > cfg.budget_chars:
        lines.pop()
    return lines


# --------------------------------------------------------------------------- benchmark items


def benchmark_records(cfg: McqConfig) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The input records of ``half`` with one gold letter, none matching the other half or ``exclude``; and counts."""
    from bencao.data_gen.leakage import QuestionSet, half_of, read_exclusions

    never = read_exclusions(cfg.exclude) if cfg.exclude else QuestionSet()
    rows: list[tuple[str, int, dict[str, Any]]] = []
    for path in cfg.input:
        if not Path(path).exists():
            raise InputError(path, "input file not found")
        for lineno, rec in iter_jsonl(path):
            if rec.get("task") not in ("mcq", "sd"):
                continue
            if not rec.get("id") or not isinstance(rec.get("options"), dict) or not rec.get("question"):
                raise InputError(path, "an mcq/sd record needs an id, a question and options", record=f"line {lineno}")
            rows.append((path, lineno, rec))
    if cfg.half:
        for _, _, rec in rows:
            if half_of(str(rec["id"])) != cfg.half:
                never.add(rec["id"], rec["question"], rec["options"])
    counts: Counter = Counter()
    kept = []
    for path, lineno, rec in rows:
        if never.match(rec["id"], rec["question"], rec["options"]):
            counts["other_half" if cfg.half and half_of(str(rec["id"])) != cfg.half else "excluded"] += 1
            continue
        gold = [str(a).strip().upper() for a in (rec.get("answer") or [])] if isinstance(rec.get("answer"), list) else [str(rec.get("answer", "")).strip().upper()]
        if len(gold) != 1 or gold[0] not in rec["options"]:
            counts["not_one_gold_letter"] += 1
            continue
        counts["kept"] += 1
        kept.append({"id": f"bench-{rec['id']}", "rec": rec, "answer": gold[0], "file": Path(path).stem})
    return kept, dict(counts)


class ServedContexts:
    """``/v1/retrieve``'s context for each question, appended to ``served_contexts.jsonl`` as it comes (a rerun reuses them)."""

    def __init__(self, cfg: McqConfig, out: Path):
        self.cfg, self.path = cfg, out / "served_contexts.jsonl"
        self.done: dict[str, str] = {}
        if self.path.exists():
            for line in self.path.read_text(encoding="utf-8").splitlines():
                try:
                    r = json.loads(line)
                    if r.get("budget_chars") == cfg.budget_chars:
                        self.done[r["id"]] = r["context"]
                except (ValueError, KeyError):
                    continue  # a torn last line of a killed run: retrieved again
        self.pipe = None

    def get(self, rid: str, question: str) -> str:
        if rid in self.done:
            return self.done[rid]
        if self.pipe is None:
            from bencao.serving.config import load_serve_config, recorded_serving_recipe
            from bencao.serving.pipeline import AnswerPipeline

            scfg = load_serve_config(self.cfg.serving_config or recorded_serving_recipe(self.cfg.graph))
            scfg.answer.context.budget_chars = self.cfg.budget_chars
            self.pipe = AnswerPipeline(self.cfg.graph, scfg)
        ctx = self.pipe.retrieve_dict(question, budget_chars=self.cfg.budget_chars)["context"]
        with open(self.path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps({"id": rid, "budget_chars": self.cfg.budget_chars, "context": ctx}, ensure_ascii=False) + "\n")
        self.done[rid] = ctx
        return ctx

    def close(self) -> None:
        graph = getattr(getattr(self.pipe, "retriever", None), "g", None)
        if graph is not None:
            graph.close()


# --------------------------------------------------------------------------- the run


def _mixed(dirs: list[str]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    from bencao.training.data import check_messages

    train, ev = [], []
    for d in dirs:
        for split, bucket in (("train", train), ("eval", ev)):
            path = Path(d) / f"{split}.jsonl"
            if split == "train" and not path.exists():
                raise InputError(path, "mix: no train.jsonl in this directory")
            if not path.exists():
                continue
            for lineno, obj in iter_jsonl(path):
                msgs = check_messages(obj, path, f"line {lineno}")
                rid = str(obj.get("id") or content_hash(path, lineno))
                bucket.append({"id": rid, "form": str(obj.get("form") or "mixed"), "source": f"mix:{Path(d).name}", "messages": msgs,
                               "split_key": str(obj.get("split_key") or rid)})
    return train, ev


def run_mcq(cfg: McqConfig) -> dict[str, Any]:
    """Write the dataset; returns the summary (also ``<output>/mcq.summary.json``)."""
    from bencao.data_gen.dataset import split_by_group, write_dataset
    from bencao.io import atomic_write_json
    from bencao.retrieval.graph.store import Graph

    if cfg.half not in (None, "a", "b"):
        raise ConfigError(f"mcq: half must be a, b or null, not {cfg.half!r}")
    if cfg.input_context not in ("none", "served"):
        raise ConfigError(f"mcq: input_context must be none or served, not {cfg.input_context!r}")
    if not cfg.n_options or any(n < 2 or n > len(LETTERS) for n in cfg.n_options):
        raise ConfigError(f"mcq: n_options must be counts between 2 and {len(LETTERS)}")
    out = Path(cfg.output)
    out.mkdir(parents=True, exist_ok=True)
    rng = random.Random(cfg.seed)
    summary: dict[str, Any] = {"graph_items": {}, "input": {}, "mixed": {}}
    records: list[dict[str, Any]] = []
    g = Graph.open(cfg.graph, read_only=True)
    served = ServedContexts(cfg, out) if cfg.input and cfg.input_context == "served" else None
    try:
        for item in graph_items(g, cfg, rng):
            lines = evidence_list(g, item, cfg, rng) if rng.random() < cfg.context_ratio else None
            records.append({"id": item["id"], "form": "mcq-context" if lines else "mcq", "source": item["source"], "split_key": item["split_key"],
                            "messages": scoring_messages(item["question"], item["options"], item["answer"], context_lines=lines)})
            summary["graph_items"][item["source"]] = summary["graph_items"].get(item["source"], 0) + 1
        bench, counts = benchmark_records(cfg) if cfg.input else ([], {})
        summary["input"] = counts
        for b in bench:
            rec = b["rec"]
            base = {"source": f"bench:{b['file']}", "split_key": b["id"]}
            records.append({"id": b["id"], "form": "bench", **base,
                            "messages": scoring_messages(rec["question"], rec["options"], b["answer"], task=rec["task"])})
            if served is not None and int(content_hash("served", rec["id"], cfg.seed), 16) % 1000 < 1000 * cfg.served_ratio:
                ctx = served.get(str(rec["id"]), rec["question"])
                if ctx.strip():
                    records.append({"id": b["id"] + "::served", "form": "bench-served", **base,
                                    "messages": scoring_messages(rec["question"], rec["options"], b["answer"], task=rec["task"],
                                                                 context_lines=ctx.splitlines())})
    finally:
        if served is not None:
            served.close()
        g.close()
    train, ev = split_by_group(records, "split_key", cfg.eval_ratio, cfg.seed)
    mtrain, mev = _mixed(cfg.mix)
    summary["mixed"] = {"train": len(mtrain), "eval": len(mev)}
    train, ev = train + mtrain, ev + mev
    random.Random(cfg.seed).shuffle(train)
    letters = Counter(m["messages"][-1]["content"][-1] for m in train if m["form"].startswith(("mcq", "bench")))
    summary["answer_letters"] = dict(sorted(letters.items()))
    summary["forms"] = dict(Counter(r["form"] for r in train))
    counts = write_dataset(out, train, ev, columns=COLUMNS, card={
        "title": "bencao multiple-choice SFT data (graph facts and benchmark questions, in the scored prompt)",
        "description": "System and user turns as the generator reads a multiple-choice question when its option letters are scored "
                       "(`build_messages(..., scoring=True)`), the assistant turn `答案：<letter>`. Graph items ask a fact's tail "
                       "(or head) with same-relation distractors that are not true of the asked entity; benchmark items come from "
                       "one half of the input files only. Split by asked entity (graph) or question (benchmark).",
        "recipe": to_dict(cfg), "summary": summary})
    summary.update(counts)
    atomic_write_json(out / "mcq.summary.json", summary)
    return summary
