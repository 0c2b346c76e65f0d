"""The one benchmark format: JSONL, one record a line, validated record by record.

Every record has ``id`` (unique in its file), ``task`` and optionally ``lang`` and ``source``
(defaults to the file stem). Per task:

- ``mcq`` / ``sd``: ``question``, ``options`` (``{"A": "..."}``, letters A–Z), ``answer`` (list of
  option letters, one or more). ``sd`` (syndrome differentiation) is scored on the option ranking.
- ``tf``: ``statement``, ``answer`` (true/false).
- ``el``: ``mention``, ``gold_ids`` (non-empty list of ontology ids); optional ``context`` (string).
- ``rec``: ``query``, ``candidates`` (non-empty list, no duplicates), ``gold`` (list of candidates,
  may be empty). Without ``candidates`` the record is open-ended (Yaoshi-RAG): ``gold`` lists the
  foods a free-text answer should name.
- ``qa``: ``question``, ``answer`` (reference text) — free text, scored with BLEU/chrF/GLEU.

Any task may carry ``gold_evidence`` (non-empty strings: the passages a retriever should find),
the reference of the context metrics. Other keys are kept as they are (e.g. ``tcm_disease``).

Bad records are skipped and counted (``Bench.skipped``: line and problem of each), so one bad line
does not cost a multi-thousand-record run; ``strict=True`` (``bencao eval --strict``) refuses the
file instead, with one line naming it, the first bad line and the problem, and how many other
lines are bad. A file with no good record is always refused.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from bencao.errors import InputError
from bencao.io import iter_lines

TASKS = ("mcq", "sd", "tf", "el", "rec", "qa")
_LETTER = re.compile(r"^[A-Z]$")


@dataclass
class Bench:
    """A validated benchmark file."""

    path: Path
    name: str
    task: str
    records: list[dict[str, Any]] = field(default_factory=list)
    skipped: list[tuple[int, str]] = field(default_factory=list)  # (line, problem) of each bad record left out

    def __len__(self) -> int:
        return len(self.records)


def _text(rec: dict[str, Any], key: str) -> str | None:
    v = rec.get(key)
    if not isinstance(v, str) or not v.strip():
        return f"{key!r} must be a non-empty string"
    return None


def _str_list(rec: dict[str, Any], key: str, allow_empty: bool = False) -> str | None:
    v = rec.get(key)
    if not isinstance(v, list) or not all(isinstance(x, str) and x.strip() for x in v):
        return f"{key!r} must be a list of non-empty strings"
    if not v and not allow_empty:
        return f"{key!r} must not be empty"
    if len(set(v)) != len(v):
        dup = next(x for i, x in enumerate(v) if x in v[:i])
        return f"{key!r} lists {dup!r} twice"
    return None


def _check_choice(rec: dict[str, Any]) -> str | None:
    problem = _text(rec, "question")
    if problem:
        return problem
    options = rec.get("options")
    if not isinstance(options, dict) or len(options) < 2:
        return "'options' must be an object with at least two options"
    for letter, text in options.items():
        if not _LETTER.match(letter):
            return f"option key {letter!r} is not a capital letter A-Z"
        if not isinstance(text, str) or not text.strip():
            return f"option {letter} must be a non-empty string"
    answer = rec.get("answer")
    if not isinstance(answer, list) or not answer:
        return "'answer' must be a non-empty list of option letters, e.g. [\"B\"]"
    for a in answer:
        if a not in options:
            return f"answer {a!r} is not one of the options ({', '.join(options)})"
    if len(set(answer)) != len(answer):
        return "'answer' lists a letter twice"
    return None


def _check_tf(rec: dict[str, Any]) -> str | None:
    problem = _text(rec, "statement")
    if problem:
        return problem
    if not isinstance(rec.get("answer"), bool):
        return f"'answer' must be true or false, got {json.dumps(rec.get('answer'), ensure_ascii=False)}"
    return None


def _check_el(rec: dict[str, Any]) -> str | None:
    problem = _text(rec, "mention") or _str_list(rec, "gold_ids")
    if problem is None and "context" in rec and not isinstance(rec["context"], str):
        return "'context' must be a string"
    return problem


def _check_rec(rec: dict[str, Any]) -> str | None:
    if "candidates" not in rec:  # open-ended: gold names the foods a free answer should recommend
        return _text(rec, "query") or _str_list(rec, "gold", allow_empty=True)
    problem = _text(rec, "query") or _str_list(rec, "candidates") or _str_list(rec, "gold", allow_empty=True)
    if problem:
        return problem
    missing = [g for g in rec["gold"] if g not in rec["candidates"]]
    if missing:
        return f"gold item {missing[0]!r} is not among the candidates"
    return None


def _check_qa(rec: dict[str, Any]) -> str | None:
    return _text(rec, "question") or _text(rec, "answer")


CHECKS: dict[str, Callable[[dict[str, Any]], str | None]] = {
    "mcq": _check_choice,
    "sd": _check_choice,
    "tf": _check_tf,
    "el": _check_el,
    "rec": _check_rec,
    "qa": _check_qa,
}


def check_record(rec: Any) -> str | None:
    """The problem with one decoded record, or None when it is valid."""
    if not isinstance(rec, dict):
        return f"expected a JSON object, got {type(rec).__name__}"
    rid = rec.get("id")
    if not isinstance(rid, (str, int)) or isinstance(rid, bool) or str(rid).strip() == "":
        return "'id' must be a non-empty string"
    task = rec.get("task")
    if task not in CHECKS:
        return f"record {rid!r}: 'task' must be one of {', '.join(TASKS)}, got {json.dumps(task, ensure_ascii=False)}"
    for key in ("lang", "source"):
        if key in rec and not isinstance(rec[key], str):
            return f"record {rid!r}: {key!r} must be a string"
    if "gold_evidence" in rec:
        problem = _str_list(rec, "gold_evidence")
        if problem:
            return f"record {rid!r} ({task}): {problem}"
    problem = CHECKS[task](rec)
    return f"record {rid!r} ({task}): {problem}" if problem else None


def load_bench(path: str | Path, strict: bool = False) -> Bench:
    """Read and validate one benchmark file; bad records are skipped (``Bench.skipped``), or with
    ``strict`` refused with an :class:`InputError` naming the first bad line.

    All records of a file must share one task (a file is one benchmark: the first good record's).
    ``source`` defaults to the file stem; ``id`` is kept as a string.
    """
    path = Path(path)
    name = path.name
    for suffix in (".gz", ".jsonl", ".json"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
    records: list[dict[str, Any]] = []
    bad: list[tuple[int, str]] = []
    seen: dict[str, int] = {}
    task: str | None = None
    for lineno, line in iter_lines(path):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as exc:
            bad.append((lineno, f"malformed JSON: {exc.msg} (column {exc.colno})"))
            continue
        problem = check_record(rec)
        if problem is None:
            rid = str(rec["id"])
            if rid in seen:
                problem = f"duplicate id {rid!r} (first on line {seen[rid]})"
            elif task is not None and rec["task"] != task:
                problem = f"record {rid!r}: task {rec['task']!r} differs from the file's task {task!r} (one task per file)"
        if problem:
            bad.append((lineno, problem))
            continue
        rid = str(rec["id"])
        seen[rid] = lineno
        task = task or rec["task"]
        rec = dict(rec, id=rid)
        rec.setdefault("source", name)
        records.append(rec)
    if bad and (strict or not records):
        lineno, problem = bad[0]
        more = ""
        if len(bad) > 1:
            lines = ", ".join(str(n) for n, _ in bad[1:6]) + (", ..." if len(bad) > 6 else "")
            more = f" ({len(bad) - 1} more bad line(s): {lines})"
        if not records and not strict:
            more += "; no good record left"
        raise InputError(path, problem + more, record=f"line {lineno}")
    if not records:
        raise InputError(path, "empty benchmark: no records")
    assert task is not None
    return Bench(path=path, name=name, task=task, records=records, skipped=bad)


def skipped_summary(b: Bench, show: int = 3) -> str:
    """One line about the bad records a non-strict load left out."""
    lines = "; ".join(f"line {n}: {p}" for n, p in b.skipped[:show]) + ("; ..." if len(b.skipped) > show else "")
    return f"{b.path}: skipped {len(b.skipped)} bad record(s) of {len(b.skipped) + len(b)} ({lines}); --strict refuses the file instead"


def load_benches(paths: list[str | Path], strict: bool = False) -> list[Bench]:
    """Load several files; two files with the same stem would collide in the outputs and are refused."""
    benches = [load_bench(p, strict=strict) for p in paths]
    names: dict[str, Path] = {}
    for b in benches:
        if b.name in names:
            raise InputError(b.path, f"same benchmark name {b.name!r} as {names[b.name]}; rename one of them")
        names[b.name] = b.path
    return benches


def gold_texts(rec: dict[str, Any]) -> list[str]:
    """The text that evidence should mention for the record to count as covered."""
    task = rec["task"]
    if task in ("mcq", "sd"):
        return [rec["options"][a] for a in rec["answer"]]
    if task == "rec":
        return list(rec["gold"])
    if task == "qa":
        return [rec["answer"]]
    if task == "tf":
        return [rec["statement"]]
    return []


def query_text(rec: dict[str, Any]) -> str:
    """The text a system retrieves evidence for."""
    task = rec["task"]
    if task in ("mcq", "sd", "qa"):
        return rec["question"]
    if task == "tf":
        return rec["statement"]
    if task == "rec":
        return rec["query"]
    return rec["mention"]
