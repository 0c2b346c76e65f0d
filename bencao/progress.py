"""Progress of a long step, on a terminal and off it.

On a terminal a rich bar; anywhere else (CI logs, ``| tee``, a file) one plain line when the step moves
to another item and at most every ``interval`` seconds within one, so a log shows the work going on
instead of nothing until the end.
"""

from __future__ import annotations

import sys
import time
from typing import Any, TextIO


class StepProgress:
    """``with StepProgress("ingest") as p: p.update("book.txt", 3, 14)``: usable as a ``(name, i, n)`` callback."""

    def __init__(self, label: str, *, stream: TextIO | None = None, interval: float = 5.0, force_plain: bool = False):
        self.label = label
        self.stream = stream if stream is not None else sys.stderr
        self.interval = interval
        self.plain = force_plain or not _is_terminal(self.stream)
        self._t0 = time.monotonic()
        self._last_print = 0.0
        self._last_desc: str | None = None
        self._rich: Any = None
        self._task: Any = None

    def __enter__(self) -> "StepProgress":
        self._t0 = time.monotonic()
        if not self.plain:
            from rich.console import Console
            from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

            self._rich = Progress(TextColumn(f"[bold]{self.label}[/] {{task.description}}"), BarColumn(),
                                  TextColumn("{task.completed}/{task.total}"), TimeElapsedColumn(),
                                  console=Console(file=self.stream), transient=True)
            self._rich.__enter__()
            self._task = self._rich.add_task("", total=None)
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._rich is not None:
            self._rich.__exit__(*exc)

    def __call__(self, description: str, completed: int, total: int) -> None:
        self.update(description, completed, total)

    def update(self, description: str, completed: int, total: int) -> None:
        if self._rich is not None:
            self._rich.update(self._task, description=description, completed=completed, total=total)
            return
        now = time.monotonic()
        moved = description != self._last_desc
        if moved or completed >= total or now - self._last_print >= self.interval:
            self.stream.write(f"{self.label} {description} {completed}/{total} ({now - self._t0:.0f} s)\n")
            self.stream.flush()
            self._last_print, self._last_desc = now, description


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
