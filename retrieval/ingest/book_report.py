"""Character accounting of a ``books-txt`` book, and the per-book report a build writes.

Every non-whitespace character of the decoded file is put in exactly one class:

- **markup**: the tags ``<篇名>``/``<目录>``, the field labels ``内容：``/``属性：`` at the start of a
  body line, the keys ``书名：/作者：/朝代：/年份：`` of header lines, and paired ``\\x…\\x``
  emphasis markers (the four characters of the two ``\\x``);
- **header**: the values of those header lines (they go to the document's meta);
- **heading**: the text of ``<篇名>``/``<目录>`` lines (and, in a book without that markup, of the
  ``第…章``/``一、…`` heading lines): it becomes section titles;
- **body**: everything else. Body text must reach the snippets, all of it, in order.

Whitespace (hard wraps, trailing spaces, U+3000) is layout and is not counted. The cleaner adds
characters in one place: a short ``\\x冬霜\\x`` emphasis becomes the subheading ``【冬霜】``; those
brackets are counted as ``added``. :meth:`BookAccount.verify` checks, per book:

1. ``chars == markup + header + heading + body`` (every character was classified);
2. the snippets' characters, with whitespace and 【】 removed, are exactly the body characters
   with 【】 removed, in the same order;
3. ``snippet_chars == body_chars + added_chars``.

A failure raises :class:`BencaoError` naming the book and the first line whose text went missing:
the build stops instead of silently losing text.
"""

from __future__ import annotations

import bisect
import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from bencao.errors import BencaoError
from bencao.io import atomic_path

_BRACKETS = str.maketrans("", "", "【】")


def nonws(text: str) -> str:
    """The text without any whitespace (the unit of the accounting)."""
    return "".join(text.split())


@dataclass
class BookAccount:
    """Where the characters of one book went (see the module doc)."""

    markup: str = "classics"  # classics (<篇名>/<目录> markup) | plain (none: title from the file name)
    encoding: str = ""
    bytes: int = 0
    undecodable_bytes: int = 0
    first_undecodable_line: int | None = None
    lines: int = 0
    blank_lines: int = 0
    chars: int = 0
    markup_chars: int = 0
    header_chars: int = 0
    heading_chars: int = 0
    body_chars: int = 0
    added_chars: int = 0
    snippet_chars: int = 0
    inline_headings: int = 0  # \x…\x subheadings inside body lines (kept in the text as 【…】)
    skipped: Counter = field(default_factory=Counter)  # lines that gave no body text, by reason
    _body: list[str] = field(default_factory=list, repr=False)
    _starts: list[int] = field(default_factory=list, repr=False)  # body-stream offset of each body line
    _linenos: list[int] = field(default_factory=list, repr=False)
    _offset: int = field(default=0, repr=False)

    def line(self, text: str) -> str:
        """Count one input line (before classification); returns its non-whitespace characters."""
        core = nonws(text)
        self.lines += 1
        self.chars += len(core)
        if not core:
            self.blank_lines += 1
        return core

    def body(self, core: str, lineno: int) -> None:
        """Record the body characters of one line (markup already removed)."""
        if not core:
            return
        self.body_chars += len(core)
        self._starts.append(self._offset)
        self._linenos.append(lineno)
        self._body.append(core)
        self._offset += len(core)

    def verify(self, snippets: Iterable[str], source: str) -> None:
        """Raise :class:`BencaoError` unless the snippets hold exactly the body text (see the module doc)."""
        parts = [nonws(t) for t in snippets]
        self.snippet_chars = sum(len(p) for p in parts)
        classified = self.markup_chars + self.header_chars + self.heading_chars + self.body_chars
        if classified != self.chars:
            raise BencaoError(f"{source}: character accounting is off: {self.chars:,} characters read, "
                              f"{classified:,} classified as markup/header/heading/body")
        got = "".join(parts).translate(_BRACKETS)
        want = "".join(self._body).translate(_BRACKETS)
        if got != want or self.snippet_chars != self.body_chars + self.added_chars:
            k = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
            line = self._line_of(k, want)
            raise BencaoError(f"{source}: the snippets hold {self.snippet_chars:,} characters for {self.body_chars:,} body "
                              f"characters (+{self.added_chars} added); first difference near line {line}: "
                              f"source {want[k:k + 12]!r}, snippets {got[k:k + 12]!r}")

    def _line_of(self, k: int, want: str) -> int | None:
        """Input line of character ``k`` of the bracket-free body stream."""
        if not self._linenos:
            return None
        # offsets were recorded with brackets; map k back by counting brackets before it
        raw = "".join(self._body)
        seen = i = 0
        while i < len(raw) and seen <= k:
            if raw[i] not in "【】":
                seen += 1
            i += 1
        pos = bisect.bisect_right(self._starts, max(i - 1, 0)) - 1
        return self._linenos[max(pos, 0)]

    def release(self) -> None:
        """Drop the body stream once verified (it is a copy of the book's text)."""
        self._body, self._starts, self._linenos = [], [], []

    def to_dict(self) -> dict[str, Any]:
        out = {k: v for k, v in self.__dict__.items() if not k.startswith("_")}
        out["skipped"] = dict(sorted(self.skipped.items()))
        return out


# --------------------------------------------------------------------------- the build's report

REPORT_DIR = "reports"
REPORT_NAME = "books.jsonl"


def book_records(documents: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """One record per book of the given documents (``Graph.documents()``) that carries an accounting."""
    out = []
    for d in documents:
        for bk in (d.get("meta") or {}).get("books", []):
            acc = bk.get("accounting")
            if acc is None:
                continue
            out.append({"file": d["source"], "document": d["id"], "title": bk.get("title"), "sections": bk.get("sections"),
                        "snippets": bk.get("snippets"), **acc,
                        **({"extractors": bk["extractors"]} if bk.get("extractors") else {})})
    return out


def summarise(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Totals of the per-book records for the manifest."""
    keys = ("sections", "snippets", "chars", "body_chars", "snippet_chars", "markup_chars", "header_chars", "heading_chars",
            "added_chars", "undecodable_bytes")
    tot = {k: sum(int(r.get(k) or 0) for r in records) for k in keys}
    skipped: Counter[str] = Counter()
    for r in records:
        skipped.update(r.get("skipped") or {})
    return {"books": len(records), **tot, "plain_books": sum(1 for r in records if r.get("markup") == "plain"),
            "books_with_undecodable_bytes": [r["file"] for r in records if r.get("undecodable_bytes")],
            "skipped_lines": dict(sorted(skipped.items())), "report": f"{REPORT_DIR}/{REPORT_NAME}"}


def write_book_report(documents: Iterable[dict[str, Any]], graph_dir: Path) -> dict[str, Any] | None:
    """Write ``<graph>/reports/books.jsonl`` (one line per book) and return the summary; None if no books."""
    records = book_records(documents)
    if not records:
        return None
    path = Path(graph_dir) / REPORT_DIR / REPORT_NAME
    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8") as fh:
        for r in records:
            fh.write(json.dumps(r, ensure_ascii=False) + "\n")
    return summarise(records)
