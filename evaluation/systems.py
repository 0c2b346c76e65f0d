"""Systems under test, registered by name.

A system turns one benchmark record into a :class:`Output`: the prediction the metrics read (see
:mod:`bencao.evaluation.metrics` for its keys per task), the ids of the evidence it used and the
evidence text (for ``evidence_contains_gold``). Systems:

- ``llm-free``: the graph-grounded answerer (retrieval + option/claim/candidate scoring), the entity
  linker for ``el``;
- ``retrieval``: evidence only (retrieval metrics), the entity linker for ``el``;
- ``llm``: a generator through the LLM client, with retrieved evidence in the prompt, or closed book
  with ``no_retrieval``;
- ``random``: a seeded chance baseline (no graph), the floor every other system must clear.

Add one with ``@register_system("name", tasks=(...), description=...)`` on a class taking
``(graph_dir, config, out_dir)`` and providing ``predict_batch(records) -> list[Output | Exception]``
(an exception in a slot is a failed record: not written, retried when the run resumes).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field as dc_field
from pathlib import Path
from typing import Any, Callable

from bencao.config import field
from bencao.errors import BencaoError
from bencao.evaluation.annotate import OpenRecConfig
from bencao.evaluation.context_metrics import JudgeConfig
from bencao.llm.base import LLMConfig


@dataclass
class Output:
    """What a system says about one record."""

    prediction: dict[str, Any] | None
    evidence_ids: dict[str, list[str]] = dc_field(default_factory=dict)
    evidence_text: str | None = None
    extra: dict[str, Any] = dc_field(default_factory=dict)


@dataclass
class EvalConfig:
    """Settings of one evaluation run (``--config FILE`` and ``--set key=value``)."""

    retrieval_config: str | None = field(None, help="Retrieval recipe (YAML) passed to Retriever.from_config; default: the retriever's defaults.")
    retrieval_overrides: list[str] = field(default_factory=list, help="key=value overrides for the retrieval recipe (e.g. linking.tau=0.6 for el).")
    no_retrieval: bool = field(False, help="llm system: closed book (no evidence in the prompt).")
    evidence_max_chars: int = field(6000, help="llm system: longest evidence text put in a prompt (characters).")
    batch_size: int = field(8, help="Records handed to a system at once (the llm system sends them as one batch).")
    seed: int = field(0, help="Seed of the random baseline and of the bootstrap resampling.")
    n_resamples: int = field(1000, help="Bootstrap resamples for the 95% intervals (0 = no intervals).")
    llm: LLMConfig = field(default_factory=LLMConfig, help="llm system: the LLM client (backend, model, base_url, temperature, cache, ...); cache defaults to <out>/llm_cache.sqlite.")
    judge: JudgeConfig = field(default_factory=JudgeConfig, help="LLM judge of the context metrics (RAGAS-style); off by default, the lexical variant always runs.")
    open_rec: OpenRecConfig = field(default_factory=OpenRecConfig, help="Open-ended rec (no candidates): which linked entity types count as recommended foods.")


@dataclass
class SystemSpec:
    name: str
    factory: Callable[..., Any]
    tasks: tuple[str, ...]
    answers: bool
    description: str


SYSTEMS: dict[str, SystemSpec] = {}


def register_system(name: str, *, tasks: tuple[str, ...], answers: bool = True, description: str) -> Callable[[type], type]:
    def deco(cls: type) -> type:
        if not callable(getattr(cls, "predict_batch", None)):
            raise TypeError(f"system {name!r}: {cls.__name__} has no predict_batch")
        SYSTEMS[name] = SystemSpec(name, cls, tasks, answers, description)
        return cls

    return deco


def get_system(name: str) -> SystemSpec:
    if name not in SYSTEMS:
        raise BencaoError(f"unknown system {name!r}; known: {', '.join(sorted(SYSTEMS))}")
    return SYSTEMS[name]


def make_system(name: str, graph_dir: str | Path | None, config: EvalConfig, tasks: set[str] | None = None,
                out_dir: str | Path | None = None) -> Any:
    """Build a system, after checking it can run every task asked of it. ``out_dir`` holds its caches."""
    spec = get_system(name)
    if tasks:
        bad = sorted(t for t in tasks if t not in spec.tasks)
        if bad:
            raise BencaoError(f"system {name!r} cannot run task(s) {', '.join(bad)}; it runs: {', '.join(spec.tasks)}")
    return spec.factory(graph_dir, config, Path(out_dir) if out_dir else None)


# ----------------------------------------------------------------------------- evidence helpers


_ID_KINDS = {"snippets": "snippet_ids", "triples": "triple_ids", "entities": "entity_ids", "paths": "path_ids",
             "sections": "section_ids"}


def evidence_ids(evidence: Any) -> dict[str, list[str]]:
    """Ids of the snippets, triples, entities (and paths/sections) an Evidence value carries."""
    data = evidence.to_dict() if hasattr(evidence, "to_dict") else (evidence or {})
    out: dict[str, list[str]] = {}
    if not isinstance(data, dict):
        return out
    for key, name in _ID_KINDS.items():
        items = data.get(key) or []
        ids: list[str] = []
        for it in items:
            if isinstance(it, dict):
                rid = it.get("id") or it.get(key[:-1] + "_id")
            else:
                rid = it if isinstance(it, str) else None
            if rid and str(rid) not in ids:
                ids.append(str(rid))
        if ids:
            out[name] = ids
    return out


def evidence_text(evidence: Any) -> str:
    if evidence is None:
        return ""
    if hasattr(evidence, "text"):
        return evidence.text() if callable(evidence.text) else str(evidence.text)
    return str(evidence)


def _requires(module: str, what: str) -> Any:
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise BencaoError(f"{what} needs {module}, which cannot be imported here: {exc}") from None


def _require_graph(graph_dir: str | Path | None, system: str) -> Path:
    if graph_dir is None:
        raise BencaoError(f"system {system!r} needs --graph DIR (a built graph)")
    path = Path(graph_dir)
    if not (path / "graph.sqlite").exists():
        raise BencaoError(f"{path}: no graph here (graph.sqlite missing); build one with `bencao graph build`")
    return path


# ----------------------------------------------------------------------------- systems


@register_system("random", tasks=("mcq", "sd", "tf", "rec"), description="Seeded chance baseline; no graph, no model.")
class RandomSystem:
    """Uniform random answers, seeded per record id so a resumed run answers the same."""

    def __init__(self, graph_dir: str | Path | None, config: EvalConfig, out_dir: Path | None = None):
        self.seed = config.seed

    def predict_one(self, rec: dict[str, Any]) -> Output:
        rng = random.Random(f"{self.seed}:{rec['task']}:{rec['id']}")
        task = rec["task"]
        if task in ("mcq", "sd"):
            ranking = list(rec["options"])
            rng.shuffle(ranking)
            return Output({"answer": ranking[:len(rec["answer"]) if task == "mcq" else 1], "ranking": ranking, "abstained": False})
        if task == "tf":
            return Output({"answer": rng.random() < 0.5, "abstained": False})
        if "candidates" not in rec:  # open-ended rec: no list to draw from, so no answer
            return Output({"text": "", "abstained": True})
        ranking = list(rec["candidates"])
        rng.shuffle(ranking)
        return Output({"ranking": ranking, "selected": ranking[: (len(ranking) + 1) // 2], "abstained": False})

    def predict_batch(self, records: list[dict[str, Any]]) -> list[Output]:
        return [self.predict_one(r) for r in records]


class _GraphSystem:
    """Shared by the systems that read a graph: a Retriever and, for el, an EntityLinker."""

    name = "graph"

    def __init__(self, graph_dir: str | Path | None, config: EvalConfig, out_dir: Path | None = None):
        self.graph_dir = _require_graph(graph_dir, self.name)
        self.config = config
        self._retriever: Any = None

    @property
    def retriever(self) -> Any:
        if self._retriever is None:
            search = _requires("bencao.retrieval.search", f"system {self.name!r}")
            self._retriever = search.Retriever.from_config(self.graph_dir, self.config.retrieval_config,
                                                           tuple(self.config.retrieval_overrides))
        return self._retriever

    @property
    def linker(self) -> Any:
        """The retriever's own entity linker (configured by the retrieval recipe's ``linking`` block)."""
        return self.retriever.linker

    def link(self, rec: dict[str, Any]) -> Output:
        res = self.linker.link(rec["mention"], context=rec.get("context"))
        cands = []
        for c in list(getattr(res, "candidates", None) or [])[:10]:
            cid = c.get("id") if isinstance(c, dict) else getattr(c, "id", c)
            cands.append(str(cid))
        pred = {
            "chosen_id": res.chosen_id, "label": res.label, "confidence": res.confidence,
            "abstained": bool(res.abstained) or not res.chosen_id, "retried": bool(res.retried),
            "rationale": res.rationale, "candidates": cands,
        }
        return Output(pred, {"entity_ids": cands})


@register_system("llm-free", tasks=("mcq", "sd", "tf", "rec", "el"),
                 description="Graph-grounded answerer: retrieval, then option/claim/candidate scoring from the evidence.")
class GraphAnswererSystem(_GraphSystem):
    name = "llm-free"

    def __init__(self, graph_dir: str | Path | None, config: EvalConfig, out_dir: Path | None = None):
        super().__init__(graph_dir, config, out_dir)
        self._answerer: Any = None

    @property
    def answerer(self) -> Any:
        if self._answerer is None:
            mod = _requires("bencao.serving.graph_answerer", "system 'llm-free'")
            self._answerer = mod.GraphAnswerer(self.retriever)
        return self._answerer

    def predict_one(self, rec: dict[str, Any]) -> Output:
        task = rec["task"]
        if task == "el":
            return self.link(rec)
        if task in ("mcq", "sd"):
            res = self.answerer.answer_mcq(rec["question"], rec["options"])
            pred = {"answer": list(res.get("answer") or []), "ranking": list(res.get("ranking") or []),
                    "scores": res.get("scores"), "abstained": bool(res.get("abstained"))}
        elif task == "tf":
            res = self.answerer.answer_tf(rec["statement"])
            pred = {"answer": res.get("answer"), "score": res.get("score"), "abstained": bool(res.get("abstained"))}
        elif "candidates" not in rec:  # open-ended rec: a free answer; the runner links the foods in it
            res = self.answerer.answer(rec["query"])
            pred = {"text": res.get("answer") or "", "abstained": bool(res.get("abstained"))}
        else:
            res = self.answerer.rank_candidates(rec["query"], rec["candidates"])
            pred = {"ranking": list(res.get("ranking") or []), "scores": res.get("scores"),
                    "selected": list(res.get("selected") or []), "abstained": bool(res.get("abstained"))}
        ev = res.get("evidence")
        return Output(pred, evidence_ids(ev), evidence_text(ev))

    def predict_batch(self, records: list[dict[str, Any]]) -> list[Output]:
        return [self.predict_one(r) for r in records]


@register_system("retrieval", tasks=("mcq", "sd", "tf", "rec", "el", "qa"), answers=False,
                 description="Evidence only: retrieval metrics (evidence_contains_gold) and, for el, the linker.")
class RetrievalSystem(_GraphSystem):
    name = "retrieval"

    def predict_one(self, rec: dict[str, Any]) -> Output:
        from bencao.evaluation.bench_format import query_text

        if rec["task"] == "el":
            return self.link(rec)
        options = list(rec["options"].values()) if rec["task"] in ("mcq", "sd") else (
            list(rec.get("candidates") or []) if rec["task"] == "rec" else None)
        ev = self.retriever.retrieve(query_text(rec), options=options)
        return Output(None, evidence_ids(ev), evidence_text(ev))

    def predict_batch(self, records: list[dict[str, Any]]) -> list[Output]:
        return [self.predict_one(r) for r in records]


@register_system("llm", tasks=("mcq", "sd", "tf", "rec", "qa"),
                 description="A generator LLM (endpoint or local model) prompted with the question, options and retrieved evidence; closed book with no_retrieval.")
class LLMSystem(_GraphSystem):
    """Prompts from :mod:`bencao.evaluation.llm_prompts`; replies parsed back into predictions.

    Requests of a batch go out together (``complete_many``); a failed request leaves its record
    unanswered, to be retried on resume. Replies are cached (``llm.cache``, default
    ``<out>/llm_cache.sqlite``), so a rerun replays them without asking the model again.
    """

    name = "llm"

    def __init__(self, graph_dir: str | Path | None, config: EvalConfig, out_dir: Path | None = None):
        from bencao.llm import make_client

        self.config = config
        self.closed_book = config.no_retrieval
        self._retriever = None
        if not self.closed_book:
            self.graph_dir = _require_graph(graph_dir, "llm (with retrieval; --no-retrieval for closed book)")
        self.client = make_client(config.llm, default_cache=(out_dir / "llm_cache.sqlite") if out_dir else None)

    def predict_batch(self, records: list[dict[str, Any]]) -> list[Any]:
        from bencao.evaluation.bench_format import query_text
        from bencao.evaluation.llm_prompts import build_messages, parse_reply

        evidences: list[Any] = []
        batch = []
        for rec in records:
            ev = None
            if not self.closed_book:
                options = list(rec["options"].values()) if rec["task"] in ("mcq", "sd") else (
                    list(rec.get("candidates") or []) if rec["task"] == "rec" else None)
                ev = self.retriever.retrieve(query_text(rec), options=options)
            evidences.append(ev)
            text = evidence_text(ev)[: self.config.evidence_max_chars] if ev is not None else None
            batch.append(build_messages(rec, text or None))
        replies = self.client.complete_many(batch, **self.config.llm.params())
        outs: list[Any] = []
        for rec, ev, reply in zip(records, evidences, replies):
            if isinstance(reply, Exception):
                outs.append(reply)
                continue
            outs.append(Output(parse_reply(rec, reply.text), evidence_ids(ev) if ev is not None else {},
                               evidence_text(ev) if ev is not None else None,
                               {"reply": reply.text, "model": reply.model, "cached": reply.cached}))
        return outs
