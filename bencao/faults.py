"""Fault injection for the crash tests: die like ``kill -9`` at a named point of a long step.

``BENCAO_FAULT=<point>`` makes the process exit at once with status 137 (``os._exit``: no cleanup,
no ``finally``, no flush — what SIGKILL leaves) when it reaches ``fault("<point>")``;
``<point>@<n>`` dies the n-th time the point is reached (``jsonl.append@3``: after two records).
Several points may be given, comma-separated. Unset (the normal case) a check costs one
environment lookup.

Points (where the code calls :func:`fault`):

- ``build.ingested``  graph build: every source ingested into the temporary directory
- ``build.indexed``   graph build: indexes built, not yet renamed to a version
- ``build.versioned`` graph build: the new version is complete beside the old one, not yet linked
- ``build.migrating`` graph build over a plain directory: the old directory renamed to a version, DIR not yet a link
- ``build.linked``    graph build: the new link is made, not yet swapped in
- ``build.swapped``   graph build: DIR points at the new version; the old one is not yet removed
- ``ingest.parsed``   graph add/build: a source is parsed, nothing of it written (``@n``: the n-th source)
- ``ingest.committed`` graph add/build: a source's document is committed
- ``add.manifest``    graph add: document committed and manifest written, indexes not yet refreshed
- ``remove.committed`` graph remove: the document's removal committed, the manifest not yet written
- ``remove.manifest`` graph remove: removal committed and manifest written, indexes not yet refreshed
- ``index.lexical``   index build/refresh: one kind's lexical index and meta written (``@n``: the n-th kind)
- ``index.written``   index build/refresh: every index file written, the manifest's record of them not yet
- ``jsonl.append``    resumable JSONL output (infer, data runs): before a record is written
- ``jsonl.torn``      resumable JSONL output: half of a record's line written
- ``dataset.written`` data runs: one split's JSONL file of a dataset written (``@1``: train written, eval not yet)
- ``extract.committed`` data extract: the run's document committed, the previous run's not yet removed

In-process hooks (tests): :func:`on` runs a function when the process reaches :func:`call` of a
point, e.g. to change an input file at a precise moment of a read, deterministically:

- ``ingest.hashed``   graph add/build: the input is hashed, not yet parsed
- ``ingest.reading``  graph add/build: the parse read of the input has read its first block (or line)
- ``sqlite.write``    graph store: before each write statement of a commit (a full disk can be simulated)
- ``file.write``      graph add/build: before each file of the indexes/snippets is written
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections import Counter
from typing import Callable, Iterator

ENV = "BENCAO_FAULT"
EXIT_CODE = 137
_seen: Counter[str] = Counter()


def _wanted(point: str) -> int | None:
    spec = os.environ.get(ENV)
    if not spec:
        return None
    for item in spec.split(","):
        name, _, nth = item.strip().partition("@")
        if name == point:
            return int(nth) if nth else 1
    return None


def hit(point: str) -> bool:
    """Count a visit of ``point``; True when ``BENCAO_FAULT`` says the process dies at this visit."""
    nth = _wanted(point)
    if nth is None:
        return False
    _seen[point] += 1
    return _seen[point] >= nth


def die(point: str) -> None:
    """Exit at once with status 137, as ``kill -9`` would leave things."""
    sys.stderr.write(f"fault injected at {point}\n")
    sys.stderr.flush()
    os._exit(EXIT_CODE)


def fault(point: str) -> None:
    """Exit with status 137 here when ``BENCAO_FAULT`` names this point (and its visit count is reached)."""
    if hit(point):
        die(point)


_hooks: dict[str, list[Callable[[], None]]] = {}


@contextlib.contextmanager
def on(point: str, fn: Callable[[], None]) -> Iterator[None]:
    """Run ``fn`` each time the process reaches :func:`call` of ``point`` inside the block (tests)."""
    _hooks.setdefault(point, []).append(fn)
    try:
        yield
    finally:
        _hooks[point].remove(fn)
        if not _hooks[point]:
            del _hooks[point]


def call(point: str) -> None:
    """Run the hooks registered for ``point`` (none, normally: one dict lookup), and die there when
    ``BENCAO_FAULT`` names it."""
    if _hooks:
        for fn in list(_hooks.get(point, ())):
            fn()
    fault(point)
