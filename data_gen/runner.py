"""Resumable, parallel, per-item steps with a skip log and a run summary.

Each item has a stable id. ``run_items`` calls ``work(item)`` on ``concurrency`` threads; the work
returns :class:`Done` (its records) or :class:`Skip` (a reason). Done items are appended to
``<out>/<name>.records.jsonl`` as ONE line per item (flushed and fsynced), so a killed run resumes
with no duplicate and no missing record; skipped items are retried on the next run (the response
cache makes that cheap) and the skip log shows the last run's reasons.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

from bencao.io import JsonlAppender, atomic_write_json
from bencao.llm.base import LLMError

log = logging.getLogger(__name__)


@dataclass
class Done:
    records: list[dict[str, Any]]
    note: str | None = None  # e.g. "template_fallback": counted in the summary


@dataclass
class Skip:
    reason: str
    detail: str = ""


@dataclass
class RunSummary:
    step: str
    total: int = 0
    done: int = 0
    done_before: int = 0
    skipped: int = 0
    skipped_by_reason: dict[str, int] = field(default_factory=dict)
    notes: dict[str, int] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"step": self.step, "total": self.total, "done": self.done, "done_before": self.done_before, "skipped": self.skipped,
                "skipped_by_reason": self.skipped_by_reason, "notes": self.notes, **self.extra}


def records_path(out: Path, name: str) -> Path:
    return Path(out) / f"{name}.records.jsonl"


def run_items(items: Iterable[tuple[str, Any]], work: Callable[[Any], Done | Skip], *, out: str | Path, name: str,
              concurrency: int = 4, progress: bool = True) -> RunSummary:
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    items = list(items)
    summary = RunSummary(step=name, total=len(items))
    skip_path = out / f"{name}.skipped.jsonl"
    if skip_path.exists():
        skip_path.unlink()  # skipped items are retried; the log shows this run's reasons
    reasons: Counter[str] = Counter()
    notes: Counter[str] = Counter()
    with JsonlAppender(records_path(out, name), id_key="item_id") as done_log, JsonlAppender(skip_path, id_key="item_id") as skip_log:
        todo = [(iid, it) for iid, it in items if iid not in done_log.done_ids]
        summary.done_before = len(items) - len(todo)
        bar = _bar(len(items), summary.done_before, name, progress)

        def finish(iid: str, result: Done | Skip) -> None:
            if isinstance(result, Done):
                done_log.write({"item_id": iid, "records": result.records})
                summary.done += 1
                if result.note:
                    notes[result.note] += 1
            else:
                skip_log.write({"item_id": iid, "reason": result.reason, "detail": result.detail[:500]})
                reasons[result.reason] += 1
            bar.update(1)

        def guarded(it: Any) -> Done | Skip:
            try:
                return work(it)
            except LLMError as exc:
                return Skip(f"llm_{exc.kind}", str(exc))

        try:
            if concurrency <= 1:
                for iid, it in todo:
                    finish(iid, guarded(it))
            else:
                with ThreadPoolExecutor(max_workers=concurrency) as pool:
                    pending: dict[Future, str] = {}
                    queue = iter(todo)
                    try:
                        while True:
                            while len(pending) < concurrency * 2:
                                nxt = next(queue, None)
                                if nxt is None:
                                    break
                                pending[pool.submit(guarded, nxt[1])] = nxt[0]
                            if not pending:
                                break
                            ready, _ = wait(pending, return_when=FIRST_COMPLETED)
                            for fut in ready:
                                finish(pending.pop(fut), fut.result())
                    except BaseException:
                        for fut in pending:
                            fut.cancel()
                        raise
        finally:
            bar.close()
    summary.skipped = sum(reasons.values())
    summary.skipped_by_reason = dict(reasons)
    summary.notes = dict(notes)
    return summary


def load_records(out: str | Path, name: str, order: list[str] | None = None) -> list[dict[str, Any]]:
    """All records of a step, in ``order`` of item ids when given (else file order)."""
    path = records_path(Path(out), name)
    if not path.exists():
        return []
    by_item: dict[str, list[dict[str, Any]]] = {}
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                obj = json.loads(line)
                by_item[obj["item_id"]] = obj["records"]
    ids = [i for i in order if i in by_item] if order is not None else list(by_item)
    return [r for i in ids for r in by_item[i]]


def save_summary(out: str | Path, summary: RunSummary, ledger: Any = None) -> dict[str, Any]:
    data = summary.to_dict()
    if ledger is not None:
        ledger.save()
        data["ledger"] = ledger.to_dict()["totals"]
    atomic_write_json(Path(out) / f"{summary.step}.summary.json", data)
    return data


def _bar(total: int, initial: int, desc: str, enabled: bool):
    from tqdm.auto import tqdm

    return tqdm(total=total, initial=initial, desc=desc, unit="item", disable=not enabled, leave=False)
