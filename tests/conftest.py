"""Shared test set-up: offline hub, markers that skip themselves where they cannot run."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

for _var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE"):
    os.environ.setdefault(_var, "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "data" / "sample"
DEV = REPO.parent / "shared" / "data" / "dev"


def pytest_collection_modifyitems(config, items):
    has_cuda = False
    if any("gpu" in item.keywords for item in items):
        try:
            import torch

            has_cuda = torch.cuda.is_available()
        except Exception:  # noqa: BLE001
            has_cuda = False
    has_chromium = shutil.which("chromium") is not None or shutil.which("chromium-browser") is not None
    for item in items:
        if "gpu" in item.keywords and not has_cuda:
            item.add_marker(pytest.mark.skip(reason="needs a CUDA device"))
        if "browser" in item.keywords and not has_chromium:
            item.add_marker(pytest.mark.skip(reason="needs Debian's chromium"))


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO


@pytest.fixture(scope="session")
def sample_dir() -> Path:
    return SAMPLE
