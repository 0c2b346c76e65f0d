"""Contrastive fine-tuning of the retrieval embedder (sentence-transformers trainer).

    python -m bencao.training.embedder --config configs/embed/bge-m3/cmnrl.yaml
    bencao train embedder --config configs/embed/bge-m3/lora.yaml num_train_epochs=1

Data: ``anchor, positive, negative (may be empty/absent), group`` per JSONL line. The recipe is one
flat YAML mapping over ``EmbedderScriptArguments`` (below) and sentence-transformers'
``SentenceTransformerTrainingArguments``.

- Losses (a registry): ``mnrl`` = MultipleNegativesRankingLoss, ``cmnrl`` = its cached (GradCache)
  version, same loss with constant memory per mini-batch.
- Batches: ``no_duplicates`` (no text twice in a batch, so no false in-batch negative),
  ``group`` (every batch drawn from one ``group`` — MLKG's same-section negatives — also without
  duplicates), or ``batch`` (plain shuffling).
- Hard negatives: the ``negative`` column is used when every training row has one (``auto``).
- Evaluation: ``InformationRetrievalEvaluator`` on the held-out split (anchors as queries, positives
  and negatives as the corpus) before and after training: Recall@k, MRR@10, nDCG@10, written to
  ``<output_dir>/bencao_training.json``.
- Optional LoRA adapter via peft (``use_lora: true``).
"""

from __future__ import annotations

import json
import logging
import math
import random
import sys
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from bencao.errors import BencaoError, ConfigError, InputError
from bencao.io import content_hash

log = logging.getLogger(__name__)

SUMMARY_FILE = "bencao_training.json"


@dataclass
class EmbedderScriptArguments:
    model_name_or_path: str | None = field(default=None, metadata={"help": "Sentence-transformers model id or path (e.g. BAAI/bge-m3)."})
    train_file: str | None = field(default=None, metadata={"help": "JSONL (or saved datasets dir) of anchor/positive/negative/group rows."})
    eval_file: str | None = field(default=None, metadata={"help": "Held-out rows for the IR evaluation; when absent, eval_fraction of the groups is held out."})
    eval_fraction: float = field(default=0.1, metadata={"help": "Share of groups held out when there is no eval_file (split by group hash, so no group leaks)."})
    loss: str = field(default="mnrl", metadata={"help": "Loss name: mnrl (MultipleNegativesRankingLoss) or cmnrl (CachedMultipleNegativesRankingLoss)."})
    scale: float = field(default=20.0, metadata={"help": "Similarity scale (inverse temperature) of the ranking loss."})
    mini_batch_size: int = field(default=32, metadata={"help": "cmnrl: texts per forward pass; memory stays constant as the batch grows."})
    batch_sampling: str = field(default="no_duplicates", metadata={"help": "no_duplicates | group (each batch from one group) | batch (plain shuffle)."})
    hard_negatives: str = field(default="auto", metadata={"help": "auto (use 'negative' when every row has one) | require (error when a row has none) | off."})
    max_seq_length: int | None = field(default=None, metadata={"help": "Truncate inputs to this many tokens (bge-m3 allows 8192; 512 is plenty for terms)."})
    use_lora: bool = field(default=False, metadata={"help": "Train a LoRA adapter instead of all weights."})
    lora_r: int = field(default=16, metadata={"help": "LoRA rank."})
    lora_alpha: int = field(default=32, metadata={"help": "LoRA alpha."})
    lora_dropout: float = field(default=0.05, metadata={"help": "LoRA dropout."})
    lora_target_modules: list[str] | None = field(default=None, metadata={"help": "Modules to adapt; default all linear layers."})
    ir_k: list[int] = field(default_factory=lambda: [1, 5, 10], metadata={"help": "Cut-offs for Recall@k / Accuracy@k in the IR evaluation."})
    eval_batch_size: int = field(default=64, metadata={"help": "Batch size when encoding for the IR evaluation."})


def dataclass_types() -> tuple[type, ...]:
    from sentence_transformers import SentenceTransformerTrainingArguments

    return (EmbedderScriptArguments, SentenceTransformerTrainingArguments)


def parse_args(config: str | Path | None, overrides: Sequence[str] = ()) -> tuple[Any, Any]:
    from bencao.training.args import parse_recipe, recipe_dict

    data = recipe_dict(config, overrides)
    data.setdefault("report_to", "none")
    data.setdefault("resume_from_checkpoint", "auto")
    if isinstance(data.get("lora_target_modules"), str):
        data["lora_target_modules"] = [data["lora_target_modules"]]
    script_args, training_args = parse_recipe(dataclass_types(), data, str(config or "config"))
    where = str(config or "config")
    if not script_args.model_name_or_path:
        raise ConfigError(f"{where}: model_name_or_path is required")
    if not script_args.train_file:
        raise ConfigError(f"{where}: train_file is required")
    if script_args.loss not in LOSSES:
        raise ConfigError(f"{where}: loss {script_args.loss!r} is not one of {', '.join(LOSSES)}")
    if script_args.batch_sampling not in ("no_duplicates", "group", "batch"):
        raise ConfigError(f"{where}: batch_sampling must be no_duplicates, group or batch")
    if script_args.hard_negatives not in ("auto", "require", "off"):
        raise ConfigError(f"{where}: hard_negatives must be auto, require or off")
    return script_args, training_args


# ---- losses ---------------------------------------------------------------------------------

def _mnrl(model, args: EmbedderScriptArguments):
    from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss

    return MultipleNegativesRankingLoss(model, scale=args.scale)


def _cmnrl(model, args: EmbedderScriptArguments):
    from sentence_transformers.sentence_transformer.losses import CachedMultipleNegativesRankingLoss

    return CachedMultipleNegativesRankingLoss(model, scale=args.scale, mini_batch_size=args.mini_batch_size)


LOSSES: dict[str, Callable[[Any, EmbedderScriptArguments], Any]] = {"mnrl": _mnrl, "cmnrl": _cmnrl}


def make_loss(name: str, model, args: EmbedderScriptArguments):
    if name not in LOSSES:
        raise ConfigError(f"loss {name!r} is not one of {', '.join(LOSSES)}")
    return LOSSES[name](model, args)


# ---- batches from one group ----------------------------------------------------------------

def _default_sampler_base():
    from sentence_transformers.base.sampler import DefaultBatchSampler

    return DefaultBatchSampler


class SameGroupBatchSampler(_default_sampler_base()):  # type: ignore[misc]
    """Batches drawn from a single group each, with no text repeated inside a batch.

    In-batch negatives then come from the same group (MLKG: the same section), which makes them
    hard. A row whose text already sits in the open batch waits for the next batch of its group.
    Batches with fewer than ``min_batch`` rows have no negative to learn from and are skipped
    (rows of singleton groups are therefore not trained on; give them a ``negative`` or merge groups).
    The order is reshuffled every epoch from ``seed + epoch``.
    """

    def __init__(self, dataset, batch_size: int, drop_last: bool, valid_label_columns=None, generator=None, seed: int = 0,
                 groups: Sequence[str] = (), min_batch: int = 2) -> None:
        super().__init__(dataset, batch_size=batch_size, drop_last=drop_last, valid_label_columns=valid_label_columns,
                         generator=generator, seed=seed)
        if len(groups) != len(dataset):
            raise ValueError(f"groups has {len(groups)} entries for {len(dataset)} rows")
        self.groups = list(groups)
        cols = [c for c in dataset.column_names if c not in (valid_label_columns or [])]
        self.texts = [tuple(row) for row in zip(*(dataset[c] for c in cols))]
        self.min_batch = min_batch
        self.epoch = 0
        self._cache: tuple[int, list[list[int]]] | None = None

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def batches(self) -> list[list[int]]:
        if self._cache and self._cache[0] == self.epoch:
            return self._cache[1]
        rng = random.Random(self.seed + self.epoch)
        by_group: dict[str, list[int]] = {}
        for i, g in enumerate(self.groups):
            by_group.setdefault(g, []).append(i)
        out: list[list[int]] = []
        for g in sorted(by_group):
            pending = by_group[g][:]
            rng.shuffle(pending)
            while pending:
                # Even split (5 rows, batch 4 -> 3 + 2), so no group ends in a batch of one.
                cap = math.ceil(len(pending) / math.ceil(len(pending) / self.batch_size))
                batch, seen, rest = [], set(), []
                for i in pending:
                    texts = {t for t in self.texts[i] if t}
                    if len(batch) < cap and not (texts & seen):
                        batch.append(i)
                        seen |= texts
                    else:
                        rest.append(i)
                pending = rest
                full = len(batch) == self.batch_size
                if len(batch) >= self.min_batch and (full or not self.drop_last):
                    out.append(batch)
        rng.shuffle(out)
        self._cache = (self.epoch, out)
        return out

    def __iter__(self) -> Iterator[list[int]]:
        yield from self.batches()

    def __len__(self) -> int:
        return len(self.batches())


# ---- data and evaluation --------------------------------------------------------------------

def split_heldout(rows: list[dict[str, str]], fraction: float) -> tuple[list[dict], list[dict]]:
    """Hold out whole groups (by a stable hash of the group, or of the anchor when ungrouped)."""
    if not 0 < fraction < 1:
        raise ConfigError(f"eval_fraction must be between 0 and 1, got {fraction}")
    train, held = [], []
    for r in rows:
        key = r["group"] or r["anchor"]
        (held if int(content_hash("heldout", key), 16) % 10_000 < fraction * 10_000 else train).append(r)
    if not held or not train:
        raise InputError("train_file", f"eval_fraction={fraction} leaves an empty split ({len(train)} train, {len(held)} held out)")
    return train, held


def ir_evaluator(rows: list[dict[str, str]], args: EmbedderScriptArguments, name: str = "heldout"):
    """InformationRetrievalEvaluator: anchors → the corpus of all positives and negatives of ``rows``."""
    from sentence_transformers.sentence_transformer.evaluation import InformationRetrievalEvaluator

    queries: dict[str, str] = {}
    corpus: dict[str, str] = {}
    relevant: dict[str, set[str]] = {}
    for r in rows:
        qid = "q" + content_hash(r["anchor"])
        pid = "d" + content_hash(r["positive"])
        queries[qid] = r["anchor"]
        corpus[pid] = r["positive"]
        relevant.setdefault(qid, set()).add(pid)
        if r.get("negative"):
            corpus["d" + content_hash(r["negative"])] = r["negative"]
    ks = sorted(set(args.ir_k))
    return InformationRetrievalEvaluator(
        queries=queries, corpus=corpus, relevant_docs=relevant, name=name, mrr_at_k=[10], ndcg_at_k=[10],
        accuracy_at_k=ks, precision_recall_at_k=ks, map_at_k=[100], batch_size=args.eval_batch_size, write_csv=False,
    )


def ir_figures(raw: dict[str, float], name: str = "heldout") -> dict[str, float]:
    """The headline figures (cosine): recall@k, mrr@10, ndcg@10, without the evaluator's prefix."""
    prefix = f"{name}_cosine_"
    keep = {}
    for k, v in raw.items():
        short = k.removeprefix(prefix)
        if k.startswith(prefix) and (short.startswith("recall@") or short in ("mrr@10", "ndcg@10", "map@100")):
            keep[short] = float(v)
    return dict(sorted(keep.items()))


def to_dataset(rows: list[dict[str, str]], use_negative: bool):
    from datasets import Dataset

    cols = ["anchor", "positive"] + (["negative"] if use_negative else [])
    return Dataset.from_dict({c: [r[c] for r in rows] for c in cols})


def decide_negatives(rows: list[dict[str, str]], mode: str, path: str) -> bool:
    if mode == "off":
        return False
    missing = [i for i, r in enumerate(rows) if not r["negative"].strip()]
    if mode == "require" and missing:
        raise InputError(path, "no 'negative' (hard_negatives: require)", record=f"row {missing[0] + 1}")
    if missing and len(missing) < len(rows):
        log.warning("%s: %d of %d rows have no negative; training without hard negatives", path, len(missing), len(rows))
    return not missing


def load_model(args: EmbedderScriptArguments):
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(args.model_name_or_path)
    if args.max_seq_length:
        model.max_seq_length = args.max_seq_length
    if args.use_lora:
        from peft import LoraConfig, TaskType

        model.add_adapter(LoraConfig(
            task_type=TaskType.FEATURE_EXTRACTION, r=args.lora_r, lora_alpha=args.lora_alpha, lora_dropout=args.lora_dropout,
            target_modules=args.lora_target_modules or "all-linear",
        ))
    return model


def main(script_args: EmbedderScriptArguments, training_args) -> dict[str, Any]:
    from sentence_transformers import SentenceTransformerTrainer
    from sentence_transformers.base.sampler import BatchSamplers

    from bencao.io import atomic_write_json, file_hash
    from bencao.training.data import load_pairs
    from bencao.training.sft import resolve_resume
    from bencao.training.stop import Stopped, graceful_stop, last_checkpoint

    rows = load_pairs(script_args.train_file)
    if script_args.eval_file:
        train_rows, held = rows, load_pairs(script_args.eval_file, "eval")
    else:
        train_rows, held = split_heldout(rows, script_args.eval_fraction)
    use_neg = decide_negatives(train_rows, script_args.hard_negatives, script_args.train_file)
    train_ds = to_dataset(train_rows, use_neg)
    if script_args.batch_sampling == "group":
        training_args.batch_sampler = partial(SameGroupBatchSampler, groups=[r["group"] for r in train_rows])
    elif script_args.batch_sampling == "no_duplicates":
        training_args.batch_sampler = BatchSamplers.NO_DUPLICATES
    else:
        training_args.batch_sampler = BatchSamplers.BATCH_SAMPLER

    model = load_model(script_args)
    evaluator = ir_evaluator(held, script_args)
    before = ir_figures(evaluator(model))
    resume = resolve_resume(training_args.resume_from_checkpoint, training_args.output_dir)
    training_args.resume_from_checkpoint = resume
    trainer = SentenceTransformerTrainer(
        model=model, args=training_args, train_dataset=train_ds, loss=make_loss(script_args.loss, model, script_args)
    )
    with graceful_stop() as stop:
        trainer.add_callback(stop.callback())
        result = trainer.train(resume_from_checkpoint=resume)
    if stop.signum is not None:
        raise Stopped(stop.signum, trainer.state.global_step, last_checkpoint(training_args.output_dir))
    after = ir_figures(evaluator(model))
    out = Path(training_args.output_dir)
    info: dict[str, Any] = {}
    if trainer.is_world_process_zero():
        model.save_pretrained(str(out))
        if script_args.use_lora:
            from bencao.training.sft import check_adapter_nonempty

            check_adapter_nonempty(out)
        losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
        info = {
            "kind": "sentence-transformer",
            "base_model": script_args.model_name_or_path,
            "datasets": [
                {"path": script_args.train_file, "sha256": file_hash(script_args.train_file) if Path(script_args.train_file).is_file() else None,
                 "split": "train", "records": len(train_rows)},
                {"path": script_args.eval_file or f"{script_args.train_file} (held-out groups, {script_args.eval_fraction:.0%})",
                 "split": "eval", "records": len(held)},
            ],
            "hyperparameters": {
                "loss": script_args.loss, "scale": script_args.scale, "batch_sampling": script_args.batch_sampling,
                "hard_negatives": use_neg, "learning_rate": training_args.learning_rate,
                "num_train_epochs": training_args.num_train_epochs, "max_steps": training_args.max_steps,
                "per_device_train_batch_size": training_args.per_device_train_batch_size,
                "warmup_steps": training_args.warmup_steps, "seed": training_args.seed,
                "method": "lora" if script_args.use_lora else "full", "max_seq_length": model.max_seq_length,
                **({"lora_r": script_args.lora_r, "lora_alpha": script_args.lora_alpha} if script_args.use_lora else {}),
            },
            "metrics": {
                "ir_before": before, "ir_after": after, "train_loss": float(result.training_loss),
                **({"train_loss_first": float(losses[0]), "train_loss_last": float(losses[-1])} if losses else {}),
            },
            "global_step": trainer.state.global_step,
            "resumed_from": resume,
        }
        atomic_write_json(out / SUMMARY_FILE, info)
        print(json.dumps({"ir_before": before, "ir_after": after}, ensure_ascii=False))
    return info


def cli(argv: Sequence[str] | None = None) -> int:
    from bencao.training.args import run_script

    return run_script(argv, "bencao.training.embedder", "Contrastive fine-tuning of the embedder.", parse_args, main)


if __name__ == "__main__":
    sys.exit(cli())
