"""Where a base model came from, and what of a local run may be published.

A model folder converted by ``bencao models`` holds ``provenance.json``::

    {"name": "Qwen2.5-Coder-0.5B-Instruct", "upstream": "Qwen/Qwen2.5-Coder-0.5B-Instruct", "licence": "Apache-2.0",
     "packages": [{"name": "...", "version": "...", "sha256": "..."}],
     "gguf": {"file": "...gguf", "bytes": 491400064, "sha256": "...", "general.name": "..."},
     "dtype": "bfloat16"}

:func:`read_provenance` reads and checks it; an export copies it into its record (``base_provenance``),
so the exported model still cites its base after the base folder is gone. :func:`public` strips local
absolute paths from anything that is published (model card, uploaded record): a path becomes its last
component; files are identified by their SHA-256, not by where they lay on one machine.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from bencao.errors import InputError

PROVENANCE_FILE = "provenance.json"
REQUIRED = ("name",)


def read_provenance(folder: str | Path | None) -> dict[str, Any] | None:
    """The folder's ``provenance.json`` (None when the folder or the file is absent); a malformed one is a one-line error."""
    if not folder:
        return None
    path = Path(folder) / PROVENANCE_FILE
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise InputError(path, f"not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise InputError(path, "must be a JSON object")
    for key in REQUIRED:
        if not isinstance(data.get(key), str) or not data[key].strip():
            raise InputError(path, f"{key!r} must be a non-empty string")
    if not isinstance(data.get("packages", []), list):
        raise InputError(path, "'packages' must be a list of {name, version, sha256}")
    if not isinstance(data.get("gguf", {}), dict):
        raise InputError(path, "'gguf' must be an object {file, bytes, sha256, general.name}")
    return data


def is_hub_id(name: str | None) -> bool:
    """``owner/name`` (a hub repo id), not a local path."""
    return bool(name) and name.count("/") == 1 and not name.startswith((".", "/", "~")) and not Path(name).exists()


def public_name(base: str | None, provenance: dict[str, Any] | None) -> str | None:
    """What to call the base model in public: the upstream repo id, else its name, else a hub id, else the folder's name."""
    if provenance:
        return provenance.get("upstream") or provenance["name"]
    if not base:
        return None
    return base if is_hub_id(base) else Path(base).name


def public(value: Any) -> Any:
    """``value`` with every absolute path (a string) replaced by its last component, recursively."""
    if isinstance(value, dict):
        return {k: public(v) for k, v in value.items()}
    if isinstance(value, list):
        return [public(v) for v in value]
    if isinstance(value, str) and (os.path.isabs(value) or value.startswith("~")) and "\n" not in value:
        return Path(value).name or value
    return value
