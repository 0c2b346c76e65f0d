"""Book loaders: the classics' ``<篇名>/<目录>`` markup, Markdown, and section records as JSONL.

All three give the same macro tree::

    book (level 0) → volume → chapter … (heading path) → section → snippets (~``max_tokens`` each)

Formats:

- ``books-txt``: ``<篇名>BOOK`` then ``书名：/作者：/朝代：/年份：`` header lines, ``<目录>卷一\\上经``
  heading paths (a backslash nests: volume\\chapter), ``<篇名>丹沙`` section titles, bodies that
  start with ``内容：`` (or ``属性：``) and continue on hard-wrapped lines. UTF-8 or GB18030.
- ``books-md``: ``#``/``##``/… headings nest by depth; text under a heading becomes its snippets.
  A single top-level ``#`` heading that opens the file is the book title.
- ``sections-jsonl``: ``{book, path: [book, volume, title], title, text, author?, dynasty?, year?}``
  records (``.gz`` accepted); one file may hold several books, each its own level-0 section.

A heading that names the section just before it (``<篇名>上经`` under ``卷一``, then
``<目录>卷一\\上经``) is that same node, so 丹沙's path is ``[神农本草经, 卷一, 上经, 丹沙]``.
Empty sections (a heading only) are kept without snippets. With ``materia_medica: true`` each
section also goes through :mod:`bencao.retrieval.ingest.materia_medica`.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field as dc_field
from pathlib import Path
from typing import Any, Iterable

from bencao.config import field
from bencao.errors import BencaoError, InputError
from bencao.io import iter_jsonl, read_text
from bencao.retrieval.graph.store import DocumentBuilder
from bencao.retrieval.ingest.registry import _title_of, register
from bencao.text import chunk_text, count_tokens

BOOK_OPTIONS = ("max_tokens", "materia_medica", "encoding")


@dataclass
class BookOptions:
    max_tokens: int = field(300, help="Longest snippet in approximate tokens; sections are cut on sentence boundaries.")
    materia_medica: bool = field(False, help="Run the LLM-free materia-medica pattern extractor on every section.")
    encoding: str | None = field(None, help="Text encoding of the file; detected (UTF-8 or GB18030) when empty.")


def parse_options(options: dict[str, Any]) -> BookOptions:
    opts = BookOptions()
    if "max_tokens" in options:
        mt = options["max_tokens"]
        if isinstance(mt, bool) or not isinstance(mt, int) or mt < 8:
            raise BencaoError(f"option max_tokens={mt!r}: expected an integer >= 8")
        opts.max_tokens = mt
    if "materia_medica" in options:
        mm = options["materia_medica"]
        if not isinstance(mm, bool):
            raise BencaoError(f"option materia_medica={mm!r}: expected true or false")
        opts.materia_medica = mm
    if options.get("encoding"):
        opts.encoding = str(options["encoding"])
    return opts


# --------------------------------------------------------------------------- parsed form


@dataclass
class RawSection:
    volumes: list[str]  # heading path between the book and this section
    title: str
    text: str  # cleaned body; '' for a heading only
    line: int  # where it starts in the input (for messages)


@dataclass
class RawBook:
    title: str
    meta: dict[str, str] = dc_field(default_factory=dict)
    intro: str = ""  # text before the first section
    sections: list[RawSection] = dc_field(default_factory=list)


def split_volume(volume: str) -> list[str]:
    """``卷一\\上经`` → ``[卷一, 上经]`` (the classics nest volume and chapter with a backslash)."""
    return [p.strip() for p in volume.replace("/", "\\").split("\\") if p.strip()] if "\\" in volume else ([volume.strip()] if volume.strip() else [])


# --------------------------------------------------------------------------- body text

_BODY_PREFIX = re.compile(r"^(内容|属性)[：:]")
_XMARK = re.compile(r"\\x(.*?)\\x")
_TERMINAL = ("。", "！", "？", "）", "」", "”", "〕", "】", "；")
# Lines that open a new paragraph whatever the line before looks like.
_PARA_START = re.compile(
    r"^(（[一二三四五六七八九十]+）|《[^》]{1,12}》曰|案[∶:]|按[∶:]|〔[^〕]{1,6}〕\S|【|\d+[．.]|[\u4e00-\u9fff]{1,8}[∶:]味)"
)


def _xmark(line: str, is_last: bool) -> str:
    """``\\x…\\x`` (the source's emphasis) → a 【…】 subheading when short, plain text otherwise."""

    def repl(m: re.Match[str]) -> str:
        inner = m.group(1).strip()
        if inner.startswith("【") or is_last or len(inner) > 10 or re.search(r"[。，；：∶、]", inner):
            return inner
        return f"【{inner}】"

    return _XMARK.sub(repl, line)


def _join(a: str, b: str) -> str:
    """Join a hard-wrapped line: no space between CJK characters, one between Western words."""
    if a and b and a[-1].isascii() and a[-1].isalnum() and b[0].isascii() and b[0].isalnum():
        return a + " " + b
    return a + b


def clean_body(lines: Iterable[str]) -> str:
    """Body lines of one section → paragraphs joined by newlines (wrapped lines rejoined).

    Strips the ``内容：``/``属性：`` marker, trailing spaces and the ``\\x`` emphasis marks. A line
    starts a new paragraph after a blank line, when it opens with a paragraph marker (``（二）``,
    ``《名医》曰∶``, ``案∶``, ``【…】``, ``名∶味``), or when the line before ends a sentence well
    short of the wrap width.
    """
    raw = [ln.rstrip() for ln in lines]
    while raw and not raw[-1].strip():
        raw.pop()
    while raw and not raw[0].strip():
        raw.pop(0)
    if raw:
        raw[0] = _BODY_PREFIX.sub("", raw[0].lstrip(), count=1)
    last_text = max((i for i, ln in enumerate(raw) if ln.strip()), default=-1)
    cleaned = [_xmark(ln, i == last_text and len(raw) > 1).strip() if ln.strip() else "" for i, ln in enumerate(raw)]
    width = max((len(ln) for ln in cleaned), default=0)
    paras: list[str] = []
    cur = ""
    prev = ""
    for ln in cleaned:
        if not ln:
            if cur:
                paras.append(cur)
            cur, prev = "", ""
            continue
        new_para = bool(cur) and (_PARA_START.match(ln) is not None or (prev.endswith(_TERMINAL) and len(prev) < width - 3))
        if new_para:
            paras.append(cur)
            cur = ln
        else:
            cur = _join(cur, ln)
        prev = ln
    if cur:
        paras.append(cur)
    return "\n".join(p for p in paras if p.strip())


# --------------------------------------------------------------------------- books-txt

_MARK = re.compile(r"^<(篇名|目录)>(.*)$")
_HEADER_KEYS = {"书名": "title", "作者": "author", "朝代": "dynasty", "年份": "year"}
_HEADER = re.compile(r"^(书名|作者|朝代|年份)[：:](.*)$")


def parse_classics_txt(text: str, path: Path) -> RawBook:
    """Parse the classics' markup into a :class:`RawBook` (raises InputError naming the line)."""
    lines = text.splitlines()
    first = next((i for i, ln in enumerate(lines) if ln.strip()), None)
    if first is None:
        raise InputError(path, "empty document: no text", record=f"line {len(lines) or 1}")
    m = _MARK.match(lines[first].strip())
    if not m or m.group(1) != "篇名" or not m.group(2).strip():
        raise InputError(path, "expected the book title as '<篇名>BOOK' (books-txt markup); for plain Markdown use books-md",
                         record=f"line {first + 1}")
    book = RawBook(title=m.group(2).strip())
    volumes: list[str] = []
    cur: RawSection | None = None
    body: list[str] = []
    intro: list[str] = []

    def flush() -> None:
        nonlocal body
        if cur is not None:
            cur.text = clean_body(body)
            book.sections.append(cur)
        body = []

    for i in range(first + 1, len(lines)):
        ln = lines[i]
        s = ln.strip()
        m = _MARK.match(s)
        if m:
            flush()
            if m.group(1) == "目录":
                volumes = split_volume(m.group(2))
                cur = None
            else:
                title = m.group(2).strip()
                if not title:
                    raise InputError(path, "empty section title '<篇名>'", record=f"line {i + 1}")
                cur = RawSection(list(volumes), title, "", i + 1)
            continue
        if cur is None:
            h = _HEADER.match(s)
            if h and not book.sections:
                val = h.group(2).strip()
                if val:
                    key = _HEADER_KEYS[h.group(1)]
                    if key != "title":
                        book.meta[key] = val
                    elif val != book.title:
                        book.meta["book_title"] = val
                continue
            if not s:
                continue
            if book.sections or volumes:
                # text under a <目录> heading with no <篇名>: a section named after the heading
                cur = RawSection(volumes[:-1], volumes[-1], "", i + 1) if volumes else RawSection([], book.title, "", i + 1)
                body.append(ln)
            else:
                intro.append(ln)
            continue
        body.append(ln)
    flush()
    book.intro = clean_body(intro)
    if not book.sections and not book.intro:
        raise InputError(path, "empty document: a title but no sections or text", record=f"line {first + 1}")
    return book


# --------------------------------------------------------------------------- books-md


def parse_markdown(text: str, path: Path, default_title: str) -> RawBook:
    """Markdown headings → nested sections. Uses markdown-it so headings inside code fences stay text."""
    from markdown_it import MarkdownIt

    lines = text.splitlines()
    tokens = MarkdownIt("commonmark").parse(text)
    heads: list[tuple[int, int, int, str]] = []  # (level, first line, end line, title)
    for k, tok in enumerate(tokens):
        if tok.type == "heading_open" and tok.map:
            inline = tokens[k + 1]
            heads.append((int(tok.tag[1:]), tok.map[0], tok.map[1], inline.content.strip()))
    if not heads and not text.strip():
        raise InputError(path, "empty document: no text", record=f"line {len(lines) or 1}")
    book_title = default_title
    intro_from = 0
    top = [h for h in heads if h[0] == 1]
    if len(top) == 1 and heads[0][0] == 1 and not "".join(lines[: heads[0][1]]).strip():
        book_title, intro_from = heads[0][3] or default_title, heads[0][2]
        heads = heads[1:]
    book = RawBook(title=book_title)
    book.intro = clean_body(lines[intro_from : heads[0][1] if heads else len(lines)])
    stack: list[tuple[int, str]] = []  # (level, title) of the open ancestors
    for j, (level, start, end, title) in enumerate(heads):
        if not title:
            raise InputError(path, "empty heading", record=f"line {start + 1}")
        while stack and stack[-1][0] >= level:
            stack.pop()
        stop = heads[j + 1][1] if j + 1 < len(heads) else len(lines)
        book.sections.append(RawSection([t for _, t in stack], title, clean_body(lines[end:stop]), start + 1))
        stack.append((level, title))
    if not book.sections and not book.intro:
        raise InputError(path, "empty document: no headings and no text", record="line 1")
    return book


# --------------------------------------------------------------------------- sections-jsonl


def parse_sections_jsonl(path: Path) -> list[RawBook]:
    books: dict[str, RawBook] = {}
    for lineno, rec in iter_jsonl(path, required=("book",)):
        where = f"line {lineno}"
        book_name = rec["book"]
        if not isinstance(book_name, str):
            raise InputError(path, "'book' must be a string", record=where)
        p = rec.get("path")
        if p is not None and (not isinstance(p, list) or not all(isinstance(x, str) for x in p) or not p):
            raise InputError(path, "'path' must be a non-empty list of strings [book, volume..., title]", record=where)
        title = rec.get("title") or (p[-1] if p else None)
        if not isinstance(title, str) or not title.strip():
            raise InputError(path, "missing 'title' (and no 'path' to take it from)", record=where)
        text = rec.get("text") or ""
        if not isinstance(text, str):
            raise InputError(path, "'text' must be a string", record=where)
        if p is not None:
            mid = p[1:-1] if len(p) >= 2 and p[-1] == title else p[1:]
        else:
            vol = rec.get("volume")
            if vol is not None and not isinstance(vol, str):
                raise InputError(path, "'volume' must be a string", record=where)
            mid = [vol] if vol else []
        volumes = [part for v in mid for part in split_volume(v)]
        book = books.get(book_name)
        if book is None:
            book = books[book_name] = RawBook(title=book_name)
            for key in ("author", "dynasty", "year"):
                if isinstance(rec.get(key), str) and rec[key].strip():
                    book.meta[key] = rec[key].strip()
        book.sections.append(RawSection(volumes, title.strip(), clean_body(text.split("\n")), lineno))
    return list(books.values())


# --------------------------------------------------------------------------- tree building


def add_book(b: DocumentBuilder, book: RawBook, opts: BookOptions) -> dict[str, Any]:
    """Write one parsed book into the builder: level-0 node, heading nodes, sections, snippets."""
    root = b.section(book.title)
    n_snip = _add_snippets(b, root, book.intro, opts)
    chain: list[tuple[str, str]] = []  # open heading nodes (title, id) below the book
    last: tuple[list[str], str, str] | None = None  # (parent titles, title, id) of the last section
    stats: Counter[str] = Counter()
    mm = None
    if opts.materia_medica:
        from bencao.retrieval.ingest import materia_medica as mm

        mm.declare_relations(b)
    for sec in book.sections:
        k = 0
        while k < len(chain) and k < len(sec.volumes) and chain[k][0] == sec.volumes[k]:
            k += 1
        chain = chain[:k]
        for t in sec.volumes[k:]:
            titles = [c[0] for c in chain]
            if last is not None and last[0] == titles and last[1] == t:
                chain.append((t, last[2]))
            else:
                chain.append((t, b.section(t, parent=chain[-1][1] if chain else root)))
            last = None
        sid = b.section(sec.title, parent=chain[-1][1] if chain else root)
        last = ([c[0] for c in chain], sec.title, sid)
        snips = _add_snippet_list(b, sid, sec.text, opts)
        n_snip += len(snips)
        if mm is not None and snips:
            for entry in mm.extract_section(b, sec.title, sec.text, snips, book=book.title):
                stats["entries"] += 1
                for rel, n in entry.items():
                    stats[rel] += n
    return {"sections": len(book.sections), "snippets": n_snip, **({"materia_medica": dict(stats)} if opts.materia_medica else {})}


def _add_snippet_list(b: DocumentBuilder, section_id: str, text: str, opts: BookOptions) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    if not text.strip():
        return out
    for chunk in chunk_text(text, opts.max_tokens):
        for piece in _fit(chunk, opts.max_tokens):
            out.append((b.snippet(section_id, piece, count_tokens(piece)), piece))
    return out


def _fit(chunk: str, max_tokens: int) -> list[str]:
    """Cut a chunk that still exceeds the budget (an overlong sentence cut by estimate) to fit exactly."""
    if count_tokens(chunk) <= max_tokens:
        return [chunk]
    out: list[str] = []
    while chunk:
        lo, hi = 1, len(chunk)
        while lo < hi:  # longest prefix within the budget
            mid = (lo + hi + 1) // 2
            if count_tokens(chunk[:mid]) <= max_tokens:
                lo = mid
            else:
                hi = mid - 1
        out.append(chunk[:lo])
        chunk = chunk[lo:]
    return out


def _add_snippets(b: DocumentBuilder, section_id: str, text: str, opts: BookOptions) -> int:
    return len(_add_snippet_list(b, section_id, text, opts))


def _finish(b: DocumentBuilder, path: Path, books: list[RawBook], opts: BookOptions) -> None:
    if not books or all(not bk.sections and not bk.intro for bk in books):
        raise InputError(path, "empty document: no sections or text")
    summaries = []
    mm_total: Counter[str] = Counter()
    for bk in books:
        s = add_book(b, bk, opts)
        summaries.append({"title": bk.title, **bk.meta, "sections": s["sections"], "snippets": s["snippets"]})
        mm_total.update(s.get("materia_medica", {}))
    if not b.snippets and len(b.sections) == len(books):
        raise InputError(path, "empty document: no sections or text")
    if len(books) == 1:
        if b.title in (None, _title_of(path)):
            b.title = books[0].title
        for key in ("author", "dynasty", "year"):
            if key in books[0].meta:
                b.meta[key] = books[0].meta[key]
    b.meta["books"] = summaries
    if opts.materia_medica:
        b.meta["materia_medica"] = {"entries": mm_total.pop("entries", 0), "triples": dict(sorted(mm_total.items()))}


@register("books-txt", kind="book", options=BOOK_OPTIONS,
          description="classics with <篇名>/<目录>/内容： markup (UTF-8 or GB18030); options max_tokens, materia_medica, encoding")
def load_books_txt(b: DocumentBuilder, path: Path, options: dict[str, Any]) -> None:
    opts = parse_options(options)
    book = parse_classics_txt(read_text(path, opts.encoding), path)
    _finish(b, path, [book], opts)


@register("books-md", kind="book", options=BOOK_OPTIONS,
          description="Markdown: # headings nest into sections, text under them becomes snippets; options max_tokens, materia_medica, encoding")
def load_books_md(b: DocumentBuilder, path: Path, options: dict[str, Any]) -> None:
    opts = parse_options(options)
    book = parse_markdown(read_text(path, opts.encoding), path, _title_of(path))
    _finish(b, path, [book], opts)


@register("sections-jsonl", kind="book", options=("max_tokens", "materia_medica"),
          description="section records {book, path: [book, volume, title], title, text} (.gz ok), several books per file; options max_tokens, materia_medica")
def load_sections_jsonl(b: DocumentBuilder, path: Path, options: dict[str, Any]) -> None:
    opts = parse_options(options)
    _finish(b, path, parse_sections_jsonl(path), opts)
