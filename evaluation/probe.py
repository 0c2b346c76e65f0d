"""The question-only retrieval probe behind ``answer_recall@k``, ``distractor_rate@k``, ``margin@k`` and ``mrr``.

A system's own evidence cannot tell whether retrieval finds the answer: with one query per option
(``retrieval.macro.option_queries``) every option's text lands in the evidence about equally often,
so "the evidence holds the gold option" measures *coverage*. The probe asks the question the way a
user of ``POST /v1/retrieve`` does — the question alone, no options, no option queries — through
the same pipeline and retrieval recipe the system under test is served with, and reads the
Evidence's snippets in rank order as the ranked passages (its first ``k`` snippets are what
``/v1/retrieve`` returns). Per record it stores (:func:`passage_ranks`):

- ``gold_rank``: the 1-based rank of the first passage holding a gold option's text (None: none of
  the top :data:`DEPTH` does);
- ``distractor_ranks``: each distractor option's first rank (None likewise);
- ``chars``: the characters of the top 5 / 10 / 20 passages; ``n_passages``: how many there were.

A passage *holds* a text when the text's matching key (:func:`bencao.text.norm_key`) occurs in the
passage's: the reading of the evidence metric (``evidence_contains_gold``). A passage is the
snippet as the index and the evidence show it: its heading path, a newline, its text.
:mod:`bencao.evaluation.metrics` aggregates these into the metrics; ``bench/retrieval_peers.py``
scores other retrievers' rankings with the same function.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from bencao.text import norm_key

#: Passages read per question (the deepest k of the metrics).
DEPTH = 20
#: The k of ``answer_recall@k``, ``distractor_rate@k``, ``margin@k`` and the stored ``chars``.
KS = (5, 10, 20)
#: Bumped when what the probe stores changes: a run's predictions are not resumed across versions.
VERSION = 1


def option_texts(rec: dict[str, Any]) -> tuple[list[str], dict[str, str]] | None:
    """``(gold texts, {distractor label: text})`` of a record, None for a task without an answer text.

    mcq / sd: the gold options and the other options (by letter); rec with candidates: the gold
    items and the other candidates; qa: the reference answer, no distractors. tf and el have no
    answer text to find."""
    task = rec.get("task")
    if task in ("mcq", "sd"):
        opts = {str(k): str(v) for k, v in (rec.get("options") or {}).items()}
        gold = {str(a) for a in rec.get("answer") or []}
        return [opts[a] for a in opts if a in gold], {a: t for a, t in opts.items() if a not in gold}
    if task == "rec" and rec.get("candidates"):
        gold = [str(g) for g in rec.get("gold") or []]
        return gold, {str(c): str(c) for c in rec["candidates"] if str(c) not in set(gold)}
    if task == "qa" and rec.get("answer"):
        return [str(rec["answer"])], {}
    return None


def passage_text(path: list[str] | None, text: str) -> str:
    """A snippet as a passage: heading path, newline, text (as the lexical index and ``Evidence.text`` show it)."""
    head = " › ".join(path or [])
    return f"{head}\n{text}" if head else str(text)


def passage_ranks(rec: dict[str, Any], passages: list[str], snippet_ids: list[str] | None = None) -> dict[str, Any] | None:
    """The probe's per-record row for ``passages`` (best first); None when the record has no answer text."""
    texts = option_texts(rec)
    if texts is None:
        return None
    gold, distractors = texts
    passages = [str(p) for p in passages[:DEPTH]]
    keys = [norm_key(p) for p in passages]

    def first(text: str) -> int | None:
        k = norm_key(text)
        if not k:
            return None
        return next((i + 1 for i, pk in enumerate(keys) if k in pk), None)

    gold_ranks = [r for r in (first(g) for g in gold) if r is not None]
    row: dict[str, Any] = {
        "gold_rank": min(gold_ranks) if gold_ranks else None,
        "distractor_ranks": {label: first(t) for label, t in distractors.items() if norm_key(t)},
        "n_passages": len(passages),
        "chars": {str(k): sum(len(p) for p in passages[:k]) for k in KS},
    }
    if snippet_ids is not None:
        row["snippet_ids"] = list(snippet_ids[:DEPTH])
    return row


def identity(config: Any, graph_dir: str | Path | None) -> dict[str, Any] | None:
    """What the probe's rows depend on beyond the serving config (which the run identity holds already);
    None when there is no probe: no graph, ``eval.retrieval_probe=false``, or a closed-book recipe (the
    served pipeline retrieves nothing, so there is no retrieval to measure)."""
    if graph_dir is None or not (Path(graph_dir) / "graph.sqlite").exists() or not config.eval.retrieval_probe:
        return None
    if config.answer.closed_book:
        return None
    return {"version": VERSION, "depth": DEPTH, "option_queries": False, "options_passed": False, "match": "norm_key"}


def probe_config(config: Any) -> Any:
    """The serving config as the probe runs it: retrieval as configured, but no option queries, no answer."""
    cfg = copy.deepcopy(config)
    cfg.retrieval.macro.option_queries = False
    cfg.answerer = "none"
    cfg.generator = None
    cfg.answer.closed_book = False
    return cfg


class RetrievalProbe:
    """Question-only retrieval for the records of a run: ``run(records) -> [row | None]``.

    ``pipeline``: the system under test's :class:`~bencao.serving.pipeline.AnswerPipeline`, whose
    graph, indexes and LLM clients the probe shares (a shallow view with the probe's config);
    without one the probe opens its own on ``graph_dir``."""

    def __init__(self, graph_dir: str | Path, config: Any, out_dir: str | Path | None = None, pipeline: Any = None):
        self.graph_dir = Path(graph_dir)
        self.cfg = probe_config(config)
        self.out_dir = Path(out_dir) if out_dir else None
        self._base = pipeline
        self._pipeline: Any = None
        self._own = False

    @property
    def pipeline(self) -> Any:
        if self._pipeline is None:
            base = self._base
            if base is not None and getattr(base, "retriever", None) is not None:
                view = copy.copy(base)  # shares the graph, indexes, LLM clients and lock
                view.cfg = self.cfg
                view.retriever = copy.copy(base.retriever)
                view.retriever.cfg = self.cfg.retrieval
                view.generator = None
                self._pipeline = view
            else:
                from bencao.serving.pipeline import AnswerPipeline

                self._pipeline = AnswerPipeline(self.graph_dir, self.cfg, cache_dir=self.out_dir)
                self._own = True
        return self._pipeline

    def run(self, records: list[dict[str, Any]]) -> list[dict[str, Any] | None]:
        from bencao.evaluation.bench_format import query_text
        from bencao.serving.tasks import Query

        out: list[dict[str, Any] | None] = [None] * len(records)
        todo = [i for i, r in enumerate(records) if option_texts(r) is not None and str(query_text(r) or "").strip()]
        if not todo:
            return out
        # the question alone, as POST /v1/retrieve takes it: no options, no candidates (Query's defaults)
        queries = [Query(str(query_text(records[i])), lang=records[i].get("lang"), id=str(records[i].get("id"))) for i in todo]
        answers = self.pipeline.run(queries, answer=False)
        for i, a in zip(todo, answers):
            snips = list(a.evidence.snippets) if a.evidence is not None else []
            out[i] = passage_ranks(records[i], [passage_text(s.path, s.text) for s in snips], [s.id for s in snips])
        return out

    def close(self) -> None:
        if self._own and self._pipeline is not None and getattr(self._pipeline, "retriever", None) is not None:
            try:
                self._pipeline.retriever.g.close()
            except Exception:  # noqa: BLE001 - closing a read-only graph twice is harmless
                pass
        self._pipeline = None
