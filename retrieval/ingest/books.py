"""Book loaders: the classics' ``<篇名>/<目录>`` markup, Markdown, and section records as JSONL.

All three give the same macro tree::

    book (level 0) → volume → chapter … (heading path) → section → snippets (~``max_tokens`` each)

Formats:

- ``books-txt``: ``<篇名>BOOK`` then ``书名：/作者：/朝代：/年份：`` header lines, ``<目录>卷一\\上经``
  heading paths (a backslash nests: volume\\chapter), ``<篇名>丹沙`` section titles, bodies that
  start with ``内容：`` (or ``属性：``) and continue on hard-wrapped lines. Plain or ``.gz``, UTF-8
  or GB18030, LF/CRLF/CR, read one line at a time (:mod:`.text_reader`: undecodable bytes become
  U+FFFD and are counted). The corpus's variants: a file without that markup (no ``<篇名>`` title
  line) is a book titled by its file name (``048-思考中医.txt`` → 思考中医) whose ``第…章``/``一、…``
  lines are its headings; an empty ``<篇名>`` leaves its text under the heading above; a ``<目录>``
  with text and no ``<篇名>`` is a section of that heading; every body line's ``内容：``/``属性：``
  label goes; a short ``\\x方名\\x`` inside a body line stays in the text as the subheading 【方名】.
  Every character is accounted for and the body text is checked to reach the snippets
  (:mod:`.book_report`); the figures land in the document meta (``books[0].accounting``).
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
from bencao.retrieval.ingest.book_kinds import check_mode, formulas_reason, materia_medica_reason
from bencao.retrieval.ingest.book_report import BookAccount, nonws
from bencao.retrieval.ingest.precision import DEFAULT_FAMILIES, FAMILIES, select_families
from bencao.retrieval.ingest.text_reader import TextLines
from bencao.retrieval.ingest.registry import _title_of, register
from bencao.text import chunk_text, count_tokens

BOOK_OPTIONS = ("max_tokens", "materia_medica", "formulas", "families", "encoding", "name_variants")


@dataclass
class BookOptions:
    max_tokens: int = field(300, help="Longest snippet in approximate tokens; sections are cut on sentence boundaries.")
    materia_medica: bool | str = field(False, help="Run the LLM-free materia-medica pattern extractor: true, false, or auto "
                                                    "(herbals and food-therapy books by title or markup, see book_kinds).")
    formulas: bool | str = field(False, help="Run the LLM-free formula extractor: true, false, or auto (formula books by title or markup).")
    families: frozenset[str] = field(DEFAULT_FAMILIES, help="Relation families the extractors write: default (those measured at or "
                                                             "above 90 %, see precision.MEASURED and docs/corpus.md), all, or a "
                                                             "list (flavour_nature, toxicity, meridian, treats, effect, alias, "
                                                             "formula_composition, formula_treats).")
    encoding: str | None = field(None, help="Text encoding of the file; detected (UTF-8 or GB18030) when empty.")
    name_variants: str = field("default", help="With the materia-medica extractor, other names as aliases of kind book_variant "
                                                "(docs/aliases.md): default = the editor's 旧作X notes and a title's modern name that "
                                                "names a curated substance (鸡头子（芡实）: the entry is 芡实); all = also 亦名/别名/"
                                                "俗名/俗呼 X and every title's modern name (judged 78 % right, below the bar); off.")


def parse_options(options: dict[str, Any]) -> BookOptions:
    opts = BookOptions()
    if "max_tokens" in options:
        mt = options["max_tokens"]
        if isinstance(mt, bool) or not isinstance(mt, int) or mt < 8:
            raise BencaoError(f"option max_tokens={mt!r}: expected an integer >= 8")
        opts.max_tokens = mt
    for key in ("materia_medica", "formulas"):
        if key in options:
            try:
                setattr(opts, key, check_mode(key, options[key]))
            except ValueError as exc:
                raise BencaoError(str(exc)) from None
    if "families" in options:
        opts.families = select_families(options["families"])
    if options.get("encoding"):
        opts.encoding = str(options["encoding"])
    if "name_variants" in options:
        v = options["name_variants"]
        v = {True: "default", False: "off"}.get(v, v) if isinstance(v, bool) else v
        if v not in ("off", "default", "all"):
            raise BencaoError(f"option name_variants={options['name_variants']!r}: expected default, all or off (true = default, false = off)")
        opts.name_variants = v
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
    account: BookAccount | None = None  # character accounting (books-txt), checked against the snippets


#: Deepest heading path below a book (volumes, chapters …): a ``<目录>`` or a sections-jsonl ``path`` of
#: 5,000 levels is a broken or hostile file (it made a 99 MB sections index), refused at this depth.
MAX_HEADING_DEPTH = 32


def check_depth(volumes: list[str], path: Path, where: str) -> list[str]:
    if len(volumes) > MAX_HEADING_DEPTH:
        raise InputError(path, f"heading path of {len(volumes):,} levels, deeper than the limit of {MAX_HEADING_DEPTH}", record=where)
    return volumes


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


def _xmark(line: str, is_last: bool, stats: Counter[str] | None = None) -> str:
    """``\\x…\\x`` (the source's emphasis) → a 【…】 subheading when short, plain text otherwise."""

    def repl(m: re.Match[str]) -> str:
        inner = m.group(1).strip()
        if inner.startswith("【") or is_last or len(inner) > 10 or re.search(r"[。，；：∶、]", inner):
            return inner
        if stats is not None:
            stats["added_chars"] += 2
            stats["inline_headings"] += 1
        return f"【{inner}】"

    return _XMARK.sub(repl, line)


def _join(a: str, b: str) -> str:
    """Join a hard-wrapped line: no space between CJK characters, one between Western words."""
    if a and b and a[-1].isascii() and a[-1].isalnum() and b[0].isascii() and b[0].isalnum():
        return a + " " + b
    return a + b


def clean_body(lines: Iterable[str], stats: Counter[str] | None = None) -> str:
    """Body lines of one section → paragraphs joined by newlines (wrapped lines rejoined).

    Strips the ``内容：``/``属性：`` field label that opens a line, trailing spaces and the ``\\x``
    emphasis marks. A line starts a new paragraph after a blank line, when it opens with a paragraph
    marker (``（二）``, ``《名医》曰∶``, ``案∶``, ``【…】``, ``名∶味``), or when the line before ends a
    sentence well short of the wrap width. ``stats`` counts the 【】 it adds (``added_chars``).
    """
    raw = [_BODY_PREFIX.sub("", ln.strip(), count=1) for ln in lines]
    while raw and not raw[-1]:
        raw.pop()
    while raw and not raw[0]:
        raw.pop(0)
    last_text = max((i for i, ln in enumerate(raw) if ln), default=-1)
    cleaned = [_xmark(ln, i == last_text and len(raw) > 1, stats).strip() if ln else "" for i, ln in enumerate(raw)]
    width = max((len(ln) for ln in cleaned), default=0)
    paras: list[str] = []
    cur = ""
    prev = ""
    first = next((i for i, ln in enumerate(cleaned) if ln), -1)
    for i, ln in enumerate(cleaned):
        if not ln:
            if cur:
                paras.append(cur)
            cur, prev = "", ""
            continue
        # a short first line (本草备要's 润肺，杀虫 over the entry) is a line of its own
        lead = i == first + 1 and len(prev) <= 16 and len(prev) < width // 2
        new_para = bool(cur) and (lead or _PARA_START.match(ln) is not None or (prev.endswith(_TERMINAL) and len(prev) < width - 3))
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
# Headings of a book without <篇名>/<目录> markup: 第一章… (level 1), 第一节…/一、… (level 2), on a short line
_PLAIN_CHAPTER = re.compile(r"^第[一二三四五六七八九十百零〇\d]+[章篇卷部讲回集辑]")
_PLAIN_SUB = re.compile(r"^(第[一二三四五六七八九十百零〇\d]+节|[一二三四五六七八九十]{1,3}[、．])[^。，；？！：:]*$")
_PLAIN_HEADER_LINES = 10  # header lines (作者：…) of a book without markup are read among its first lines only
UNTITLED = "（无题）"


def _plain_level(s: str) -> int:
    if len(s) <= 30 and _PLAIN_CHAPTER.match(s) and not re.search(r"[。；？！，]", s):
        return 1
    if len(s) <= 24 and _PLAIN_SUB.match(s):
        return 2
    return 0


def book_title_from_file(path: Path) -> str:
    """``048-思考中医.txt.gz`` → 思考中医 (the corpus numbers its files)."""
    return re.sub(r"^\d+[-.．_ ]+", "", _title_of(path)) or _title_of(path)


def parse_classics_txt(text: str | Iterable[tuple[int, str]], path: Path, default_title: str | None = None,
                       account: BookAccount | None = None) -> RawBook:
    """Parse the classics' markup into a :class:`RawBook` (raises InputError naming the line).

    ``text`` is the file's text or its ``(line_number, line)`` pairs (a :class:`TextLines`). A file
    whose first line is not ``<篇名>BOOK`` is a book without markup: its title is ``default_title``
    (the file name without its number), ``第…章``/``一、…`` lines are its headings, the rest is body.
    ``account`` receives the character accounting (see :mod:`.book_report`).
    """
    lines = enumerate(text.splitlines(), start=1) if isinstance(text, str) else text
    acc = account if account is not None else BookAccount()
    stats: Counter[str] = Counter()
    book: RawBook | None = None
    volumes: list[str] = []
    chapter: list[str] = []  # open level-1 heading of a book without markup
    cur: RawSection | None = None
    body: list[str] = []
    intro: list[str] = []
    seen = 0  # non-blank lines so far
    last_line = 0

    def flush() -> None:
        nonlocal body
        if cur is not None:
            cur.text = clean_body(body, stats)
            book.sections.append(cur)  # type: ignore[union-attr]
        body = []

    def body_line(i: int, ln: str, s: str) -> None:
        nonlocal cur
        if cur is None:
            if book.sections or volumes or chapter:  # type: ignore[union-attr]
                # text under a heading with no <篇名>: a section named after the heading
                cur = RawSection(volumes[:-1], volumes[-1], "", i) if volumes else RawSection([], chapter[0] if chapter else book.title, "", i)  # type: ignore[union-attr]
            else:
                intro.append(ln)
                _account_body(acc, s, i)
                return
        body.append(ln)
        _account_body(acc, s, i)

    for i, ln in lines:
        last_line = i
        s = ln.strip()
        core = acc.line(s)
        if not core:
            (body if cur is not None else intro if intro else []).append("")
            continue
        seen += 1
        if book is None:
            m = _MARK.match(s)
            if m and m.group(1) == "篇名" and m.group(2).strip():
                book = RawBook(title=m.group(2).strip())
                acc.markup_chars += 4
                acc.heading_chars += len(core) - 4
                continue
            book = RawBook(title=default_title or book_title_from_file(path))
            if not m:  # no markup at all (a <目录> first is markup without a title line)
                acc.markup = "plain"
        h = _HEADER.match(s)
        if h and cur is None and not book.sections and (acc.markup == "classics" or seen <= _PLAIN_HEADER_LINES):
            key_len = len(h.group(1)) + 1
            acc.markup_chars += key_len
            acc.header_chars += len(core) - key_len
            acc.skipped["header line (document meta)"] += 1
            val = h.group(2).strip()
            if val:
                key = _HEADER_KEYS[h.group(1)]
                if key != "title":
                    book.meta.setdefault(key, val)
                elif val != book.title:
                    book.meta.setdefault("book_title", val)
            continue
        m = _MARK.match(s)
        if m:
            flush()
            acc.markup_chars += 4
            acc.heading_chars += len(core) - 4
            title = m.group(2).strip()
            if m.group(1) == "目录":
                volumes = check_depth(split_volume(m.group(2)), path, f"line {i}")
                cur = None
                if not title:
                    acc.skipped["empty <目录> line"] += 1
            elif title:
                cur = RawSection(list(volumes), title, "", i)
            else:
                cur = None  # text after an empty <篇名> belongs to the heading above it
                acc.skipped["empty <篇名> line"] += 1
            continue
        elif acc.markup == "plain":
            level = _plain_level(s)
            if level:
                flush()
                acc.heading_chars += len(core)
                if level == 1:
                    chapter = [s]
                    cur = RawSection([], s, "", i)
                else:
                    cur = RawSection(list(chapter), s, "", i)
                continue
        body_line(i, ln, s)
    if book is None:
        raise InputError(path, "empty document: no text", record=f"line {last_line or 1}")
    flush()
    book.intro = clean_body(intro, stats)
    acc.added_chars += stats["added_chars"]
    acc.inline_headings += stats["inline_headings"]
    if not book.sections and not book.intro:
        raise InputError(path, "empty document: a title but no sections or text", record="line 1")
    return book


def _account_body(acc: BookAccount, s: str, lineno: int) -> None:
    """Body characters of one line: without the 内容：/属性： label and the paired \\x markers."""
    m = _BODY_PREFIX.match(s)
    if m:
        acc.markup_chars += m.end()
        s = s[m.end():].strip()
    n = len(_XMARK.findall(s))
    if n:
        acc.markup_chars += 4 * n
        s = _XMARK.sub(lambda x: x.group(1), s)
    acc.body(nonws(s), lineno)


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
        if len(mid) > MAX_HEADING_DEPTH:
            check_depth(mid, path, where)
        volumes = check_depth([part for v in mid for part in split_volume(v)], path, where)
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
    """Write one parsed book into the builder: level-0 node, heading nodes, sections, snippets, and
    (when chosen for this book) the pattern extractors' entities and triples."""
    root = b.section(book.title)
    texts: list[str] = []  # every snippet's text, for the accounting check
    intro = _add_snippet_list(b, root, book.intro, opts)
    texts += [t for _, t in intro]
    n_snip = len(intro)
    chain: list[tuple[str, str]] = []  # open heading nodes (title, id) below the book
    last: tuple[list[str], str, str] | None = None  # (parent titles, title, id) of the last section
    written: list[tuple[str, str, list[tuple[str, str]]]] = []  # (title, text, snippets) per section
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
        texts += [t for _, t in snips]
        written.append((sec.title, sec.text, snips))
    out: dict[str, Any] = {"sections": len(book.sections), "snippets": n_snip}
    if book.account is not None:
        book.account.verify(texts, f"{b.source} ({book.title})")
        book.account.release()
        out["accounting"] = book.account.to_dict()
        out["max_snippet_tokens"] = max((count_tokens(t) for t in texts), default=0)
    out.update(_extract(b, book.title, written, opts))
    return out


def _extract(b: DocumentBuilder, title: str, written: list[tuple[str, str, list[tuple[str, str]]]],
             opts: BookOptions) -> dict[str, Any]:
    """Run the extractors chosen for this book (materia medica first: its entries name substances)."""
    pairs = [(t, x) for t, x, _ in written]
    why_mm = materia_medica_reason(opts.materia_medica, title, pairs)
    why_f = formulas_reason(opts.formulas, title, pairs)
    out: dict[str, Any] = {}
    if why_mm is None and why_f is None:
        return out
    from bencao.retrieval.ingest import formulas as fx
    from bencao.retrieval.ingest import materia_medica as mm
    from bencao.retrieval.ingest.substances import SubstanceNames

    names = SubstanceNames(b.graph)
    out["extractors"] = {k: v for k, v in (("materia_medica", why_mm), ("formulas", why_f)) if v}
    if why_mm is not None:
        mm.declare_relations(b)
        out["materia_medica"] = dict(mm.extract_book(b, written, names, relations=_relations(mm.FAMILIES, opts),
                                                     variants=opts.name_variants))
    if why_f is not None:
        fx.declare_relations(b)
        out["formulas"] = dict(fx.extract_book(b, written, names, relations=_relations(fx.FAMILIES, opts)))
    return out


def _relations(families: dict[str, str], opts: BookOptions) -> list[str]:
    """The relations of an extractor (relation → family) whose family the book's ``families`` option selects."""
    rels = [r for r, fam in families.items() if fam in opts.families]
    if "alias" in opts.families:
        rels.append("aliases")
    return rels


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


def _finish(b: DocumentBuilder, path: Path, books: list[RawBook], opts: BookOptions) -> None:
    if not books or all(not bk.sections and not bk.intro for bk in books):
        raise InputError(path, "empty document: no sections or text")
    summaries = []
    totals: dict[str, Counter[str]] = {"materia_medica": Counter(), "formulas": Counter()}
    for bk in books:
        s = add_book(b, bk, opts)
        summary = {"title": bk.title, **bk.meta, "sections": s["sections"], "snippets": s["snippets"]}
        if "accounting" in s:
            summary["accounting"] = {**s["accounting"], "max_snippet_tokens": s["max_snippet_tokens"]}
        if s.get("extractors"):
            summary["extractors"] = {"chosen_by": s["extractors"], "families": [f for f in FAMILIES if f in opts.families],
                                     **{k: s[k] for k in totals if k in s}}
        summaries.append(summary)
        for k in totals:
            totals[k].update(s.get(k, {}))
    if not b.snippets and len(b.sections) == len(books):
        raise InputError(path, "empty document: no sections or text")
    if len(books) == 1:
        if b.title in (None, _title_of(path)):
            b.title = books[0].title
        for key in ("author", "dynasty", "year"):
            if key in books[0].meta:
                b.meta[key] = books[0].meta[key]
    b.meta["books"] = summaries
    if opts.materia_medica is not False:
        mm_total = totals["materia_medica"]
        b.meta["materia_medica"] = {"entries": mm_total.pop("entries", 0), "aliases": mm_total.pop("aliases", 0),
                                    "triples": dict(sorted(mm_total.items()))}
    if opts.formulas is not False:
        f_total = totals["formulas"]
        b.meta["formulas"] = {"formulas": f_total.pop("formulas", 0), "ingredients_unknown": f_total.pop("ingredients_unknown", 0),
                              "triples": dict(sorted(f_total.items()))}


@register("books-txt", kind="book", options=BOOK_OPTIONS,
          description="classics with <篇名>/<目录>/内容： markup (UTF-8 or GB18030, .gz ok); options max_tokens, materia_medica, formulas, families, encoding")
def load_books_txt(b: DocumentBuilder, path: Path, options: dict[str, Any]) -> None:
    opts = parse_options(options)
    lines = TextLines(path, opts.encoding)
    acc = BookAccount()
    book = parse_classics_txt(lines, path, account=acc)
    acc.encoding, acc.bytes = lines.encoding, lines.bytes_read
    acc.undecodable_bytes, acc.first_undecodable_line = lines.undecodable_bytes, lines.first_undecodable_line
    book.account = acc
    _finish(b, path, [book], opts)


@register("books-md", kind="book", options=BOOK_OPTIONS,
          description="Markdown: # headings nest into sections, text under them becomes snippets; options max_tokens, materia_medica, formulas, families, encoding")
def load_books_md(b: DocumentBuilder, path: Path, options: dict[str, Any]) -> None:
    opts = parse_options(options)
    book = parse_markdown(read_text(path, opts.encoding), path, _title_of(path))
    _finish(b, path, [book], opts)


@register("sections-jsonl", kind="book", options=("max_tokens", "materia_medica", "formulas", "families", "name_variants"),
          description="section records {book, path: [book, volume, title], title, text} (.gz ok), several books per file; options max_tokens, materia_medica, formulas, families")
def load_sections_jsonl(b: DocumentBuilder, path: Path, options: dict[str, Any]) -> None:
    opts = parse_options(options)
    _finish(b, path, parse_sections_jsonl(path), opts)
