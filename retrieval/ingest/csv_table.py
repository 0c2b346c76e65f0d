"""CSV rows with row-precise errors, shared by the catalogue and knowledge-base loaders.

The file is streamed line by line through ``bencao.io.iter_lines`` (bounded; UTF-8 unless the loader
option ``encoding`` names another codec, e.g. ``encoding=gb18030``; bytes that are not valid UTF-8 are
refused naming the line) and parsed by the standard ``csv`` module, so memory does not grow with the file. A cell (quoted multi-line cells
included, whatever the line structure) may hold at most ``max_line_bytes`` characters (the
loader option, 8 MiB by default): a larger one is refused with its row, not stored as one snippet. Every data row must have exactly as many fields as the header; a
row that does not is refused with its row number and physical line, never silently padded.
"""

from __future__ import annotations

import csv
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from bencao.errors import InputError
from bencao.io import iter_lines, read_limits, set_record


def _set_field_limit() -> int:
    """The csv module's (process-wide) cell limit set to the ``max_line_bytes`` in force; returns it."""
    limit = min(read_limits().max_line_bytes, sys.maxsize)
    while True:
        try:
            csv.field_size_limit(limit)
            return limit
        except OverflowError:  # C long is 32 bits on some platforms
            limit //= 2


def _csv_problem(exc: csv.Error, limit: int) -> str:
    if "field larger than field limit" in str(exc):
        return f"a cell of more than {limit:,} characters, over the limit (option max_line_bytes)"
    return f"malformed CSV: {exc}"


@dataclass(frozen=True)
class Row:
    """One data row: ``number`` counts data rows from 1 (the header is row 0); ``line`` is where it starts."""

    number: int
    line: int
    values: dict[str, str]

    @property
    def where(self) -> str:
        return f"row {self.number} (line {self.line})"


class CsvTable:
    """A parsed CSV file: ``header`` plus an iterator of :class:`Row` with exact field counts."""

    def __init__(self, path: str | Path, delimiter: str = ","):
        self.path = Path(path)
        self.delimiter = delimiter
        limit = _set_field_limit()
        lines = self._lines()
        try:
            header = next(csv.reader(lines, delimiter=delimiter))
        except StopIteration:
            raise InputError(self.path, "empty CSV: no header row") from None
        except csv.Error as exc:
            raise InputError(self.path, f"{_csv_problem(exc, limit)} (in the header)", record="line 1") from None
        finally:
            lines.close()
        self.header = [h.strip().lstrip("\ufeff") for h in header]
        dupes = sorted({h for h in self.header if self.header.count(h) > 1})
        if dupes:
            raise InputError(self.path, f"duplicate column name(s) in the header: {', '.join(dupes)}", record="line 1")

    def require(self, columns: dict[str, str]) -> None:
        """Refuse a file lacking a column; ``columns`` maps the role (for the message) to the column name."""
        for role, col in columns.items():
            if col and col not in self.header:
                raise InputError(self.path, f"missing column {col!r} ({role}); the header has: {', '.join(self.header)}", record="line 1")

    def _lines(self) -> Iterator[str]:
        """The file's lines as the csv module reads them (line endings as ``\n``), streamed and bounded line by line
        (``bencao.io.iter_lines``): a catalogue of a million rows is never held whole (it was, twice, as text)."""
        for _n, line in iter_lines(self.path):
            yield line + "\n"

    def rows(self) -> Iterator[Row]:
        limit = _set_field_limit()
        reader = csv.reader(self._lines(), delimiter=self.delimiter, strict=True)
        n = len(self.header)
        number = 0
        start_line = 1
        try:
            next(reader)
            for fields in reader:
                line = start_line + 1
                start_line = reader.line_num
                if not fields or (len(fields) == 1 and not fields[0].strip()):
                    continue  # blank line
                number += 1
                if len(fields) != n:
                    raise InputError(self.path, f"expected {n} fields as in the header, got {len(fields)}",
                                     record=f"row {number} (line {line})")
                row = Row(number, line, dict(zip(self.header, fields)))
                set_record(row.where)
                yield row
        except csv.Error as exc:
            raise InputError(self.path, _csv_problem(exc, limit), record=f"row {number + 1} (line {reader.line_num})") from None
