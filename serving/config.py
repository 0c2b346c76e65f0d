"""The one configuration of the answering pipeline: ``ask``, ``serve``, ``infer`` and ``eval`` all read it.

A serving recipe (``configs/serving/*.yaml``) holds every stage of the pipeline, each optional:

- ``retrieval``: the retrieval recipe, nested (a mapping, or the path of a retrieval YAML that is
  read in at load time: ``retrieval: configs/retrieval/default.yaml``); parsed with the rest, so
  a misspelt key fails at load;
- ``understand``, ``cot``, ``planner``, ``generator`` (and, inside ``retrieval.linking``, the
  selector / scorer / synonym LLMs): the LLM roles of the five papers, each a ``bencao.llm``
  block; without one the stage falls back to its rule;
- ``answer`` (generator prompts and presentation), ``graph_answer`` (the LLM-free answerer);
- ``api`` (``serve``), ``infer`` (``infer``), ``eval`` (``eval``): front-end settings.

Overrides (``--set key=value``) name keys as in the YAML; a key of a retrieval section may leave
out the ``retrieval.`` prefix (``--set linking.tau=0.6`` = ``--set retrieval.linking.tau=0.6``), so
the same override works in ``link``, ``ask``, ``eval`` and ``serve``; likewise ``seed``,
``n_resamples`` and ``batch_size`` mean ``eval.*``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bencao.config import apply_overrides, field, from_dict, read_yaml, resolve_config_path
from bencao.errors import ConfigError
from bencao.llm.base import LLMConfig
from bencao.retrieval.search.config import RetrievalConfig
from bencao.serving.answer import AnswerConfig
from bencao.serving.api import ApiConfig
from bencao.serving.cot import CotConfig
from bencao.serving.graph_answerer import AnswererConfig
from bencao.serving.infer import InferConfig

ANSWERERS = ("auto", "generator", "graph", "none")


@dataclass
class UnderstandConfig:
    """Question understanding (Yaoshi-RAG keyword extraction, MLKG's patient/disease split, iDISK's typed entities)."""

    llm: LLMConfig | None = field(None, help="LLM that extracts the question's entities with their types and the patient's "
                                             "information (age group, sex, history); null = dictionary matching only.")
    mode: str = field("merge", help="merge: the LLM's mentions are linked beside the dictionary's; replace: the LLM's only.")
    max_entities: int = field(8, help="Most mentions taken from one reply.")
    prompts_dir: str | None = field(None, help="Directory of prompt templates overriding bencao/prompts/understand.*.jinja.")


@dataclass
class PlannerConfig:
    """Yaoshi-RAG's relation-path planner: the LLM proposes relation sequences from the graph's relation list."""

    llm: LLMConfig | None = field(None, help="LLM that plans relation paths (few-shot, from the graph's relations); null = the "
                                             "mined frequent sequences only.")
    mode: str = field("beside", help="beside: planned sequences are followed with the mined ones; instead: planned ones only.")
    max_paths: int = field(4, help="Most relation sequences taken from one reply.")
    max_hops: int = field(3, help="Longest planned sequence.")
    prompts_dir: str | None = field(None, help="Directory of prompt templates overriding bencao/prompts/plan_paths.*.jinja.")


@dataclass
class JudgeConfig:
    """The LLM judge of the context metrics (``--set judge.enabled=true --set judge.llm.model=...``)."""

    enabled: bool = field(False, help="Judge retrieved contexts with an LLM (RAGAS-style) besides the lexical context metrics.")
    llm: LLMConfig = field(default_factory=LLMConfig, help="The judge's LLM client (backend, model, base_url, ...); cache defaults to <out>/judge_cache.sqlite.")
    prompts_dir: str | None = field(None, help="Directory of your own judge templates (context_precision.zh.jinja ...), used before the shipped ones.")
    max_contexts: int = field(10, help="Context items shown to the judge (the top-ranked ones).")
    max_context_chars: int = field(600, help="Characters of each context item shown to the judge.")
    lexical_coverage: float = field(0.6, help="Lexical variant (always on): share of a reference sentence's distinct terms a context item must contain to cover it.")


@dataclass
class OpenRecConfig:
    item_types: list[str] = field(default_factory=lambda: ["food", "dish", "substance", "supplement_ingredient", "ingredient", "herb"],
                                  help="Entity types that count as recommended foods when linked in a free-text answer.")
    max_items: int = field(30, help="Most foods read from one answer.")


@dataclass
class EvalSettings:
    """``bencao eval`` only."""

    batch_size: int = field(8, help="Records answered together (LLM requests of a batch go out at once).")
    seed: int = field(0, help="Seed of the random baseline and of the bootstrap resampling.")
    n_resamples: int = field(1000, help="Bootstrap resamples for the 95% intervals (0 = no intervals).")
    judge: JudgeConfig = field(default_factory=JudgeConfig, help="LLM judge of the context metrics (RAGAS-style); off by default, the lexical variant always runs.")
    open_rec: OpenRecConfig = field(default_factory=OpenRecConfig, help="Open-ended rec (no candidates): which linked entity types count as recommended foods.")
    retrieval_probe: bool = field(True, help="With a graph: also retrieve from each question alone (no options, no option queries, "
                                             "the recipe's retrieval otherwise) and score the ranked snippets: answer_recall@k, "
                                             "distractor_rate@k, margin@k, mrr (docs/evaluation-metrics.md).")
    on_leak: str = field("flag", help="Items whose reasoning was distilled into the graph (its manifest's `distilled` record): "
                                      "flag (leaked: true per record, a count in the metrics) | refuse (stop before answering).")


@dataclass
class PipelineConfig:
    """What answers: question understanding → linking → retrieval → answer, each stage configured."""

    model_name: str = field("bencao", help="Model id this service reports in /v1/models and in replies.")
    retrieval: RetrievalConfig = field(default_factory=RetrievalConfig,
                                       help="The retrieval recipe (a mapping, or the path of a retrieval YAML read in at load time).")
    understand: UnderstandConfig = field(default_factory=UnderstandConfig, help="Question understanding (LLM, optional).")
    cot: CotConfig = field(default_factory=CotConfig, help="CoT model that decomposes the question into query triples (off by default).")
    planner: PlannerConfig = field(default_factory=PlannerConfig, help="Relation-path planner (LLM, optional).")
    generator: LLMConfig | None = field(None, help="Generator LLM (bencao.llm block); null = the LLM-free graph answerer answers.")
    answerer: str = field("auto", help="Who answers: auto (the generator when configured, else the graph answerer) | generator | graph | "
                                       "none (evidence only).")
    answer: AnswerConfig = field(default_factory=AnswerConfig, help="Generator prompts (task templates) and answer presentation.")
    graph_answer: AnswererConfig = field(default_factory=AnswererConfig, help="The LLM-free answerer: scoring weights, thresholds, "
                                                                              "intent table, relation labels.")

    def validate(self) -> None:
        if self.answerer not in ANSWERERS:
            raise ConfigError(f"answerer: {self.answerer!r} is not one of {', '.join(ANSWERERS)}")
        if self.answerer == "generator" and self.generator is None:
            raise ConfigError("answerer: generator needs a generator LLM block (generator.backend, generator.model, generator.base_url ...)")
        if self.understand.mode not in ("merge", "replace"):
            raise ConfigError(f"understand.mode: {self.understand.mode!r} is not merge or replace")
        if self.planner.mode not in ("beside", "instead"):
            raise ConfigError(f"planner.mode: {self.planner.mode!r} is not beside or instead")
        self.retrieval.index.validate()


@dataclass
class ServeConfig(PipelineConfig):
    """The pipeline + HTTP API + batch inference + evaluation settings: one file serves every front end."""

    api: ApiConfig = field(default_factory=ApiConfig, help="HTTP server and request limits (bencao serve).")
    infer: InferConfig = field(default_factory=InferConfig, help="Batch inference (bencao infer).")
    eval: EvalSettings = field(default_factory=EvalSettings, help="Evaluation (bencao eval).")

    def validate(self) -> None:
        super().validate()
        self.api.validate()


_RETRIEVAL_KEYS = {f.name for f in dataclasses.fields(RetrievalConfig)}
_EVAL_KEYS = {f.name for f in dataclasses.fields(EvalSettings)}
_TOP_KEYS = {f.name for f in dataclasses.fields(ServeConfig)}


def route_override(ov: str) -> str:
    """``linking.tau=0.6`` → ``retrieval.linking.tau=0.6``, ``seed=1`` → ``eval.seed=1``: sections named without their prefix."""
    key = ov.split("=", 1)[0].strip()
    head = key.split(".", 1)[0]
    if head in _RETRIEVAL_KEYS and head not in _TOP_KEYS:
        return "retrieval." + ov.strip()
    if head in _EVAL_KEYS and head not in _TOP_KEYS:
        return "eval." + ov.strip()
    return ov


def _inline_retrieval(data: dict[str, Any], base: Path | None) -> dict[str, Any]:
    """``retrieval: path.yaml`` (and the old ``retrieval_config`` / ``retrieval_overrides`` keys) read in as a mapping."""
    old_path = data.pop("retrieval_config", None)
    old_over = data.pop("retrieval_overrides", None) or []
    ref = data.get("retrieval", old_path)
    if isinstance(ref, str):
        p = Path(ref).expanduser()
        if not p.is_absolute() and not p.exists() and base is not None and (base / p).exists():
            p = base / p
        data["retrieval"] = read_yaml(p)
    elif ref is None:
        data.pop("retrieval", None)
    if old_over:
        data.setdefault("retrieval", {})
        apply_overrides(data["retrieval"], [str(o) for o in old_over])
    return data


def load_pipeline_config(cls: type, path: str | Path | None = None, overrides: list[str] | tuple[str, ...] = ()) -> Any:
    """Read a serving recipe into ``cls`` (``ServeConfig`` or a subclass), overrides routed, retrieval inlined, validated."""
    path = resolve_config_path(path) if path else None
    data = read_yaml(path) if path else {}
    base = path.resolve().parent if path else None
    data = _inline_retrieval(data, base)
    routed = [route_override(o) for o in overrides]
    direct = [o for o in routed if o.split("=", 1)[0].strip() in ("retrieval", "retrieval_config")]
    for o in direct:  # `--set retrieval=other.yaml` swaps the whole retrieval recipe
        data["retrieval"] = o.split("=", 1)[1]
        data = _inline_retrieval(data, None)
    data = apply_overrides(data, [o for o in routed if o not in direct])
    cfg = from_dict(cls, data, where=str(path) if path else "config")
    cfg.validate()
    return cfg


def recorded_serving_recipe(graph_dir: str | Path) -> str | None:
    """The serving recipe a graph's build recorded (``manifest.json`` ``serving``: a shipped recipe's name
    or an absolute path), None when it recorded none or the graph has no readable manifest."""
    import json

    p = Path(graph_dir) / "manifest.json"
    try:
        value = json.loads(p.read_text(encoding="utf-8")).get("serving")
    except (OSError, ValueError, AttributeError):
        return None
    return value if isinstance(value, str) and value.strip() else None


def load_serve_config(path: str | Path | None = None, overrides: list[str] | tuple[str, ...] = ()) -> ServeConfig:
    """The serving recipe for ``ask``, ``serve``, ``infer`` and ``eval`` (all defaults when ``path`` is None)."""
    return load_pipeline_config(ServeConfig, path, overrides)
