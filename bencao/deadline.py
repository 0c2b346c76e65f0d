"""A per-request time budget, checked cooperatively by the pipeline's loops.

The HTTP API sets a deadline for the worker thread that answers a request (:func:`deadline`); the
answering pipeline, the retriever's option loop and the graph answerer call :func:`check_deadline`
between units of work, so a request that runs past its budget stops there and frees the pipeline for
the next one (the API answers 504), instead of holding it for minutes. Outside a request (``ask``,
``infer``, ``eval``) no deadline is set and the check is a dictionary look-up.
"""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Iterator

from bencao.errors import BencaoError

_local = threading.local()


class DeadlineExceeded(BencaoError):
    """The request ran past its time budget."""


@contextlib.contextmanager
def deadline(seconds: float | None) -> Iterator[None]:
    """Run the block under a budget of ``seconds`` (None or <= 0: no budget) in this thread."""
    prev = getattr(_local, "deadline", None)
    _local.deadline = (time.monotonic() + seconds, seconds) if seconds and seconds > 0 else None
    try:
        yield
    finally:
        _local.deadline = prev


def check_deadline(where: str = "") -> None:
    """Raise :class:`DeadlineExceeded` when this thread's request is past its budget."""
    d = getattr(_local, "deadline", None)
    if d is not None and time.monotonic() > d[0]:
        raise DeadlineExceeded(f"the request ran past its time budget of {d[1]:g}s" + (f" (at {where})" if where else ""))
