"""Session fixtures for the training tests: a tiny Qwen2 on disk, SFT and embedder data, one LoRA run.

Import the fixtures by name in a test module: ``from fixtures_training import tiny_qwen, sft_data``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tiny_models import build_tiny_qwen, embed_records, sft_records, write_jsonl

FAST = ["gradient_checkpointing=false", "per_device_train_batch_size=8", "per_device_eval_batch_size=8", "max_length=128",
        "logging_steps=1", "dataloader_num_workers=0", "seed=0", "disable_tqdm=true"]


@pytest.fixture(scope="session")
def tiny_qwen(tmp_path_factory) -> Path:
    return build_tiny_qwen(tmp_path_factory.mktemp("tiny_qwen") / "model")


@pytest.fixture(scope="session")
def sft_data(tmp_path_factory) -> tuple[Path, Path]:
    d = tmp_path_factory.mktemp("sft_data")
    recs = sft_records(40)
    return write_jsonl(d / "train.jsonl", recs[:32]), write_jsonl(d / "eval.jsonl", recs[32:])


@pytest.fixture(scope="session")
def pairs_file(tmp_path_factory) -> Path:
    return write_jsonl(tmp_path_factory.mktemp("pairs") / "train.jsonl", embed_records())


def sft_overrides(model: Path, data: tuple[Path, Path], out: Path, *extra: str) -> list[str]:
    return [f"model_name_or_path={model}", f"train_file={data[0]}", f"eval_file={data[1]}", f"output_dir={out}", *FAST, *extra]


@pytest.fixture(scope="session")
def lora_run(tiny_qwen, sft_data, tmp_path_factory) -> tuple[Path, dict]:
    """One LoRA SFT run (reused by the SFT and export tests)."""
    from bencao.training.sft import main, parse_args

    out = tmp_path_factory.mktemp("lora_run") / "out"
    info = main(*parse_args(None, sft_overrides(
        tiny_qwen, sft_data, out, "use_peft=true", "lora_r=8", "lora_alpha=16", "lora_dropout=0.0",
        "learning_rate=2e-2", "max_steps=10", "save_steps=100", "warmup_steps=0",  # 10 steps of 4 per epoch: 2.5 epochs
    )))
    return out, info
