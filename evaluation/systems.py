"""Systems under test: the answering pipeline, as configured, and a chance baseline.

``bencao eval --config SERVING.yaml`` evaluates exactly the pipeline ``bencao serve --config
SERVING.yaml`` runs (:class:`PipelineSystem`), so a benchmark figure is a figure of what is served.
The ``--system`` names are presets of that one pipeline (overrides applied to the config), not
other code paths:

- ``pipeline`` (default): the config as given;
- ``llm-free``: ``answerer=graph`` — the graph-grounded answerer scores options, claims, candidates;
- ``llm``: ``answerer=generator`` — needs a ``generator`` block (``--set generator.base_url=...``);
  closed book with ``--no-retrieval`` (``answer.closed_book=true``);
- ``cot+llm-free``, ``cot+llm``: the same with the CoT model driving micro retrieval (needs ``cot.llm``);
- ``retrieval``: ``answerer=none`` — evidence only: its coverage (``evidence_contains_gold``) and the
  question-only retrieval metrics (``answer_recall@k``, ``margin@k``, ...), which every system run with
  a graph reports (docs/evaluation-metrics.md);
- ``random``: a seeded chance baseline (no graph, no pipeline), the floor every system must clear.

``el`` records are linked by the pipeline's entity linker (the retrieval recipe's ``linking``
block: rules or the LLM selector / scorer / synonym stages).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field as dc_field
from pathlib import Path
from typing import Any, Callable

from bencao.errors import BencaoError, ConfigError
from bencao.serving.config import ServeConfig

#: Evaluation reads the serving recipe: one config class for every front end.
EvalConfig = ServeConfig


@dataclass
class Output:
    """What a system says about one record."""

    prediction: dict[str, Any] | None
    evidence_ids: dict[str, list[str]] = dc_field(default_factory=dict)
    evidence_text: str | None = None
    extra: dict[str, Any] = dc_field(default_factory=dict)


@dataclass
class SystemSpec:
    name: str
    factory: Callable[..., Any]
    tasks: tuple[str, ...]
    answers: bool
    description: str
    overrides: tuple[str, ...] = ()
    needs: tuple[str, ...] = ()  # config blocks that must be set (generator, cot.llm)
    needs_graph: bool = False


SYSTEMS: dict[str, SystemSpec] = {}
ALL_TASKS = ("mcq", "sd", "tf", "rec", "qa", "el")


def register_system(name: str, *, tasks: tuple[str, ...], answers: bool = True, description: str,
                    overrides: tuple[str, ...] = (), needs: tuple[str, ...] = (), needs_graph: bool = False) -> Callable[[type], type]:
    def deco(cls: type) -> type:
        if not callable(getattr(cls, "predict_batch", None)):
            raise TypeError(f"system {name!r}: {cls.__name__} has no predict_batch")
        SYSTEMS[name] = SystemSpec(name, cls, tasks, answers, description, overrides, needs, needs_graph)
        return cls

    return deco


def get_system(name: str) -> SystemSpec:
    if name not in SYSTEMS:
        raise BencaoError(f"unknown system {name!r}; known: {', '.join(sorted(SYSTEMS))}")
    return SYSTEMS[name]


def system_overrides(name: str) -> list[str]:
    """The overrides a preset applies to the serving config."""
    return list(get_system(name).overrides)


def check_needs(name: str, config: ServeConfig) -> None:
    for need in get_system(name).needs:
        if need == "generator" and config.generator is None:
            raise ConfigError(f"system {name!r} needs a generator LLM: --config a serving recipe with a generator block, or "
                              "--set generator.backend=openai --set generator.base_url=URL --set generator.model=NAME (or --llm)")
        if need == "cot" and config.cot.llm is None:
            raise ConfigError(f"system {name!r} needs a CoT model: cot.llm in the serving recipe, or --cot MODEL@URL / --cot PATH")


def make_system(name: str, graph_dir: str | Path | None, config: ServeConfig, tasks: set[str] | None = None,
                out_dir: str | Path | None = None) -> Any:
    """Build a system, after checking it can run every task asked of it. ``out_dir`` holds its caches."""
    spec = get_system(name)
    if tasks:
        bad = sorted(t for t in tasks if t not in spec.tasks)
        if bad:
            raise BencaoError(f"system {name!r} cannot run task(s) {', '.join(bad)}; it runs: {', '.join(spec.tasks)}")
    if spec.needs_graph and (graph_dir is not None or not config.answer.closed_book or "el" in (tasks or set())):
        _require_graph(graph_dir, name)
    check_needs(name, config)
    return spec.factory(graph_dir, config, Path(out_dir) if out_dir else None)


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

    def __init__(self, graph_dir: str | Path | None, config: ServeConfig, out_dir: Path | None = None):
        self.seed = config.eval.seed

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


class PipelineSystem:
    """The answering pipeline (``bencao.serving.pipeline.AnswerPipeline``) over a graph, as configured."""

    name = "pipeline"

    def __init__(self, graph_dir: str | Path | None, config: ServeConfig, out_dir: Path | None = None):
        from bencao.serving.pipeline import AnswerPipeline

        self.config = config
        # closed book (answer.closed_book) runs without a graph unless el records need the linker
        self.pipeline = AnswerPipeline(Path(graph_dir) if graph_dir is not None else None, config, cache_dir=out_dir)

    def link(self, rec: dict[str, Any]) -> Output:
        res = self.pipeline.link(rec["mention"], rec.get("context"))
        cands = [str(c.get("id")) for c in list(res.candidates or [])[:10]]
        pred = {"chosen_id": res.chosen_id, "label": res.label, "confidence": res.confidence,
                "abstained": bool(res.abstained) or not res.chosen_id, "retried": bool(res.retried), "rationale": res.rationale,
                "candidates": cands, "first_pass": res.first_pass, "synonyms": res.synonyms}
        return Output(pred, {"entity_ids": cands})

    def predict_batch(self, records: list[dict[str, Any]]) -> list[Any]:
        from bencao.serving.tasks import Query

        outs: list[Any] = [None] * len(records)
        asked = []
        for i, rec in enumerate(records):
            if rec["task"] == "el":
                outs[i] = self.link(rec)
            else:
                asked.append(i)
        answers = self.pipeline.run([Query.from_record(records[i]) for i in asked]) if asked else []
        for i, a in zip(asked, answers):
            if a.error:
                outs[i] = BencaoError(a.error)  # a failed request: not written, retried when the run resumes
                continue
            ev = a.evidence
            extra = {k: v for k, v in (("reply", a.reply), ("answered_by", a.answered_by), ("query_triples", a.query_triples),
                                       ("understanding", a.understanding), ("plan", a.plan)) if v is not None}
            outs[i] = Output(a.prediction if self.pipeline.answerer != "none" else None, ev.ids() if ev is not None else {},
                             ev.text() if ev is not None else None, extra)
        return outs


_PRESETS = [
    ("pipeline", (), (), "The serving recipe as given (--config): every stage it configures."),
    ("llm-free", ("answerer=graph",), (), "Graph-grounded answerer: retrieval, then option/claim/candidate scoring from the evidence."),
    ("llm", ("answerer=generator",), ("generator",), "The generator LLM with the task's template and the retrieved evidence "
                                                       "(closed book with --no-retrieval)."),
    ("cot+llm-free", ("answerer=graph",), ("cot",), "The CoT model's query triples drive micro retrieval; the graph answerer answers."),
    ("cot+llm", ("answerer=generator",), ("cot", "generator"), "CoT model + generator (TCM-DiffRAG)."),
    ("retrieval", ("answerer=none",), (), "Evidence only: question-only retrieval metrics (answer_recall@k, margin@k), evidence coverage and, for el, the linker."),
]
for _name, _ov, _needs, _desc in _PRESETS:
    register_system(_name, tasks=ALL_TASKS, answers=_name != "retrieval", description=_desc, overrides=_ov, needs=_needs,
                    needs_graph=True)(PipelineSystem)
