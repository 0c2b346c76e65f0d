"""Contrastive fine-tuning of the retrieval embedder (sentence-transformers trainer).

    python -m bencao.training.embedder --config configs/embed/bge-m3/cmnrl.yaml
    bencao train embedder --config configs/embed/bge-m3/lora.yaml num_train_epochs=1

Data: ``anchor, positive, negative (may be empty/absent), group`` per JSONL line. The recipe is one
flat YAML mapping over ``EmbedderScriptArguments`` (below) and sentence-transformers'
``SentenceTransformerTrainingArguments``.

- Losses (a registry): ``mnrl`` = MultipleNegativesRankingLoss, ``cmnrl`` = its cached (GradCache)
  version, same loss with constant memory per mini-batch.
- Batches: ``no_duplicates`` (no text twice in a batch, so no false in-batch negative),
  ``group`` (full batches of whole groups, small groups sharing a batch — MLKG's same-section
  negatives — also without duplicates; used/skipped counts in the training record), or ``batch``
  (plain shuffling).
- Hard negatives (``auto``): the ``negative`` column where rows have one; rows that lack one get one
  mined with the base model (sentence-transformers ``mine_hard_negatives``); how many were given,
  mined or left without one is logged and recorded. ``require``: a row without one is an error
  naming it. ``off``: in-batch negatives only.
- Evaluation: ``InformationRetrievalEvaluator`` on the held-out split (anchors as queries, positives
  and negatives as the corpus) before and after training: Recall@k, MRR@10, nDCG@10, written to
  ``<output_dir>/bencao_training.json``.
- Optional LoRA adapter via peft (``use_lora: true``).
- ``model_name_or_path: static``: a ``StaticEmbedding`` model trained from scratch, its tokenizer
  trained on the training texts (:mod:`bencao.training.static_embedder`; ``static_*`` keys).
- ``languages: [zh]``: train and evaluate on the rows whose anchor is in those languages only (one
  pairs directory can feed an English and a Chinese recipe); ``eval_file: auto``: the ``eval.jsonl``
  beside ``train_file`` (what ``bencao data pairs`` writes).
"""

from __future__ import annotations

import json
import logging
import random
import sys
from collections import deque
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Sequence

from bencao.errors import ConfigError, InputError
from bencao.io import content_hash

log = logging.getLogger(__name__)

SUMMARY_FILE = "bencao_training.json"


@dataclass
class EmbedderScriptArguments:
    model_name_or_path: str | None = field(default=None, metadata={"help": "Sentence-transformers model id or path (e.g. BAAI/bge-m3), or 'static': "
                                                                           "a StaticEmbedding trained from scratch (static_* keys)."})
    train_file: str | None = field(default=None, metadata={"help": "JSONL (or saved datasets dir) of anchor/positive/negative/group rows."})
    eval_file: str | None = field(default=None, metadata={"help": "Held-out rows for the IR evaluation; 'auto' = eval.jsonl beside train_file; when absent, "
                                                                  "eval_fraction of the groups is held out."})
    languages: list[str] = field(default_factory=list, metadata={"help": "Only rows whose anchor is in these languages (bencao.text.lang_of: zh, en); empty: all."})
    static_tokenizer: str = field(default="bpe", metadata={"help": "model_name_or_path=static: char | bpe (trained on the training texts) | a tokenizer.json path."})
    static_vocab_size: int = field(default=32000, metadata={"help": "model_name_or_path=static: tokenizer vocabulary size."})
    static_min_frequency: int = field(default=2, metadata={"help": "model_name_or_path=static: rarest token kept (occurrences)."})
    static_dim: int = field(default=256, metadata={"help": "model_name_or_path=static: embedding dimension."})
    eval_fraction: float = field(default=0.1, metadata={"help": "Share of groups held out when there is no eval_file (split by group hash, so no group leaks)."})
    loss: str = field(default="mnrl", metadata={"help": "Loss name: mnrl (MultipleNegativesRankingLoss) or cmnrl (CachedMultipleNegativesRankingLoss)."})
    scale: float = field(default=20.0, metadata={"help": "Similarity scale (inverse temperature) of the ranking loss."})
    mini_batch_size: int = field(default=32, metadata={"help": "cmnrl: texts per forward pass; memory stays constant as the batch grows."})
    batch_sampling: str = field(default="no_duplicates", metadata={"help": "no_duplicates | group (full batches of whole groups, same-group negatives first) | batch (plain shuffle)."})
    hard_negatives: str = field(default="auto", metadata={"help": "auto (the 'negative' column; rows lacking one get one mined with the base model; counts recorded) | require (error naming a row without one) | off."})
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
    resolve_eval_file(script_args, where)
    if script_args.model_name_or_path == "static" and script_args.use_lora:
        raise ConfigError(f"{where}: a static embedding model trains all its weights (use_lora: false)")
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


# ---- batches of whole groups ---------------------------------------------------------------

def _default_sampler_base():
    from sentence_transformers.base.sampler import DefaultBatchSampler

    return DefaultBatchSampler


class SameGroupBatchSampler(_default_sampler_base()):  # type: ignore[misc]
    """Full batches made of whole groups, with no text repeated inside a batch.

    Rows are ordered group by group (groups in a random order, rows shuffled inside their group;
    both reshuffled every epoch from ``seed + epoch``) and cut into batches of ``batch_size``: a
    group larger than a batch fills whole batches of its own, small groups share a batch, so the
    in-batch negatives of a row are its groupmates first (MLKG: the same section) and the batch is
    always the recipe's size. A row whose text already sits in the open batch moves on to the next
    batch. Only the end of an epoch can leave a short batch: kept unless ``drop_last`` (or it holds a
    single row, which has no negative to learn from); its rows are counted as skipped otherwise.
    :meth:`stats` gives the counts for the training record.
    """

    def __init__(self, dataset, batch_size: int, drop_last: bool, valid_label_columns=None, generator=None, seed: int = 0,
                 groups: Sequence[str] = (), min_batch: int = 2) -> None:
        super().__init__(dataset, batch_size=batch_size, drop_last=drop_last, valid_label_columns=valid_label_columns,
                         generator=generator, seed=seed)
        if len(groups) != len(dataset):
            raise ValueError(f"groups has {len(groups)} entries for {len(dataset)} rows")
        self.groups = list(groups)
        cols = [c for c in dataset.column_names if c not in (valid_label_columns or [])]
        self.texts = [frozenset(t for t in row if t) for row in zip(*(dataset[c] for c in cols))]
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
        names = sorted(by_group)
        rng.shuffle(names)
        queue: deque[int] = deque()
        for g in names:
            members = by_group[g][:]
            rng.shuffle(members)
            queue.extend(members)
        out: list[list[int]] = []
        deferred: list[int] = []
        while queue or deferred:
            source = deque(deferred)  # rows moved on from the last batch come first
            deferred = []
            batch: list[int] = []
            seen: set[str] = set()
            while len(batch) < self.batch_size and (source or queue):
                i = source.popleft() if source else queue.popleft()
                if self.texts[i] & seen:
                    deferred.append(i)
                else:
                    batch.append(i)
                    seen |= self.texts[i]
            deferred.extend(source)
            if len(batch) == self.batch_size or (not self.drop_last and len(batch) >= self.min_batch):
                out.append(batch)
        rng.shuffle(out)
        self._cache = (self.epoch, out)
        return out

    def stats(self) -> dict[str, Any]:
        """Rows used and skipped, batches (full ones), and rows that share a batch with a groupmate."""
        batches = self.batches()
        used = sum(len(b) for b in batches)
        with_mate = 0
        for b in batches:
            counts: dict[str, int] = {}
            for i in b:
                counts[self.groups[i]] = counts.get(self.groups[i], 0) + 1
            with_mate += sum(n for n in counts.values() if n > 1)
        return {"rows": len(self.groups), "used": used, "skipped": len(self.groups) - used, "batch_size": self.batch_size,
                "batches": len(batches), "full_batches": sum(len(b) == self.batch_size for b in batches),
                "rows_with_groupmate_in_batch": with_mate}

    def __iter__(self) -> Iterator[list[int]]:
        yield from self.batches()

    def __len__(self) -> int:
        return len(self.batches())


# ---- data and evaluation --------------------------------------------------------------------

def resolve_eval_file(script_args: Any, where: str) -> None:
    """``eval_file: auto`` → the ``eval.jsonl`` beside ``train_file`` (what ``bencao data pairs`` writes)."""
    if script_args.eval_file == "auto":
        sibling = Path(script_args.train_file).parent / "eval.jsonl"
        if not sibling.is_file():
            raise ConfigError(f"{where}: eval_file: auto, but {sibling} does not exist")
        script_args.eval_file = str(sibling)


def load_splits(script_args: Any) -> tuple[list[dict[str, str]], list[dict[str, str]]]:
    """(train rows, held-out rows) of a pairs recipe: ``train_file`` in ``languages``, held out by ``eval_file``
    or, without one, ``eval_fraction`` of the groups."""
    from bencao.training.data import load_pairs

    rows = keep_languages(load_pairs(script_args.train_file), script_args.languages)
    if not rows:
        raise InputError(script_args.train_file, f"no rows in the languages {', '.join(script_args.languages)}")
    if script_args.eval_file:
        return rows, keep_languages(load_pairs(script_args.eval_file, "eval"), script_args.languages)
    return split_heldout(rows, script_args.eval_fraction)


def datasets_record(script_args: Any, n_train: int, n_held: int) -> list[dict[str, Any]]:
    """The training record's ``datasets``: the train file and the held-out file (or split), with their hashes."""
    from bencao.training.record import file_entry

    return [d for d in (
        file_entry(script_args.train_file, "train", n_train),
        file_entry(script_args.eval_file, "eval", n_held) if script_args.eval_file else
        {"path": f"{script_args.train_file} (held-out groups, {script_args.eval_fraction:.0%})", "split": "eval", "records": n_held},
    ) if d]


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


def decide_negatives(rows: list[dict[str, str]], mode: str, path: str) -> str:
    """What to do about hard negatives: ``use`` (every row has one), ``mine`` (some rows lack one),
    ``none`` (no row has one, or ``off``). ``require`` with a row lacking one is an error naming the row."""
    if mode == "off":
        return "none"
    missing = [i for i, r in enumerate(rows) if not r["negative"].strip()]
    if mode == "require" and missing:
        first = rows[missing[0]]
        raise InputError(path, f"no 'negative' (hard_negatives: require; {len(missing)} of {len(rows)} rows lack one)",
                         record=first.get("where") or f"row {missing[0] + 1}")
    if not missing:
        return "use"
    return "none" if len(missing) == len(rows) else "mine"


def mine_missing_negatives(rows: list[dict[str, str]], model, batch_size: int = 64, seed: int = 0) -> dict[str, int]:
    """Fill the rows that lack a negative, in place, with sentence-transformers' ``mine_hard_negatives``.

    Candidates are the training set's own positives and negatives, ranked by the (base) model's
    similarity to the anchor; the nearest one scoring at least 5 % below the row's own positive is
    taken (NV-Retriever's margin against false negatives). A row with no such candidate gets another
    row's positive, i.e. one more in-batch-style negative: it trains without a hard one, and is counted.
    """
    from datasets import Dataset
    from sentence_transformers.util import mine_hard_negatives

    missing = [i for i, r in enumerate(rows) if not r["negative"].strip()]
    corpus = list(dict.fromkeys(t for r in rows for t in (r["positive"], r["negative"]) if t.strip()))
    found: dict[tuple[str, str], str] = {}
    if missing and len(corpus) > 1:
        pairs = Dataset.from_dict({"anchor": [rows[i]["anchor"] for i in missing], "positive": [rows[i]["positive"] for i in missing]})
        mined = mine_hard_negatives(pairs, model, corpus=corpus, num_negatives=1, relative_margin=0.05, sampling_strategy="top",
                                    output_format="triplet", batch_size=batch_size, verbose=False)
        found = {(a, p): n for a, p, n in zip(mined["anchor"], mined["positive"], mined["negative"])}
    rng = random.Random(seed)
    counts = {"mined": 0, "without_hard_negative": 0}
    for i in missing:
        r = rows[i]
        neg = found.get((r["anchor"], r["positive"]))
        if neg:
            counts["mined"] += 1
        else:
            others = [t for t in corpus if t != r["positive"]] or [r["positive"]]
            neg = others[rng.randrange(len(others))]
            counts["without_hard_negative"] += 1
        r["negative"] = neg
    return counts


def keep_languages(rows: list[dict[str, str]], languages: list[str]) -> list[dict[str, str]]:
    from bencao.text import lang_of

    return [r for r in rows if lang_of(r["anchor"]) in languages] if languages else rows


def load_model(args: EmbedderScriptArguments, texts: Iterable[str] = (), seed: int = 0):
    from sentence_transformers import SentenceTransformer

    from bencao.models import resolve_model

    if args.model_name_or_path == "static":
        from bencao.training.static_embedder import build_static_model

        return build_static_model(args, list(texts), seed)
    model = SentenceTransformer(resolve_model(args.model_name_or_path))
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

    from bencao.io import atomic_write_json
    from bencao.training.record import languages, run_facts
    from bencao.training.sft import resolve_resume
    from bencao.training.stop import train_until_stopped

    train_rows, held = load_splits(script_args)
    negatives = decide_negatives(train_rows, script_args.hard_negatives, script_args.train_file)
    model = load_model(script_args, (t for r in train_rows for t in (r["anchor"], r["positive"], r["negative"]) if t), training_args.seed)
    n_given = sum(1 for r in train_rows if r["negative"].strip()) if negatives != "none" else 0
    neg_report = {"mode": script_args.hard_negatives, "rows": len(train_rows), "given": n_given, "mined": 0,
                  "without_hard_negative": len(train_rows) if negatives == "none" else 0}
    if negatives == "mine":
        neg_report.update(mine_missing_negatives(train_rows, model, script_args.eval_batch_size, training_args.seed))
    if neg_report["mined"] or neg_report["without_hard_negative"]:
        log.warning("%s: hard negatives: %d given, %d mined with the base model, %d rows train without one (hard_negatives: %s)",
                    script_args.train_file, neg_report["given"], neg_report["mined"], neg_report["without_hard_negative"],
                    script_args.hard_negatives)
    use_neg = negatives != "none"
    train_ds = to_dataset(train_rows, use_neg)
    batching: dict[str, Any] = {"sampling": script_args.batch_sampling}
    if script_args.batch_sampling == "group":
        groups = [r["group"] for r in train_rows]
        training_args.batch_sampler = partial(SameGroupBatchSampler, groups=groups)
        batching.update(SameGroupBatchSampler(train_ds, batch_size=training_args.per_device_train_batch_size,
                                              drop_last=training_args.dataloader_drop_last, groups=groups,
                                              seed=training_args.seed).stats())
        log.info("group batches (epoch 0): %s", batching)
    elif script_args.batch_sampling == "no_duplicates":
        training_args.batch_sampler = BatchSamplers.NO_DUPLICATES
    else:
        training_args.batch_sampler = BatchSamplers.BATCH_SAMPLER

    evaluator = ir_evaluator(held, script_args)
    before = ir_figures(evaluator(model))
    resume = resolve_resume(training_args.resume_from_checkpoint, training_args.output_dir)
    training_args.resume_from_checkpoint = resume
    trainer = SentenceTransformerTrainer(
        model=model, args=training_args, train_dataset=train_ds, loss=make_loss(script_args.loss, model, script_args)
    )
    result = train_until_stopped(trainer, training_args.output_dir, resume)
    after = ir_figures(evaluator(model))
    out = Path(training_args.output_dir)
    info: dict[str, Any] = {}
    if trainer.is_world_process_zero():
        model.save_pretrained(str(out))
        if script_args.use_lora:
            from bencao.training.sft import check_adapter_nonempty

            check_adapter_nonempty(out)
        losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
        steps_key = "max_steps" if training_args.max_steps and training_args.max_steps > 0 else "num_train_epochs"
        info = {
            "kind": "sentence-transformer",
            "base_model": script_args.model_name_or_path,
            "datasets": datasets_record(script_args, len(train_rows), len(held)),
            "languages": languages(f"{r['anchor']} {r['positive']}" for r in train_rows),
            "hyperparameters": {
                "loss": script_args.loss, "scale": script_args.scale, "batch_sampling": script_args.batch_sampling,
                "hard_negatives": use_neg, "learning_rate": training_args.learning_rate,
                steps_key: getattr(training_args, steps_key),
                "per_device_train_batch_size": training_args.per_device_train_batch_size,
                "warmup_steps": training_args.warmup_steps, "seed": training_args.seed,
                "method": "lora" if script_args.use_lora else "full",
                "max_seq_length": model.max_seq_length if isinstance(model.max_seq_length, int) else None,
                **({"static_tokenizer": script_args.static_tokenizer, "vocab_size": model[0].num_embeddings, "dim": model[0].embedding_dim}
                   if script_args.model_name_or_path == "static" else {}),
                **({"lora_r": script_args.lora_r, "lora_alpha": script_args.lora_alpha} if script_args.use_lora else {}),
            },
            "training": run_facts(trainer),
            "metrics": {
                "ir_before": before, "ir_after": after, "train_loss": float(result.training_loss),
                **({"train_loss_first": float(losses[0]), "train_loss_last": float(losses[-1])} if losses else {}),
            },
            "hard_negatives": neg_report,
            "batching": batching,
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
