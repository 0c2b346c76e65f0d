"""Supervised fine-tuning of the chain-of-thought model (trl ``SFTTrainer`` + peft LoRA, or full).

One file, three ways to run it (the shape of trl's ``trl/scripts/sft.py``)::

    python -m bencao.training.sft --config configs/sft/tiny/lora_cpu.yaml max_steps=20
    torchrun --nproc_per_node 2 -m bencao.training.sft --config ...
    accelerate launch --config_file configs/accelerate/zero2.yaml -m bencao.training.sft --config ...

``bencao train sft`` builds the ``accelerate launch`` line for you (see ``launch.py``).

The recipe is one flat YAML mapping over three dataclasses: ``SFTScriptArguments`` (data files),
trl's ``SFTConfig`` (every ``TrainingArguments`` key: learning_rate, max_steps, deepspeed, ...) and
trl's ``ModelConfig`` (model_name_or_path, dtype, use_peft, lora_*). Defaults that differ from trl:
``assistant_only_loss: true``, ``lora_target_modules: all-linear``, ``report_to: none``,
``bf16: auto`` and ``resume_from_checkpoint: auto`` (continue from the last checkpoint in
``output_dir`` when there is one). For ChatML tokenizers (Qwen) the EOS is ``<|im_end|>`` in the
tokenizer, the model config and ``generation_config.json``.
"""

from __future__ import annotations

import json
import logging
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from bencao.errors import BencaoError, ConfigError

log = logging.getLogger(__name__)

SUMMARY_FILE = "bencao_training.json"
CHATML_EOS = "<|im_end|>"


@dataclass
class SFTScriptArguments:
    """Where the conversational data comes from (see ``bencao.training.data``)."""

    train_file: str | None = field(
        default=None,
        metadata={"help": "Training set: JSONL of {'messages': [...]} records, or a datasets dir saved with save_to_disk."},
    )
    eval_file: str | None = field(
        default=None, metadata={"help": "Held-out set in the same format; its loss is reported and goes into the model card."}
    )
    train_split: str = field(default="train", metadata={"help": "Split to read when train_file is a saved DatasetDict."})
    eval_split: str = field(default="eval", metadata={"help": "Split to read when eval_file is a saved DatasetDict."})
    tokenizer_name_or_path: str | None = field(
        default=None, metadata={"help": "Tokenizer id or path; defaults to model_name_or_path."}
    )
    max_train_samples: int | None = field(default=None, metadata={"help": "Use only the first N training records."})
    check_adapter: bool = field(
        default=True, metadata={"help": "After saving, fail if the LoRA adapter file is missing or holds empty tensors."}
    )
    torch_threads: int | None = field(
        default=None,
        metadata={"help": "CPU threads torch computes with (torch.set_num_threads), set before the model loads; null = torch's "
                          "default ($OMP_NUM_THREADS, else every core). On a CPU shared with other jobs one thread is often faster."},
    )
    overlong: str = field(
        default="truncate",
        metadata={"help": "Rows longer than max_length tokens: truncate (trl keeps the start) | drop. Either way their number is "
                          "logged and recorded in bencao_training.json."},
    )


def dataclass_types() -> tuple[type, ...]:
    from trl import ModelConfig, SFTConfig

    return (SFTScriptArguments, SFTConfig, ModelConfig)


def make_parser():
    """The trl parser over this script's dataclasses (for ``--help`` and trl-style ``--key value`` use)."""
    from trl import TrlParser

    return TrlParser(dataclass_types(), prog="bencao.training.sft")


def recipe_defaults(data: dict[str, Any]) -> dict[str, Any]:
    data.setdefault("assistant_only_loss", True)
    data.setdefault("report_to", "none")
    data.setdefault("resume_from_checkpoint", "auto")
    if data.get("use_peft"):
        data.setdefault("lora_target_modules", "all-linear")
    return data


def _recipe(config: str | Path | None, overrides: Sequence[str]) -> dict[str, Any]:
    from bencao.training.args import recipe_dict, resolve_shipped

    data = recipe_defaults(recipe_dict(config, overrides))
    if isinstance(data.get("deepspeed"), str) and data["deepspeed"]:
        data["deepspeed"] = str(resolve_shipped(data["deepspeed"], "configs/deepspeed", (".json",)))
    if isinstance(data.get("lora_target_modules"), str):
        data["lora_target_modules"] = [data["lora_target_modules"]]
    return data


def _check_required(where: str, overlong: Any, model: Any, train_file: Any) -> None:
    if overlong not in ("truncate", "drop"):
        raise ConfigError(f"{where}: overlong must be truncate or drop, got {overlong!r}")
    if not model:
        raise ConfigError(f"{where}: model_name_or_path is required")
    if not train_file:
        raise ConfigError(f"{where}: train_file is required")


def validate_recipe(config: str | Path | None, overrides: Sequence[str] = ()) -> None:
    """The recipe's checks without building the training arguments: what ``bencao train sft`` runs once before it
    launches any rank (and for ``--dry-run``), so a misspelt key is one line instead of a traceback per rank."""
    from bencao.training.args import check_recipe

    where = str(config or "config")
    data = check_recipe(dataclass_types(), _recipe(config, overrides), where)
    _check_required(where, data.get("overlong", "truncate"), data.get("model_name_or_path"), data.get("train_file"))


def parse_args(config: str | Path | None, overrides: Sequence[str] = ()) -> tuple[Any, Any, Any]:
    """(script_args, training_args, model_args) from a YAML recipe and ``key=value`` overrides."""
    from bencao.training.args import parse_recipe

    script_args, training_args, model_args = parse_recipe(dataclass_types(), _recipe(config, overrides), str(config or "config"))
    _check_required(str(config or "config"), script_args.overlong, model_args.model_name_or_path, script_args.train_file)
    return script_args, training_args, model_args


def resolve_resume(value: str | None, output_dir: str) -> str | None:
    """``auto`` → the last ``checkpoint-N`` in ``output_dir`` (None when there is none); a path is kept."""
    from transformers.trainer_utils import get_last_checkpoint

    if value is None or str(value).lower() in ("", "none", "false", "no"):
        return None
    if str(value).lower() in ("auto", "last", "true"):
        return get_last_checkpoint(output_dir) if Path(output_dir).is_dir() else None
    if not Path(value).is_dir():
        raise ConfigError(f"resume_from_checkpoint: {value} is not a checkpoint directory")
    return value


def load_tokenizer(script_args, training_args, model_args):
    from transformers import AutoTokenizer

    from bencao.models import resolve_model

    name = script_args.tokenizer_name_or_path or model_args.model_name_or_path
    tok = AutoTokenizer.from_pretrained(
        resolve_model(name), revision=model_args.model_revision, trust_remote_code=training_args.trust_remote_code
    )
    if tok.chat_template is None and training_args.chat_template_path is None:
        raise ConfigError(f"{name}: the tokenizer has no chat template; set chat_template_path to a .jinja file")
    template = tok.chat_template or ""
    if training_args.eos_token is None and CHATML_EOS in tok.get_vocab() and "<|im_start|>" in template:
        # ChatML (Qwen): every turn ends with <|im_end|>; generation must stop there, not at <|endoftext|>.
        training_args.eos_token = CHATML_EOS
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return tok


def load_model(training_args, model_args):
    import torch
    from transformers import AutoModelForCausalLM
    from trl import get_quantization_config

    kwargs: dict[str, Any] = dict(
        revision=model_args.model_revision,
        trust_remote_code=training_args.trust_remote_code,
        attn_implementation=model_args.attn_implementation,
    )
    dtype = model_args.dtype
    kwargs["dtype"] = dtype if dtype in ("auto", None) else getattr(torch, dtype)
    quant = get_quantization_config(model_args)
    if quant is not None:
        kwargs["quantization_config"] = quant
        from accelerate import PartialState

        kwargs["device_map"] = {"": PartialState().local_process_index}  # one quantised copy per process
    if training_args.model_init_kwargs:
        kwargs.update(training_args.model_init_kwargs)
    from bencao.models import resolve_model

    return AutoModelForCausalLM.from_pretrained(resolve_model(model_args.model_name_or_path), **kwargs)


def overlong_rows(dataset, tok, max_length: int | None, action: str, split: str, announce: bool = True):
    """(dataset, report): how many rows the chat template makes longer than ``max_length`` tokens;
    with ``action == "drop"`` they are removed, else trl truncates them. Logged when there are any."""
    from bencao.training.record import languages

    report: dict[str, Any] = {"rows": len(dataset), "max_length": max_length, "over_max_length": 0, "used": len(dataset),
                              "languages": languages(" ".join(m["content"] for m in msgs) for msgs in dataset["messages"])}
    if max_length is None or len(dataset) == 0:
        return dataset, report
    texts = tok.apply_chat_template(list(dataset["messages"]), tokenize=False)
    lengths = [len(ids) for ids in tok(texts, add_special_tokens=False)["input_ids"]]
    over = [i for i, n in enumerate(lengths) if n > max_length]
    report.update(over_max_length=len(over), longest_tokens=max(lengths))
    if over:
        report["overlong"] = "dropped" if action == "drop" else "truncated"
        if announce:
            log.warning("%s: %d of %d rows are longer than max_length=%d tokens (longest %d): %s", split, len(over), len(dataset),
                        max_length, max(lengths), report["overlong"])
        if action == "drop":
            keep = sorted(set(range(len(dataset))) - set(over))
            dataset = dataset.select(keep)
            report["used"] = len(dataset)
    return dataset, report


def build_trainer(script_args, training_args, model_args):
    """Data, tokenizer, model and an ``SFTTrainer`` ready to train (datasets already tokenised).

    ``trainer.data_report`` holds the per-split row counts and overlong rows (see :func:`overlong_rows`)."""
    from trl import SFTTrainer, get_peft_config

    from bencao.training.data import load_sft

    train = load_sft(script_args.train_file, script_args.train_split)
    if script_args.max_train_samples:
        train = train.select(range(min(script_args.max_train_samples, len(train))))
    evalset = load_sft(script_args.eval_file, script_args.eval_split) if script_args.eval_file else None
    if evalset is None and str(training_args.eval_strategy) not in ("no", "IntervalStrategy.NO"):
        raise ConfigError(f"eval_strategy={training_args.eval_strategy} needs eval_file")
    tok = load_tokenizer(script_args, training_args, model_args)
    # Set up the process group first: under ZeRO-3, from_pretrained enters zero.Init, which checks
    # the batch arithmetic against the world size it finds (1 when the group does not exist yet).
    _ = training_args.device
    main_rank = training_args.process_index == 0
    train, train_report = overlong_rows(train, tok, training_args.max_length, script_args.overlong, "train", main_rank)
    reports = {"train": train_report}
    if evalset is not None:
        evalset, reports["eval"] = overlong_rows(evalset, tok, training_args.max_length, script_args.overlong, "eval", main_rank)
    if len(train) == 0:
        raise ConfigError(f"{script_args.train_file}: every row is longer than max_length={training_args.max_length} (overlong: drop)")
    if training_args.deepspeed and training_args.world_size > 1:
        import deepspeed

        deepspeed.init_distributed()  # binds DeepSpeed's comm to that group (on CPU accelerate leaves it unbound)
    model = load_model(training_args, model_args)
    trainer = SFTTrainer(
        model=model,
        args=training_args,
        train_dataset=train,
        eval_dataset=evalset,
        processing_class=tok,
        peft_config=get_peft_config(model_args),
    )
    trainer.data_report = reports
    return trainer


def check_adapter_nonempty(out_dir: str | Path) -> int:
    """Number of adapter parameters saved in ``out_dir``; raises when the file is missing or empty.

    ZeRO-3 + LoRA can save an adapter whose tensors have zero elements (trl#4416); such a model
    silently behaves like the base model, so it must fail here, loudly.
    """
    from safetensors import safe_open

    out_dir = Path(out_dir)
    st = out_dir / "adapter_model.safetensors"
    if not st.exists():
        raise BencaoError(f"{out_dir}: no adapter_model.safetensors was written")
    total, empty = 0, []
    with safe_open(str(st), framework="pt") as fh:
        keys = list(fh.keys())
        for k in keys:
            n = 1
            for d in fh.get_slice(k).get_shape():
                n *= d
            total += n
            if n == 0:
                empty.append(k)
    if not keys or empty or total == 0:
        detail = f"{len(empty)} of {len(keys)} tensors are empty (e.g. {empty[0]})" if empty else "it holds no tensors"
        raise BencaoError(
            f"{st}: the saved LoRA adapter is empty: {detail}. Under ZeRO-3 set "
            "stage3_gather_16bit_weights_on_model_save: true (configs/deepspeed/ds_z3.json) or use ZeRO-2 for LoRA"
        )
    return total


def losses(log_history: list[dict[str, Any]]) -> dict[str, float]:
    train = [h["loss"] for h in log_history if "loss" in h]
    out: dict[str, float] = {}
    if train:
        out["train_loss_first"] = float(train[0])
        out["train_loss_last"] = float(train[-1])
    evals = [h["eval_loss"] for h in log_history if "eval_loss" in h]
    if evals:
        out["eval_loss"] = float(evals[-1])
    return out


def summary(trainer, script_args, training_args, model_args, metrics: dict) -> dict[str, Any]:
    """What the model card needs, read from the run: base, data (SHA-256, overlong rows, languages),
    hyper-parameters, what ran (steps, epochs, processes, DeepSpeed stage, precision), figures, EOS."""
    from bencao.training.record import file_entry, run_facts

    tok = trainer.processing_class
    keys = ["learning_rate", "per_device_train_batch_size", "gradient_accumulation_steps", "warmup_steps", "lr_scheduler_type",
            "weight_decay", "max_length", "packing", "assistant_only_loss", "gradient_checkpointing", "seed"]
    keys.insert(1, "max_steps" if training_args.max_steps and training_args.max_steps > 0 else "num_train_epochs")
    hp = {k: getattr(training_args, k) for k in keys}
    hp["lr_scheduler_type"] = str(hp["lr_scheduler_type"]).split(".")[-1].lower()
    hp["overlong"] = script_args.overlong
    hp["method"] = "lora" if model_args.use_peft else "full"
    if model_args.use_peft:
        tm = model_args.lora_target_modules
        hp.update(lora_r=model_args.lora_r, lora_alpha=model_args.lora_alpha, lora_dropout=model_args.lora_dropout,
                  lora_target_modules=tm if isinstance(tm, (str, type(None))) else list(tm))
        hp["quantization"] = "4bit" if model_args.load_in_4bit else "8bit" if model_args.load_in_8bit else None
    reports = getattr(trainer, "data_report", {})
    train_report, eval_report = reports.get("train") or {}, reports.get("eval") or {}
    return {
        "kind": "causal-lm",
        "base_model": model_args.model_name_or_path,
        "datasets": [d for d in (
            file_entry(script_args.train_file, "train", train_report.get("used", len(trainer.train_dataset)), **_length_facts(train_report)),
            file_entry(script_args.eval_file, "eval", eval_report.get("used", 0), **_length_facts(eval_report)),
        ) if d],
        "languages": train_report.get("languages", {}),
        "hyperparameters": hp,
        "training": run_facts(trainer),
        "metrics": metrics,
        "global_step": trainer.state.global_step,
        "eos_token": tok.eos_token,
        "pad_token": tok.pad_token,
    }


def _length_facts(report: dict[str, Any] | None) -> dict[str, Any]:
    if not report or report.get("max_length") is None:
        return {}
    keep = {"over_max_length": report["over_max_length"]}
    if report.get("overlong"):
        keep["overlong"] = report["overlong"]
    if report.get("longest_tokens") is not None:
        keep["longest_tokens"] = report["longest_tokens"]
    return keep


def _cpu_seconds() -> float:
    import resource

    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def main(script_args, training_args, model_args) -> dict[str, Any]:
    """Train, evaluate, save (adapter or full model + tokenizer + generation config) and summarise."""
    from transformers import GenerationConfig

    from bencao.io import atomic_write_json
    from bencao.training.stop import train_until_stopped

    resume = resolve_resume(training_args.resume_from_checkpoint, training_args.output_dir)
    training_args.resume_from_checkpoint = resume
    if script_args.torch_threads:
        import torch

        torch.set_num_threads(int(script_args.torch_threads))
    trainer = build_trainer(script_args, training_args, model_args)
    if resume:
        trainer.accelerator.print(f"resuming from {resume}")
    cpu0 = _cpu_seconds()
    result = train_until_stopped(trainer, training_args.output_dir, resume)
    metrics = losses(trainer.state.log_history)
    metrics["train_cpu_s"] = round(_cpu_seconds() - cpu0, 1)  # this process's CPU time in training (on a shared CPU, beside the wall time)
    metrics["train_loss"] = float(result.training_loss)
    for key in ("train_runtime", "train_samples_per_second"):
        if key in (result.metrics or {}):
            metrics[key] = round(float(result.metrics[key]), 3)  # of this run (a resumed run: since it resumed)
    if trainer.eval_dataset is not None:
        metrics["eval_loss"] = float(trainer.evaluate()["eval_loss"])
    out = Path(training_args.output_dir)
    trainer.save_model(str(out))  # on every rank: ZeRO-3 gathers the weights here
    if training_args.deepspeed:
        from transformers.integrations.deepspeed import unset_hf_deepspeed_config

        unset_hf_deepspeed_config()  # later from_pretrained calls must not enter zero.Init
    trainer.accelerator.wait_for_everyone()
    info: dict[str, Any] = {}
    if trainer.accelerator.is_main_process:
        tok = trainer.processing_class
        tok.save_pretrained(str(out))
        model = trainer.accelerator.unwrap_model(trainer.model)
        gen = model.generation_config if getattr(model, "generation_config", None) is not None else GenerationConfig()
        eos = gen.eos_token_id if isinstance(gen.eos_token_id, list) else [gen.eos_token_id] if gen.eos_token_id is not None else []
        if tok.eos_token_id not in eos:
            eos = [tok.eos_token_id, *eos]
        gen.eos_token_id = eos
        gen.pad_token_id = tok.pad_token_id
        gen.save_pretrained(str(out))
        if model_args.use_peft and script_args.check_adapter:
            metrics["adapter_parameters"] = check_adapter_nonempty(out)
        info = summary(trainer, script_args, training_args, model_args, metrics)
        info["resumed_from"] = resume
        atomic_write_json(out / SUMMARY_FILE, info)
        (out / "README.md").write_text(training_readme(info, model_args.model_name_or_path, out.name), encoding="utf-8")
        trainer.accelerator.print(json.dumps(metrics, ensure_ascii=False))
    trainer.accelerator.wait_for_everyone()
    if hasattr(trainer, "end"):
        trainer.end()
    return info


def training_readme(info: dict[str, Any], base: str, name: str) -> str:
    """The output folder's README.md, in place of trl's generated card (which names the base by its local path and
    links a hub page that does not exist): what the folder is and how to export it. `bencao export` writes the
    full model card (provenance, data, figures)."""
    method = (info.get("hyperparameters") or {}).get("method", "")
    base_name = Path(base).name if Path(base).is_absolute() else base
    metrics = info.get("metrics") or {}
    lines = [f"# {name}", "",
             f"{'A LoRA adapter' if method == 'lora' else 'Weights'} trained by `bencao train sft` on `{base_name}` "
             f"({info.get('global_step', '?')} steps; training loss {metrics.get('train_loss_first', float('nan')):.3f} → "
             f"{metrics.get('train_loss_last', float('nan')):.3f}). The training record, with the data's hashes and the "
             "hyper-parameters, is `bencao_training.json`.", "",
             "Merge and export it (this writes the model card with provenance, data and figures):", "",
             f"    bencao export --model {name} --out OUT [--gguf q8_0]", ""]
    return "\n".join(lines)


def cli(argv: Sequence[str] | None = None) -> int:
    from bencao.training.args import run_script

    return run_script(argv, "bencao.training.sft", "SFT of the CoT model (trl SFTTrainer, LoRA or full).", parse_args, main)


if __name__ == "__main__":
    sys.exit(cli())
