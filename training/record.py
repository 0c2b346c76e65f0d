"""What a training run really did, for ``bencao_training.json`` and the model card.

Read from the finished trainer, never from the recipe alone: the DeepSpeed stage of the engine that
ran (also when the launcher's accelerate config, not the recipe, switched DeepSpeed on), the
precision in use, the optimizer steps and epochs actually run (a ``max_steps`` run stops before its
``num_train_epochs``), the SHA-256 of every data file, and the languages of the training rows.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable

#: A language is claimed for a model when at least this share of its training rows is in it.
LANGUAGE_SHARE = 0.02


def run_facts(trainer: Any) -> dict[str, Any]:
    """Processes, distributed type, DeepSpeed stage, precision, steps and epochs of the run that just ended."""
    acc = trainer.accelerator
    model = acc.unwrap_model(trainer.model)
    dtype = getattr(model, "dtype", None)
    if dtype is None:
        dtype = next((p.dtype for p in model.parameters()), None)
    facts: dict[str, Any] = {
        "world_size": acc.num_processes,
        "distributed_type": str(acc.distributed_type).split(".")[-1],
        "deepspeed": deepspeed_facts(trainer),
        "precision": {"mixed_precision": str(acc.mixed_precision), "weights_dtype": str(dtype).removeprefix("torch.") if dtype else None},
        "steps_run": int(trainer.state.global_step),
        "epochs_run": round(float(trainer.state.epoch or 0.0), 4),
    }
    return facts


def deepspeed_facts(trainer: Any) -> dict[str, Any] | None:
    """The ZeRO stage and offload of the DeepSpeed engine that trained, or None without DeepSpeed."""
    if not getattr(trainer, "is_deepspeed_enabled", False):
        return None
    plugin = trainer.accelerator.state.deepspeed_plugin
    cfg = (plugin.deepspeed_config if plugin is not None else None) or {}
    zero = cfg.get("zero_optimization", {})
    return {
        "zero_stage": int(zero.get("stage", plugin.zero_stage if plugin is not None else 0)),
        "offload_optimizer": (zero.get("offload_optimizer") or {}).get("device", "none"),
        "offload_param": (zero.get("offload_param") or {}).get("device", "none"),
        "config": str(trainer.args.deepspeed) if isinstance(trainer.args.deepspeed, str) else None,
    }


def file_entry(path: str | None, split: str, records: int, **extra: Any) -> dict[str, Any] | None:
    """A data file (or saved dataset directory) with the SHA-256 of its bytes (of each file, for a directory)."""
    from bencao.models import file_sha256

    if not path:
        return None
    p = Path(path)
    entry: dict[str, Any] = {"path": str(p), "split": split, "records": records}
    if p.is_file():
        entry["sha256"] = file_sha256(p)
    elif p.is_dir():
        entry["sha256_files"] = {f.relative_to(p).as_posix(): file_sha256(f) for f in sorted(p.rglob("*")) if f.is_file()}
    entry.update(extra)
    return entry


def languages(texts: Iterable[str]) -> dict[str, int]:
    """Rows per language (``bencao.text.lang_of``: zh when a fifth of the characters are CJK, else en)."""
    from bencao.text import lang_of

    counts: dict[str, int] = {}
    for t in texts:
        lang = lang_of(t)
        counts[lang] = counts.get(lang, 0) + 1
    return dict(sorted(counts.items(), key=lambda kv: -kv[1]))


def claimed_languages(counts: dict[str, int]) -> list[str]:
    """Languages with at least ``LANGUAGE_SHARE`` of the rows, most rows first."""
    total = sum(counts.values())
    return [lang for lang, n in counts.items() if total and n / total >= LANGUAGE_SHARE]
