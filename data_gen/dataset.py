"""Write a generated dataset: split by group, ``train.jsonl``/``eval.jsonl``, a ``datasets`` copy, a card.

The split is by a group key (an entity for SFT data, the positive entity for pairs), so nothing
about an eval entity is seen in training. Groups are ordered by a hash of their key and the first
``ceil(eval_ratio × groups)`` go to eval: deterministic, and never empty when there are ≥ 2 groups.
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Any

from bencao import faults
from bencao.io import atomic_write_text, write_jsonl


def split_by_group(records: list[dict[str, Any]], key: str, eval_ratio: float, seed: int = 0) -> tuple[list[dict], list[dict]]:
    groups = list(dict.fromkeys(str(r[key]) for r in records))
    if len(groups) < 2 or eval_ratio <= 0:
        return list(records), []
    ranked = sorted(groups, key=lambda g: hashlib.sha1(f"{seed}\x1f{g}".encode("utf-8")).hexdigest())
    n_eval = min(len(groups) - 1, max(1, math.ceil(eval_ratio * len(groups))))
    eval_groups = set(ranked[:n_eval])
    train = [r for r in records if str(r[key]) not in eval_groups]
    ev = [r for r in records if str(r[key]) in eval_groups]
    return train, ev


def write_dataset(out: str | Path, train: list[dict[str, Any]], eval_: list[dict[str, Any]], *, columns: list[str],
                  card: dict[str, Any]) -> dict[str, int]:
    """JSONL files with exactly ``columns``, the ``datasets`` DatasetDict under ``out/hf``, and ``out/README.md``."""
    from datasets import Dataset, DatasetDict
    from datasets.utils.logging import disable_progress_bar

    disable_progress_bar()
    out = Path(out)
    rows = {name: [{c: r[c] for c in columns} for r in recs] for name, recs in (("train", train), ("eval", eval_))}
    for name, recs in rows.items():
        write_jsonl(out / f"{name}.jsonl", recs)
        faults.fault("dataset.written")
    dd = DatasetDict({name: Dataset.from_list(recs) if recs else Dataset.from_dict({c: [] for c in columns}) for name, recs in rows.items()
                      if recs or name == "train"})
    tmp = out / "hf.tmp"
    if tmp.exists():
        import shutil

        shutil.rmtree(tmp)
    dd.save_to_disk(str(tmp))
    final = out / "hf"
    if final.exists():
        import shutil

        shutil.rmtree(final)
    tmp.rename(final)
    counts = {name: len(recs) for name, recs in rows.items()}
    atomic_write_text(out / "README.md", render_card(card, counts, columns))
    return counts


def render_card(card: dict[str, Any], counts: dict[str, int], columns: list[str]) -> str:
    lines = [f"# {card.get('title', 'bencao generated dataset')}", "", card.get("description", ""), "",
             "## Files", "", "- `train.jsonl`, `eval.jsonl`: one JSON object per line", "- `hf/`: the same as a `datasets` DatasetDict "
             "(`datasets.load_from_disk`)", "", "## Columns", ""]
    lines += [f"- `{c}`" for c in columns]
    lines += ["", "## Size", ""] + [f"- {k}: {v}" for k, v in counts.items()]
    lines += ["", "## How it was made", "", "```json", json.dumps(card.get("recipe", {}), ensure_ascii=False, indent=2), "```", ""]
    if card.get("summary"):
        lines += ["## Run summary", "", "```json", json.dumps(card["summary"], ensure_ascii=False, indent=2), "```", ""]
    lines += ["## Intended use and limits", "",
              card.get("limits", "Training data for research models. Generated text can be wrong; it is not medical advice and must "
                       "not be used to diagnose or treat anyone."), ""]
    return "\n".join(lines)
