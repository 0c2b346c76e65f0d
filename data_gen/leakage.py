"""The leakage guard: evaluation questions must never be distilled into the graph they are scored on.

A question is known by its id and by a key of its normalised text (:func:`question_key`: ``norm_key``
— width, case, traditional → simplified — with spaces and punctuation removed, plus the options of a
choice question, so "Which of the following is correct?" with other options is another question).

- ``bencao data cot --exclude FILE...``: benchmark files, or ``{"id"}`` / ``{"question"}`` lines, whose
  questions are never distilled (:func:`read_exclusions`, :meth:`QuestionSet.match`; a bare question
  line excludes that question whatever its options).
- Every ``data cot`` run that writes the personalized layer records, in the graph manifest under
  ``distilled``, the ids and keys of every question whose reasoning is in the graph
  (:func:`record_distilled`, recomputed from the store's reasoning documents, so it stays true
  after several runs).
- ``half_of(id)``: the half (a | b) a question's id hashes into. ``bench/eval_llm.py --half`` scores one half;
  ``bencao data cot|mcq`` with ``half`` keep the other and exclude every question of this one (by id and text).
- ``bencao eval`` reads it (:func:`distilled_questions`) and flags (``leaked: true`` per record, a
  count in the metrics) or refuses (``eval.on_leak=refuse``) the items whose reasoning is in the graph.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from bencao.errors import InputError
from bencao.io import iter_jsonl
from bencao.text import norm_key

MANIFEST_KEY = "distilled"
_DROP = re.compile(r"[\W_]+", re.UNICODE)
QUESTION_FIELDS = ("question", "query", "statement")


def _norm(text: str) -> str:
    return _DROP.sub("", norm_key(str(text)))


def question_key(question: str, options: dict[str, Any] | None = None) -> str:
    """16 hex characters identifying a question by its normalised text (and its options, sorted by letter)."""
    parts = [_norm(question)]
    if options:
        parts += [f"{k}={_norm(v)}" for k, v in sorted((str(k).strip().upper(), v) for k, v in options.items())]
    return hashlib.sha1("\x1f".join(parts).encode("utf-8")).hexdigest()[:16]


def half_of(rec_id: str) -> str:
    """``a`` or ``b``: the half of a benchmark file a record's id falls in (SHA-256 of the id, even → a)."""
    return "a" if int(hashlib.sha256(str(rec_id).encode("utf-8")).hexdigest(), 16) % 2 == 0 else "b"


def record_question(rec: dict[str, Any]) -> str:
    """The question text of a benchmark or QA record (``question``, ``query`` or ``statement``)."""
    return next((str(rec[f]) for f in QUESTION_FIELDS if rec.get(f)), "")


@dataclass
class QuestionSet:
    """Question ids and question keys; :meth:`match` says which of them an item hits."""

    ids: set[str] = field(default_factory=set)
    keys: set[str] = field(default_factory=set)

    def add(self, qid: str | None, question: str | None, options: dict[str, Any] | None = None) -> None:
        if qid:
            self.ids.add(str(qid))
        if question and _norm(question):
            self.keys.add(question_key(question, options))

    def match(self, qid: str | None, question: str | None, options: dict[str, Any] | None = None) -> list[str]:
        """``["id"]``, ``["question"]``, both, or ``[]``. A stored key without options matches the stem with any options."""
        how = []
        if qid and str(qid) in self.ids:
            how.append("id")
        if question and _norm(question) and (question_key(question, options) in self.keys or (options and question_key(question) in self.keys)):
            how.append("question")
        return how

    def __len__(self) -> int:
        return len(self.ids | self.keys)

    def __bool__(self) -> bool:
        return bool(self.ids or self.keys)


def read_exclusions(paths: Iterable[str | Path]) -> QuestionSet:
    """Ids and question keys of every line of ``paths`` (benchmark JSONL, or ``{"id"}``/``{"question"}`` lines)."""
    qs = QuestionSet()
    for path in paths:
        if not Path(path).exists():
            raise InputError(path, "exclude file not found")
        for lineno, rec in iter_jsonl(path):
            question = record_question(rec)
            if not rec.get("id") and not question:
                raise InputError(path, "an exclude line needs an 'id' or a 'question'", record=f"line {lineno}")
            options = rec.get("options") if isinstance(rec.get("options"), dict) else None
            qs.add(rec.get("id"), question, options)
    return qs


def _reasoning_questions(graph: Any) -> tuple[set[str], set[str], int]:
    """(question ids, question keys, documents) of the store's reasoning documents."""
    ids: set[str] = set()
    keys: set[str] = set()
    n = 0
    for d in graph.documents():
        if d["kind"] != "reasoning":
            continue
        n += 1
        meta = d.get("meta") or {}
        if meta.get("question_id"):
            ids.add(str(meta["question_id"]))
        if meta.get("question_key"):
            keys.add(str(meta["question_key"]))
    return ids, keys, n


def record_distilled(graph: Any, op: str = "distilled", detail: dict[str, Any] | None = None) -> dict[str, Any]:
    """Write the manifest record of the questions whose reasoning the graph holds; returns it.

    Recomputed from the store's reasoning documents (``meta.question_id``, ``meta.question_key``), so
    the record names exactly the questions whose reasoning is in the graph when it is written."""
    ids, keys, n = _reasoning_questions(graph)
    record = {"documents": n, "ids": sorted(ids), "question_keys": sorted(keys)}
    graph.write_manifest(op=op, detail={**(detail or {}), "distilled_questions": len(ids)}, **{MANIFEST_KEY: record})
    return record


def distilled_questions(graph_dir: str | Path) -> QuestionSet:
    """The questions whose reasoning is in the graph at ``graph_dir``, from its manifest record.

    A graph written before the record existed falls back to its reasoning documents' question ids."""
    from bencao.retrieval.graph.store import Graph

    g = Graph.open(graph_dir, read_only=True)
    try:
        rec = g.read_manifest().get(MANIFEST_KEY)
        if rec is not None:
            return QuestionSet(set(rec.get("ids") or []), set(rec.get("question_keys") or []))
        ids, keys, _ = _reasoning_questions(g)
        return QuestionSet(ids, keys)
    finally:
        g.close()
