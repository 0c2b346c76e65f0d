"""File I/O shared by every part: bounded, validated reading of inputs; atomic writes; resumable JSONL.

Reading an input (every loader under ``retrieval/ingest``, question files, benchmark files) goes
through one bounded reader:

- ``.gz`` is decompressed as it is read; the decompressed bytes are counted, so a file that
  inflates past ``max_bytes`` or more than ``max_ratio`` times its compressed size (a compression
  bomb) is refused early, with bounded memory; corrupt or truncated compression is a one-line error.
- Lines are read with a size cap (``max_line_bytes``): a 50 MB line is refused at the cap, not read
  whole. NUL bytes are refused (binary data, or UTF-16).
- Structured formats (JSONL, CSV, OBO, OWL) must be UTF-8 unless an ``encoding`` is given; running
  text (books) may also be GB18030, but bytes that only decode as GB18030 mojibake (Latin-1 or
  Windows-1252 text) are refused. Every decoding error names the line and the byte.
- JSON records may not carry lone UTF-16 surrogates or NUL characters (``"\\ud800"``, ``"\\u0000"``).

The limits are a :class:`ReadLimits`, taken from the context (:func:`using_limits`): the ingestion
registry sets them from the options every loader accepts (``encoding``, ``max_line_bytes``,
``max_bytes``, ``max_ratio``, ``max_name_chars``). :func:`check_name` is the one check of names
(entity names, aliases, types, relations) and :func:`check_text` of stored free text.
"""

from __future__ import annotations

import contextlib
import contextvars
import gzip
import hashlib
import json
import os
import re
import tempfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Iterator

from bencao.config import field
from bencao.errors import BencaoError, InputError, InvalidValue
from bencao import faults

MiB = 1024 * 1024

#: Longest line accepted from a text/JSONL input by default. Longer lines are almost always a broken
#: file (a missing newline, a binary blob); they get a clear error instead of exhausting memory.
MAX_LINE_BYTES = 8 * MiB


@dataclass(frozen=True)
class ReadLimits:
    """Limits and encoding for reading one input file (loader options of every format)."""

    encoding: str | None = field(None, help="Text encoding of the file. Default: UTF-8 (JSONL, CSV, OBO, OWL); UTF-8 or GB18030 for books.")
    max_line_bytes: int = field(MAX_LINE_BYTES, help="Longest line (or record) in bytes; a longer one is refused when the cap is reached.")
    max_bytes: int = field(4096 * MiB, help="Largest (decompressed) file in bytes.")
    max_ratio: float = field(100.0, help="Largest decompressed/compressed size ratio of a .gz file (a compression bomb is refused early).")
    max_name_chars: int = field(1000, help="Longest entity name, alias, type or relation name in characters.")


#: Loader options handled here for every format (a loader may also declare ``encoding`` itself).
LIMIT_OPTIONS = ("encoding", "max_line_bytes", "max_bytes", "max_ratio", "max_name_chars")

#: Below this many decompressed bytes the ratio check is not applied (small files compress well).
_RATIO_FLOOR = 16 * MiB
_CHUNK = MiB

class ReadWatch:
    """The reads of one input file during its ingestion (:func:`watching`): the bytes of every complete
    read are hashed, so the registry can check that what was parsed is what was hashed into the
    document id, and the file's size and modification time are compared before and after."""

    def __init__(self, path: Path):
        self.path = path
        self.key = _file_key(path)
        self.before = _stat_key(path)
        self.digests: list[str] = []  # sha1 of the (decompressed) bytes of each read that reached the end

    def verify(self, expected: str) -> None:
        """InputError when the file changed since the watch began: another size, modification time or
        file, or a complete read that saw other bytes than ``expected`` (the hash in the document id)."""
        after = _stat_key(self.path)
        if after != self.before or any(d != expected for d in self.digests):
            what = "grew or shrank" if after is None or self.before is None or after[0] != self.before[0] else "was modified"
            raise InputError(self.path, f"the file {what} while it was read; nothing was added (add it again once it is complete)")


def _file_key(path: Path) -> tuple[int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _stat_key(path: Path) -> tuple[int, int, int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_size, st.st_mtime_ns, st.st_ino, st.st_dev


class _ReadHasher:
    """Hashes one read of a watched file; recorded in the watch when the read reaches the end."""

    def __init__(self, watch: ReadWatch):
        self.watch = watch
        self.h = hashlib.sha1()
        self.n = 0
        self.done = False

    def update(self, data: bytes) -> None:
        if not data:
            if not self.done:
                self.done = True
                self.watch.digests.append(self.h.hexdigest())
            return
        self.h.update(data)
        first = self.n == 0
        self.n += len(data)
        if first:
            faults.call("ingest.reading")


_WATCH: contextvars.ContextVar[ReadWatch | None] = contextvars.ContextVar("bencao_read_watch", default=None)


@contextlib.contextmanager
def watching(path: str | Path) -> Iterator[ReadWatch]:
    """Hash every read of ``path`` inside the block (see :class:`ReadWatch`)."""
    token = _WATCH.set(ReadWatch(Path(path)))
    try:
        yield _WATCH.get()  # type: ignore[misc]
    finally:
        _WATCH.reset(token)


def read_hasher(path: str | Path) -> _ReadHasher | None:
    """A hasher for a read of ``path`` when it is the watched input (:func:`watching`), else None.
    Feed it every byte read in order, then ``b""`` at the end of the file."""
    w = _WATCH.get()
    if w is None or w.key is None or _file_key(Path(path)) != w.key:
        return None
    return _ReadHasher(w)


_LIMITS: contextvars.ContextVar[ReadLimits] = contextvars.ContextVar("bencao_read_limits", default=ReadLimits())
#: What the name/title normalisation changed while a file was read (counts for the add's summary).
_CLEANED: contextvars.ContextVar[dict[str, int] | None] = contextvars.ContextVar("bencao_cleaned", default=None)
_RECORD: contextvars.ContextVar[str | None] = contextvars.ContextVar("bencao_current_record", default=None)


def read_limits() -> ReadLimits:
    """The limits in force (the defaults unless inside :func:`using_limits`)."""
    return _LIMITS.get()


@contextlib.contextmanager
def using_limits(limits: ReadLimits) -> Iterator[ReadLimits]:
    """Read with ``limits`` inside the block; the record being read is tracked for error messages."""
    t1, t2, t3 = _LIMITS.set(limits), _RECORD.set(None), _CLEANED.set({})
    try:
        yield limits
    finally:
        _LIMITS.reset(t1)
        _RECORD.reset(t2)
        _CLEANED.reset(t3)


def cleaned_counts() -> dict[str, int]:
    """What :func:`check_name` and :func:`clean_title` changed inside the current :func:`using_limits` block."""
    return dict(_CLEANED.get() or {})


def _count(what: str, n: int = 1) -> None:
    c = _CLEANED.get()
    if c is not None:
        c[what] = c.get(what, 0) + n


def limits_from_options(options: dict[str, Any], where: str) -> ReadLimits:
    """:class:`ReadLimits` from loader options (only the keys of :data:`LIMIT_OPTIONS` are read)."""
    from bencao.config import from_dict

    given = {k: options[k] for k in LIMIT_OPTIONS if k in options}
    if given.get("encoding") in ("", None):
        given.pop("encoding", None)
    limits = from_dict(ReadLimits, given, where=where)
    for key in ("max_line_bytes", "max_bytes", "max_ratio", "max_name_chars"):
        if getattr(limits, key) <= 0:
            raise BencaoError(f"{where}: option {key}={getattr(limits, key)!r}: expected a positive number")
    if limits.encoding:
        check_encoding(limits.encoding, where)
    return limits


def check_encoding(encoding: str, where: str) -> str:
    """``encoding`` when it names a text encoding; BencaoError for an unknown one or a codec that is
    not text (rot13, base64, hex, zlib: bytes-to-bytes or str-to-str transforms)."""
    import codecs

    try:
        info = codecs.lookup(encoding)
    except LookupError:
        raise BencaoError(f"{where}: option encoding={encoding!r}: unknown encoding") from None
    if not getattr(info, "_is_text_encoding", True):
        raise BencaoError(f"{where}: option encoding={encoding!r}: not a text encoding (use e.g. utf-8, gb18030, big5, latin-1)")
    probe = "\n\r\t <>:,;=\"'{}[]/\\+-_.?!@#$%&*()|~`^09AZaz"
    try:
        compatible = probe.encode(info.name).removeprefix(codecs.BOM_UTF8) == probe.encode("ascii")
    except (UnicodeError, LookupError):
        compatible = False
    if not compatible:  # UTF-16/32, UTF-7, EBCDIC: the readers split lines and find markup on ASCII bytes
        raise BencaoError(f"{where}: option encoding={encoding!r}: not an ASCII-compatible encoding, which the loaders read line by line; "
                          f"convert the file to UTF-8 first (e.g. iconv -f {info.name} -t utf-8)")
    return encoding


def set_record(where: str | None) -> None:
    """Name the record being read (``line 12``, ``row 3 (line 4)``, ``term FOODON:1``) for error messages."""
    _RECORD.set(where)


def current_record() -> str | None:
    return _RECORD.get()


# --------------------------------------------------------------------------- bounded binary reading


class _Source:
    """One input file opened for bounded reading: decompresses ``.gz``, counts bytes, names the file."""

    def __init__(self, path: Path, limits: ReadLimits | None, watch: bool = True):
        self.path = path
        self.limits = limits
        self.compressed = path.name.endswith(".gz")
        try:
            self.size = path.stat().st_size
            self._raw: BinaryIO = open(path, "rb")
        except FileNotFoundError:
            raise InputError(path, "file not found") from None
        except IsADirectoryError:
            raise InputError(path, "is a directory, not a file") from None
        except OSError as exc:
            raise InputError(path, f"cannot read: {exc.strerror or exc}") from None
        if self.compressed and self._raw.read(2) != b"\x1f\x8b":
            self._raw.close()
            raise InputError(path, "not gzip data (the name ends in .gz but the content is not gzip-compressed)")
        self._raw.seek(0)
        self._fh: BinaryIO = gzip.GzipFile(fileobj=self._raw, mode="rb") if self.compressed else self._raw  # type: ignore[assignment]
        self.total = 0
        self.hasher = read_hasher(path) if watch else None

    def close(self) -> None:
        if self._fh is not self._raw:
            self._fh.close()
        self._raw.close()

    def __enter__(self) -> "_Source":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(self, fn: Any, n: int) -> bytes:
        try:
            data = fn(n)
        except (OSError, EOFError, zlib.error) as exc:
            if not self.compressed:
                raise InputError(self.path, f"cannot read: {exc}") from None
            what = "truncated" if isinstance(exc, EOFError) else "corrupt"
            after = f" after {self.total:,} good decompressed bytes" if self.total else ""
            raise InputError(self.path, f"{what} gzip data{after} ({exc})") from None
        self.total += len(data)
        if self.hasher is not None:
            self.hasher.update(data)
        lim = self.limits
        if lim is not None:
            if self.total > lim.max_bytes:
                raise InputError(self.path, f"more than {lim.max_bytes:,} bytes{' decompressed' if self.compressed else ''}, "
                                            f"over the limit (option max_bytes)")
            if self.compressed and self.total > max(_RATIO_FLOOR, self.size * lim.max_ratio):
                raise InputError(self.path, f"decompresses to more than {lim.max_ratio:g} times its {self.size:,} bytes "
                                            f"(a compression bomb?); refused after {self.total:,} bytes (option max_ratio)")
        return data

    def read(self, n: int = _CHUNK) -> bytes:
        return self._call(self._fh.read, n)

    def readline(self, limit: int) -> bytes:
        return self._call(self._fh.readline, limit)


def _line_of(data: bytes | bytearray, offset: int) -> int:
    return data.count(b"\n", 0, offset) + 1


def _too_long(path: Path, lineno: int, limit: int) -> InputError:
    return InputError(path, f"line is at least {limit + 1:,} bytes, over the {limit:,}-byte limit (option max_line_bytes)",
                      record=f"line {lineno}")


def read_bytes(path: str | Path, limits: ReadLimits | None = None) -> bytes:
    """A whole file (``.gz`` decompressed) within ``limits`` (default: the limits in force).

    Reading stops with an :class:`InputError` at the first line longer than ``max_line_bytes`` and
    when the (decompressed) size passes ``max_bytes`` or ``max_ratio``: memory stays bounded.
    """
    path = Path(path)
    lim = limits or read_limits()
    buf = bytearray()
    line_start = 0  # offset where the current (unfinished) line starts
    step = min(_CHUNK, lim.max_line_bytes)  # a line inside one chunk cannot pass the cap unseen
    with _Source(path, lim) as src:
        while True:
            chunk = src.read(step)
            if not chunk:
                break
            base = len(buf)
            buf += chunk
            m = _EOL.search(chunk)  # LF, CRLF or a bare CR ends a line
            if m is not None:
                first = m.start()
                if base + first - line_start > lim.max_line_bytes:
                    raise _too_long(path, _line_of(buf, line_start), lim.max_line_bytes)
                line_start = base + max(chunk.rfind(b"\n"), chunk.rfind(b"\r")) + 1
            if len(buf) - line_start > lim.max_line_bytes:
                raise _too_long(path, _line_of(buf, line_start), lim.max_line_bytes)
    return bytes(buf)


_EOL = re.compile(rb"[\r\n]")


class LineTooLong(Exception):
    def __init__(self, lineno: int):
        self.lineno = lineno


def split_lines(read: Any, limit: int) -> Iterator[bytes]:
    """Lines of a byte stream (``read(n)`` until ``b""``) without their endings: LF, CRLF and a bare
    CR each end a line. A line longer than ``limit`` raises :class:`LineTooLong` once ``limit`` bytes
    of it are held (memory stays bounded whatever the line structure)."""
    pending = b""
    lineno = 0
    step = max(1, min(_CHUNK, limit + 1))
    while True:
        chunk = read(step)
        if not chunk:
            break
        data = pending + chunk if pending else chunk
        parts = data.splitlines(keepends=True)
        last = parts[-1]
        if last.endswith(b"\n"):
            pending, complete = b"", parts
        else:  # no ending yet, or a CR that may be the first half of a CRLF: wait for the next chunk
            pending, complete = last, parts[:-1]
        for part in complete:
            lineno += 1
            body = part.rstrip(b"\r\n") if part[-1:] in (b"\n", b"\r") else part
            if len(body) > limit:
                raise LineTooLong(lineno)
            yield body
        if len(pending) > limit + 1:
            raise LineTooLong(lineno + 1)
    if pending:
        body = pending[:-1] if pending.endswith(b"\r") else pending
        if len(body) > limit:
            raise LineTooLong(lineno + 1)
        yield body


def iter_raw_lines(path: str | Path, limits: ReadLimits | None = None) -> Iterator[tuple[int, bytes]]:
    """Stream ``(line_number, bytes)`` without the line ending (LF, CRLF or CR), each line within ``max_line_bytes``."""
    path = Path(path)
    lim = limits or read_limits()
    with _Source(path, lim) as src:
        lineno = 0
        try:
            for raw in split_lines(src.read, lim.max_line_bytes):
                lineno += 1
                yield lineno, raw
        except LineTooLong as exc:
            raise _too_long(path, exc.lineno, lim.max_line_bytes) from None


# --------------------------------------------------------------------------- decoding

_ENCODINGS = ("utf-8", "gb18030")
def _looks_single_byte(data: bytes) -> bool:
    """True when bytes that decode as GB18030 are more likely Latin-1/Windows-1252 (mojibake).

    A high byte followed by an ASCII byte in 0x40-0x7e is rare in GB18030 Chinese, whose characters
    are runs of high bytes (at most 8% of its high bytes on the 698 GB18030 books of the corpus), and
    the rule in single-byte text that happens to decode as GB18030 (every accented letter).
    """
    import numpy as np

    a = np.frombuffer(data, dtype=np.uint8)
    high = int(np.count_nonzero(a >= 0x80))
    pairs = int(np.count_nonzero((a[:-1] >= 0x81) & (a[:-1] <= 0xFE) & (a[1:] >= 0x40) & (a[1:] <= 0x7E)))
    return high > 0 and pairs / high > 0.5


#: Characters that are rare in Chinese text but what Big5 read as GB18030 (or the reverse) is full of:
#: private use, replacement, kana, half-width katakana, Greek, Cyrillic, pinyin letters, box drawing, small forms.
_ODD = re.compile("[\ue000-\uf8ff\ufffd\u3040-\u30ff\uff61-\uff9f\u0370-\u03ff\u0400-\u04ff\u0100-\u024f\u2500-\u257f\ufe50-\ufe6f]")
_PUA = re.compile("[\ue000-\uf8ff\ufffd]")
_NON_ASCII = re.compile("[^\x00-\x7f]")
#: Chinese double-byte encodings told apart when guessing (both decode almost any high bytes).
_CHINESE = ("gb18030", "big5")
_CHINESE_CODECS = {"gb18030", "gbk", "gb2312", "big5", "cp950", "big5hkscs", "hz", "euc_cn"}
_SAMPLE = 1 << 20


def _oddness(text: str) -> tuple[int, int, int]:
    """(private-use/replacement characters, odd characters (see _ODD), non-ASCII characters) of ``text``."""
    return len(_PUA.findall(text)), len(_ODD.findall(text)), len(_NON_ASCII.findall(text))


def guess_chinese(data: bytes) -> str:
    """``gb18030`` or ``big5`` for bytes that are not UTF-8: the one whose decoding has fewer undecodable
    bytes and fewer odd characters (kana, Greek, private use ... are what Big5 read as GB18030 gives);
    GB18030 on a tie."""
    head = data
    if len(data) > _SAMPLE:
        cut = data.rfind(b"\n", 0, _SAMPLE)
        head = data[: cut if cut > 0 else _SAMPLE]
    best, best_score = "gb18030", None
    for enc in _CHINESE:
        text = head.decode(enc, "replace")
        pua, odd, _ = _oddness(text)
        score = odd + 10 * pua
        if best_score is None or score < best_score:
            best, best_score = enc, score
    return best


def check_decoded(data: bytes, encoding: str, path: Path, declared: bool) -> None:
    """Refuse bytes that ``encoding`` decodes into implausible text.

    A declared legacy encoding over bytes that are valid UTF-8 (with non-ASCII) is refused (``-o
    encoding=gb18030`` on a UTF-8 file stores mojibake); so is a decoding where more than 2 % of
    the non-ASCII characters are private-use or replacement characters, and, for the Chinese
    encodings, one where more than 10 % are kana/Greek/Cyrillic/pinyin/box drawing while the other
    Chinese encoding reads the bytes cleanly (Big5 read as GB18030, or the reverse). Only the first
    MiB is judged."""
    name = codec_name(encoding)
    if name.startswith("utf") or name in ("ascii",):
        return
    head = data
    if len(data) > _SAMPLE:  # judge whole lines of the first MiB
        cut = data.rfind(b"\n", 0, _SAMPLE)
        head = data[: cut if cut > 0 else _SAMPLE]
    if head.isascii():
        return
    how = "declared" if declared else "detected"
    if declared:
        _utf8_under_declared(head, encoding, path)
        _chinese_under_latin(head, encoding, name, path)
    text = head.decode(encoding, "replace")
    pua, odd, nonascii = _oddness(text)
    if nonascii < 8:
        return
    implausible = pua > max(2, nonascii * 0.02)
    if not implausible and not (name in _CHINESE_CODECS and odd > nonascii * 0.10):
        return
    alt = _clean_alternative(head, name)
    hint = f" and it reads cleanly as {alt}: give -O encoding={alt}" if alt else " (give the right encoding option: gb18030, big5, ...)"
    if implausible:
        raise InputError(path, f"read as {encoding} ({how}), {pua:,} of {nonascii:,} non-ASCII characters are private-use or "
                               f"undecodable: not {encoding} text{hint}")
    if alt:  # kana/Greek/... alone may be real text: refused only when the other encoding is clean
        raise InputError(path, f"read as {encoding} ({how}) the text is implausible ({odd:,} of {nonascii:,} non-ASCII "
                               f"characters are kana, Greek, Cyrillic, pinyin or box drawing){hint}")


def _utf8_under_declared(data: bytes, encoding: str, path: Path) -> None:
    """Refuse a declared legacy encoding over bytes that are UTF-8 with non-ASCII text."""
    if len(data) > _SAMPLE:  # judge whole lines of the first MiB
        cut = data.rfind(b"\n", 0, _SAMPLE)
        data = data[: cut if cut > 0 else _SAMPLE]
    if codec_name(encoding).startswith("utf") or data.isascii():
        return
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return
    raise InputError(path, f"encoding={encoding} is declared but the bytes are UTF-8 (read as {encoding} they would be "
                           "mojibake): drop the encoding option")


#: Latin-script single-byte codecs: every byte decodes, so a wrong declaration is never an error by itself.
_LATIN_CODECS = {"iso8859-1", "cp1252", "iso8859-15", "mac-roman", "cp850", "cp437", "iso8859-2", "cp1250"}


def _chinese_under_latin(data: bytes, encoding: str, name: str, path: Path) -> None:
    """Refuse a declared Latin-script encoding over Chinese double-byte text (``-O encoding=latin-1`` on a
    GB18030 or Big5 file decodes every byte and stores 'Ã\x80Ã¾' mojibake): Latin text has its high bytes
    one at a time between ASCII letters, Chinese text in runs, and a Chinese encoding reads it cleanly."""
    if name not in _LATIN_CODECS or _looks_single_byte(data):
        return
    if len(_NON_ASCII.findall(data.decode("latin-1"))) < 16:
        return
    alt = _clean_alternative(data, "")
    if alt:
        raise InputError(path, f"read as {encoding} (declared) the text is implausible (its non-ASCII bytes come in runs, as in "
                               f"Chinese double-byte text) and it reads cleanly as {alt}: give -O encoding={alt}")


def _clean_alternative(head: bytes, name: str) -> str | None:
    """The other Chinese encoding that decodes ``head`` without errors into plausible text, if any."""
    for alt in _CHINESE:
        if codec_name(alt) == name:
            continue
        try:
            alt_text = head.decode(alt)
        except UnicodeDecodeError:
            continue
        a_pua, a_odd, a_non = _oddness(alt_text)
        if a_pua == 0 and a_odd <= a_non * 0.01:
            return alt
    return None


def _encoding_hint(data: bytes, start: int) -> str:
    """A guess at what the bytes that are not UTF-8 are, from the run of non-ASCII bytes at ``start``."""
    end = start
    while end < len(data) and data[end] >= 0x80:
        end += 1
    run = data[start:end]
    try:
        run.decode("utf-8", "surrogatepass")
        return "a UTF-16 surrogate encoded as UTF-8 (CESU-8): not valid Unicode text"
    except UnicodeDecodeError:
        pass
    if len(run) >= 2:
        try:
            run.decode("gb18030")
            return "it looks like GB18030"
        except UnicodeDecodeError:
            pass
    return "it looks like Latin-1/Windows-1252"


def _check_binary(data: bytes, path: Path, offset: int = 0) -> None:
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise InputError(path, "UTF-16 text (byte-order mark); convert it to UTF-8")
    nul = data.find(b"\x00")
    if nul >= 0:
        raise InputError(path, "NUL byte: binary data or UTF-16 text, not a text file", record=f"line {_line_of(data, nul)}")


def _not_utf8(data: bytes, path: Path, exc: UnicodeDecodeError, line: int | None = None, allowed: str = "UTF-8") -> InputError:
    bad = data[exc.start : exc.start + 1].hex()
    lineno = line if line is not None else _line_of(data, exc.start)
    return InputError(path, f"not valid {allowed} (byte 0x{bad}; {_encoding_hint(data, exc.start)}): convert the file to UTF-8 "
                            f"or give its encoding (option encoding=gb18030, encoding=latin-1, ...)", record=f"line {lineno}")


def decode_text(data: bytes, path: str | Path, encoding: str | None = None, guess: bool = True) -> str:
    """Decode a whole text file.

    With ``encoding`` (or one set in the limits in force) exactly that codec. Otherwise UTF-8 (a BOM
    is dropped), and with ``guess`` GB18030 too (Chinese classics circulate in both) unless the
    bytes look like single-byte Latin-1/Windows-1252 text, which would decode as GB18030 mojibake.
    NUL bytes and UTF-16 are refused. Every error names the line.
    """
    path = Path(path)
    encoding = encoding or read_limits().encoding
    if encoding and codec_name(encoding) not in ("utf-16", "utf-32"):
        _check_binary(data, path)
    if encoding:
        try:
            text = data.decode(encoding)
        except LookupError:
            raise InputError(path, f"unknown encoding {encoding!r}") from None
        except UnicodeDecodeError as exc:
            _utf8_under_declared(data[:_SAMPLE], encoding, path)
            raise InputError(path, f"cannot decode as {encoding}: byte 0x{data[exc.start:exc.start + 1].hex()}",
                             record=f"line {_line_of(data, exc.start)}") from None
        check_decoded(data, encoding, path, declared=True)
        return text[1:] if text.startswith("\ufeff") else text
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    _check_binary(data, path)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        if not guess:
            raise _not_utf8(data, path, exc) from None
        first = exc
    enc = guess_chinese(data)
    try:
        text = data.decode(enc)
    except UnicodeDecodeError:
        raise _not_utf8(data, path, first, allowed="UTF-8, GB18030 or Big5") from None
    if enc == "gb18030" and _looks_single_byte(data):
        raise _not_utf8(data, path, first, allowed="UTF-8, and GB18030 would give mojibake") from None
    check_decoded(data, enc, path, declared=False)
    return text


def codec_name(encoding: str) -> str:
    import codecs

    try:
        return codecs.lookup(encoding).name
    except LookupError:
        return encoding


def read_text(path: str | Path, encoding: str | None = None, guess: bool = True) -> str:
    """A whole text file, bounded (:func:`read_bytes`) and decoded (:func:`decode_text`)."""
    return decode_text(read_bytes(path), path, encoding, guess)


def iter_lines(path: str | Path, encoding: str | None = None) -> Iterator[tuple[int, str]]:
    """Stream ``(line_number, line)`` of a UTF-8 text file (or ``encoding``), without line endings.

    Bounded line by line (:func:`iter_raw_lines`); a line that is not valid in the encoding, or holds
    a NUL byte, is refused naming its number. Each line read becomes the current record.
    """
    path = Path(path)
    declared = encoding or read_limits().encoding
    encoding = declared or "utf-8"
    utf8 = codec_name(encoding) == "utf-8"
    sample: list[bytes] | None = [] if declared and not utf8 else None  # the first MiB, to check the declared encoding
    size = 0
    for lineno, raw in iter_raw_lines(path):
        if sample is not None:
            sample.append(raw)
            size += len(raw) + 1
            if size >= _SAMPLE:
                check_decoded(b"\n".join(sample), encoding, path, declared=True)
                sample = None
        if lineno == 1:
            if raw.startswith((b"\xff\xfe", b"\xfe\xff")):
                raise InputError(path, "UTF-16 text (byte-order mark); convert it to UTF-8")
            if raw.startswith(b"\xef\xbb\xbf"):
                raw = raw[3:]
        if b"\x00" in raw:
            raise InputError(path, "NUL byte: binary data or UTF-16 text, not a text file", record=f"line {lineno}")
        try:
            line = raw.decode(encoding)
        except UnicodeDecodeError as exc:
            if utf8:
                raise _not_utf8(raw, path, exc, line=lineno) from None
            _utf8_under_declared(raw, encoding, path)
            raise InputError(path, f"cannot decode as {encoding}: byte 0x{raw[exc.start:exc.start + 1].hex()}", record=f"line {lineno}") from None
        _RECORD.set(f"line {lineno}")
        yield lineno, line
    if sample:
        check_decoded(b"\n".join(sample), encoding, path, declared=True)


# --------------------------------------------------------------------------- values

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_SURROGATE = re.compile(r"[\ud800-\udfff]")
_BAD_TEXT = re.compile(r"[\x00\ud800-\udfff]")


def _show(value: str, n: int = 40) -> str:
    return repr(value if len(value) <= n else value[:n] + "…")


def check_text(value: str, what: str) -> str:
    """Refuse free text that cannot be stored: NUL characters and lone UTF-16 surrogates."""
    m = _BAD_TEXT.search(value)
    if m:
        ch = m.group()
        kind = "a NUL character" if ch == "\x00" else f"a lone UTF-16 surrogate U+{ord(ch):04X} (not valid Unicode)"
        raise InvalidValue(f"{what} contains {kind}")
    return value


#: Invisible characters removed from names and titles: every format character of Unicode (category Cf:
#: zero-width space/joiners, soft hyphen, word joiner, a BOM inside text, invisible operators, Arabic
#: number signs, musical and shorthand format controls, tags) with the bidirectional controls among them
#: (LRM/RLM/ALM, embeddings, overrides, isolates), and the marks and letters that print as nothing
#: (combining grapheme joiner, Hangul fillers, Khmer inherent vowels, Mongolian and other variation
#: selectors). Two names that print the same then match. ``tests/test_loader_names.py`` checks it covers every
#: Cf character this Python knows.
INVISIBLE = re.compile("[\u00ad\u034f\u0600-\u0605\u061c\u06dd\u070f\u0890\u0891\u08e2\u115f\u1160\u17b4\u17b5"
                       "\u180b-\u180f\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u206f\u3164\ufe00-\ufe0f\ufeff\uffa0"
                       "\ufff9-\ufffb\U000110bd\U000110cd\U00013430-\U0001343f\U0001bca0-\U0001bca3\U0001d173-\U0001d17a"
                       "\U000e0000-\U000e007f\U000e0100-\U000e01ef]")
#: Line and paragraph separators (and NEL) inside a name: a space, as any other line break would be.
_NAME_BREAKS = re.compile("[\u0085\u2028\u2029]")
_TITLE_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]+")
#: Longest section title kept; a longer one (a paragraph or a file pasted into a heading) is cut.
MAX_TITLE_CHARS = 200


def clean_title(value: str, what: str = "section title") -> str:
    """A title normalised for storage: invisible characters removed, control characters and line
    breaks (BEL, ESC, newlines) turned into one space, at most :data:`MAX_TITLE_CHARS` characters
    (cut with '…'). Each change is counted for the add's summary. NUL and lone surrogates are refused."""
    check_text(value, what)
    title = value
    if INVISIBLE.search(title):
        n = len(title)
        title = INVISIBLE.sub("", title)
        _count("invisible_characters_removed", n - len(title))
    if _TITLE_CONTROL.search(title):
        title = " ".join(_TITLE_CONTROL.sub(" ", title).split())
        _count("titles_with_control_characters")
    title = title.strip()
    if len(title) > MAX_TITLE_CHARS:
        title = title[: MAX_TITLE_CHARS - 1] + "…"
        _count("titles_cut")
    return title


def check_name(value: str, what: str = "name", max_chars: int | None = None) -> str:
    """A name stripped of surrounding whitespace and of invisible characters (:data:`INVISIBLE`,
    counted); refused when empty, over ``max_chars`` (default: the limit in force), or holding
    control characters or lone surrogates."""
    if INVISIBLE.search(value):
        n = len(value)
        value = INVISIBLE.sub("", value)
        _count("invisible_characters_removed", n - len(value))
    if _NAME_BREAKS.search(value):
        _count("line_separators_in_names", len(_NAME_BREAKS.findall(value)))
        value = _NAME_BREAKS.sub(" ", value)
    name = value.strip()
    if not name:
        raise InvalidValue(f"{what} is empty" + (" (whitespace only)" if value else ""))
    m = _CONTROL.search(name)
    if m:
        raise InvalidValue(f"{what} {_show(name)} contains the control character U+{ord(m.group()):04X}")
    m = _SURROGATE.search(name)
    if m:
        raise InvalidValue(f"{what} {_show(name)} contains a lone UTF-16 surrogate U+{ord(m.group()):04X} (not valid Unicode)")
    limit = max_chars if max_chars is not None else read_limits().max_name_chars
    if len(name) > limit:
        raise InvalidValue(f"{what} {_show(name)} is {len(name):,} characters, over the limit of {limit:,} (option max_name_chars)")
    return name


def _bad_json_string(obj: Any, where: str = "") -> tuple[str, str] | None:
    """The first string (key or value) holding NUL or a lone surrogate: ``(field path, problem)``."""
    if isinstance(obj, str):
        try:
            check_text(obj, "")
        except InvalidValue as exc:
            return where or "value", str(exc).strip()
        return None
    if isinstance(obj, dict):
        for k, v in obj.items():
            hit = _bad_json_string(k, f"{where}.{k!r}" if where else repr(k)) or _bad_json_string(v, f"{where}.{k}" if where else str(k))
            if hit:
                return hit
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            hit = _bad_json_string(v, f"{where}[{i}]")
            if hit:
                return hit
    return None


class DuplicateKey(ValueError):
    """A JSON object that gives the same key twice (``json.loads`` would keep the last, silently)."""


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        for k, _ in pairs:
            if k in seen:
                raise DuplicateKey(f"duplicate key {k[:60]!r} in a JSON object (which value is meant?)")
            seen.add(k)
    return out


def loads_json(text: str) -> Any:
    """``json.loads`` refusing objects with duplicate keys (:class:`DuplicateKey`)."""
    return json.loads(text, object_pairs_hook=_unique_pairs)


def iter_jsonl(path: str | Path, required: tuple[str, ...] = ()) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield ``(line_number, object)`` for each non-blank line of a JSONL file (``.gz`` allowed), streaming.

    Raises :class:`InputError` naming the file and line for bytes that are not UTF-8, malformed JSON,
    a string holding NUL or a lone surrogate (``"\\u0000"``, ``"\\ud800"``), a value that is not an
    object, or a missing required key.
    """
    n_records = 0
    for lineno, line in iter_lines(path):
        if not line.strip():
            continue
        where = f"line {lineno}"
        try:
            obj = loads_json(line)
        except DuplicateKey as exc:
            raise InputError(path, str(exc), record=where) from None
        except json.JSONDecodeError as exc:
            raise InputError(path, f"malformed JSON: {exc.msg} (column {exc.colno})", record=where) from None
        except RecursionError:
            raise InputError(path, "malformed JSON: nested too deeply", record=where) from None
        except ValueError as exc:  # e.g. an integer over Python's digit limit
            raise InputError(path, f"malformed JSON: {exc}", record=where) from None
        if "\\u" in line:  # NUL and surrogates can only arrive as escapes (raw ones are refused above)
            bad = _bad_json_string(obj)
            if bad:
                raise InputError(path, f"field {bad[0]} {bad[1]}", record=where)
        if not isinstance(obj, dict):
            raise InputError(path, f"expected a JSON object, got {type(obj).__name__}", record=where)
        missing = [k for k in required if k not in obj or obj[k] in (None, "")]
        if missing:
            raise InputError(path, f"missing required field(s): {', '.join(missing)}", record=where)
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
        faults.call("file.write")
        yield tmp_path
        os.replace(tmp_path, path)
    finally:
        if tmp_path.exists():
            tmp_path.unlink()


def remove_stale_tmp(directory: str | Path, pattern: str) -> int:
    """Remove temporary files/directories ``<name>.tmp-<pid>-<thread>`` matching ``pattern`` in
    ``directory`` whose writing process no longer runs (it was killed mid-write). Returns how many."""
    import shutil

    n = 0
    for p in Path(directory).glob(pattern):
        m = re.search(r"\.tmp-(\d+)(?:-\d+)?$", p.name)
        if not m:
            continue
        pid = int(m.group(1))
        if pid == os.getpid():
            continue
        try:
            os.kill(pid, 0)
            continue  # still running: its file, not ours to remove
        except ProcessLookupError:
            pass
        except (PermissionError, OSError):
            continue
        with contextlib.suppress(OSError):
            shutil.rmtree(p) if p.is_dir() else p.unlink()
            n += 1
    return n


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
            good: list[bytes] = []
            torn = False
            with open(self.path, "rb") as fh:  # bytes: a kill may cut a line inside a UTF-8 character
                for line in fh:
                    try:
                        if not line.endswith(b"\n"):
                            raise ValueError("torn write")
                        obj = json.loads(line.decode("utf-8"))
                    except ValueError:  # torn, undecodable or malformed: the kill's last line
                        torn = True
                        break
                    good.append(line)
                    if isinstance(obj, dict) and id_key in obj:
                        self.done_ids.add(str(obj[id_key]))
            if torn:
                with atomic_path(self.path) as tmp:
                    tmp.write_bytes(b"".join(good))
        self._fh = open(self.path, "a", encoding="utf-8")

    def write(self, rec: dict[str, Any], sync: bool = True) -> None:
        """Append one record, flushed to the OS (a killed process loses nothing); ``sync=False`` leaves the
        fsync (power loss) to a later :meth:`sync`, for writers that batch it."""
        line = json.dumps(rec, ensure_ascii=False) + "\n"
        faults.fault("jsonl.append")
        if faults.hit("jsonl.torn"):  # fault injection (tests): die with half a line written, inside a character if it can
            data = line.encode("utf-8")
            cut = len(data) // 2
            while cut < len(data) - 1 and (data[cut] & 0xC0) != 0x80:
                cut += 1
            self._fh.buffer.write(data[:cut])
            self._fh.flush()
            faults.die("jsonl.torn")
        self._fh.write(line)
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


def file_hash(path: str | Path, limits: ReadLimits | None = None) -> str:
    """sha1 of a file's (decompressed) bytes, streamed; within ``limits`` when given (inputs), unbounded otherwise."""
    h = hashlib.sha1()
    with _Source(Path(path), limits, watch=False) as src:
        while True:
            chunk = src.read(_CHUNK)
            if not chunk:
                break
            h.update(chunk)
    return h.hexdigest()
