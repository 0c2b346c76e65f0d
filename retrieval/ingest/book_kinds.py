"""Which pattern extractor a book gets: materia-medica entries (本草) or formulas (方书).

With the books-txt options ``materia_medica: auto`` / ``formulas: auto`` each book is judged by its
title, then by its markup:

- **materia medica**: the title names a herbal or a food-therapy book — 本草, 本经, 别录, 药性, 药征,
  药鉴, 药分剂, 炮炙/炮制, 食疗, 食治, 食鉴, 饮膳, 饮食 — or, whatever the title, at least 30 % of the
  sections with text open with a 性味 header (味甘，平 / 甘苦微温 / 气平，味甘);
- **formulas**: the title names a formula book — 方 (not 方案: case records), 剂 (not 十剂表),
  汤头 — or at least 30 % of the titled sections are formula names (…汤 散 丸 膏 丹 饮), or the book
  has at least 30 formula headings inside its sections (【加味宣风散】, 桂枝汤方∶).

``true``/``false`` force an extractor on or off for every book of the source (a recipe can give a
book its own source entry to override the rule). The reason is recorded in the per-book report.
"""

from __future__ import annotations

import re
from typing import Iterable

MATERIA_MEDICA_TITLE = re.compile(r"本草|本经|别录|药性|药征|药鉴|药分剂|炮炙|炮制|食疗|食治|食鉴|饮膳|饮食")
FORMULA_TITLE = re.compile(r"方(?!案)|剂(?!表)|汤头")
MARKUP_SHARE = 0.30
MIN_INLINE_FORMULAS = 30
_MODES = (True, False, "auto")


def check_mode(name: str, value: object) -> bool | str:
    if value not in _MODES or (value != "auto" and not isinstance(value, bool)):
        raise ValueError(f"option {name}={value!r}: expected true, false or auto")
    return value  # type: ignore[return-value]


def materia_medica_reason(mode: bool | str, title: str, sections: Iterable[tuple[str, str]]) -> str | None:
    """Why the materia-medica extractor runs on this book ("option", "title", "markup"), or None."""
    if mode is True:
        return "option"
    if mode is False:
        return None
    if MATERIA_MEDICA_TITLE.search(title):
        return "title"
    from bencao.retrieval.ingest.materia_medica import parse_header, Entry

    texts = [t for _, t in sections if t.strip()]
    if not texts:
        return None
    opens = sum(1 for t in texts if parse_header(Entry("x"), t.split("\n", 1)[0])[1])
    return "markup" if opens >= MARKUP_SHARE * len(texts) and opens >= 10 else None


def formulas_reason(mode: bool | str, title: str, sections: Iterable[tuple[str, str]]) -> str | None:
    """Why the formula extractor runs on this book ("option", "title", "markup"), or None."""
    if mode is True:
        return "option"
    if mode is False:
        return None
    if FORMULA_TITLE.search(title):
        return "title"
    from bencao.retrieval.ingest.formulas import is_formula_name

    secs = list(sections)
    titled = [t for t, _ in secs]
    named = sum(1 for t in titled if is_formula_name(t))
    if titled and named >= MARKUP_SHARE * len(titled) and named >= 10:
        return "markup"
    heads = 0
    for _, text in secs:
        heads += sum(1 for n in re.findall(r"^【([^】]{1,12})】", text, re.M) if is_formula_name(n))
        heads += sum(1 for n in re.findall(r"(?:^|。)([\u4e00-\u9fff]{2,12}?)方(?:[∶:]|$)", text, re.M) if is_formula_name(n))
        heads += sum(1 for n in re.findall(r"([\u4e00-\u9fff]{2,12}?)主之。方[一二三四五六七八九十]+。", text) if is_formula_name(n))
    return "markup" if heads >= MIN_INLINE_FORMULAS else None
