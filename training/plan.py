"""Per-GPU memory plan of an SFT recipe, from DeepSpeed's ZeRO estimators.

``bencao train plan --config configs/sft/qwen2.5-7b-instruct/lora_zero2.yaml --num-gpus 8``

The model is built on the meta device from its config (no weights are read), LoRA layers are added
the way training adds them, and the parameter counts go into DeepSpeed's
``estimate_zero{2,3}_model_states_mem_needs``. With LoRA the frozen base is not partitioned by
ZeRO-2 (it is not in the optimizer), so its 16-bit copy is added per GPU and the estimator is applied
to the trainable parameters only. Figures are model states (weights, gradients, optimizer states);
activations come on top and grow with batch × sequence length.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

from bencao.errors import ConfigError

GiB = 1024**3


def count_params(model_config: Any, lora: dict[str, Any] | None) -> dict[str, int]:
    """total, trainable and largest-layer parameter counts of the model (meta device, no memory)."""
    from accelerate import init_empty_weights
    from transformers import AutoModelForCausalLM

    with init_empty_weights():
        model = AutoModelForCausalLM.from_config(model_config)
        if lora:
            from peft import LoraConfig, get_peft_model

            model = get_peft_model(model, LoraConfig(task_type="CAUSAL_LM", **lora))
    seen: dict[int, int] = {}
    trainable = 0
    for p in model.parameters():
        if id(p) in seen:
            continue
        seen[id(p)] = p.numel()
        if p.requires_grad:
            trainable += p.numel()
    largest = max(sum(p.numel() for p in m.parameters(recurse=False)) for m in model.modules())
    total = sum(seen.values())
    return {"total": total, "trainable": trainable if lora else total, "largest_layer": largest}


def estimates(counts: dict[str, int], lora: bool, num_gpus: int, num_nodes: int) -> list[dict[str, Any]]:
    """Per-GPU and per-node CPU bytes for DDP, ZeRO-2, ZeRO-3 and ZeRO-3 with CPU offload."""
    from deepspeed.runtime.zero.stage3 import estimate_zero3_model_states_mem_needs
    from deepspeed.runtime.zero.stage_1_and_2 import estimate_zero2_model_states_mem_needs

    total, train, largest = counts["total"], counts["trainable"], counts["largest_layer"]
    frozen = total - train if lora else 0
    gpus = num_gpus * num_nodes
    rows = []
    # DDP: every GPU holds everything; bf16 weights + fp32 master/grads/Adam moments for trained ones.
    rows.append({"stage": "ddp", "gpu": 2 * frozen + 18 * train, "cpu": 0})
    cpu2, gpu2 = estimate_zero2_model_states_mem_needs(train, num_gpus, num_nodes, cpu_offload=False)
    rows.append({"stage": "zero2", "gpu": gpu2 + 2 * frozen, "cpu": cpu2})
    cpu3, gpu3, _ = estimate_zero3_model_states_mem_needs(train, largest, num_gpus, num_nodes, cpu_offload=False,
                                                          cpu_offload_params=False, zero_init=True)
    rows.append({"stage": "zero3", "gpu": gpu3 + int(2 * frozen / gpus), "cpu": cpu3})
    cpu3o, gpu3o, _ = estimate_zero3_model_states_mem_needs(train, largest, num_gpus, num_nodes, cpu_offload=True,
                                                            cpu_offload_params=True, zero_init=True)
    rows.append({"stage": "zero3_offload", "gpu": gpu3o, "cpu": cpu3o + 2 * frozen * num_gpus // max(gpus, 1)})
    return rows


def plan(config: str | Path, overrides: Sequence[str] = (), num_gpus: int = 8, num_nodes: int = 1,
         model_config: str | Path | None = None) -> dict[str, Any]:
    from transformers import AutoConfig

    from bencao.training.args import recipe_dict, resolve_shipped
    from bencao.training.sft import recipe_defaults

    data = recipe_defaults(recipe_dict(config, overrides))
    name = data.get("model_name_or_path")
    source = model_config or name
    if not source:
        raise ConfigError(f"{config}: model_name_or_path is required")
    from bencao.models import resolve_model

    if model_config is None:
        # A shipped recipe carries its model's architecture (config.json, no weights) beside it, so a plan
        # needs neither the weights nor the hub; a model that is there locally (a path, the hub cache) is
        # read as it is. Online or offline: a machine without network access must not wait on the hub.
        beside = resolve_shipped(config).parent / "architecture"
        if (beside / "config.json").is_file():
            from bencao.models import _local_snapshot

            try:
                resolved: str | None = resolve_model(str(source))
            except ConfigError:
                resolved = None
            if resolved is None or not Path(resolved).exists():
                snap = _local_snapshot(str(source))
                model_config = snap if snap and (Path(snap) / "config.json").is_file() else beside
    try:
        cfg = AutoConfig.from_pretrained(str(model_config) if model_config else resolve_model(str(source)))
    except OSError as exc:
        raise ConfigError(f"{source}: cannot read the model config ({str(exc).splitlines()[0]}); pass --model-config config.json") from None
    lora = None
    if data.get("use_peft"):
        tm = data.get("lora_target_modules", "all-linear")
        lora = {"r": int(data.get("lora_r", 16)), "lora_alpha": int(data.get("lora_alpha", 32)),
                "target_modules": tm if isinstance(tm, str) else list(tm)}
    counts = count_params(cfg, lora)
    stage = "ddp"
    if data.get("deepspeed"):
        ds = json.loads(resolve_shipped(data["deepspeed"], "configs/deepspeed", (".json",)).read_text())
        stage = f"zero{ds['zero_optimization']['stage']}"
    return {"model": str(name), "lora": lora is not None, "counts": counts, "num_gpus": num_gpus, "num_nodes": num_nodes,
            "recipe_stage": stage, "rows": estimates(counts, lora is not None, num_gpus, num_nodes)}


def render(p: dict[str, Any]) -> str:
    c = p["counts"]
    lines = [
        f"model {p['model']}: {c['total'] / 1e9:.2f} B parameters, {c['trainable'] / 1e6:.1f} M trainable"
        f" ({'LoRA' if p['lora'] else 'full'}), largest layer {c['largest_layer'] / 1e6:.1f} M",
        f"{p['num_nodes']} node(s) x {p['num_gpus']} GPU(s); model states only (activations come on top)",
        f"{'stage':<16}{'per GPU':>12}{'CPU per node':>16}",
    ]
    for r in p["rows"]:
        mark = "  <- recipe" if r["stage"] == p["recipe_stage"] else ""
        lines.append(f"{r['stage']:<16}{r['gpu'] / GiB:>9.1f} GiB{r['cpu'] / GiB:>12.1f} GiB{mark}")
    return "\n".join(lines)
