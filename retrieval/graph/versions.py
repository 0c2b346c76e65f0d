"""Graph directories replaced in one atomic step, recovered after a crash, and locked while written.

``bencao graph build --graph DIR`` leaves this layout (DIR's parent holds everything)::

    DIR -> .DIR.v-<stamp>      a relative symlink to the current version: what every command opens
    .DIR.v-<stamp>/            the graph itself: graph.sqlite, manifest.json, index/, lexical/
    .DIR.lock                  lock file: a command that writes the graph holds it (flock)

A build writes into ``.DIR.building-<pid>``; when it is complete it is renamed to a new version, a
new symlink is made beside DIR and renamed over DIR (one ``rename``: atomic), and the old version is
deleted. The old version's files are never touched before that rename, so a kill at any moment
leaves DIR pointing at either the old graph or the new one. A plain directory DIR (a graph made by
``graph add --create``, or by an older bencao) is renamed to a version first; a kill between that
rename and the link leaves no DIR, and the recovery rule below points DIR at the newest version.

Recovery (:func:`recover`, run by ``Graph.open`` and at the start of every build): when DIR is
missing or dangling it is pointed at the newest complete version (or an older bencao's
``.DIR.old-<pid>`` is renamed back); leftovers of killed builds (``.DIR.building-*``, ``.DIR.link-*``,
versions DIR does not point at, ``.DIR.old-*``) are deleted. Each action is logged as a warning.
Nothing is recovered or deleted while another process holds the lock (a build in progress).

A symlink DIR that points anywhere else (the user's own link) is followed: the layout lives where
it leads. Deleting a graph: remove DIR and ``.DIR.v-*`` (or rebuild: old versions never pile up).
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import glob
import logging
import os
import re
import shutil
import sys
import threading
import time
from pathlib import Path
from typing import Iterator

from bencao.errors import BencaoError
from bencao.faults import fault

log = logging.getLogger(__name__)

DB_NAME = "graph.sqlite"
#: Seconds a writer waits for another writer of the same graph before giving up (env BENCAO_LOCK_TIMEOUT).
LOCK_TIMEOUT_S = 600.0


def _names(name: str) -> dict[str, str]:
    return {"version": f".{name}.v-", "building": f".{name}.building-", "link": f".{name}.link-", "old": f".{name}.old-",
            "lock": f".{name}.lock"}


def is_internal(path: Path) -> bool:
    """True for a build's temporary directory (its own graph has no lock and no recovery)."""
    return path.name.startswith(".") and ".building-" in path.name


def _is_ours(link: Path) -> bool:
    target = os.readlink(link)
    prefix = _names(link.name)["version"]
    return os.sep not in target and target.startswith(prefix) and _SUFFIX["version"].fullmatch(target[len(prefix):]) is not None


def managed_path(directory: str | Path) -> Path:
    """The absolute path where DIR's layout lives: DIR itself, or where the user's own symlinks lead."""
    p = Path(os.path.abspath(directory))
    for _ in range(40):
        if not p.is_symlink() or _is_ours(p):
            return p
        p = Path(os.path.abspath(os.path.join(p.parent, os.readlink(p))))
    raise BencaoError(f"{directory}: too many levels of symbolic links")


#: What follows the prefix of each kind of sibling (so the graph "g" never claims "g.v-2"'s files).
_SUFFIX = {"version": re.compile(r"(\d{8}T\d{12}Z|0-plain)-\d+"), "building": re.compile(r"\d+"), "link": re.compile(r"\d+"),
           "old": re.compile(r"\d+")}


def _siblings(target: Path, kind: str) -> list[Path]:
    prefix = _names(target.name)[kind]
    pattern = glob.escape(str(target.parent / prefix)) + "*"
    return sorted(Path(p) for p in glob.glob(pattern) if _SUFFIX[kind].fullmatch(Path(p).name[len(prefix):]))


def versions(target: Path) -> list[Path]:
    """Complete versions of the graph at ``target``, oldest first."""
    return [p for p in _siblings(target, "version") if p.is_dir()]


def current_version(target: Path) -> Path | None:
    """The version DIR points at (None when DIR is a plain directory, missing or dangling)."""
    if target.is_symlink() and _is_ours(target):
        v = target.parent / os.readlink(target)
        return v if v.is_dir() else None
    return None


def _stamp() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%S%fZ") + f"-{os.getpid()}"


def building_dir(target: Path) -> Path:
    """A fresh temporary directory name for a build of ``target`` (not created)."""
    return target.parent / f"{_names(target.name)['building']}{os.getpid()}"


# --------------------------------------------------------------------------- locking

_held: dict[str, list] = {}  # lock path -> [fd, depth]: the lock is re-entrant within a process
_held_guard = threading.Lock()


def lock_path(target: Path) -> Path | None:
    """The lock file of the graph at ``target`` (None for a build's temporary directory)."""
    if is_internal(target):
        return None
    return target.parent / _names(target.name)["lock"]


def _holder(path: Path) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        text = ""
    return text or "another process"


def _acquire(path: Path, wait: bool, timeout_s: float) -> int | None:
    """An exclusively locked fd of ``path``; None when not waiting and busy (or locking is unsupported)."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX: no locking
        return None
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError:
        return -1  # a read-only location: nobody can write here, so nobody needs to be excluded
    deadline = time.monotonic() + timeout_s
    told = False
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            if not wait:
                os.close(fd)
                return None
            if time.monotonic() > deadline:
                os.close(fd)
                raise BencaoError(f"{path.parent / path.name[1:-5]}: another bencao command ({_holder(path)}) is writing this graph "
                                  f"and did not finish within {timeout_s:g}s; run this again when it has finished") from None
            if not told:
                log.warning("%s: waiting for another bencao command (%s) that is writing this graph", path.parent / path.name[1:-5], _holder(path))
                told = True
            time.sleep(0.1)
    os.ftruncate(fd, 0)
    os.write(fd, f"pid {os.getpid()}: {' '.join(Path(a).name if i == 0 else a for i, a in enumerate(sys.argv[:4]))}".encode())
    return fd


@contextlib.contextmanager
def writer_lock(target: str | Path, wait: bool = True, timeout_s: float | None = None) -> Iterator[bool]:
    """Hold the graph's writer lock (re-entrant in one process). Yields False when ``wait`` is off and
    another process holds it. Waiting is announced with one warning line; past ``timeout_s`` (default
    ``BENCAO_LOCK_TIMEOUT`` or 600 s) a clear error is raised instead of SQLite's "database is locked"."""
    target = managed_path(target)
    path = lock_path(target)
    if path is None:
        yield True
        return
    key = str(path)
    with _held_guard:
        entry = _held.get(key)
        if entry is not None:
            entry[1] += 1
    if entry is None:
        if timeout_s is None:
            timeout_s = float(os.environ.get("BENCAO_LOCK_TIMEOUT", LOCK_TIMEOUT_S))
        if not target.parent.is_dir():
            yield True  # no graph and no place for one yet: nothing to exclude (the command fails or creates it)
            return
        fd = _acquire(path, wait, timeout_s)
        if fd is None:
            yield False
            return
        with _held_guard:
            entry = _held[key] = [fd, 1]
    try:
        yield True
    finally:
        with _held_guard:
            entry[1] -= 1
            done = entry[1] == 0
            if done:
                del _held[key]
        if done and entry[0] >= 0:
            if not target.exists() and not target.is_symlink():
                path.unlink(missing_ok=True)  # no graph was made (e.g. a mistyped --graph): leave no lock file
            os.close(entry[0])  # closing the fd releases the flock


# --------------------------------------------------------------------------- recovery


def _remove(path: Path) -> bool:
    """Delete a leftover; False when it could not be deleted (e.g. a read-only location)."""
    try:
        if path.is_symlink() or path.is_file():
            path.unlink(missing_ok=True)
        else:
            shutil.rmtree(path)
    except OSError:
        return False
    return True


def _link(target: Path, version: Path) -> None:
    """Point ``target`` at ``version`` with one rename of a fresh symlink over it."""
    tmp = target.parent / f"{_names(target.name)['link']}{os.getpid()}"
    _remove(tmp)
    os.symlink(version.name, tmp)
    fault("build.linked")
    os.replace(tmp, target)


def _leftovers(target: Path) -> list[Path]:
    current = current_version(target)
    out = _siblings(target, "building") + _siblings(target, "link")
    out += [v for v in _siblings(target, "version") if v != current]
    out += _siblings(target, "old")
    return out


def recover(directory: str | Path) -> list[str]:
    """Make DIR usable after a killed build and delete the build's leftovers; returns what was done.

    Cheap when there is nothing to do (one directory listing). Skipped while another process holds
    the writer lock (its build is not a leftover).
    """
    target = managed_path(directory)
    if is_internal(target):
        return []
    missing = not target.exists()  # also True for a dangling symlink
    if not missing and not _leftovers(target):
        return []
    done: list[str] = []
    with writer_lock(target, wait=False) as got:
        if not got:
            return []
        if not target.exists():
            old = [p for p in _siblings(target, "old") if (p / DB_NAME).exists()]
            complete = [v for v in versions(target) if (v / DB_NAME).exists()]
            if old and not target.is_symlink():
                os.replace(old[-1], target)
                done.append(f"restored {target} from {old[-1].name}, left by a build killed while swapping")
            elif complete:
                _link(target, complete[-1])
                done.append(f"pointed {target} at {complete[-1].name}, the newest complete version (a build was killed while swapping)")
        for p in _leftovers(target):
            if _remove(p):
                done.append(f"removed {p.name}, left by an interrupted build")
    for msg in done:
        log.warning("%s", msg)
    return done


# --------------------------------------------------------------------------- the swap


def install(built: Path, target: Path) -> Path:
    """Make the finished graph in ``built`` the graph at ``target`` (the caller holds the writer lock).

    Returns the new version's directory. Every step before the final rename leaves ``target`` as it
    was; the old version is deleted only after ``target`` points at the new one.
    """
    names = _names(target.name)
    version = target.parent / f"{names['version']}{_stamp()}"
    os.replace(built, version)
    fault("build.versioned")
    previous = current_version(target)
    if target.exists() and not target.is_symlink():  # a plain directory: becomes the oldest version
        legacy = target.parent / f"{names['version']}0-plain-{os.getpid()}"
        os.replace(target, legacy)
        fault("build.migrating")
        previous = legacy
    _link(target, version)
    fault("build.swapped")
    if previous is not None and previous != version:
        _remove(previous)
    for p in _leftovers(target):
        _remove(p)
    return version
