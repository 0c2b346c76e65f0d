"""The one answering pipeline: question understanding → linking → retrieval → answer.

Every front end — ``bencao ask``, ``bencao serve``, ``bencao infer``, ``bencao eval`` — builds
:class:`~bencao.serving.tasks.Query` values and runs them through :meth:`AnswerPipeline.run`, from
the same serving config, so what is evaluated is what is served. Stages, each optional, each its
own ``bencao.llm`` client from config (no LLM → the stage's rule):

1. ``understand`` (LLM): typed mentions (verbatim or the LLM's own term) → linked beside or instead
   of the dictionary mentions; keywords → their top candidate entities → the linker's selector;
   patient information → the case layer's patient filter;
2. ``cot`` (the fine-tuned CoT model): query triples in the SFT ``triples`` form → micro retrieval;
3. ``planner`` (LLM): relation sequences from the graph's relation list → reasoning paths;
4. retrieval (:class:`bencao.retrieval.search.Retriever`, which also runs the linker's selector /
   scorer / synonym LLMs): the typed :class:`~bencao.retrieval.evidence.Evidence`;
5. answer: the ``generator`` LLM with the task's template (qa with citations and the "not in the
   knowledge base" rule, mcq / sd / tf with a parsable answer line, rec as a JSON recommendation),
   or, with no generator, the LLM-free :class:`~bencao.serving.graph_answerer.GraphAnswerer` on the
   same Evidence; ``answerer: none`` stops after retrieval.

LLM requests of a batch go out together (outside the lock); retrieval and graph answering run one
at a time under a lock (one SQLite connection and index set per process).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bencao.deadline import check_deadline
from bencao.errors import BencaoError
from bencao.retrieval.evidence import Evidence
from bencao.serving.answer import (ANSWER_PREFIX, build_messages, citation, citation_support, generator_context, not_in_kb, own_answer_label,
                                   own_answer_messages, parse_reply, prompt_language, references)
from bencao.serving.config import PipelineConfig
from bencao.serving.cot import CotDecomposer
from bencao.serving.tasks import Query, read_prediction


class GeneratorError(BencaoError):
    """The generator LLM failed (after its retries): a server-side problem, not the user's."""


def as_tuples(triples: list[Any] | None) -> list[tuple[str, str, str]] | None:
    """Query triples as the retriever takes them: ``(head, relation, tail)``, unknown parts ("?") empty."""
    if not triples:
        return None
    out = []
    for t in triples:
        parts = [t.get(k, "") for k in ("head", "relation", "tail")] if isinstance(t, dict) else list(t)
        out.append(tuple("" if str(p).strip() in ("?", "？") else str(p).strip() for p in parts))
    return out  # type: ignore[return-value]


@dataclass
class Answer:
    """What the pipeline says of one Query, with everything that produced it."""

    query: Query
    answer: str | None = None
    prediction: dict[str, Any] | None = None  # what the metrics read (letters, ranking, true/false, items, text)
    abstained: bool = False
    citations: list[dict[str, Any]] = field(default_factory=list)
    invalid_citations: list[int] = field(default_factory=list)
    unsupported_citations: list[int] = field(default_factory=list)  # cited texts that do not state their clause (citation_support)
    own_answer: str | None = None
    answered_by: str = "none"  # graph | generator:<model> | none
    evidence: Evidence | None = None
    query_triples: list[Any] | None = None
    understanding: dict[str, Any] | None = None
    plan: dict[str, Any] | None = None
    reply: str | None = None  # the generator's raw reply
    usage: dict[str, int] | None = None
    error: str | None = None  # a failed LLM request (the item can be retried)
    cot_error: str | None = None
    timings: dict[str, float] = field(default_factory=dict)
    context: Any = None  # the RenderedContext the generator read (its numbers are the citations)

    def to_dict(self) -> dict[str, Any]:
        refs = self.context.references() if self.context is not None else references(self.evidence)
        out = {"question": self.query.question, "task": self.query.task, "answer": self.answer, "prediction": self.prediction,
               "abstained": self.abstained, "citations": self.citations, "invalid_citations": self.invalid_citations,
               "unsupported_citations": self.unsupported_citations, "own_answer": self.own_answer, "answered_by": self.answered_by,
               "evidence": self.evidence.to_dict() if self.evidence is not None else None,
               "references": [citation(r) for r in refs], "query_triples": self.query_triples, "timings": self.timings}
        for k in ("understanding", "plan", "reply", "usage", "error", "cot_error"):
            v = getattr(self, k)
            if v:
                out[k] = v
        return out


def _now() -> float:
    return time.perf_counter()


class AnswerPipeline:
    """Loads the graph, retriever and models once; answers Queries (thread-safe).

    ``clients`` replaces the configured LLM of a stage by name (``understand``, ``cot``, ``planner``,
    ``generator``); ``cache_dir`` gives every stage's client a response cache there unless its own
    ``llm.cache`` says otherwise (``bencao eval`` uses it to resume and replay runs).
    """

    def __init__(self, graph_dir: str | Path | None, cfg: PipelineConfig | None = None, *, read_only: bool = True,
                 retriever: Any = None, clients: dict[str, Any] | None = None, cache_dir: str | Path | None = None):
        from bencao.llm import make_client
        from bencao.llm.meter import Metered, UsageMeter
        from bencao.retrieval.graph.store import Graph
        from bencao.retrieval.linking import LinkerLLMs
        from bencao.retrieval.search.retriever import Retriever
        from bencao.serving.graph_answerer import GraphAnswerer
        from bencao.serving.planner import PathPlanner
        from bencao.serving.understand import QuestionUnderstanding

        self.cfg = cfg or PipelineConfig()
        self.cfg.validate()
        if graph_dir is None and retriever is None and not (self.cfg.answer.closed_book and self.cfg.planner.llm is None):
            raise BencaoError("the answering pipeline needs a graph directory (only a closed-book generator without a planner runs without one)")
        self.graph_dir = Path(graph_dir) if graph_dir is not None else None
        clients = dict(clients or {})
        cache = str(Path(cache_dir) / "llm_cache.sqlite") if cache_dir else None

        self.meter = UsageMeter()  # tokens of every LLM reply, all stages: throughput figures (bencao infer)

        def client(name: str, llm_cfg: Any) -> Any:
            c = clients[name] if name in clients else make_client(llm_cfg, default_cache=cache) if llm_cfg is not None else None
            return Metered(c, self.meter) if c is not None else None

        if retriever is None and self.graph_dir is not None:
            graph = Graph.open(self.graph_dir, read_only=read_only)
            lk = self.cfg.retrieval.linking
            llms = LinkerLLMs(client("selector", lk.llm), client("scorer", lk.scorer.llm), None)
            llms.synonyms = client("synonyms", lk.synonyms.llm) or llms.scorer or llms.selector
            retriever = Retriever(graph, self.cfg.retrieval, llms=llms)
        self.retriever = retriever
        self.generator = client("generator", self.cfg.generator)
        cot_client = client("cot", self.cfg.cot.llm)
        self.cot = CotDecomposer(cot_client, self.cfg.cot) if cot_client is not None else None
        u = self.cfg.understand
        und_client = client("understand", u.llm)
        self.understander = QuestionUnderstanding(und_client, u.max_entities, u.prompts_dir) if und_client is not None else None
        p = self.cfg.planner
        plan_client = client("planner", p.llm)
        self.planner = (PathPlanner(plan_client, self.retriever.g.relations(), max_paths=p.max_paths, max_hops=p.max_hops,
                                    prompts_dir=p.prompts_dir) if plan_client is not None else None)
        self.graph_answerer = GraphAnswerer(self.cfg.graph_answer, self.cfg.retrieval.question.stopwords)
        self._lock = threading.RLock()

    # -- descriptions
    @property
    def model_name(self) -> str:
        return self.cfg.model_name

    @property
    def answerer(self) -> str:
        a = self.cfg.answerer
        if a == "auto":
            return "generator" if self.generator is not None else "graph"
        return a

    def info(self) -> dict[str, Any]:
        linker = self.retriever.linker if self.retriever is not None else None
        return {
            "graph": str(self.graph_dir) if self.graph_dir else None, "model": self.model_name, "answerer": self.answerer,
            "generator": getattr(self.generator, "model", None), "cot_model": getattr(getattr(self.cot, "client", None), "model", None),
            "stages": {"understand": self.understander is not None, "cot": self.cot is not None, "planner": self.planner is not None,
                       "selector": linker.cfg.selector if linker else None, "scorer": bool(linker and linker.llms.scorer is not None),
                       "synonyms": bool(linker and linker.llms.synonyms is not None), "generator": self.generator is not None},
        }

    # -- single stages (front ends that need only one)
    def link(self, mention: str, context: str | None = None) -> Any:
        if self.retriever is None:
            raise BencaoError("entity linking needs a graph (--graph DIR)")
        with self._lock:
            return self.retriever.link(mention, context)

    def retrieve_dict(self, question: str, query_triples: list[Any] | None = None, use_cot: bool = True,
                      options: list[str] | None = None, budget_chars: int | None = None) -> dict[str, Any]:
        """Evidence as JSON (``/v1/retrieve``): every stage up to retrieval, with timings, and ``context``: the
        numbered evidence text the generator would read, cut to ``budget_chars`` (default: the recipe's
        ``answer.context.budget_chars``), with its citation list."""
        q = Query(question, candidates=list(options) if options else None,
                  query_triples=query_triples if (query_triples is not None or not use_cot) else None)
        if not use_cot and q.query_triples is None:
            q.query_triples = []
        a = self.run([q], answer=False)[0]
        ctx = generator_context(q, a.evidence, self.cfg.answer, budget_chars)
        return {"question": question, "query_triples": a.query_triples, "cot_error": a.cot_error,
                "evidence": a.evidence.to_dict() if a.evidence is not None else None,
                "references": [citation(r) for r in references(a.evidence)], "understanding": a.understanding, "plan": a.plan,
                "context": ctx.text, "context_chars": len(ctx.text), "budget_chars": ctx.budget_chars,
                "context_citations": ctx.references(), "timings": a.timings}

    # -- answering
    def answer(self, question: str, *, task: str | None = None, options: dict[str, str] | None = None,
               candidates: list[str] | None = None, **params: Any) -> dict[str, Any]:
        """One question (the HTTP API's chat completion): raises :class:`GeneratorError` when the generator fails."""
        a = self.run([Query(question, task=task or "qa", options=options, candidates=candidates)], **params)[0]
        if a.error:
            raise GeneratorError(f"generator failed: {a.error}")
        return a.to_dict()

    def run(self, queries: list[Query], *, answer: bool = True, **params: Any) -> list[Answer]:
        """Answer a batch: LLM stages batched, retrieval one by one, answers batched.

        ``params`` (temperature, max_tokens, ...) go to the generator. Each Answer carries
        ``timings`` in seconds (batch-wide stages shared out evenly). A failed generator request
        leaves ``error`` set on its Answer instead of raising, so a long run goes on.
        """
        if not queries:
            return []
        n = len(queries)
        out = [Answer(query=q) for q in queries]
        questions = [q.question for q in queries]
        langs = [q.language for q in queries]

        t = _now()
        und = self.understander.understand_many(questions, langs) if self.understander is not None else [None] * n
        for a, u in zip(out, und):
            a.understanding = u.to_dict() if u is not None else None
        self._share(out, "understand_s", t)

        t = _now()
        need = [i for i, q in enumerate(queries) if q.query_triples is None]
        for i, q in enumerate(queries):
            out[i].query_triples = q.query_triples or None
        if self.cot is not None and need:
            for i, c in zip(need, self.cot.decompose_many([questions[i] for i in need])):
                out[i].query_triples, out[i].cot_error = c["triples"], c.get("error")
        self._share(out, "cot_s", t)

        t = _now()
        plans: list[Any] = [None] * n
        if self.planner is not None:
            ents = [[{"mention": m.text, "type": m.type} for m in (u.mentions if u is not None else [])] for u in und]
            plans = self.planner.plan_many(questions, langs, ents)
            for a, p in zip(out, plans):
                a.plan = p.to_dict()
        self._share(out, "plan_s", t)

        for i, q in enumerate(queries):
            check_deadline("retrieval")
            t = _now()
            if not self.cfg.answer.closed_book:
                u, p = und[i], plans[i]
                with self._lock:
                    out[i].evidence = self.retriever.retrieve(
                        q.question, query_triples=as_tuples(out[i].query_triples), options=q.option_texts(),
                        mentions=u.mentions if u is not None else None,
                        dictionary=u is None or self.cfg.understand.mode == "merge" or not u.mentions,
                        keywords=u.keywords if u is not None else None,
                        patient=u.patient if u is not None and u.patient else None,
                        planned_paths=p.paths if p is not None else None,
                        planned_only=p is not None and bool(p.paths) and self.cfg.planner.mode == "instead",
                        asked_relations=self.graph_answerer.intent_relations(q.question))
            out[i].timings["retrieve_s"] = round(_now() - t, 4)

        if answer:
            check_deadline("answering")
            t = _now()
            if self.answerer == "generator":
                self._generate(out, params)
            elif self.answerer == "graph":
                with self._lock:
                    for a in out:
                        self._graph_answer(a)
            self._share(out, "answer_s", t)
        for a in out:
            a.timings["total_s"] = round(sum(v for k, v in a.timings.items() if k != "total_s"), 4)
        return out

    def answer_many(self, queries: list[Query | str], **params: Any) -> list[dict[str, Any]]:
        """``run`` for Queries or plain questions, as JSON-ready dicts."""
        qs = [q if isinstance(q, Query) else Query(q) for q in queries]
        return [a.to_dict() for a in self.run(qs, **params)]

    # -- answerers
    @staticmethod
    def _share(out: list[Answer], key: str, t0: float) -> None:
        each = round((_now() - t0) / max(1, len(out)), 4)
        for a in out:
            a.timings[key] = each

    def _graph_answer(self, a: Answer) -> None:
        """The LLM-free answer of one Query from its Evidence, in the question's language."""
        q, ev, ga = a.query, a.evidence or Evidence(question=a.query.question), self.graph_answerer
        a.answered_by = "graph"
        if q.task in ("mcq", "sd"):
            res = ga.answer_mcq(q.question, q.options or {}, ev, q.n_answers if q.task == "mcq" else 1)
            a.prediction = {k: res[k] for k in ("answer", "ranking", "scores", "abstained", "exception")}
            a.abstained = res["abstained"]
            a.answer = ga.not_in_kb(q.question) if a.abstained else ", ".join(f"{k}. {q.options[k]}" for k in res["answer"])
        elif q.task == "tf":
            res = ga.answer_tf(q.question, ev)
            a.prediction = dict(res)
            a.abstained = res["abstained"]
            zh = q.language == "zh"
            a.answer = ga.not_in_kb(q.question) if a.abstained else (("正确" if res["answer"] else "错误") if zh else str(res["answer"]).lower())
        elif q.task == "rec":
            res = ga.rank_candidates(q.question, q.candidates, ev) if q.candidates else ga.recommend(q.question, ev)
            a.prediction = dict(res)
            a.abstained = res["abstained"]
            items = res.get("selected", res.get("items")) or []
            a.answer = ga.not_in_kb(q.question) if a.abstained else ("、" if q.language == "zh" else ", ").join(items)
            if not q.candidates:  # open-ended: the free answer, whose foods evaluation links (Yaoshi-RAG's scoring)
                a.prediction["text"] = "" if a.abstained else a.answer
        else:
            res = ga.answer(q.question, ev)
            a.abstained = res["abstained"]
            parsed = parse_reply(res["answer"], references(ev))
            a.answer, a.citations, a.invalid_citations = parsed.answer, parsed.citations, parsed.invalid_citations
            a.prediction = {"text": a.answer, "abstained": a.abstained, "support": res["support"]}

    def _no_linking_fact(self, a: Answer) -> bool:
        """answer.yes_no_rule: a yes/no question whose asked entity no fact links to the asked condition."""
        from bencao.serving.question_shape import is_yes_no

        if not self.cfg.answer.yes_no_rule or a.evidence is None or not is_yes_no(a.query.question):
            return False
        with self._lock:
            res = self.graph_answerer.answer(a.query.question, a.evidence)
        return bool(res.get("abstained"))

    def scores_letters(self) -> bool:
        """Whether mcq / sd questions are answered by scoring the option letters (answer.mcq_mode)."""
        from bencao.llm.base import can_score

        mode = self.cfg.answer.mcq_mode
        if mode == "letters" and not can_score(self.generator):
            raise BencaoError(f"answer.mcq_mode: letters needs a generator that scores choices; "
                              f"{getattr(self.generator, 'model', '?')} does not (use generate)")
        return mode == "letters" or (mode == "auto" and can_score(self.generator, exact=True))

    def _score_letters(self, items: list[Answer]) -> None:
        """mcq / sd by the option letters' next-token scores (lm-eval-harness's multiple-choice scoring)."""
        from bencao.llm import LLMError

        acfg = self.cfg.answer
        by_prefix: dict[str, list[Answer]] = {}
        for a in items:
            by_prefix.setdefault(ANSWER_PREFIX[prompt_language(a.query, acfg)], []).append(a)
        for prefix, group in by_prefix.items():
            batch = [build_messages(a.query, None if acfg.closed_book else a.evidence, acfg,
                                    context=None if acfg.closed_book else a.context, scoring=True) for a in group]
            results = self.generator.score_choices_many(batch, [list(a.query.options or {}) for a in group], prefix=prefix)
            for a, r in zip(group, results):
                if isinstance(r, LLMError):
                    a.error = str(r)
                    continue
                n = a.query.n_answers if a.query.task == "mcq" else 1
                ranking = sorted((k for k, v in r.scores.items() if v is not None), key=lambda k: -r.scores[k])  # type: ignore[operator]
                a.prediction = {"answer": ranking[:n], "ranking": ranking, "scores": {k: (None if v is None else round(v, 4))
                                                                                       for k, v in r.scores.items()},
                                "abstained": not ranking, "scored_by": "letters"}
                a.abstained = not ranking
                a.usage = {"prompt_tokens": r.prompt_tokens, "completion_tokens": 0}
                opts = a.query.options or {}
                a.answer = ", ".join(f"{k}. {opts[k]}" for k in ranking[:n])

    def _generate(self, out: list[Answer], params: dict[str, Any]) -> None:
        from bencao.llm import LLMError

        acfg = self.cfg.answer
        model = getattr(self.generator, "model", "?")
        batch, slots, own, scored = [], [], [], []
        letters = any(a.query.task in ("mcq", "sd") for a in out) and self.scores_letters()
        for a in out:
            a.answered_by = f"generator:{model}"
            ev = a.evidence
            if not acfg.closed_book:
                a.context = generator_context(a.query, ev, acfg)
            if a.query.task == "qa" and not acfg.closed_book and (ev is None or ev.is_empty() or self._no_linking_fact(a)):
                a.answer, a.abstained = not_in_kb(a.query.question, acfg), True  # nothing to ground an answer in
                a.prediction = {"text": a.answer, "abstained": True}
                own.append(a)
                continue
            if letters and a.query.task in ("mcq", "sd") and a.query.options:
                scored.append(a)
                continue
            batch.append(build_messages(a.query, None if acfg.closed_book else ev, acfg, context=None if acfg.closed_book else a.context))
            slots.append(a)
        if scored:
            self._score_letters(scored)
        replies = self.generator.complete_many(batch, **params) if batch else []
        for a, rep in zip(slots, replies):
            if isinstance(rep, LLMError):
                a.error = str(rep)
                continue
            a.reply = rep.text
            a.usage = {"prompt_tokens": rep.prompt_tokens, "completion_tokens": rep.completion_tokens}
            parsed = parse_reply(rep.text, a.context.references() if a.context is not None else [])
            a.citations, a.invalid_citations = parsed.citations, parsed.invalid_citations
            if a.query.task == "qa":
                if parsed.not_in_kb:  # the evidence does not answer the question (iDISK2.0-RAG)
                    a.answer, a.abstained, a.citations = not_in_kb(a.query.question, acfg), True, []
                    own.append(a)
                else:
                    a.answer = parsed.answer
                    a.unsupported_citations = citation_support(a.answer, a.citations, a.query.question)
                a.prediction = {"text": a.answer, "abstained": a.abstained}
            else:
                a.prediction = read_prediction(a.query, rep.text)
                a.abstained = bool(a.prediction.get("abstained"))
                a.answer = parsed.answer
        if acfg.own_answer and own:
            for a, rep in zip(own, self.generator.complete_many([own_answer_messages(a.query.question, acfg) for a in own], **params)):
                if isinstance(rep, LLMError):
                    continue  # the plain "not in the knowledge base" answer stands
                text = parse_reply(rep.text, []).answer
                a.own_answer = text
                a.answer = f"{a.answer}\n\n{own_answer_label(a.query.question, acfg)}\n{text}"
