"""The wheel works from an empty folder: built with `python -m build`, installed into a fresh virtualenv
from the lock, it builds the sample graph from a copied recipe, answers, plans a 7B run and lists recipes.

It takes one to three minutes (a fresh venv with the locked packages from pip's cache) and runs in CI's
`make test`: the packaging test of the package list alone let a wheel without schema.sql ship.
"""

from __future__ import annotations

import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LOCK = ROOT / "requirements" / "lock.txt"

pytestmark = pytest.mark.timeout(1200)


def _run(cmd: list[str], cwd: Path, env: dict[str, str], timeout: int = 900) -> str:
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{' '.join(map(str, cmd))} exited {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(bin folder of a fresh venv with the built wheel installed, an empty working folder, env)."""
    base = tmp_path_factory.mktemp("wheel")
    dist = base / "dist"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_DATASETS_OFFLINE="1", TOKENIZERS_PARALLELISM="false",
               PIP_DISABLE_PIP_VERSION_CHECK="1")
    # sdist first, then the wheel from the sdist: what the sdist leaves out fails here too
    _run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(dist), str(ROOT)], cwd=base, env=env)
    wheels = sorted(dist.glob("bencao-*.whl"))
    assert wheels and sorted(dist.glob("bencao-*.tar.gz")), f"no wheel and sdist in {dist}"
    venv.EnvBuilder(with_pip=True).create(base / "venv")
    bin_ = base / "venv" / "bin"
    pip = [str(bin_ / "python"), "-m", "pip", "install", "-q", "-c", str(LOCK)]
    _run([*pip, "torch"], cwd=base, env=env)
    _run([*pip, f"{wheels[0]}[train]"], cwd=base, env=env)
    work = base / "empty"
    work.mkdir()
    env["PATH"] = f"{bin_}{os.pathsep}{env.get('PATH', '')}"
    return bin_, work, env


def test_installed_wheel_does_not_import_from_the_checkout(installed):
    bin_, work, env = installed
    where = _run([str(bin_ / "python"), "-c", "import bencao, bencao.recipes as r; print(bencao.__file__); print(r.package_root())"], work, env)
    module, root = where.split()
    assert str(ROOT) not in module and "site-packages" in module
    assert Path(root).name == "bencao" and (Path(root) / "configs").is_dir() and (Path(root) / "data" / "sample").is_dir()


def test_version_help_and_every_recipe_listed(installed):
    bin_, work, env = installed
    from bencao import __version__
    from bencao.recipes import list_recipes

    assert _run([str(bin_ / "bencao"), "--version"], work, env).strip() == f"bencao {__version__}"
    assert "graph" in _run([str(bin_ / "bencao"), "--help"], work, env)
    listed = {line.split()[0] for line in _run([str(bin_ / "bencao"), "recipes", "list"], work, env).splitlines()}
    assert listed == {r.name for r in list_recipes()}  # the checkout's configs/, all of it, in the wheel


def test_sample_graph_from_a_copied_recipe_answers_with_citations(installed):
    bin_, work, env = installed
    bencao = str(bin_ / "bencao")
    _run([bencao, "recipes", "show", "graph/sample", "-o", "my-sample.yaml"], work, env)
    _run([bencao, "graph", "build", "--config", "my-sample.yaml", "--graph", "g", "index_config=retrieval/lexical"], work, env)
    stats = _run([bencao, "graph", "stats", "--graph", "g"], work, env)
    assert "snippets" in stats
    answer = _run([bencao, "ask", "--graph", "g", "山药有什么功效？"], work, env)
    assert "山药" in answer and "[1]" in answer
    # the sample data's licences travel with it
    root = Path(_run([str(bin_ / "python"), "-c", "import bencao.recipes as r; print(r.sample_data_dir())"], work, env).strip())
    assert (root / "foodon" / "LICENSE.FoodOn.CC-BY-4.0.txt").is_file() and (root / "idisk" / "LICENSE.iDISK2.0.txt").is_file()


def test_train_plan_for_a_packaged_7b_recipe(installed):
    bin_, work, env = installed
    out = _run([str(bin_ / "bencao"), "train", "plan", "--config", "sft/qwen2.5-7b-instruct/lora_zero2"], work, env, timeout=300)
    assert "Qwen/Qwen2.5-7B-Instruct: 7.78 B parameters" in out
    assert "<- recipe" in out and "zero2" in out
