"""Question → (CoT triples) → Evidence → answer with citations. One pipeline for the API and batch.

Stages, each timed:

1. ``cot``: when a CoT model is configured, the question is decomposed into query triples
   (:mod:`bencao.serving.cot`) that drive micro retrieval; otherwise retrieval starts from the
   question alone.
2. ``retrieve``: :class:`bencao.retrieval.search.Retriever` assembles the Evidence.
3. ``generate``: with a generator LLM configured, the prompt of :mod:`bencao.serving.answer` and
   the reply parsed into answer + citations; with empty evidence, "not in the knowledge base"
   (plus the model's own answer, marked, when ``answer.own_answer`` is on). With no generator the
   LLM-free :class:`bencao.serving.graph_answerer.GraphAnswerer` answers from the same evidence.

The graph store and the retriever are shared by every request: retrieval and graph answering run
one at a time under a lock, LLM requests outside it (a local model takes its own lock; an endpoint
serves several at once).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bencao.config import field
from bencao.errors import BencaoError
from bencao.llm import LLMConfig
from bencao.serving.answer import (
    AnswerConfig,
    build_messages,
    citation,
    evidence_dict,
    is_empty,
    not_in_kb,
    own_answer_label,
    own_answer_messages,
    parse_reply,
    references,
)
from bencao.serving.cot import CotConfig, CotDecomposer
from bencao.serving import vllm_backend  # noqa: F401  (registers the in-process "vllm" LLM backend)


@dataclass
class PipelineConfig:
    """What answers: retrieval recipe, optional CoT model, optional generator, prompt settings."""

    retrieval_config: str | None = field(None, help="Retrieval recipe (YAML) for Retriever.from_config; default: the retriever's defaults.")
    retrieval_overrides: list[str] = field(default_factory=list, help="key=value overrides of the retrieval recipe.")
    generator: LLMConfig | None = field(None, help="Generator LLM (bencao.llm LLMConfig); null = the LLM-free graph answerer answers.")
    cot: CotConfig = field(default_factory=CotConfig, help="CoT model that decomposes the question into query triples (off by default).")
    answer: AnswerConfig = field(default_factory=AnswerConfig, help="Prompt assembly and answer presentation.")
    model_name: str = field("bencao", help="Model id this service reports in /v1/models and in replies.")


def as_tuples(triples: list[Any] | None) -> list[tuple[str, str, str]] | None:
    """Query triples as the retriever takes them: ``(head, relation, tail)``, unknown parts ("?") empty."""
    if not triples:
        return None
    out = []
    for t in triples:
        parts = [t.get(k, "") for k in ("head", "relation", "tail")] if isinstance(t, dict) else list(t)
        out.append(tuple("" if str(p).strip() in ("?", "？") else str(p).strip() for p in parts))
    return out  # type: ignore[return-value]


class GeneratorError(BencaoError):
    """The generator LLM failed (after its retries): a server-side problem, not the user's."""


class _WithTriples:
    """A retriever view whose every retrieval uses the given query triples (the CoT model's)."""

    def __init__(self, retriever: Any, triples: list[tuple[str, str, str]] | None):
        self._retriever = retriever
        self._triples = triples

    def retrieve(self, question: str, query_triples: Any = None, options: list[str] | None = None) -> Any:
        return self._retriever.retrieve(question, query_triples=query_triples or self._triples, options=options)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._retriever, name)


def _now() -> float:
    return time.perf_counter()


class AnswerPipeline:
    """Loads the graph, retriever and models once; answers questions (thread-safe)."""

    def __init__(self, graph_dir: str | Path, cfg: PipelineConfig | None = None, *, retriever: Any = None,
                 generator: Any = None, cot: CotDecomposer | None = None):
        self.cfg = cfg or PipelineConfig()
        self.graph_dir = Path(graph_dir)
        if retriever is None:
            from bencao.retrieval.search import Retriever

            retriever = Retriever.from_config(self.graph_dir, self.cfg.retrieval_config, tuple(self.cfg.retrieval_overrides))
        self.retriever = retriever
        if generator is None and self.cfg.generator is not None:
            from bencao.llm import make_client

            generator = make_client(self.cfg.generator)
        self.generator = generator
        self.cot = cot if cot is not None else CotDecomposer.from_config(self.cfg.cot)
        self._graph_answerer: Any = None
        self._lock = threading.RLock()

    # -- descriptions
    @property
    def model_name(self) -> str:
        return self.cfg.model_name

    def info(self) -> dict[str, Any]:
        return {
            "graph": str(self.graph_dir),
            "model": self.model_name,
            "generator": getattr(self.generator, "model", None),
            "cot_model": getattr(self.cot.client, "model", None) if self.cot else None,
            "answerer": "generator" if self.generator is not None else "graph",
        }

    @property
    def graph_answerer(self) -> Any:
        if self._graph_answerer is None:
            from bencao.serving.graph_answerer import GraphAnswerer

            self._graph_answerer = GraphAnswerer(self.retriever)
        return self._graph_answerer

    # -- stages
    def decompose(self, questions: list[str]) -> list[dict[str, Any]]:
        if self.cot is None:
            return [{"triples": None, "reasoning": None, "error": None} for _ in questions]
        return self.cot.decompose_many(questions)

    def retrieve(self, question: str, query_triples: list[Any] | None = None, options: list[str] | None = None) -> Any:
        with self._lock:
            return self.retriever.retrieve(question, query_triples=as_tuples(query_triples), options=options)

    def retrieve_dict(self, question: str, query_triples: list[Any] | None = None, use_cot: bool = True,
                      options: list[str] | None = None) -> dict[str, Any]:
        """Evidence as JSON (``/v1/retrieve``), with the query triples that drove it and timings."""
        t0 = _now()
        cot = self.decompose([question])[0] if (use_cot and query_triples is None) else {"triples": query_triples, "error": None}
        t1 = _now()
        ev = self.retrieve(question, cot["triples"], options)
        t2 = _now()
        return {"question": question, "query_triples": cot["triples"], "cot_error": cot.get("error"),
                "evidence": evidence_dict(ev), "references": [citation(r) for r in references(ev)],
                "timings": {"cot_s": round(t1 - t0, 4), "retrieve_s": round(t2 - t1, 4), "total_s": round(t2 - t0, 4)}}

    # -- answering
    def answer(self, question: str, **params: Any) -> dict[str, Any]:
        return self.answer_many([question], **params)[0]

    def answer_many(self, questions: list[str], options: list[list[str] | None] | None = None, **params: Any) -> list[dict[str, Any]]:
        """Answer a batch: CoT requests batched, retrieval one by one, generation batched.

        ``options`` (one list or None per question: multiple-choice options, candidates) are linked
        by retrieval as well. ``params`` (temperature, max_tokens, ...) go to the generator. Every
        item carries ``timings`` in seconds (the batch-wide stages are shared out evenly).
        """
        if not questions:
            return []
        for q in questions:
            if not isinstance(q, str) or not q.strip():
                raise BencaoError("empty question")
        n = len(questions)
        t0 = _now()
        cots = self.decompose(questions)
        t_cot = (_now() - t0) / n
        results: list[dict[str, Any]] = []
        evidences = []
        opts = list(options) if options is not None else [None] * n
        for q, c, o in zip(questions, cots, opts):
            t = _now()
            if self.generator is None:
                with self._lock:
                    res = self._graph_answer(q, c["triples"])
                results.append(res)
                evidences.append(None)
            else:
                evidences.append(self.retrieve(q, c["triples"], o))
                results.append({})
            results[-1]["timings"] = {"cot_s": round(t_cot, 4), "retrieve_s": round(_now() - t, 4)}
        if self.generator is not None:
            t = _now()
            gen = self._generate(questions, evidences, params)
            t_gen = (_now() - t) / n
            for r, g in zip(results, gen):
                timings = r["timings"]
                r.clear()
                r.update(g)
                r["timings"] = {**timings, "generate_s": round(t_gen, 4)}
        for q, c, r in zip(questions, cots, results):
            r["question"] = q
            r["query_triples"] = c["triples"]
            if c.get("error"):
                r["cot_error"] = c["error"]
            r["timings"]["total_s"] = round(sum(v for k, v in r["timings"].items() if k != "total_s"), 4)
        return results

    def graph_answerer_for(self, query_triples: list[Any] | None) -> Any:
        """The LLM-free answerer; with query triples, one whose retrieval is driven by them."""
        if not query_triples:
            return self.graph_answerer
        from bencao.serving.graph_answerer import GraphAnswerer

        return GraphAnswerer(_WithTriples(self.retriever, as_tuples(query_triples)), self.graph_answerer.cfg)

    def _graph_answer(self, question: str, query_triples: list[Any] | None) -> dict[str, Any]:
        res = self.graph_answerer_for(query_triples).answer(question)
        ev = res.get("evidence")
        refs = references(ev)
        abstained = bool(res.get("abstained"))
        # The answerer's own fallback wording is English; say it in the question's language.
        text = not_in_kb(question, self.cfg.answer) if abstained else str(res.get("answer") or "")
        parsed = parse_reply(text, refs)
        return {"answer": parsed.answer, "citations": parsed.citations, "invalid_citations": parsed.invalid_citations,
                "abstained": abstained, "own_answer": None, "answered_by": "graph", "evidence": evidence_dict(ev),
                "references": [citation(r) for r in refs]}

    def _generate(self, questions: list[str], evidences: list[Any], params: dict[str, Any]) -> list[dict[str, Any]]:
        from bencao.llm import LLMError

        acfg = self.cfg.answer
        out: list[dict[str, Any] | None] = [None] * len(questions)
        batch, slots = [], []
        own_batch, own_slots = [], []
        for i, (q, ev) in enumerate(zip(questions, evidences)):
            refs = references(ev)
            base = {"evidence": evidence_dict(ev), "references": [citation(r) for r in refs], "answered_by": f"generator:{self.generator.model}"}
            if is_empty(ev):
                out[i] = {**base, "answer": not_in_kb(q, acfg), "citations": [], "invalid_citations": [], "abstained": True, "own_answer": None}
                if acfg.own_answer:
                    own_batch.append(own_answer_messages(q, acfg))
                    own_slots.append(i)
            else:
                out[i] = base
                batch.append(build_messages(q, ev, acfg))
                slots.append((i, refs))
        replies = self.generator.complete_many(batch, **params) if batch else []
        for (i, refs), rep in zip(slots, replies):
            if isinstance(rep, LLMError):
                raise GeneratorError(f"generator failed: {rep}")
            parsed = parse_reply(rep.text, refs)
            out[i].update({"answer": parsed.answer, "citations": parsed.citations, "invalid_citations": parsed.invalid_citations,
                           "abstained": False, "own_answer": None, "usage": {"prompt_tokens": rep.prompt_tokens,
                                                                              "completion_tokens": rep.completion_tokens}})
        own = self.generator.complete_many(own_batch, **params) if own_batch else []
        for i, rep in zip(own_slots, own):
            if isinstance(rep, LLMError):
                continue  # the plain "not in the knowledge base" answer stands
            q = questions[i]
            text = parse_reply(rep.text, []).answer
            out[i]["own_answer"] = text
            out[i]["answer"] = f"{out[i]['answer']}\n\n{own_answer_label(q, acfg)}\n{text}"
        return [o for o in out if o is not None]
