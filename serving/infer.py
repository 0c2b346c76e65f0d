"""Offline batch inference: ``bencao infer questions.jsonl --output answers.jsonl``.

Input lines are either plain ``{"id", "question"}`` or benchmark records (``task`` = mcq, sd, tf,
rec, qa, el with their fields; see ``evaluation/bench_format.py``): the text asked is the
``question`` / ``statement`` / ``query`` / ``mention``. Multiple-choice options and
recommendation candidates go with the question to the pipeline as one Query of that task, so
every answer — a generator's or the LLM-free answerer's — carries the ``prediction`` the metrics
read (options, claim, ranking); ``el`` records are linked.

Resumable: the output is appended record by record (flushed and fsynced), ids already in it are
skipped on restart, and a line torn by a kill is dropped, so a killed run resumes without
duplicates. Each output line carries the answer, citations, evidence and timings.

The summary a run returns (and ``bencao infer`` prints) has its throughput: questions answered per
second of wall time, and the prompt and generated tokens per second of every LLM stage (CoT model,
generator, ...) summed, counted from the replies themselves (cached replies apart: they generate nothing).
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


def to_query(q: dict[str, Any]) -> Any:
    """The pipeline Query of a read question (plain questions are ``qa``)."""
    from bencao.serving.tasks import Query

    rec = dict(q["record"], task=q["task"] or "qa")
    rec.setdefault("question", q["text"])
    return Query.from_record(rec)


def throughput(answered: int, seconds: float, usage: Any) -> dict[str, Any]:
    """Questions/s and prompt/generated tokens (and tokens/s) of a run that answered ``answered`` in ``seconds``."""
    s = max(seconds, 1e-9)
    prompt, generated = (usage.prompt_tokens, usage.completion_tokens) if usage is not None else (0, 0)
    return {"seconds": round(seconds, 3), "questions_per_s": round(answered / s, 4),
            "llm_requests": usage.requests if usage is not None else 0, "cached_replies": usage.cached if usage is not None else 0,
            "prompt_tokens": prompt, "generated_tokens": generated,
            "prompt_tokens_per_s": round(prompt / s, 2), "generated_tokens_per_s": round(generated / s, 2)}


def summary_line(res: dict[str, Any]) -> str:
    """The throughput of a run in one line."""
    line = f"{res['answered']} questions in {res['seconds']:.2f} s ({res['questions_per_s']:.3g} questions/s)"
    if res["llm_requests"] or res["cached_replies"]:
        line += (f"; LLM: {res['llm_requests']} requests ({res['cached_replies']} cached), {res['prompt_tokens']:,} prompt tokens "
                 f"({res['prompt_tokens_per_s']:,.1f}/s), {res['generated_tokens']:,} generated ({res['generated_tokens_per_s']:,.1f}/s)")
    return line


def run_inference(pipeline: Any, questions_path: str | Path, output_path: str | Path, cfg: InferConfig | None = None,
                  progress: Callable[[int, int], None] | None = None) -> dict[str, Any]:
    """Answer every question not yet in ``output_path``. Returns ``{total, skipped, answered, failed, error}`` and the
    run's throughput (:func:`throughput`: seconds, questions_per_s, prompt/generated tokens and tokens/s): ``failed``
    counts the questions whose LLM request failed (not written: asked again when the run is resumed), ``error`` is
    the first such failure."""
    cfg = cfg or InferConfig()
    questions = read_questions(questions_path)
    meter = getattr(pipeline, "meter", None)
    before = meter.snapshot() if meter is not None else None
    started = time.perf_counter()
    with JsonlAppender(output_path) as out:
        todo = [q for q in questions if q["id"] not in out.done_ids]
        skipped = len(questions) - len(todo)
        done = failed = 0
        first_error: str | None = None
        if progress:
            progress(0, len(todo))
        bs = max(1, cfg.batch_size)
        for i in range(0, len(todo), bs):
            batch = todo[i : i + bs]
            t0 = time.perf_counter()
            links = {q["id"]: pipeline.link(q["text"]) for q in batch if q["task"] == "el"}
            asked = [q for q in batch if q["task"] != "el"]
            answers = dict(zip((q["id"] for q in asked), pipeline.run([to_query(q) for q in asked]))) if asked else {}
            for q in batch:
                rec: dict[str, Any] = {"id": q["id"]}
                rec.update({k: q["record"][k] for k in cfg.keep_fields if k in q["record"]})
                rec["question"] = q["text"]
                if q["task"] == "el":
                    rec["prediction"] = links[q["id"]].to_dict()
                    rec["timings"] = {"batch_s": round(time.perf_counter() - t0, 4), "batch_size": len(batch)}
                    out.write(rec)
                    done += 1
                    continue
                a = answers[q["id"]].to_dict()
                if a.get("error"):  # a failed LLM request: not written, retried when the run resumes
                    failed += 1
                    first_error = first_error or " ".join(str(a["error"]).split())[:300]
                    continue
                rec.update({k: a.get(k) for k in ("answer", "prediction", "citations", "invalid_citations", "unsupported_citations", "abstained", "own_answer",
                                                  "answered_by", "query_triples")})
                if cfg.evidence:
                    rec["evidence"] = a.get("evidence")
                rec["timings"] = {**a.get("timings", {}), "batch_s": round(time.perf_counter() - t0, 4), "batch_size": len(batch)}
                out.write(rec)
                done += 1
            if progress:
                progress(done, len(todo))
    usage = meter.snapshot().minus(before) if meter is not None else None
    return {"total": len(questions), "skipped": skipped, "answered": done, "failed": failed, "error": first_error,
            **throughput(done, time.perf_counter() - started, usage)}
