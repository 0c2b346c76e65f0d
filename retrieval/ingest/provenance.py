"""Exact provenance for the pattern extractors: a position in a section's text → the snippet holding it.

A section's snippets are its cleaned text cut into pieces (whitespace aside, nothing added or
dropped: :mod:`.book_report` checks it), so counting non-whitespace characters maps any position of
the text to exactly one snippet. An extractor finds a fact's words inside its entry's span of the
text and gets the snippet that says them; a fact whose words are not in the span gets no snippet
and is not written.
"""

from __future__ import annotations

import bisect
from itertools import accumulate


class SectionSnippets:
    def __init__(self, text: str, snippets: list[tuple[str, str]]):
        self.text = text
        self.snippets = snippets
        self._ends = list(accumulate(len("".join(t.split())) for _, t in snippets))  # non-whitespace end of each
        self._prefix: list[int] | None = None

    def _nonws_before(self, pos: int) -> int:
        if self._prefix is None:
            self._prefix = [0, *accumulate(0 if ch.isspace() else 1 for ch in self.text)]
        return self._prefix[min(max(pos, 0), len(self.text))]

    def at(self, pos: int) -> str:
        """The snippet holding the character at ``pos`` of the section text."""
        idx = bisect.bisect_right(self._ends, self._nonws_before(pos))
        return self.snippets[min(idx, len(self.snippets) - 1)][0]

    def locate(self, needles: list[str], start: int = 0, end: int | None = None) -> str | None:
        """The snippet of the first needle found in ``text[start:end]``; the span's only snippet when
        it lies in one; else None."""
        end = len(self.text) if end is None else end
        for n in needles:
            if n:
                k = self.text.find(n, start, end)
                if k >= 0:
                    return self.at(k)
        first, last = self.at(start), self.at(max(start, end - 1))
        return first if first == last else None
