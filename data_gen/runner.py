"""Resumable, concurrent, per-item steps with a skip log, a run summary and a live throughput line.

Each item has a stable id. ``work(item)`` returns :class:`Done` (its records) or :class:`Skip` (a
reason). A coroutine ``work`` (the LLM steps) runs on the process's one LLM event loop with
``concurrency`` items in flight (callers pass twice ``llm.max_concurrency``, so the client's
semaphore, the one knob, always has a request waiting); a plain function runs the items one after
another (CPU-bound graph work). Done items are appended to ``<out>/<name>.records.jsonl`` as ONE
line per item, written and flushed at once (a killed process loses nothing) and fsynced in
batches (at most every ``SYNC_EVERY_S``, and at the end), so a killed run resumes with no duplicate
and no missing record; skipped items are retried on the next run (the response cache makes that
cheap) and the skip log shows the last run's reasons.

With a :class:`~bencao.data_gen.ledger.Ledger` the progress bar shows requests/s, tokens/s and the
cost so far next to the items' ETA, the ledger is saved every ``LEDGER_EVERY_S`` (a killed run keeps
its accounting), and the summary records the run's throughput.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Awaitable, Callable, Iterable

from bencao.io import JsonlAppender, atomic_write_json
from bencao.llm.base import LLMError

log = logging.getLogger(__name__)

SYNC_EVERY_S = 0.5
LEDGER_EVERY_S = 10.0


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
    throughput: dict[str, Any] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"step": self.step, "total": self.total, "done": self.done, "done_before": self.done_before, "skipped": self.skipped,
                "skipped_by_reason": self.skipped_by_reason, "notes": self.notes,
                **({"throughput": self.throughput} if self.throughput else {}), **self.extra}


def records_path(out: Path, name: str) -> Path:
    return Path(out) / f"{name}.records.jsonl"


def is_async_work(work: Callable[..., Any]) -> bool:
    return inspect.iscoroutinefunction(work) or inspect.iscoroutinefunction(getattr(work, "__call__", None))


class _Meter:
    """Requests/s, tokens/s and cost of this run, from the ledger's totals."""

    def __init__(self, ledger: Any):
        self.ledger = ledger
        self.t0 = time.monotonic()
        self.start = ledger.totals() if ledger is not None else None
        self.last_ledger_save = self.t0

    def figures(self) -> dict[str, Any]:
        wall = max(1e-9, time.monotonic() - self.t0)
        out: dict[str, Any] = {"wall_s": round(wall, 3)}
        if self.ledger is None:
            return out
        now = self.ledger.totals()
        req = now["requests"] - self.start["requests"]
        tok = (now["prompt_tokens"] + now["completion_tokens"]) - (self.start["prompt_tokens"] + self.start["completion_tokens"])
        out.update(requests=int(req), cache_hits=int(now["cache_hits"] - self.start["cache_hits"]),
                   requests_per_s=round(req / wall, 2), tokens_per_s=round(tok / wall, 1),
                   cost=round(now["cost"] - self.start["cost"], 6))
        return out

    def postfix(self) -> str:
        f = self.figures()
        if "requests" not in f:
            return ""
        return f"{f['requests_per_s']:.1f} req/s, {f['tokens_per_s']:.0f} tok/s, cost {f['cost']:.2f}"

    def maybe_save_ledger(self) -> None:
        if self.ledger is not None and time.monotonic() - self.last_ledger_save >= LEDGER_EVERY_S:
            self.ledger.save()
            self.last_ledger_save = time.monotonic()


def run_items(items: Iterable[tuple[str, Any]], work: Callable[[Any], Done | Skip] | Callable[[Any], Awaitable[Done | Skip]], *,
              out: str | Path, name: str, concurrency: int = 1, progress: bool = True, ledger: Any = None) -> RunSummary:
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    items = list(items)
    summary = RunSummary(step=name, total=len(items))
    skip_path = out / f"{name}.skipped.jsonl"
    if skip_path.exists():
        skip_path.unlink()  # skipped items are retried; the log shows this run's reasons
    reasons: Counter[str] = Counter()
    notes: Counter[str] = Counter()
    meter = _Meter(ledger)
    with JsonlAppender(records_path(out, name), id_key="item_id") as done_log, JsonlAppender(skip_path, id_key="item_id") as skip_log:
        todo = [(iid, it) for iid, it in items if iid not in done_log.done_ids]
        summary.done_before = len(items) - len(todo)
        bar = _bar(len(items), summary.done_before, name, progress)
        last_sync = [time.monotonic()]
        batched = is_async_work(work)

        def finish(iid: str, result: Done | Skip) -> None:
            if isinstance(result, Done):
                done_log.write({"item_id": iid, "records": result.records}, sync=not batched)
                summary.done += 1
                if result.note:
                    notes[result.note] += 1
            else:
                skip_log.write({"item_id": iid, "reason": result.reason, "detail": result.detail[:500]}, sync=not batched)
                reasons[result.reason] += 1
            now = time.monotonic()
            if batched and now - last_sync[0] >= SYNC_EVERY_S:
                done_log.sync()
                skip_log.sync()
                last_sync[0] = now
            if ledger is not None:
                bar.set_postfix_str(meter.postfix(), refresh=False)
                meter.maybe_save_ledger()
            bar.update(1)

        try:
            if batched:
                from bencao.llm import aio

                aio.run(_drive(todo, work, max(1, concurrency), finish))
            else:
                for iid, it in todo:
                    try:
                        result = work(it)
                    except LLMError as exc:
                        result = Skip(f"llm_{exc.kind}", str(exc))
                    finish(iid, result)
        finally:
            bar.close()
    summary.skipped = sum(reasons.values())
    summary.skipped_by_reason = dict(reasons)
    summary.notes = dict(notes)
    summary.throughput = meter.figures()
    if ledger is not None:
        summary.throughput["in_flight_items"] = max(1, concurrency) if batched else 1
        log.info("%s: %s", name, json.dumps(summary.throughput))
    return summary


async def _drive(todo: list[tuple[str, Any]], work: Callable[[Any], Awaitable[Done | Skip]], concurrency: int,
                 finish: Callable[[str, Done | Skip], None]) -> None:
    """``concurrency`` workers pull items from one queue; the first unexpected error cancels the rest."""
    queue = iter(todo)

    async def worker() -> None:
        for iid, it in queue:
            try:
                result = await work(it)
            except LLMError as exc:
                result = Skip(f"llm_{exc.kind}", str(exc))
            finish(iid, result)

    try:
        async with asyncio.TaskGroup() as tg:
            for _ in range(min(concurrency, len(todo))):
                tg.create_task(worker())
    except BaseExceptionGroup as group:  # the error itself, as a sequential run would raise it
        raise group.exceptions[0] from None


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
