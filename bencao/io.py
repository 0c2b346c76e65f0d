"""File I/O shared by every part: atomic writes, encoding detection, JSONL with line-precise errors."""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import io
import json
import os
import tempfile
from pathlib import Path
from typing import Any, Iterator

from bencao.errors import InputError

#: Longest line accepted from a text/JSONL input. Longer lines are almost always a broken file
#: (a missing newline, a binary blob); they get a clear error instead of exhausting memory.
MAX_LINE_BYTES = 8 * 1024 * 1024

_ENCODINGS = ("utf-8", "gb18030")


def _open_raw(path: Path) -> io.BufferedIOBase:
    if path.suffix == ".gz":
        return gzip.open(path, "rb")  # type: ignore[return-value]
    return open(path, "rb")


def read_bytes(path: str | Path) -> bytes:
    """Read a file, transparently decompressing ``.gz``."""
    path = Path(path)
    if not path.exists():
        raise InputError(path, "file not found")
    try:
        with _open_raw(path) as fh:
            return fh.read()
    except (OSError, EOFError) as exc:
        raise InputError(path, f"cannot read: {exc}") from None


def decode_text(data: bytes, path: str | Path, encoding: str | None = None) -> str:
    """Decode bytes as UTF-8 (with or without BOM) or GB18030, or the given encoding.

    Chinese classics circulate in both encodings; anything else is refused with a clear error
    rather than decoded into mojibake.
    """
    if encoding:
        try:
            return data.decode(encoding)
        except (UnicodeDecodeError, LookupError) as exc:
            raise InputError(path, f"cannot decode as {encoding}: {exc}") from None
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    if b"\x00" in data[:4096]:
        raise InputError(path, "looks binary (NUL bytes); expected UTF-8 or GB18030 text")
    for enc in _ENCODINGS:
        try:
            return data.decode(enc)
        except UnicodeDecodeError:
            continue
    # Name the first offending position for UTF-8, the most likely intended encoding.
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise InputError(path, f"unknown text encoding (neither UTF-8 nor GB18030; first bad byte on line {line})") from None
    raise InputError(path, "unknown text encoding")  # pragma: no cover - unreachable


def read_text(path: str | Path, encoding: str | None = None) -> str:
    """Read a whole text file with encoding detection and the line-length guard."""
    data = read_bytes(path)
    text = decode_text(data, path, encoding)
    check_line_lengths(text, path)
    return text


def check_line_lengths(text: str, path: str | Path, limit: int = MAX_LINE_BYTES) -> None:
    start = 0
    lineno = 1
    n = len(text)
    while start < n:
        end = text.find("\n", start)
        if end < 0:
            end = n
        if end - start > limit // 4 and len(text[start:end].encode("utf-8")) > limit:
            raise InputError(path, f"line is {len(text[start:end].encode('utf-8')):,} bytes, over the {limit:,}-byte limit", record=f"line {lineno}")
        start = end + 1
        lineno += 1


def iter_lines(path: str | Path, encoding: str | None = None) -> Iterator[tuple[int, str]]:
    """Yield ``(line_number, line)`` without the trailing newline; guards line length and encoding."""
    text = read_text(path, encoding)
    for i, line in enumerate(text.splitlines(), start=1):
        yield i, line


def iter_jsonl(path: str | Path, required: tuple[str, ...] = ()) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield ``(line_number, object)`` for each non-blank line of a JSONL file (``.gz`` allowed).

    Raises :class:`InputError` naming the file and line for malformed JSON, a value that is not an
    object, or a missing required key.
    """
    n_records = 0
    for lineno, line in iter_lines(path):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InputError(path, f"malformed JSON: {exc.msg} (column {exc.colno})", record=f"line {lineno}") from None
        if not isinstance(obj, dict):
            raise InputError(path, f"expected a JSON object, got {type(obj).__name__}", record=f"line {lineno}")
        missing = [k for k in required if k not in obj or obj[k] in (None, "")]
        if missing:
            raise InputError(path, f"missing required field(s): {', '.join(missing)}", record=f"line {lineno}")
        n_records += 1
        yield lineno, obj
    if n_records == 0:
        raise InputError(path, "empty document: no records")


@contextlib.contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; on success it is renamed over ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        os.replace(tmp_path, path)
    finally:
        if tmp_path.exists():
            tmp_path.unlink()


def atomic_write_text(path: str | Path, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def atomic_write_json(path: str | Path, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, ensure_ascii=False, indent=2, sort_keys=False) + "\n")


def write_jsonl(path: str | Path, records: Any) -> int:
    """Write records atomically as UTF-8 JSONL (Chinese kept as is). Returns the count."""
    n = 0
    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8") as fh:
        for rec in records:
            fh.write(json.dumps(rec, ensure_ascii=False) + "\n")
            n += 1
    return n


class JsonlAppender:
    """Append-only JSONL output for resumable jobs: each record is flushed and fsynced as written.

    ``done_ids`` lists the ids already present, so a restarted job skips them. A torn last line
    (the job was killed mid-write) is dropped on open.
    """

    def __init__(self, path: str | Path, id_key: str = "id"):
        self.path = Path(path)
        self.id_key = id_key
        self.done_ids: set[str] = set()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if self.path.exists():
            good: list[str] = []
            with open(self.path, encoding="utf-8") as fh:
                for line in fh:
                    if not line.endswith("\n"):
                        break  # torn write
                    try:
                        obj = json.loads(line)
                    except json.JSONDecodeError:
                        break
                    good.append(line)
                    if isinstance(obj, dict) and id_key in obj:
                        self.done_ids.add(str(obj[id_key]))
            with atomic_path(self.path) as tmp:
                tmp.write_text("".join(good), encoding="utf-8")
        self._fh = open(self.path, "a", encoding="utf-8")

    def write(self, rec: dict[str, Any], sync: bool = True) -> None:
        """Append one record, flushed to the OS (a killed process loses nothing); ``sync=False`` leaves the
        fsync (power loss) to a later :meth:`sync`, for writers that batch it."""
        self._fh.write(json.dumps(rec, ensure_ascii=False) + "\n")
        self._fh.flush()
        if sync:
            os.fsync(self._fh.fileno())
        if self.id_key in rec:
            self.done_ids.add(str(rec[self.id_key]))

    def sync(self) -> None:
        """fsync what was written so far."""
        os.fsync(self._fh.fileno())

    def close(self) -> None:
        if not self._fh.closed:
            self._fh.flush()
            os.fsync(self._fh.fileno())
        self._fh.close()

    def __enter__(self) -> "JsonlAppender":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def content_hash(*parts: object, length: int = 16) -> str:
    """Stable hex id of the given parts (joined with a separator that cannot occur in text)."""
    h = hashlib.sha1()
    for p in parts:
        h.update(str(p).encode("utf-8"))
        h.update(b"\x1f")
    return h.hexdigest()[:length]


def file_hash(path: str | Path) -> str:
    """sha1 of a file's (decompressed) bytes."""
    return hashlib.sha1(read_bytes(path)).hexdigest()
