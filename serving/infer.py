"""Offline batch inference: ``bencao infer questions.jsonl --output answers.jsonl``.

Input lines are either plain ``{"id", "question"}`` or benchmark records (``task`` = mcq, sd, tf,
rec, qa, el with their fields; see ``evaluation/bench_format.py``): the text asked is the
``question`` / ``statement`` / ``query`` / ``mention``. Multiple-choice options and
recommendation candidates are shown to a generator in the question; with the LLM-free answerer
they go to its option, claim and candidate scorers, whose prediction is kept under ``prediction``.

Resumable: the output is appended record by record (flushed and fsynced), ids already in it are
skipped on restart, and a line torn by a kill is dropped, so a killed run resumes without
duplicates. Each output line carries the answer, citations, evidence and timings.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from bencao.config import field
from bencao.errors import InputError
from bencao.io import JsonlAppender, iter_jsonl

TEXT_KEYS = {"mcq": "question", "sd": "question", "qa": "question", "tf": "statement", "rec": "query", "el": "mention"}


@dataclass
class InferConfig:
    """Batch inference settings."""

    batch_size: int = field(8, help="Questions answered together (CoT and generator requests are batched).")
    keep_fields: list[str] = field(default_factory=lambda: ["task", "lang", "source"], help="Input fields copied to each output line.")
    evidence: bool = field(True, help="Write the evidence of each answer (set false for small outputs).")


def read_questions(path: str | Path) -> list[dict[str, Any]]:
    """Validated questions, in file order: ``{id, text, task, record, line}``; one-line errors name file and line."""
    out: list[dict[str, Any]] = []
    seen: dict[str, int] = {}
    for lineno, rec in iter_jsonl(path):
        where = f"line {lineno}"
        rid = rec.get("id")
        if not isinstance(rid, (str, int)) or isinstance(rid, bool) or str(rid).strip() == "":
            raise InputError(path, "'id' must be a non-empty string", record=where)
        rid = str(rid)
        if rid in seen:
            raise InputError(path, f"id {rid!r} repeats line {seen[rid]}", record=where)
        seen[rid] = lineno
        task = rec.get("task")
        if task is not None and task not in TEXT_KEYS:
            raise InputError(path, f"record {rid!r}: 'task' must be one of {', '.join(TEXT_KEYS)}, got {task!r}", record=where)
        key = TEXT_KEYS.get(task, "question")
        text = rec.get(key)
        if not isinstance(text, str) or not text.strip():
            raise InputError(path, f"record {rid!r}: {key!r} must be a non-empty string", record=where)
        if task in ("mcq", "sd") and not (isinstance(rec.get("options"), dict) and rec["options"]):
            raise InputError(path, f"record {rid!r}: 'options' must be an object of lettered options", record=where)
        if task == "rec" and not (isinstance(rec.get("candidates"), list) and rec["candidates"]):
            raise InputError(path, f"record {rid!r}: 'candidates' must be a non-empty list", record=where)
        out.append({"id": rid, "text": text.strip(), "task": task, "record": rec, "line": lineno})
    return out


def prompt_text(q: dict[str, Any]) -> str:
    """What a generator is asked: the question, with the options or candidates listed."""
    rec, task = q["record"], q["task"]
    if task in ("mcq", "sd"):
        return q["text"] + "\n" + "\n".join(f"{k}. {v}" for k, v in rec["options"].items())
    if task == "rec":
        return q["text"] + "\n" + "\n".join(f"- {c}" for c in rec["candidates"])
    return q["text"]


def options_of(q: dict[str, Any]) -> list[str] | None:
    """Option or candidate texts that retrieval should link too."""
    rec, task = q["record"], q["task"]
    if task in ("mcq", "sd"):
        return [str(v) for v in rec["options"].values()]
    if task == "rec":
        return [str(c) for c in rec["candidates"]]
    return None


def _task_prediction(pipeline: Any, q: dict[str, Any], query_triples: list[Any] | None) -> dict[str, Any] | None:
    """The LLM-free answerer's prediction for scored tasks (mcq/sd options, tf claims, rec candidates)."""
    task, rec = q["task"], q["record"]
    with pipeline._lock:
        ga = pipeline.graph_answerer_for(query_triples)
        if task in ("mcq", "sd"):
            res = ga.answer_mcq(q["text"], rec["options"])
            return {"answer": list(res.get("answer") or []), "ranking": list(res.get("ranking") or []), "scores": res.get("scores"),
                    "abstained": bool(res.get("abstained"))}
        if task == "tf":
            res = ga.answer_tf(q["text"])
            return {"answer": res.get("answer"), "score": res.get("score"), "abstained": bool(res.get("abstained"))}
        if task == "rec":
            res = ga.rank_candidates(q["text"], rec["candidates"])
            return {"ranking": list(res.get("ranking") or []), "scores": res.get("scores"), "selected": list(res.get("selected") or []),
                    "abstained": bool(res.get("abstained"))}
    return None


def run_inference(pipeline: Any, questions_path: str | Path, output_path: str | Path, cfg: InferConfig | None = None,
                  progress: Callable[[int, int], None] | None = None) -> dict[str, int]:
    """Answer every question not yet in ``output_path``. Returns ``{total, skipped, answered}``."""
    cfg = cfg or InferConfig()
    questions = read_questions(questions_path)
    with JsonlAppender(output_path) as out:
        todo = [q for q in questions if q["id"] not in out.done_ids]
        skipped = len(questions) - len(todo)
        done = 0
        if progress:
            progress(0, len(todo))
        bs = max(1, cfg.batch_size)
        for i in range(0, len(todo), bs):
            batch = todo[i : i + bs]
            t0 = time.perf_counter()
            answers = pipeline.answer_many([prompt_text(q) for q in batch], options=[options_of(q) for q in batch])
            for q, a in zip(batch, answers):
                rec: dict[str, Any] = {"id": q["id"]}
                rec.update({k: q["record"][k] for k in cfg.keep_fields if k in q["record"]})
                rec["question"] = q["text"]
                rec.update({k: a.get(k) for k in ("answer", "citations", "abstained", "own_answer", "answered_by", "query_triples")})
                if pipeline.generator is None and q["task"] in ("mcq", "sd", "tf", "rec"):
                    t = time.perf_counter()
                    rec["prediction"] = _task_prediction(pipeline, q, a.get("query_triples"))
                    a["timings"]["predict_s"] = round(time.perf_counter() - t, 4)
                if cfg.evidence:
                    rec["evidence"] = a.get("evidence")
                rec["timings"] = {**a.get("timings", {}), "batch_s": round(time.perf_counter() - t0, 4), "batch_size": len(batch)}
                out.write(rec)
                done += 1
            if progress:
                progress(done, len(todo))
    return {"total": len(questions), "skipped": skipped, "answered": done}
