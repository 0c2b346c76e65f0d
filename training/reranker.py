"""Fine-tuning the retrieval reranker: a cross-encoder on the graph's pairs (sentence-transformers' CrossEncoderTrainer).

    bencao train reranker --config rerank/bge-reranker-v2-m3 train_file=PAIRS/train.jsonl output_dir=DIR
    # then serve with it: --set retrieval.rerank.model=DIR (docs/retrieval.md#reranking)

Data: the pairs ``bencao data pairs`` writes (``anchor, positive, negative, group`` per JSONL line, the
embedder's format; ``templates=[..., vignette]`` adds exam-shaped questions → the passage that answers
them). The recipe is one flat YAML mapping over ``RerankerScriptArguments`` (below) and
sentence-transformers' ``CrossEncoderTrainingArguments``.

- Losses (a registry): ``bce`` = BinaryCrossEntropyLoss on (question, passage, 1/0) rows — each row's
  positive and, where it has one, its hard negative; ``mnrl`` = the cross-encoder
  MultipleNegativesRankingLoss on (question, positive[, negative]) rows, ``num_negatives`` more
  sampled from the batch.
- Evaluation: ``CrossEncoderRerankingEvaluator`` on the held-out groups (``eval_fraction``) or
  ``eval_file``: each held-out question ranks its positive among its hard negative and
  ``eval_negatives`` other held-out passages; MRR@10 and nDCG@10 before and after training, written to
  ``<output_dir>/bencao_training.json``.
- ``model_name_or_path``: a cross-encoder (BAAI/bge-reranker-v2-m3) or an encoder to put a fresh
  one-logit head on (a packaged name, local path or hub id).
- ``languages: [zh]``: the rows whose question is in those languages only.
"""

from __future__ import annotations

import json
import logging
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from bencao.errors import ConfigError, InputError

log = logging.getLogger(__name__)

SUMMARY_FILE = "bencao_training.json"


@dataclass
class RerankerScriptArguments:
    model_name_or_path: str | None = field(default=None, metadata={"help": "Cross-encoder or encoder: hub id, packaged name or path "
                                                                           "(e.g. BAAI/bge-reranker-v2-m3)."})
    train_file: str | None = field(default=None, metadata={"help": "JSONL (or saved datasets dir) of anchor/positive/negative/group rows."})
    eval_file: str | None = field(default=None, metadata={"help": "Held-out rows; 'auto' = eval.jsonl beside train_file; when absent, "
                                                                  "eval_fraction of the groups is held out."})
    languages: list[str] = field(default_factory=list, metadata={"help": "Only rows whose question is in these languages (zh, en); empty: all."})
    eval_fraction: float = field(default=0.1, metadata={"help": "Share of groups held out when there is no eval_file."})
    loss: str = field(default="bce", metadata={"help": "bce (BinaryCrossEntropyLoss on positives and hard negatives) or mnrl "
                                                       "(MultipleNegativesRankingLoss, in-batch negatives)."})
    num_negatives: int = field(default=4, metadata={"help": "mnrl: negatives sampled from the batch per question."})
    max_length: int = field(default=512, metadata={"help": "Tokens of question + passage the model reads."})
    eval_negatives: int = field(default=9, metadata={"help": "Other held-out passages each held-out question is ranked against "
                                                             "(besides its own hard negative)."})
    eval_batch_size: int = field(default=64, metadata={"help": "Pairs per forward pass in the evaluation."})


def dataclass_types() -> tuple[type, ...]:
    from sentence_transformers.cross_encoder import CrossEncoderTrainingArguments

    return (RerankerScriptArguments, CrossEncoderTrainingArguments)


def parse_args(config: str | Path | None, overrides: Sequence[str] = ()) -> tuple[Any, Any]:
    from bencao.training.args import parse_recipe, recipe_dict
    from bencao.training.embedder import resolve_eval_file

    data = recipe_dict(config, overrides)
    data.setdefault("report_to", "none")
    data.setdefault("resume_from_checkpoint", "auto")
    script_args, training_args = parse_recipe(dataclass_types(), data, str(config or "config"))
    where = str(config or "config")
    if not script_args.model_name_or_path:
        raise ConfigError(f"{where}: model_name_or_path is required")
    if not script_args.train_file:
        raise ConfigError(f"{where}: train_file is required")
    if script_args.loss not in LOSSES:
        raise ConfigError(f"{where}: loss {script_args.loss!r} is not one of {', '.join(LOSSES)}")
    resolve_eval_file(script_args, where)
    return script_args, training_args


# ---- data and losses ------------------------------------------------------------------------

def bce_dataset(rows: list[dict[str, str]]):
    """(question, passage, label) rows: every positive (1), every given hard negative (0)."""
    from datasets import Dataset

    q, p, y = [], [], []
    for r in rows:
        q.append(r["anchor"])
        p.append(r["positive"])
        y.append(1.0)
        if r["negative"].strip():
            q.append(r["anchor"])
            p.append(r["negative"])
            y.append(0.0)
    return Dataset.from_dict({"query": q, "passage": p, "label": y})


def mnrl_dataset(rows: list[dict[str, str]]):
    from datasets import Dataset

    cols: dict[str, list[str]] = {"query": [r["anchor"] for r in rows], "positive": [r["positive"] for r in rows]}
    if all(r["negative"].strip() for r in rows):
        cols["negative"] = [r["negative"] for r in rows]
    return Dataset.from_dict(cols)


def _bce(model, args: RerankerScriptArguments, rows: list[dict[str, str]]):
    from sentence_transformers.cross_encoder.losses import BinaryCrossEntropyLoss

    return BinaryCrossEntropyLoss(model), bce_dataset(rows)


def _mnrl(model, args: RerankerScriptArguments, rows: list[dict[str, str]]):
    from sentence_transformers.cross_encoder.losses import MultipleNegativesRankingLoss

    return MultipleNegativesRankingLoss(model, num_negatives=args.num_negatives), mnrl_dataset(rows)


#: Loss name → (model, args, rows) → (loss, the training dataset it reads).
LOSSES: dict[str, Callable[[Any, RerankerScriptArguments, list[dict[str, str]]], tuple[Any, Any]]] = {"bce": _bce, "mnrl": _mnrl}


def rerank_samples(rows: list[dict[str, str]], n_other: int, seed: int = 0) -> list[dict[str, Any]]:
    """The held-out ranking task: each question's positive among its hard negative and ``n_other`` other
    held-out passages (never one equal to its positive)."""
    rng = random.Random(seed)
    pool = list(dict.fromkeys(r["positive"] for r in rows))
    out = []
    for r in rows:
        others = [p for p in rng.sample(pool, min(len(pool), n_other + 1)) if p != r["positive"]][:n_other]
        neg = ([r["negative"]] if r["negative"].strip() and r["negative"] != r["positive"] else []) + others
        if neg:
            out.append({"query": r["anchor"], "positive": [r["positive"]], "negative": list(dict.fromkeys(neg))})
    return out


def rerank_figures(raw: dict[str, float]) -> dict[str, float]:
    """MRR@10 and nDCG@10 of a CrossEncoderRerankingEvaluator result, 4 decimals."""
    out = {}
    for key, value in raw.items():
        for metric in ("mrr@10", "ndcg@10", "map"):
            if key.endswith(metric):
                out[metric] = round(float(value), 4)
    return out


def load_model(args: RerankerScriptArguments):
    from sentence_transformers.cross_encoder import CrossEncoder

    from bencao.models import resolve_model

    path = resolve_model(args.model_name_or_path)
    try:
        return CrossEncoder(path, num_labels=1, max_length=args.max_length)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"model_name_or_path {args.model_name_or_path!r} cannot be loaded: {str(exc).splitlines()[0]}") from None


def main(script_args: RerankerScriptArguments, training_args) -> dict[str, Any]:
    from sentence_transformers.cross_encoder import CrossEncoderTrainer
    from sentence_transformers.cross_encoder.evaluation import CrossEncoderRerankingEvaluator

    from bencao.io import atomic_write_json
    from bencao.training.embedder import datasets_record, load_splits
    from bencao.training.record import languages, run_facts
    from bencao.training.sft import resolve_resume
    from bencao.training.stop import train_until_stopped

    train_rows, held = load_splits(script_args)
    samples = rerank_samples(held, script_args.eval_negatives, training_args.seed)
    if not samples:
        raise InputError(script_args.eval_file or script_args.train_file, "the held-out rows give no ranking task "
                         "(each needs a hard negative or another held-out passage)")
    model = load_model(script_args)
    loss, train_ds = LOSSES[script_args.loss](model, script_args, train_rows)
    evaluator = CrossEncoderRerankingEvaluator(samples=samples, at_k=10, name="heldout", batch_size=script_args.eval_batch_size,
                                               write_csv=False)
    before = rerank_figures(evaluator(model))
    resume = resolve_resume(training_args.resume_from_checkpoint, training_args.output_dir)
    training_args.resume_from_checkpoint = resume
    trainer = CrossEncoderTrainer(model=model, args=training_args, train_dataset=train_ds, loss=loss)
    result = train_until_stopped(trainer, training_args.output_dir, resume)
    after = rerank_figures(evaluator(model))
    out = Path(training_args.output_dir)
    info: dict[str, Any] = {}
    if trainer.is_world_process_zero():
        model.save_pretrained(str(out))
        losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
        steps_key = "max_steps" if training_args.max_steps and training_args.max_steps > 0 else "num_train_epochs"
        info = {
            "kind": "cross-encoder",
            "base_model": script_args.model_name_or_path,
            "datasets": datasets_record(script_args, len(train_rows), len(held)),
            "languages": languages(f"{r['anchor']} {r['positive']}" for r in train_rows),
            "hyperparameters": {
                "loss": script_args.loss, "learning_rate": training_args.learning_rate, steps_key: getattr(training_args, steps_key),
                "per_device_train_batch_size": training_args.per_device_train_batch_size, "max_length": script_args.max_length,
                "warmup_steps": training_args.warmup_steps, "seed": training_args.seed,
                **({"num_negatives": script_args.num_negatives} if script_args.loss == "mnrl" else {}),
            },
            "training": run_facts(trainer),
            "metrics": {
                "rerank_before": before, "rerank_after": after, "heldout_questions": len(samples),
                "train_loss": float(result.training_loss),
                **({"train_loss_first": float(losses[0]), "train_loss_last": float(losses[-1])} if losses else {}),
            },
            "global_step": trainer.state.global_step,
            "resumed_from": resume,
        }
        atomic_write_json(out / SUMMARY_FILE, info)
        print(json.dumps({"rerank_before": before, "rerank_after": after}, ensure_ascii=False))
    return info


def cli(argv: Sequence[str] | None = None) -> int:
    from bencao.training.args import run_script

    return run_script(argv, "bencao.training.reranker", "Fine-tuning of the retrieval reranker (a cross-encoder).", parse_args, main)


if __name__ == "__main__":
    raise SystemExit(cli())
