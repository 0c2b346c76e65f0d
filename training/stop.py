"""Clean stop of a training run on SIGTERM or SIGINT (what a scheduler or Ctrl-C sends).

In every rank, :func:`graceful_stop` turns the first SIGTERM/SIGINT into a request: the trainer
finishes the optimizer step it is in, every rank agrees on stopping at that same step (one
``all_reduce`` of a flag per step, so no rank is left waiting in a collective), a checkpoint is
saved (``checkpoint-N`` in ``output_dir``, what ``resume_from_checkpoint: auto`` continues from) and
training ends with :class:`Stopped`. A second signal ends the process at once.

The launcher side (``bencao train sft --accelerate-config ...``) is :func:`run_forwarding`: it
starts ``accelerate launch`` in a session of its own, forwards SIGTERM/SIGINT/SIGHUP to it once
(accelerate's elastic agent passes SIGTERM on to every rank), and after ``grace_s`` kills whatever
is left of the whole process tree — accelerate and every rank, whatever session or process group
they put themselves in — so nothing of the run outlives the launcher by more than ``grace_s``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any, Iterator, Sequence

from bencao.errors import BencaoError

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
DEFAULT_GRACE_S = 25.0


class Stopped(BencaoError):
    """Training stopped on a signal after saving a checkpoint; the same command resumes it."""

    def __init__(self, signum: int, step: int | None, checkpoint: str | None):
        self.signum = signum
        self.exit_code = 128 + signum
        where = f"; checkpoint {checkpoint}" if checkpoint else "; no checkpoint could be saved"
        at = f" at step {step}" if step is not None else ""
        super().__init__(f"stopped by {signal.Signals(signum).name}{at}{where}; run the same command again to resume")


class StopRequest:
    """The first stop signal received in this process (None while training may go on)."""

    def __init__(self) -> None:
        self.signum: int | None = None

    def handler(self, signum: int, frame: Any) -> None:
        if self.signum is not None:  # a second signal: stop now, the default way
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        self.signum = signum
        print(f"bencao: {signal.Signals(signum).name} received; finishing this step, saving a checkpoint, stopping "
              "(send it again to stop at once)", file=sys.stderr, flush=True)

    def callback(self):
        """A ``transformers.TrainerCallback`` that saves and stops at the first step after the signal."""
        from transformers import TrainerCallback

        request = self

        class StopOnSignal(TrainerCallback):
            def on_step_end(self, args, state, control, **kwargs):
                if _agreed(request.signum is not None, args):
                    control.should_save = True
                    control.should_training_stop = True
                    if request.signum is None:  # another rank got the signal: stop with it
                        request.signum = int(signal.SIGTERM)
                return control

            def on_save(self, args, state, control, **kwargs):
                if control.should_training_stop and request.signum is not None:
                    control.should_save = False  # saved once; the epoch-end pass must not save again
                return control

        return StopOnSignal()


def _agreed(flag: bool, args: Any) -> bool:
    """True on every rank when any rank has the flag (one tiny all_reduce; no-op in a single process)."""
    import torch
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return flag
    t = torch.tensor([1 if flag else 0], dtype=torch.int32, device=args.device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return bool(t.item())


@contextlib.contextmanager
def graceful_stop() -> Iterator[StopRequest]:
    """Install the SIGTERM/SIGINT handlers for the duration of a training run (main thread only)."""
    request = StopRequest()
    if threading.current_thread() is not threading.main_thread():
        yield request
        return
    previous = {s: signal.signal(s, request.handler) for s in STOP_SIGNALS}
    try:
        yield request
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


def train_until_stopped(trainer: Any, output_dir: str, resume: str | None) -> Any:
    """``trainer.train(resume_from_checkpoint=resume)`` under :func:`graceful_stop`: its result, or, when a
    SIGTERM/SIGINT stopped the run after a checkpoint, :class:`Stopped` naming that checkpoint."""
    with graceful_stop() as stop:
        trainer.add_callback(stop.callback())
        result = trainer.train(resume_from_checkpoint=resume)
    if stop.signum is not None:
        raise Stopped(stop.signum, trainer.state.global_step, last_checkpoint(output_dir))
    return result


def last_checkpoint(output_dir: str) -> str | None:
    """The newest ``checkpoint-N`` in ``output_dir`` (what ``resume_from_checkpoint: auto`` picks), or None."""
    from pathlib import Path

    steps = [(int(p.name.split("-", 1)[1]), p) for p in Path(output_dir).glob("checkpoint-*")
             if p.is_dir() and p.name.split("-", 1)[1].isdigit()]
    return str(max(steps)[1]) if steps else None


# ---- the launcher side ------------------------------------------------------------------------

def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    """Linux: the launched process gets SIGTERM if the launcher dies, even by SIGKILL."""
    os.setsid()
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, int(signal.SIGTERM))  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _tree(pid: int) -> list[Any]:
    import psutil

    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def run_forwarding(cmd: Sequence[str], env: dict[str, str] | None = None, grace_s: float = DEFAULT_GRACE_S) -> tuple[int, int | None]:
    """Run ``cmd``; forward the first SIGTERM/SIGINT/SIGHUP to it and reap its whole tree within ``grace_s``.

    Returns (exit code, the signal that stopped the run or None).
    """
    import psutil

    proc = subprocess.Popen(list(cmd), env=env, preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,
                            start_new_session=not sys.platform.startswith("linux"))
    got: list[int] = []
    got_at = [0.0]
    known: dict[int, Any] = {}

    def remember() -> None:
        for p in _tree(proc.pid):
            known.setdefault(p.pid, p)

    def on_signal(signum: int, frame: Any) -> None:
        remember()
        if got:  # a second signal: no more waiting
            kill_all()
            return
        got.append(signum)
        got_at[0] = time.monotonic()
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM if signum == signal.SIGHUP else signum)

    def kill_all() -> None:
        for p in [*known.values(), *_tree(proc.pid)]:
            with contextlib.suppress(psutil.Error):
                p.kill()

    previous = {s: signal.signal(s, on_signal) for s in FORWARDED}
    try:
        while True:
            try:
                rc = proc.wait(timeout=0.5)
                break
            except subprocess.TimeoutExpired:
                remember()  # ranks start late; keep the whole tree known while it lives
                if got and time.monotonic() - got_at[0] > grace_s:
                    kill_all()
        if got:  # the launcher is gone; give what is left of its tree the rest of the grace period
            alive = [p for p in known.values() if _running(p)]
            while alive and time.monotonic() - got_at[0] < grace_s:
                time.sleep(0.2)
                alive = [p for p in alive if _running(p)]
            for p in alive:
                with contextlib.suppress(psutil.Error):
                    p.kill()
        return rc, (got[0] if got else None)
    except BaseException:
        kill_all()
        raise
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


def _running(p: Any) -> bool:
    import psutil

    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False
