"""Compare the installed environment with the committed lock (``requirements/lock.txt``).

``python -m bencao.lockcheck`` exits 1 and names each package whose installed version differs from its
pin (``--report`` lists them and exits 0: `make test-latest` uses it to show what drifted). The suite runs
the same check, so a test run on an environment that did not install from the lock says so at once.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

#: Installer tooling that the lock does not pin (the Makefile pins pip itself).
UNPINNED = frozenset({"pip", "bencao"})


@dataclass(frozen=True)
class Pin:
    name: str
    version: str
    line: int


@dataclass(frozen=True)
class Drift:
    name: str
    locked: str
    installed: str | None  # None: pinned for this platform but not installed


def read_lock(path: Path) -> dict[str, Pin]:
    """The pins of a lock file that apply to this interpreter and platform (markers evaluated)."""
    pins: dict[str, Pin] = {}
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        line = raw.split(" #", 1)[0].strip()
        if not line or line.startswith(("#", "-")):
            continue
        try:
            req = Requirement(line)
        except InvalidRequirement as exc:
            raise ValueError(f"{path}:{number}: not a requirement line ({exc})") from None
        specs = list(req.specifier)
        if len(specs) != 1 or specs[0].operator != "==":
            raise ValueError(f"{path}:{number}: {req.name} is not pinned with == (a lock pins every package)")
        if req.marker is not None and not req.marker.evaluate():
            continue
        pins[canonicalize_name(req.name)] = Pin(req.name, specs[0].version, number)
    return pins


def installed_versions() -> dict[str, str]:
    return {canonicalize_name(d.metadata["Name"]): d.version for d in metadata.distributions() if d.metadata["Name"]}


def _same(locked: str, installed: str) -> bool:
    # A local build of the locked release (torch 2.13.0+cpu for 2.13.0) is that release.
    return installed == locked or installed.split("+", 1)[0] == locked


def drift(lock: Path, *, required_only: bool = True) -> list[Drift]:
    """Packages installed at another version than the lock's. With ``required_only``, a pin of a package
    that is not installed is not drift (the lock covers every extra and platform; an install takes a part)."""
    pins = read_lock(lock)
    have = installed_versions()
    out: list[Drift] = []
    for key, pin in sorted(pins.items()):
        if key in UNPINNED:
            continue
        version = have.get(key)
        if version is None:
            if not required_only:
                out.append(Drift(pin.name, pin.version, None))
            continue
        if not _same(pin.version, version):
            out.append(Drift(pin.name, pin.version, version))
    return out


def unlocked(lock: Path) -> list[str]:
    """Installed packages the lock does not name at all (something was installed outside the lock)."""
    pins = {canonicalize_name(n) for n in _all_names(lock)}
    return sorted(k for k in installed_versions() if k not in pins and k not in UNPINNED)


def _all_names(lock: Path) -> list[str]:
    names = []
    for raw in lock.read_text(encoding="utf-8").splitlines():
        line = raw.split(" #", 1)[0].strip()
        if line and not line.startswith(("#", "-")):
            names.append(Requirement(line).name)
    return names


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bencao.lockcheck", description=__doc__.splitlines()[0])
    parser.add_argument("--lock", type=Path, default=Path("requirements/lock.txt"), help="lock file (default: %(default)s)")
    parser.add_argument("--report", action="store_true", help="list the differences and exit 0")
    args = parser.parse_args(argv)
    if not args.lock.is_file():
        print(f"error: {args.lock}: no such lock file", file=sys.stderr)
        return 2
    try:
        found = drift(args.lock)
        extra = unlocked(args.lock)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for d in found:
        print(f"{d.name}: locked {d.locked}, installed {d.installed}")
    for name in extra:
        print(f"{name}: installed, not in the lock")
    if not found and not extra:
        print(f"the environment matches {args.lock}")
        return 0
    return 0 if args.report else 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
