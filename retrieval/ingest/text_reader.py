"""Stream a book file line by line: plain or ``.gz``, UTF-8 or GB18030, any line ends.

The classics corpus is 699 gzip files in GB18030 with CRLF (a few with bare CR) line ends, and one
file has a couple of bytes no encoding can read. :class:`TextLines` decompresses and decodes one
line at a time (nothing is written to disk, memory stays at one line), splits on LF, CRLF and CR,
and replaces each undecodable byte with U+FFFD, counting them (``undecodable_bytes``, with the
first line that had one). A file where more than one byte in 1,000 is undecodable is not text in
the detected encoding and is refused with the line of its first bad byte.

Encoding: a BOM means UTF-8; otherwise the first MiB is decoded both ways and the encoding with
fewer undecodable bytes wins (UTF-8 on a tie, e.g. pure ASCII); bytes that are not UTF-8 are read
as GB18030 or Big5, whichever gives fewer kana/Greek/private-use characters (what the other
encoding's text turns into). ``encoding=`` forces one, and is checked on the first MiB
(:func:`bencao.io.check_decoded`: UTF-8 bytes under a declared legacy encoding, or Big5 declared
as GB18030, are refused).
"""

from __future__ import annotations

import codecs
import gzip
import re
import zlib
from pathlib import Path
from typing import BinaryIO, Iterator

from bencao.errors import InputError
from bencao.io import LineTooLong, check_decoded, guess_chinese, read_hasher, read_limits, split_lines

SNIFF_BYTES = 1 << 20
#: More undecodable bytes than this per 1,000 bytes read refuses the file.
MAX_UNDECODABLE_PER_MILLE = 1
_ESCAPED = re.compile("[\udc80-\udcff]")
_READ_ERRORS = (OSError, EOFError, zlib.error)


def _open(path: Path) -> BinaryIO:
    return gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")  # type: ignore[return-value]


def _count_bad(data: bytes, encoding: str) -> int:
    return len(_ESCAPED.findall(data.decode(encoding, "surrogateescape")))


def sniff_encoding(head: bytes) -> str:
    """``utf-8-sig`` / ``utf-8`` / ``gb18030`` / ``big5`` for the first bytes of a file (see the module doc)."""
    if head.startswith(codecs.BOM_UTF8):
        return "utf-8-sig"
    cut = head.rfind(b"\n")
    if cut > 0:
        head = head[:cut]  # do not judge a character cut in half at the sniff boundary
    if _count_bad(head, "utf-8") <= _count_bad(head, "gb18030"):
        return "utf-8"
    return guess_chinese(head)  # Big5 decodes as GB18030 too, into kana, Greek and private-use mojibake


class TextLines:
    """Iterate ``(line_number, line)`` of a text file; afterwards the decode figures are set.

    ``encoding`` is the one used, ``bytes_read`` the decompressed size, ``undecodable_bytes`` how
    many bytes were replaced by U+FFFD and ``first_undecodable_line`` where the first one was.
    Raises :class:`InputError` (naming the file and line) for unreadable or corrupt gzip data, a
    binary file, a line over ``max_line_bytes`` (:func:`bencao.io.read_limits`), or too many undecodable bytes.
    """

    def __init__(self, path: str | Path, encoding: str | None = None):
        self.path = Path(path)
        self.requested = encoding
        self.encoding = encoding or ""
        self.bytes_read = 0
        self.lines = 0
        self.undecodable_bytes = 0
        self.boms_removed = 0
        self.first_undecodable_line: int | None = None

    def __iter__(self) -> Iterator[tuple[int, str]]:
        if not self.path.exists():
            raise InputError(self.path, "file not found")
        try:
            with _open(self.path) as fh:
                yield from self._lines(fh)
        except _READ_ERRORS as exc:
            raise InputError(self.path, f"cannot read: {exc}", record=f"line {self.lines + 1}") from None

    def _lines(self, fh: BinaryIO) -> Iterator[tuple[int, str]]:
        head = fh.read(SNIFF_BYTES)
        if b"\x00" in head[:4096]:
            raise InputError(self.path, "looks binary (NUL bytes); expected UTF-8 or GB18030 text")
        if not self.requested:
            self.encoding = sniff_encoding(head)
        try:
            codecs.lookup(self.encoding)
        except LookupError:
            raise InputError(self.path, f"unknown encoding {self.encoding!r}") from None
        # a declared encoding is checked, a detected one judged: Big5 read as GB18030 is refused, not stored
        check_decoded(head[3:] if head.startswith(codecs.BOM_UTF8) else head, self.encoding, self.path, declared=bool(self.requested))
        fh.seek(0)
        hasher = read_hasher(self.path)  # graph add: the bytes parsed are checked against the document id
        enc = "utf-8" if self.encoding == "utf-8-sig" else self.encoding
        n = 0
        first = True
        max_line = read_limits().max_line_bytes  # the loader's max_line_bytes option, or the default

        def read(size: int) -> bytes:
            data = fh.read(size)
            if hasher is not None:
                hasher.update(data)
            self.bytes_read += len(data)
            return data

        try:
            for raw in split_lines(read, max_line):  # LF, CRLF and a bare CR each end a line
                if first:
                    if raw.startswith(codecs.BOM_UTF8):
                        raw = raw[3:]
                    first = False
                try:
                    text = raw.decode(enc)
                except UnicodeDecodeError:
                    text = raw.decode(enc, "surrogateescape")
                    bad = len(_ESCAPED.findall(text))
                    text = _ESCAPED.sub("\ufffd", text)
                    self.undecodable_bytes += bad
                    if self.first_undecodable_line is None:
                        self.first_undecodable_line = n + 1
                except LookupError:
                    raise InputError(self.path, f"unknown encoding {self.encoding!r}") from None
                if "\ufeff" in text:  # a BOM at the start of every line (files joined from parts) would hide the markup
                    self.boms_removed += text.count("\ufeff")
                    text = text.replace("\ufeff", "")
                n += 1
                self.lines = n
                yield n, text
        except LineTooLong as exc:  # refused at the cap: the rest of the line is never read
            raise InputError(self.path, f"line is at least {max_line + 1:,} bytes, over the {max_line:,}-byte limit "
                             "(option max_line_bytes)", record=f"line {exc.lineno}") from None
        if self.undecodable_bytes * 1000 > max(self.bytes_read, 1) * MAX_UNDECODABLE_PER_MILLE:
            raise InputError(self.path, f"{self.undecodable_bytes:,} undecodable bytes in {self.bytes_read:,}: not "
                             f"{self.encoding.upper()} text (UTF-8 or GB18030 expected, or give the encoding option)",
                             record=f"line {self.first_undecodable_line}")
