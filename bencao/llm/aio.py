"""One background event loop per process for every LLM request.

Hundreds of requests in flight cost one thread: async clients (``openai.AsyncOpenAI``) and the
data-generation runner run their coroutines on this loop, and synchronous callers (serving,
evaluation, one-off requests) block on :func:`run` from their own thread. The loop starts on first
use, in a daemon thread, and again after a ``fork``.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextvars
import os
import threading
from typing import Any, Callable, Coroutine, TypeVar

T = TypeVar("T")


class Interrupted(Exception):
    """A KeyboardInterrupt/SystemExit raised in a worker thread, carried through the loop (where it would
    stop the loop itself) to the caller waiting in :func:`run`, which raises the original."""

    def __init__(self, original: BaseException):
        super().__init__(repr(original))
        self.original = original

_lock = threading.Lock()
_loop: asyncio.AbstractEventLoop | None = None
_thread: threading.Thread | None = None
_pid: int | None = None
_closers: list[Callable[[], Coroutine[Any, Any, Any]]] = []


def loop() -> asyncio.AbstractEventLoop:
    """The shared loop, started on first use."""
    global _loop, _thread, _pid
    with _lock:
        if _loop is None or _pid != os.getpid() or _thread is None or not _thread.is_alive():
            _loop = asyncio.new_event_loop()
            _thread = threading.Thread(target=_loop.run_forever, name="bencao-llm-loop", daemon=True)
            _thread.start()
            _pid = os.getpid()
        return _loop


def close_at_exit(closer: Callable[[], Coroutine[Any, Any, Any]]) -> None:
    """Await ``closer()`` on the loop when the process exits (HTTP sessions made on the loop)."""
    _closers.append(closer)


@atexit.register
def _close_all() -> None:
    if not _closers or _loop is None or _pid != os.getpid() or _thread is None or not _thread.is_alive():
        return
    closers, _closers[:] = list(_closers), []

    async def close() -> None:
        await asyncio.gather(*(c() for c in closers), return_exceptions=True)

    try:
        submit(close()).result(timeout=5)
    except Exception:  # noqa: BLE001 - best effort at exit
        pass


def in_loop_thread() -> bool:
    return _thread is not None and threading.current_thread() is _thread


def submit(coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
    """Schedule ``coro`` on the shared loop from any thread (or from another event loop)."""
    return asyncio.run_coroutine_threadsafe(coro, loop())


_pool: concurrent.futures.ThreadPoolExecutor | None = None
_pool_pid: int | None = None
_pending: set[concurrent.futures.Future[Any]] = set()


def _executor() -> concurrent.futures.ThreadPoolExecutor:
    global _pool, _pool_pid
    with _lock:
        if _pool is None or _pool_pid != os.getpid():
            _pool = concurrent.futures.ThreadPoolExecutor(thread_name_prefix="bencao-llm-work")
            _pool_pid = os.getpid()
            _pending.clear()
        return _pool


async def to_thread(fn: Callable[..., T], *args: Any) -> T:
    """``asyncio.to_thread`` whose KeyboardInterrupt/SystemExit comes back as :class:`Interrupted`.

    The call is remembered until it returns: a thread cannot be cancelled, so :func:`run` waits for
    the calls still running before it hands a failure back (the caller would otherwise close the
    graph or files they are reading)."""
    cf = _executor().submit(contextvars.copy_context().run, fn, *args)
    with _lock:
        _pending.add(cf)
    cf.add_done_callback(_forget)
    try:
        return await asyncio.wrap_future(cf)
    except (KeyboardInterrupt, SystemExit) as exc:
        raise Interrupted(exc) from None


def _forget(cf: concurrent.futures.Future[Any]) -> None:
    with _lock:
        _pending.discard(cf)


def _wait_for_threads(timeout: float) -> None:
    """Let the worker-thread calls still running finish (up to ``timeout``) after a run failed."""
    with _lock:
        running = list(_pending)
    if running:
        concurrent.futures.wait(running, timeout=timeout)


def run(coro: Coroutine[Any, Any, T], cancel_grace_s: float = 10.0) -> T:
    """Run ``coro`` on the shared loop and wait for its result from a synchronous caller.

    An interrupt (Ctrl-C, an exception in the waiting thread) cancels the coroutine and waits up to
    ``cancel_grace_s`` for its ``finally`` blocks (closing output files, committing the cache)
    before re-raising.
    """
    if in_loop_thread():
        coro.close()
        raise RuntimeError("bencao.llm.aio.run called from the LLM event loop itself: await the async method instead")
    lp = loop()
    done = threading.Event()
    box: dict[str, Any] = {}

    def start() -> None:
        task = lp.create_task(coro)
        box["task"] = task
        task.add_done_callback(lambda _t: done.set())

    lp.call_soon_threadsafe(start)
    try:
        done.wait()
    except BaseException:
        lp.call_soon_threadsafe(lambda: box["task"].cancel() if "task" in box else None)
        done.wait(cancel_grace_s)
        _wait_for_threads(cancel_grace_s)
        raise
    task = box["task"]
    if task.cancelled() or task.exception() is not None:
        _wait_for_threads(cancel_grace_s)
    if not task.cancelled() and isinstance(task.exception(), Interrupted):
        raise task.exception().original  # type: ignore[union-attr]
    return task.result()
