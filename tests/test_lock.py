"""The locked install: the lock covers what pyproject asks for, and the suite runs on the locked set."""

from __future__ import annotations

import os
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from bencao import lockcheck

ROOT = Path(__file__).resolve().parents[1]
LOCK = ROOT / "requirements" / "lock.txt"
#: Extras the lock does not cover: vllm pins its own torch (a GPU server's install, not this lock's).
UNLOCKED_EXTRAS = {"vllm"}


def _pyproject_requirements() -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = [Requirement(r) for r in project["dependencies"]]
    for extra, items in project["optional-dependencies"].items():
        if extra in UNLOCKED_EXTRAS:
            continue
        reqs += [Requirement(r) for r in items if canonicalize_name(Requirement(r).name) != "bencao"]
    return reqs


def _all_pins() -> dict[str, str]:
    pins = {}
    for raw in LOCK.read_text().splitlines():
        line = raw.split(" #", 1)[0].strip()
        if line and not line.startswith(("#", "-")):
            req = Requirement(line)
            pins[canonicalize_name(req.name)] = next(iter(req.specifier)).version
    return pins


def test_lock_pins_every_requirement_within_pyprojects_range():
    pins = _all_pins()
    problems = []
    for req in _pyproject_requirements():
        key = canonicalize_name(req.name)
        if key not in pins:
            problems.append(f"{req.name}: not in the lock")
        elif not req.specifier.contains(pins[key], prereleases=True):
            problems.append(f"{req.name}: locked {pins[key]} is outside pyproject's {req.specifier}")
    assert not problems, "the lock is stale; run `make lock`: " + "; ".join(problems)


def test_lock_holds_the_cpu_torch_and_a_peft_that_transformers_accepts():
    pins = _all_pins()
    assert pins["torch"] == "2.13.0"
    # transformers 5.24 refuses peft < 0.22 for LoRA adapters (requirements/constraints.in says why).
    from packaging.version import Version

    assert Version(pins["transformers"]) < Version("5.24") or Version(pins["peft"]) >= Version("0.22")


def test_every_line_of_the_lock_is_an_exact_pin(tmp_path):
    lockcheck.read_lock(LOCK)  # raises on a line that is not `name==version`
    bad = tmp_path / "lock.txt"
    bad.write_text("numpy>=1.26\n")
    with pytest.raises(ValueError, match=r"lock.txt:1: numpy is not pinned"):
        lockcheck.read_lock(bad)


def test_drift_names_each_package_off_its_pin(tmp_path):
    from importlib import metadata

    lock = tmp_path / "lock.txt"
    have = metadata.version("pyyaml")
    lock.write_text(f"pyyaml==0.0.1\nrich=={metadata.version('rich')}\n")
    found = lockcheck.drift(lock)
    assert [(d.name, d.locked, d.installed) for d in found] == [("pyyaml", "0.0.1", have)]


@pytest.mark.skipif(os.environ.get("BENCAO_UNLOCKED") == "1", reason="make test-latest runs the suite on unlocked releases")
def test_the_environment_running_the_suite_is_the_locked_one():
    drift = lockcheck.drift(LOCK)
    assert not drift, "installed off the lock (install with `make test`, or run `make test-latest` on purpose): " + ", ".join(
        f"{d.name} {d.installed} (locked {d.locked})" for d in drift)
    assert not lockcheck.unlocked(LOCK), "installed but not in the lock"
