"""Book loaders (books-txt, books-md, sections-jsonl) on the real bundled classics."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import pytest

from bencao.errors import BencaoError, InputError
from bencao.retrieval.graph.store import Graph
from bencao.io import read_text
from bencao.retrieval.ingest.books import clean_body, parse_classics_txt, split_volume
from bencao.retrieval.ingest.registry import ingest_file
from bencao.text import count_tokens, split_sentences

CLASSICS = Path(__file__).resolve().parents[1] / "data" / "sample" / "tcm_classics"
SHENNONG = CLASSICS / "txt" / "000-神农本草经.txt"
YINSHAN = CLASSICS / "txt" / "009-饮膳正要.txt"
SHILIAO = CLASSICS / "txt" / "004-食疗本草.txt"
SECTIONS = CLASSICS / "tcm_classics_sections.jsonl.gz"


@pytest.fixture(scope="module")
def shennong(tmp_path_factory):
    g = Graph.create(tmp_path_factory.mktemp("g"))
    doc, added, counts = ingest_file(g, "books-txt", SHENNONG)
    assert added
    yield g, doc, counts
    g.close()


def _by_path(g: Graph, doc: str) -> dict[tuple[str, ...], dict]:
    return {tuple(s["path"]): s for s in g.sections_of(doc)}


def _tree(g: Graph, doc: str) -> list[tuple[tuple[str, ...], int, tuple[str, ...]]]:
    """(path, level, snippet texts) per section, in order: the content of a build without its ids."""
    return [(tuple(s["path"]), s["level"], tuple(p["text"] for p in g.snippets_of_section(s["id"]))) for s in g.sections_of(doc)]


def test_books_txt_builds_the_real_tree_of_shennong(shennong):
    g, doc, counts = shennong
    d = g.get_document(doc)
    assert d["title"] == "神农本草经" and d["kind"] == "book" and d["format"] == "books-txt"
    assert d["meta"]["author"] == "孙星衍" and d["meta"]["dynasty"] == "清" and d["meta"]["year"] == "公元1644-1911年"
    secs = _by_path(g, doc)
    root = secs[("神农本草经",)]
    assert root["level"] == 0 and root["parent_id"] is None
    assert [c["title"] for c in g.child_sections(root["id"])] == ["邵序", "张序", "孙序", "卷一", "卷二", "卷三"]
    # 上经 is a section with its own text under 卷一 and the heading of the entries after it: one node
    shangjing = secs[("神农本草经", "卷一", "上经")]
    assert shangjing["level"] == 2 and sum(1 for s in secs.values() if s["title"] == "上经") == 1
    dansha = secs[("神农本草经", "卷一", "上经", "丹沙")]
    assert dansha["level"] == 3 and dansha["parent_id"] == shangjing["id"]
    assert ("神农本草经", "卷二", "中经") in secs and ("神农本草经", "卷三", "下经") in secs
    # 378 <篇名> sections + the book + three volumes
    assert counts["sections"] == 382
    first = g.snippets_of_section(dansha["id"])[0]["text"]
    # hard-wrapped lines joined without spaces; the 内容： marker gone
    assert first.startswith("味甘，微寒。主身体五脏百病") and "久服，通神明，不老" in first and " " not in first[:60]


def test_nested_volume_paths_and_header_meta_of_yinshan(tmp_path):
    g = Graph.create(tmp_path / "g")
    doc, _, _ = ingest_file(g, "books-txt", YINSHAN)
    secs = _by_path(g, doc)
    sour = secs[("饮膳正要", "卷第三", "果品", "酸枣")]
    assert sour["level"] == 3
    guopin = [s for p, s in secs.items() if p == ("饮膳正要", "卷第三", "果品")]
    assert len(guopin) == 1  # consecutive entries under one path share the heading node
    assert g.get_document(doc)["meta"]["dynasty"] == "元"
    text = "".join(p["text"] for p in g.snippets_of_section(sour["id"]))
    assert text == "味酸甘，平，无毒。主心腹寒热，邪结气聚，除烦。"


def test_sections_jsonl_makes_one_root_per_book_and_matches_the_txt_tree(tmp_path, shennong):
    g_txt, doc_txt, _ = shennong
    g = Graph.create(tmp_path / "g")
    doc, _, counts = ingest_file(g, "sections-jsonl", SECTIONS)
    secs = g.sections_of(doc)
    roots = [s["title"] for s in secs if s["level"] == 0]
    assert sorted(roots) == sorted(["神农本草经", "食疗本草", "饮膳正要", "食鉴本草", "黄帝内经素问", "伤寒论", "千金食治", "食疗方", "饮食须知"])
    meta = g.get_document(doc)["meta"]
    assert {b["title"]: b["sections"] for b in meta["books"]}["神农本草经"] == 378
    # same book, two formats: the same tree and the same snippets
    txt_tree = _tree(g_txt, doc_txt)
    jsonl_tree = [t for t in _tree(g, doc) if t[0][0] == "神农本草经"]
    assert jsonl_tree == txt_tree


def test_books_md_headings_nest_and_code_fences_stay_text(tmp_path, shennong):
    g_txt, doc_txt, _ = shennong
    # the real book, written as Markdown: # book, ## volume, ### chapter, #### entry
    lines = [f"# 神农本草经", ""]
    secs = g_txt.sections_of(doc_txt)
    for s in secs[1:]:
        lines += ["#" * (s["level"] + 1) + " " + s["title"], ""]
        lines += [p["text"] for p in g_txt.snippets_of_section(s["id"])] + [""]
    lines += ["```", "# 这不是标题", "```"]
    md = tmp_path / "shennong.md"
    md.write_text("\n".join(lines), encoding="utf-8")
    g = Graph.create(tmp_path / "g")
    doc, _, _ = ingest_file(g, "books-md", md)
    assert g.get_document(doc)["title"] == "神农本草经"
    got = _by_path(g, doc)
    assert set(got) == {tuple(s["path"]) for s in secs}
    assert got[("神农本草经", "卷一", "上经", "丹沙")]["level"] == 3
    last = g.sections_of(doc)[-1]
    assert "# 这不是标题" in "".join(p["text"] for p in g.snippets_of_section(last["id"]))


def test_snippets_keep_sentences_whole_and_respect_max_tokens(tmp_path):
    g = Graph.create(tmp_path / "g")
    doc, _, _ = ingest_file(g, "books-txt", SHENNONG, {"max_tokens": 60})
    book = parse_classics_txt(read_text(SHENNONG), SHENNONG)
    texts = iter([(("神农本草经", *s.volumes, s.title), s.text) for s in book.sections if s.text])
    n_sections = n_sentences = 0
    for s in g.sections_of(doc):
        snips = [p["text"] for p in g.snippets_of_section(s["id"])]
        if not snips:
            continue
        n_sections += 1
        path, text = next(texts)
        assert tuple(s["path"]) == path
        assert all(count_tokens(t) <= 60 for t in snips)
        assert re.sub(r"\s", "", "".join(snips)) == re.sub(r"\s", "", text)  # nothing lost, nothing added
        for sent in split_sentences(text):
            if count_tokens(sent) <= 60:
                n_sentences += 1
                assert any(sent in t for t in snips), sent  # a sentence that fits is never cut
    assert n_sections > 370 and n_sentences > 3000
    # the default budget makes fewer, longer snippets
    g2 = Graph.create(tmp_path / "g2")
    _, _, c300 = ingest_file(g2, "books-txt", SHENNONG)
    assert c300["snippets"] < g.counts()["snippets"]


def test_heading_only_sections_are_kept_without_snippets(shennong):
    g, doc, _ = shennong
    vol = _by_path(g, doc)[("神农本草经", "卷一")]
    assert g.snippets_of_section(vol["id"]) == [] and g.child_sections(vol["id"])


def test_building_twice_gives_identical_ids_and_counts(tmp_path):
    ids = []
    for name in ("a", "b"):
        g = Graph.create(tmp_path / name)
        doc, _, counts = ingest_file(g, "books-txt", SHILIAO, {"materia_medica": True})
        ids.append((doc, counts, [s["id"] for s in g.sections_of(doc)], [p["id"] for p in g.iter_snippets()],
                    sorted(t["id"] for t in g.iter_triples())))
        again = ingest_file(g, "books-txt", SHILIAO, {"materia_medica": True})
        assert again[1] is False and g.counts()["documents"] == 1
    assert ids[0] == ids[1]


def test_gb18030_input_gives_the_same_graph_as_utf8(tmp_path):
    gb = tmp_path / "食疗本草-gb.txt"
    gb.write_bytes(SHILIAO.read_text(encoding="utf-8").encode("gb18030"))
    trees, triples = [], []
    for name, path in (("u", SHILIAO), ("g", gb)):
        g = Graph.create(tmp_path / name)
        doc, _, _ = ingest_file(g, "books-txt", path, {"materia_medica": True})
        assert g.get_document(doc)["title"] == "食疗本草"
        trees.append(_tree(g, doc))
        triples.append(sorted((t["head"], t["relation"], t["tail"]) for t in g.iter_triples()))
    assert trees[0] == trees[1] and len(trees[0]) == 268
    assert triples[0] == triples[1] and triples[0]


def _graph_with_one_book(tmp_path) -> tuple[Graph, dict]:
    g = Graph.create(tmp_path / "g")
    ingest_file(g, "books-txt", SHILIAO)
    return g, g.counts()


def test_undecodable_bytes_name_file_and_line_and_leave_the_graph(tmp_path):
    g, before = _graph_with_one_book(tmp_path)
    bad = tmp_path / "broken.txt"
    bad.write_bytes("<篇名>坏书\n内容：味甘，平。\n".encode("utf-8") + b"\xff\xfe\xff bad\n")
    with pytest.raises(InputError) as exc:
        ingest_file(g, "books-txt", bad)
    assert "broken.txt" in str(exc.value) and "line 3" in str(exc.value)
    assert g.counts() == before


def test_malformed_jsonl_line_names_file_and_line(tmp_path):
    g, before = _graph_with_one_book(tmp_path)
    with gzip.open(SECTIONS, "rt", encoding="utf-8") as fh:
        good = [next(fh) for _ in range(3)]
    bad = tmp_path / "sections.jsonl"
    bad.write_text("".join(good) + '{"book": "神农本草经", "title": "破"\n', encoding="utf-8")
    with pytest.raises(InputError) as exc:
        ingest_file(g, "sections-jsonl", bad)
    assert str(exc.value).startswith(f"{bad}:line 4: malformed JSON")
    wrong = tmp_path / "wrong.jsonl"
    rec = json.loads(good[0])
    rec["path"] = "神农本草经/邵序"
    wrong.write_text(good[0] + json.dumps(rec, ensure_ascii=False) + "\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"wrong\.jsonl:line 2: 'path' must be"):
        ingest_file(g, "sections-jsonl", wrong)
    assert g.counts() == before


@pytest.mark.parametrize("fmt,suffix", [("books-txt", ".txt"), ("books-md", ".md"), ("sections-jsonl", ".jsonl")])
def test_empty_file_is_refused(tmp_path, fmt, suffix):
    g, before = _graph_with_one_book(tmp_path)
    empty = tmp_path / f"empty{suffix}"
    empty.write_text("\n\n", encoding="utf-8")
    with pytest.raises(InputError, match="empty document") as exc:
        ingest_file(g, fmt, empty)
    assert str(empty) in str(exc.value)
    assert g.counts() == before


def test_title_without_sections_is_empty(tmp_path):
    g, before = _graph_with_one_book(tmp_path)
    only_header = tmp_path / "header.txt"
    only_header.write_text("<篇名>空书\n书名：空书\n作者：某\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"header\.txt:line 1: empty document"):
        ingest_file(g, "books-txt", only_header)
    assert g.counts() == before


def test_a_9mb_line_names_its_line(tmp_path):
    g, before = _graph_with_one_book(tmp_path)
    big = tmp_path / "big.txt"
    big.write_text("<篇名>大书\n<篇名>一节\n内容：" + "甘" * (3 * 1024 * 1024) + "\n", encoding="utf-8")  # 9 MB of UTF-8
    with pytest.raises(InputError, match=r"big\.txt:line 3: line is at least 8,388,609 bytes, over the 8,388,608-byte limit"):
        ingest_file(g, "books-txt", big)
    assert g.counts() == before


def test_bad_options_are_refused(tmp_path):
    g = Graph.create(tmp_path / "g")
    with pytest.raises(BencaoError, match="max_tokens"):
        ingest_file(g, "books-txt", SHILIAO, {"max_tokens": "many"})
    with pytest.raises(BencaoError, match="materia_medica"):
        ingest_file(g, "books-txt", SHILIAO, {"materia_medica": "yes please"})
    with pytest.raises(BencaoError, match="no option"):
        ingest_file(g, "books-txt", SHILIAO, {"chunk": 3})
    with pytest.raises(BencaoError, match="families: unknown family dosage"):
        ingest_file(g, "books-txt", SHILIAO, {"materia_medica": True, "families": ["treats", "dosage"]})
    assert g.counts()["documents"] == 0


def test_cli_add_reports_a_bad_book_on_one_line(tmp_path, capsys):
    from bencao.cli import main

    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"book": "x", "title": "y", "text": 3}\n', encoding="utf-8")
    rc = main(["graph", "add", str(bad), "--graph", str(tmp_path / "g"), "--format", "sections-jsonl", "--create"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and err == f"error: {bad}:line 1: 'text' must be a string"
    rc = main(["graph", "add", str(SHILIAO), "--graph", str(tmp_path / "g"), "--format", "books-txt", "-O", "materia_medica=true"])
    assert rc == 0 and "added" in capsys.readouterr().out


def test_clean_body_and_split_volume():
    assert split_volume("卷一\\上经") == ["卷一", "上经"] and split_volume("卷上") == ["卷上"] and split_volume("") == []
    body = ["内容：味甘，微寒。主身体五脏百病，养精神，安魂魄，益气，明目，杀精魁邪恶鬼。久服， ",
            "通神明，不老。 ",
            "《名医》曰∶作末，名真朱。 ",
            "\\x光绪辛卯\\x "]
    assert clean_body(body) == "味甘，微寒。主身体五脏百病，养精神，安魂魄，益气，明目，杀精魁邪恶鬼。久服，通神明，不老。\n《名医》曰∶作末，名真朱。\n光绪辛卯"
    assert clean_body(["Wrapped English", "words here."]) == "Wrapped English words here."


# --------------------------------------------------------------------------- the corpus's file variants


def _book_meta(g: Graph, doc: str) -> dict:
    return g.get_document(doc)["meta"]["books"][0]


def test_gzip_gb18030_crlf_gives_the_same_book_as_utf8(tmp_path):
    """The corpus stores books as GB18030 + CRLF inside gzip; read streaming, they give the plain file's graph."""
    text = SHILIAO.read_text(encoding="utf-8")
    gz = tmp_path / "004-食疗本草.txt.gz"
    with gzip.open(gz, "wb") as fh:
        fh.write(text.replace("\n", "\r\n").encode("gb18030"))
    cr = tmp_path / "004-食疗本草-cr.txt"  # old Mac line ends and a stray CR before CRLF
    cr.write_bytes(text.replace("\n", "\r").replace("\r\r", "\r\r\n").encode("gb18030"))
    trees = []
    for name, path in (("u", SHILIAO), ("z", gz), ("c", cr)):
        g = Graph.create(tmp_path / name)
        doc, _, _ = ingest_file(g, "books-txt", path)
        trees.append(_tree(g, doc))
        acc = _book_meta(g, doc)["accounting"]
        assert acc["encoding"] == ("utf-8" if path == SHILIAO else "gb18030") and acc["undecodable_bytes"] == 0
    assert trees[0] == trees[1] == trees[2] and len(trees[0]) == 268


def test_corrupt_gzip_is_one_line_error(tmp_path):
    g, before = _graph_with_one_book(tmp_path)
    good = gzip.compress(SHILIAO.read_bytes())
    bad = tmp_path / "broken.txt.gz"
    bad.write_bytes(good[: len(good) // 2])
    with pytest.raises(InputError) as exc:
        ingest_file(g, "books-txt", bad)
    msg = str(exc.value)
    assert msg.startswith(str(bad)) and "truncated gzip data" in msg and "\n" not in msg
    assert g.counts() == before


def test_a_few_undecodable_bytes_are_replaced_and_counted(tmp_path):
    """One corpus file (婴童类萃) has two bytes no encoding reads: they become U+FFFD, counted, with their line."""
    lines = SHILIAO.read_text(encoding="utf-8").split("\n")
    # the corpus's own damage: a lead byte followed by an ASCII digit (壅\xb52不通)
    data = "\r\n".join(lines[:40]).encode("gb18030") + "\r\n壅".encode("gb18030") + b"\xb52" + "不通\r\n".encode("gb18030") \
        + "\r\n".join(lines[40:]).encode("gb18030")
    path = tmp_path / "damaged.txt"
    path.write_bytes(data)
    g = Graph.create(tmp_path / "g")
    doc, _, _ = ingest_file(g, "books-txt", path)
    acc = _book_meta(g, doc)["accounting"]
    assert acc["undecodable_bytes"] == 1 and acc["first_undecodable_line"] == 41
    assert any("壅\ufffd2不通" in p["text"] for p in g.iter_snippets(doc))


def test_book_without_markup_takes_its_title_from_the_file_and_finds_its_headings(tmp_path):
    book = tmp_path / "048-思考中医.txt"
    book.write_text("中医瑰宝苑\n\n作者：刘力红\n　 序\n作者是我众多学生中颇具特色的一位。\n\n"
                    "第一章 略说中医的学习与研究\n这一章讲学习。\n一、树立正确的认识\n对中医的信念和感情，自然造就了我的使命。\n"
                    "（1）中医目前的状况\n上述这样一个认识并不是偶然的。\n二、学问的传承\n传承很重要。\n第二章 伤寒之意义\n伤寒是什么？\n",
                    encoding="utf-8")
    g = Graph.create(tmp_path / "g")
    doc, _, _ = ingest_file(g, "books-txt", book)
    d = g.get_document(doc)
    assert d["title"] == "思考中医" and d["meta"]["author"] == "刘力红"
    paths = [tuple(s["path"]) for s in g.sections_of(doc)]
    assert paths == [("思考中医",), ("思考中医", "第一章 略说中医的学习与研究"), ("思考中医", "第一章 略说中医的学习与研究", "一、树立正确的认识"),
                     ("思考中医", "第一章 略说中医的学习与研究", "二、学问的传承"), ("思考中医", "第二章 伤寒之意义")]
    sec = {tuple(s["path"]): s for s in g.sections_of(doc)}
    first = "".join(p["text"] for p in g.snippets_of_section(sec[paths[2]]["id"]))
    assert "（1）中医目前的状况" in first and "偶然的" in first  # a lower heading stays in the text
    assert "中医瑰宝苑" in "".join(p["text"] for p in g.snippets_of_section(sec[paths[0]]["id"]))  # text before the first heading
    acc = _book_meta(g, doc)["accounting"]
    assert acc["markup"] == "plain" and acc["heading_chars"] == sum(len(t.replace(" ", "")) for p in paths[1:] for t in p[-1:])


def test_markup_variants_lose_no_text(tmp_path):
    """属性： labels on several lines, an empty <篇名>, \\x headings inside a body line, a <目录> with text and no <篇名>."""
    book = tmp_path / "方书.txt"
    book.write_text("<篇名>方书\n书名：方书\n作者：某\n\n<目录>卷一\n<篇名>\n\n内容：卷首的话。\n\n<目录>卷一\\风门\n<篇名>通治方\n"
                    "属性：\\x加味宣风散\\x \n治肾虚证，疹疮变黑。\n属性：槟榔（二个） 陈皮（去白）\n上为末。\n<目录>卷二\n卷二没有篇名的文字。\n",
                    encoding="utf-8")
    g = Graph.create(tmp_path / "g")
    doc, _, _ = ingest_file(g, "books-txt", book)
    secs = {tuple(s["path"]): "".join(p["text"] for p in g.snippets_of_section(s["id"])) for s in g.sections_of(doc)}
    assert secs[("方书", "卷一")] == "卷首的话。"  # the empty <篇名>'s text stays under its heading
    assert secs[("方书", "卷一", "风门", "通治方")] == "【加味宣风散】治肾虚证，疹疮变黑。槟榔（二个） 陈皮（去白）上为末。"
    assert secs[("方书", "卷二")] == "卷二没有篇名的文字。"
    acc = _book_meta(g, doc)["accounting"]
    assert acc["skipped"] == {"empty <篇名> line": 1, "header line (document meta)": 2}
    assert acc["added_chars"] == 2 and acc["inline_headings"] == 1
    assert acc["markup_chars"] == 4 * 6 + 3 * 3 + 4 + 6  # tags, labels, one \\x pair, header keys
    assert acc["snippet_chars"] == acc["body_chars"] + 2 and acc["chars"] == acc["markup_chars"] + acc["header_chars"] + acc["heading_chars"] + acc["body_chars"]


def test_text_that_misses_the_snippets_stops_the_ingest(tmp_path, monkeypatch):
    """The accounting check is real: a chunker that drops one sentence is caught, with the line it came from."""
    from bencao.retrieval.ingest import books

    real = books.chunk_text

    def lossy(text, max_tokens):
        return [c.replace("主心腹邪气", "") for c in real(text, max_tokens)]

    monkeypatch.setattr(books, "chunk_text", lossy)
    g = Graph.create(tmp_path / "g")
    with pytest.raises(BencaoError, match=r"000-神农本草经\.txt \(神农本草经\): the snippets hold .* first difference near line \d+: source '主心腹邪气"):
        ingest_file(g, "books-txt", SHENNONG)
    assert g.counts()["documents"] == 0


def test_every_snippet_of_a_huge_section_fits_max_tokens(tmp_path):
    book = tmp_path / "长.txt"
    body = "".join(f"第{i}句说的是很长的一件事情没有标点" + ("，" if i % 7 else "。") for i in range(3000))
    book.write_text("<篇名>长书\n<篇名>一节\n内容：" + body + "\n" + "无" * 5000 + "\n", encoding="utf-8")
    g = Graph.create(tmp_path / "g")
    doc, _, _ = ingest_file(g, "books-txt", book, {"max_tokens": 120})
    snips = list(g.iter_snippets(doc))
    assert len(snips) > 400 and max(count_tokens(p["text"]) for p in snips) <= 120
    acc = _book_meta(g, doc)["accounting"]
    assert acc["max_snippet_tokens"] <= 120 and acc["snippet_chars"] == acc["body_chars"] == len(body) + 5000
