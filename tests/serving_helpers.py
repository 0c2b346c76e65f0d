"""Shared set-up of the serving tests: one small real graph per test session, and `bencao serve` runs.

The graph is the 106-item medicine-food-homology catalogue plus 神农本草经 (materia-medica pattern
extraction on), indexed with the default embedder. It is built once per pytest session under the
session's base temp directory, whichever serving test module asks first.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

REPO = Path(__file__).resolve().parents[1]
BENCAO = [sys.executable, "-m", "bencao.cli"]

RECIPE = """\
name: serving-test
root: {root}
index: true
sources:
  - format: catalog-csv
    path: data/sample/mfh_catalog/mfh_catalog_106.csv
  - format: books-txt
    path: data/sample/tcm_classics/txt/000-神农本草经.txt
    options: {{materia_medica: true}}
"""


def serving_graph(tmp_path_factory) -> Path:  # noqa: ANN001
    """The session's serving graph directory (built on first use)."""
    from bencao.retrieval.build import build_graph, load_build_config

    base = tmp_path_factory.getbasetemp() / "serving-graph"
    graph = base / "graph"
    if (graph / "graph.sqlite").exists():
        return graph
    base.mkdir(parents=True, exist_ok=True)
    recipe = base / "recipe.yaml"
    recipe.write_text(RECIPE.format(root=REPO), encoding="utf-8")
    cfg, root = load_build_config(recipe)
    build_graph(cfg, root, graph)
    return graph


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def env() -> dict[str, str]:
    e = dict(os.environ)
    for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE"):
        e[var] = "1"
    e["TOKENIZERS_PARALLELISM"] = "false"
    e["PYTHONUNBUFFERED"] = "1"
    return e


@contextlib.contextmanager
def bencao_serve(graph: Path, *args: str, api_key: str | None = None, log: Path | None = None,
                 startup_timeout_s: float = 120.0) -> Iterator[tuple[str, subprocess.Popen]]:
    """Run ``bencao serve`` in a subprocess on a free loopback port; yields (base URL, process)."""
    import httpx

    port = free_port()
    cmd = [*BENCAO, "serve", "--graph", str(graph), "--host", "127.0.0.1", "--port", str(port), *args]
    if api_key is not None:
        cmd += ["--api-key", api_key]
    out = open(log, "wb") if log else subprocess.DEVNULL
    proc = subprocess.Popen(cmd, cwd=REPO, env=env(), stdout=out, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + startup_timeout_s
        while True:
            if proc.poll() is not None:
                tail = Path(log).read_text(encoding="utf-8", errors="replace")[-2000:] if log else ""
                raise RuntimeError(f"bencao serve exited with {proc.returncode}: {tail}")
            try:
                if httpx.get(base + "/healthz", timeout=1.0).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("bencao serve did not become healthy in time")
            time.sleep(0.2)
        yield base, proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if log:
            out.close()  # type: ignore[union-attr]
