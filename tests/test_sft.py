"""SFT of the CoT model on a tiny Qwen2 built from a config (CPU, no downloads)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fixtures_training import lora_run, pairs_file, sft_data, sft_overrides, tiny_qwen  # noqa: F401
from tiny_models import sft_records, write_jsonl

from bencao.errors import BencaoError, ConfigError, InputError

REPO = Path(__file__).resolve().parents[1]


def test_labels_cover_only_assistant_turns_and_im_end(tiny_qwen, sft_data, tmp_path):
    from bencao.training.sft import build_trainer, parse_args

    trainer = build_trainer(*parse_args(None, sft_overrides(tiny_qwen, sft_data, tmp_path / "o", "max_steps=1")))
    tok = trainer.processing_class
    msgs = sft_records(1)[0]["messages"]  # 神农本草经 entry: system + user + assistant
    example = trainer.train_dataset[0]
    batch = trainer.data_collator([example])
    labels = batch["labels"][0].tolist()
    ids = batch["input_ids"][0].tolist()
    kept = [i for i, lab in zip(ids, labels) if lab != -100]
    assert tok.decode(ids).startswith("<|im_start|>system\n" + msgs[0]["content"])
    # Exactly the assistant's answer plus its end-of-turn token are learned; prompt and roles are masked.
    assert tok.decode(kept).strip() == msgs[2]["content"] + "<|im_end|>"
    im_end = tok.convert_tokens_to_ids("<|im_end|>")
    assert im_end == tok.eos_token_id and kept.count(im_end) == 1
    assert tok.decode(kept[kept.index(im_end) + 1 :]).strip() == ""  # at most the template's newline follows
    assert msgs[1]["content"] not in tok.decode(kept)


def test_lora_sft_learns_and_saves_a_nonempty_adapter(lora_run, tiny_qwen):
    from transformers import AutoTokenizer, GenerationConfig

    out, info = lora_run
    m = info["metrics"]
    assert m["train_loss_last"] < m["train_loss_first"]
    assert m["adapter_parameters"] > 0 and "eval_loss" in m
    assert (out / "adapter_model.safetensors").stat().st_size > 0
    tok = AutoTokenizer.from_pretrained(out)
    gen = GenerationConfig.from_pretrained(out)
    assert tok.eos_token == "<|im_end|>"
    assert tok.convert_tokens_to_ids("<|im_end|>") in gen.eos_token_id  # base config only had <|endoftext|>
    assert gen.pad_token_id == tok.pad_token_id
    summary = json.loads((out / "bencao_training.json").read_text(encoding="utf-8"))
    assert summary["hyperparameters"]["method"] == "lora"
    assert summary["hyperparameters"]["lora_target_modules"] == "all-linear"
    assert summary["datasets"][0]["records"] == 32
    card = (out / "README.md").read_text(encoding="utf-8")  # bencao's, not trl's: no local path, no link to a page that is not there
    assert "bencao export --model" in card and str(tiny_qwen) not in card and "huggingface.co/None" not in card


def test_full_sft_loss_decreases_and_resume_continues(tiny_qwen, sft_data, tmp_path):
    from bencao.training.sft import main, parse_args

    out = tmp_path / "full"
    common = ["learning_rate=5e-3", "save_steps=3", "warmup_steps=0", "lr_scheduler_type=constant"]
    first = main(*parse_args(None, sft_overrides(tiny_qwen, sft_data, out, "max_steps=6", *common)))
    assert first["hyperparameters"]["method"] == "full"
    assert first["metrics"]["train_loss_last"] < first["metrics"]["train_loss_first"]
    assert (out / "checkpoint-6").is_dir() and (out / "model.safetensors").exists()
    second = main(*parse_args(None, sft_overrides(tiny_qwen, sft_data, out, "max_steps=9", *common)))
    assert second["resumed_from"].endswith("checkpoint-6")
    assert second["global_step"] == 9
    state = json.loads((out / "checkpoint-9" / "trainer_state.json").read_text())
    steps = [h["step"] for h in state["log_history"] if "loss" in h]
    assert steps == list(range(1, 10))  # steps 1-6 from the first run, 7-9 from the resumed one


def test_empty_adapter_fails_loudly(tmp_path):
    import torch
    from safetensors.torch import save_file

    from bencao.training.sft import check_adapter_nonempty

    save_file({"base_model.model.q_proj.lora_A.weight": torch.zeros(0, 64)}, str(tmp_path / "adapter_model.safetensors"))
    with pytest.raises(BencaoError, match="adapter is empty"):
        check_adapter_nonempty(tmp_path)
    with pytest.raises(BencaoError, match="no adapter_model"):
        check_adapter_nonempty(tmp_path / "missing")


def test_bad_record_names_file_and_line(tmp_path):
    from bencao.training.data import load_sft

    p = write_jsonl(tmp_path / "train.jsonl", sft_records(2))
    with open(p, "a", encoding="utf-8") as fh:
        fh.write(json.dumps({"messages": [{"role": "user", "content": "大枣？"}]}, ensure_ascii=False) + "\n")
    with pytest.raises(InputError, match=r"train\.jsonl:line 3: no non-empty assistant message"):
        load_sft(p)


def test_recipe_errors_are_one_line(tmp_path):
    from bencao.training.sft import parse_args

    cfg = tmp_path / "r.yaml"
    cfg.write_text("model_name_or_path: x\ntrain_file: t.jsonl\nlearning_rat: 1e-4\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="unknown key.*learning_rat"):
        parse_args(cfg)
    cfg.write_text("model_name_or_path: x\ntrain_file: t.jsonl\nlearning_rate: fast\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="learning_rate"):
        parse_args(cfg)
    # YAML reads 1.0e-4 as a float but 1e-4 as a string: both must work.
    _, args, _ = parse_args(cfg, ["learning_rate=1e-4"])
    assert args.learning_rate == pytest.approx(1e-4)


@pytest.mark.parametrize("launcher", [[], ["--accelerate-config", "zero2", "--num-processes", "2"]])
def test_a_misspelt_recipe_key_is_refused_once_before_anything_launches_even_in_a_dry_run(tmp_path, capsys, launcher):
    """Issue 33 item 7: `--dry-run` printed the launch line for a misspelt key, and the launched ranks each failed
    with a traceback. The recipe is checked once, before the line is printed or run."""
    from bencao.cli import main

    cfg = tmp_path / "r.yaml"
    cfg.write_text(f"model_name_or_path: x\ntrain_file: t.jsonl\noutput_dir: {tmp_path / 'o'}\nlearning_rat: 1e-4\n", encoding="utf-8")
    assert main(["train", "sft", "--config", str(cfg), *launcher, "--dry-run"]) == 2
    cap = capsys.readouterr()
    assert "accelerate" not in cap.out and "bencao.training.sft" not in cap.out  # no launch line
    err = cap.err.strip().splitlines()
    assert len(err) == 1 and "unknown key(s) learning_rat (did you mean learning_rate" in err[0], cap.err
    cfg.write_text(f"model_name_or_path: x\ntrain_file: t.jsonl\noutput_dir: {tmp_path / 'o'}\nlearning_rate: 1e-4\n", encoding="utf-8")
    assert main(["train", "sft", "--config", str(cfg), *launcher, "--dry-run"]) == 0
    assert "bencao.training.sft" in capsys.readouterr().out


def _env():
    env = dict(os.environ, OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    env["PYTHONPATH"] = str(REPO / "tests")
    return env


def _accelerate_sft(tmp_path, recipe: str, accelerate_config: str, overrides: list[str]) -> None:
    """`bencao train sft` on 2 processes through accelerate with the given recipe YAML; must exit 0."""
    cfg = tmp_path / "r.yaml"
    cfg.write_text(recipe, encoding="utf-8")
    cmd = [sys.executable, "-m", "bencao.cli", "train", "sft", "--config", str(cfg), "--accelerate-config", accelerate_config,
           "--num-processes", "2", *overrides]
    proc = subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]


def _free_port() -> int:
    """A port nothing listens on now: a fixed one collides with another run of the suite on the machine."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.distributed
def test_torchrun_two_processes_gloo(tiny_qwen, sft_data, tmp_path):
    out = tmp_path / "ddp"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", str(_free_port()),
           "-m", "bencao.training.sft", *sft_overrides(tiny_qwen, sft_data, out, "use_peft=true", "max_steps=3", "save_steps=100")]
    proc = subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads((out / "bencao_training.json").read_text())
    assert summary["training"]["world_size"] == 2 and summary["training"]["deepspeed"] is None
    assert summary["global_step"] == 3 and summary["metrics"]["adapter_parameters"] > 0


@pytest.mark.slow
@pytest.mark.distributed
def test_accelerate_launch_deepspeed_zero2(tiny_qwen, sft_data, tmp_path):
    from bencao.training.model_card import run_text

    out = tmp_path / "z2"
    # DeepSpeed switched on by the launcher's accelerate config alone (the recipe has no deepspeed key): the record and
    # the card must still say ZeRO-2 (they used to say deepspeed: false)
    _accelerate_sft(tmp_path, "use_peft: true\nmax_steps: 3\nsave_steps: 100\n", "zero2", sft_overrides(tiny_qwen, sft_data, out))
    summary = json.loads((out / "bencao_training.json").read_text())
    assert summary["training"]["world_size"] == 2 and summary["training"]["distributed_type"] == "DEEPSPEED"
    assert summary["training"]["deepspeed"]["zero_stage"] == 2
    assert "DeepSpeed ZeRO-2" in run_text(summary) and summary["training"]["steps_run"] == 3
    assert summary["metrics"]["adapter_parameters"] > 0


@pytest.mark.slow
@pytest.mark.distributed
def test_accelerate_launch_zero3_lora_saves_a_full_adapter_and_full_model_exports(tiny_qwen, sft_data, tmp_path):
    """ZeRO-3 partitions the LoRA weights; gathering on save (ds_z3.json) must give a non-empty adapter."""
    from safetensors import safe_open

    from bencao.training.export import export

    out = tmp_path / "z3"
    _accelerate_sft(tmp_path, "use_peft: true\nmax_steps: 2\nsave_steps: 100\n", "zero3",
                    [*sft_overrides(tiny_qwen, sft_data, out), "deepspeed=configs/deepspeed/ds_z3.json"])
    with safe_open(str(out / "adapter_model.safetensors"), framework="pt") as fh:
        shapes = [fh.get_slice(k).get_shape() for k in fh.keys()]
    assert shapes and all(0 not in s for s in shapes)
    merged = export(out, tmp_path / "merged")  # from_pretrained in a fresh process: no zero.Init hang
    assert merged.merged and (tmp_path / "merged" / "model.safetensors").exists()


def test_command_line_errors_are_one_line_exit_2(tmp_path, capsys, sft_data):
    from bencao.cli import main
    from bencao.training.sft import cli

    assert main(["train", "sft", "--config", str(tmp_path / "missing.yaml")]) == 2
    assert "missing.yaml: config file not found" in capsys.readouterr().err
    bad = write_jsonl(tmp_path / "bad.jsonl", [{"messages": "大枣"}])
    assert cli(["--config", str(REPO / "configs" / "sft" / "tiny" / "lora_cpu.yaml"), f"train_file={bad}",
                f"model_name_or_path={tmp_path}", f"output_dir={tmp_path / 'o'}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: ") and "bad.jsonl:line 1" in err[-1]


def test_rows_longer_than_max_length_are_counted_and_can_be_dropped(tiny_qwen, sft_data, tmp_path, caplog):
    from transformers import AutoTokenizer

    from bencao.training.sft import build_trainer, parse_args

    tok = AutoTokenizer.from_pretrained(tiny_qwen)
    convs = [json.loads(line)["messages"] for line in sft_data[0].read_text(encoding="utf-8").splitlines()]
    lengths = [len(tok.apply_chat_template(m, tokenize=True, return_dict=True)["input_ids"]) for m in convs]
    limit = sorted(lengths)[len(lengths) // 2]
    over = sum(n > limit for n in lengths)
    assert 0 < over < len(convs)
    with caplog.at_level("WARNING", logger="bencao.training.sft"):
        kept = build_trainer(*parse_args(None, sft_overrides(tiny_qwen, sft_data, tmp_path / "a", f"max_length={limit}")))
    report = kept.data_report["train"]
    assert report["over_max_length"] == over and report["overlong"] == "truncated" and report["longest_tokens"] == max(lengths)
    assert f"{over} of {len(convs)} rows are longer than max_length={limit}" in caplog.text
    dropped = build_trainer(*parse_args(None, sft_overrides(tiny_qwen, sft_data, tmp_path / "b", f"max_length={limit}", "overlong=drop")))
    assert len(dropped.train_dataset) == dropped.data_report["train"]["used"] == len(convs) - over
    assert max(len(ids) for ids in dropped.train_dataset["input_ids"]) <= limit


def test_packing_keeps_the_assistant_only_mask(tiny_qwen, sft_data, tmp_path):
    from bencao.training.sft import build_trainer, parse_args

    trainer = build_trainer(*parse_args(None, sft_overrides(tiny_qwen, sft_data, tmp_path / "o", "packing=true", "max_length=256")))
    assert len(trainer.train_dataset) < 32  # several conversations per packed row
    batch = trainer.data_collator([trainer.train_dataset[0]])
    tok = trainer.processing_class
    kept = batch["labels"][batch["labels"] != -100].tolist()
    assert 0 < len(kept) < batch["input_ids"].numel()
    assert "<|im_start|>" not in tok.decode(kept) and "的性味是什么" not in tok.decode(kept)  # prompts stay masked
