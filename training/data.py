"""Reading the training sets the data-generation step writes, with one-line errors on bad records.

- SFT: ``{"messages": [{"role", "content"}, ...], ...}`` per JSONL line, or a ``datasets`` dataset
  saved with ``save_to_disk`` (a ``Dataset``, or a ``DatasetDict`` holding the named split).
- Embedder: ``anchor, positive, negative (may be empty or absent), group`` per line.

Only the columns a trainer consumes are kept; extra bookkeeping columns (ids, provenance) are
dropped so they never reach a collator.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bencao.errors import InputError
from bencao.io import iter_jsonl

ROLES = ("system", "user", "assistant", "tool")


def check_messages(obj: dict[str, Any], path: str | Path, record: str) -> list[dict[str, str]]:
    """Validate one conversational record; returns its messages as plain ``{role, content}`` dicts."""
    msgs = obj.get("messages")
    if not isinstance(msgs, list) or not msgs:
        raise InputError(path, "expected a non-empty list in 'messages'", record=record)
    out = []
    for i, m in enumerate(msgs):
        if not isinstance(m, dict) or m.get("role") not in ROLES:
            raise InputError(path, f"messages[{i}]: role must be one of {', '.join(ROLES)}", record=record)
        if not isinstance(m.get("content"), str):
            raise InputError(path, f"messages[{i}]: content must be a string", record=record)
        out.append({"role": m["role"], "content": m["content"]})
    if not any(m["role"] == "assistant" and m["content"].strip() for m in out):
        raise InputError(path, "no non-empty assistant message to learn from", record=record)
    return out


def _from_disk(path: Path, split: str):
    from datasets import DatasetDict, load_from_disk

    try:
        ds = load_from_disk(str(path))
    except (FileNotFoundError, ValueError) as exc:
        raise InputError(path, f"not a saved datasets dataset: {exc}") from None
    if isinstance(ds, DatasetDict):
        if split not in ds:
            raise InputError(path, f"no split {split!r} (splits: {', '.join(ds)})")
        ds = ds[split]
    return ds


def load_sft(path: str | Path, split: str = "train"):
    """A ``datasets.Dataset`` with one ``messages`` column, every record validated."""
    from datasets import Dataset

    path = Path(path)
    if path.is_dir():
        ds = _from_disk(path, split)
        if "messages" not in ds.column_names:
            raise InputError(path, f"split {split!r} has no 'messages' column (columns: {', '.join(ds.column_names)})")
        rows = [{"messages": check_messages(r, path, f"row {i}")} for i, r in enumerate(ds)]
    else:
        rows = [{"messages": check_messages(obj, path, f"line {n}")} for n, obj in iter_jsonl(path)]
    return Dataset.from_list(rows)


def load_pairs(path: str | Path, split: str = "train") -> list[dict[str, str]]:
    """Embedder pairs as ``{anchor, positive, negative, group, where}`` dicts (negative/group may be "";
    ``where`` is the row's place in the file, ``line 7`` or ``row 6``, for error messages)."""
    path = Path(path)
    if path.is_dir():
        items = ((f"row {i}", r) for i, r in enumerate(_from_disk(path, split)))
    else:
        items = ((f"line {n}", obj) for n, obj in iter_jsonl(path))
    rows = []
    for where, obj in items:
        row = {}
        for key in ("anchor", "positive", "negative", "group"):
            val = obj.get(key)
            if val is None:
                val = ""
            if not isinstance(val, (str, int)):
                raise InputError(path, f"{key!r} must be a string", record=where)
            row[key] = str(val)
        for key in ("anchor", "positive"):
            if not row[key].strip():
                raise InputError(path, f"empty {key!r}", record=where)
        row["where"] = where
        rows.append(row)
    return rows
