"""configs/graph/classics.yaml on a two-book slice (CI's smoke test of the corpus recipe; never corpus files).

The slice is two short books of the bundled sample, stored the way the corpus stores them
(GB18030, CRLF, gzip) and as plain UTF-8 text, in a folder given as ``root=`` on the command line.
"""

from __future__ import annotations

import gzip
import json
import shutil

import pytest

from bencao.cli import main
from bencao.retrieval.build import load_build_config, resolve_sources
from bencao.retrieval.graph.store import Graph
from bencao.retrieval.ingest.precision import DEFAULT_FAMILIES, FAMILIES

BOOKS = ("000-神农本草经.txt", "457-伤寒论.txt")


@pytest.fixture(scope="module")
def slice_dir(tmp_path_factory, repo):
    d = tmp_path_factory.mktemp("corpus") / "tcm_ancient_books"
    d.mkdir()
    src = repo / "data" / "sample" / "tcm_classics" / "txt"
    with gzip.open(d / (BOOKS[0] + ".gz"), "wb") as fh:  # as the corpus ships it
        fh.write(src.joinpath(BOOKS[0]).read_text(encoding="utf-8").replace("\n", "\r\n").encode("gb18030"))
    shutil.copy(src / BOOKS[1], d / BOOKS[1])
    (d / "PROVENANCE.md").write_text("not a book\n", encoding="utf-8")
    return d


@pytest.fixture(scope="module")
def built(tmp_path_factory, slice_dir, repo):
    graph = tmp_path_factory.mktemp("out") / "classics"
    rc = main(["graph", "build", "--config", str(repo / "configs" / "graph" / "classics.yaml"), "--graph", str(graph),
               f"root={slice_dir}", "index=false"])
    assert rc == 0
    return graph


def test_recipe_builds_catalogue_books_and_recipes_from_the_root_folder(built):
    with Graph.open(built) as g:
        docs = g.documents()
    assert [(d["format"], d["title"]) for d in docs] == [("catalog-csv", "mfh_catalog_106"), ("books-txt", "神农本草经"),
                                                         ("books-txt", "伤寒论"), ("recipes-jsonl", "食疗方")]
    assert [d["source"] for d in docs[1:3]] == [BOOKS[0] + ".gz", BOOKS[1]]


def test_build_writes_the_per_book_report_and_its_summary(built):
    rows = [json.loads(line) for line in (built / "reports" / "books.jsonl").read_text(encoding="utf-8").splitlines()]
    assert [r["title"] for r in rows] == ["神农本草经", "伤寒论"]
    for r in rows:
        assert r["snippet_chars"] == r["body_chars"] + r["added_chars"] and r["body_chars"] > 10_000
        assert r["chars"] == r["markup_chars"] + r["header_chars"] + r["heading_chars"] + r["body_chars"]
        assert r["max_snippet_tokens"] <= 300 and r["undecodable_bytes"] == 0 and r["sections"] >= 10
        assert r["skipped"]["header line (document meta)"] == 4
    assert rows[0]["encoding"] == "gb18030" and rows[1]["encoding"] == "utf-8"
    summary = json.loads((built / "manifest.json").read_text(encoding="utf-8"))["books"]
    assert summary["books"] == 2 and summary["snippets"] == sum(r["snippets"] for r in rows)
    assert summary["body_chars"] == sum(r["body_chars"] for r in rows) and summary["report"] == "reports/books.jsonl"


def test_root_on_the_command_line_is_relative_to_the_current_directory(slice_dir, repo, monkeypatch):
    monkeypatch.chdir(slice_dir.parent)
    recipe = repo / "configs" / "graph" / "classics.yaml"
    cfg, root = load_build_config(recipe, ["root=tcm_ancient_books"])
    assert root == slice_dir.resolve()
    files = [(s.format, s.path.name) for s in resolve_sources(cfg, root)]
    assert files == [("catalog-csv", "mfh_catalog_106.csv"), ("books-txt", BOOKS[0] + ".gz"), ("books-txt", BOOKS[1]),
                     ("recipes-jsonl", "shiliaofang_recipes.jsonl")]
    # without root= the recipe reads the bundled sample books (relative to the recipe's folder)
    cfg, root = load_build_config(recipe)
    assert root == (repo / "data" / "sample" / "tcm_classics" / "txt").resolve()
    assert sum(1 for s in resolve_sources(cfg, root) if s.format == "books-txt") == 9


def test_a_missing_root_folder_is_a_one_line_error(tmp_path, repo, capsys):
    rc = main(["graph", "build", "--config", str(repo / "configs" / "graph" / "classics.yaml"), "--graph", str(tmp_path / "g"),
               f"root={tmp_path / 'nowhere'}"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and err.startswith("error: root=") and "no such folder" in err and "\n" not in err


def test_each_book_gets_the_extractor_its_title_or_markup_calls_for(built):
    rows = {json.loads(line)["title"]: json.loads(line) for line in (built / "reports" / "books.jsonl").read_text(encoding="utf-8").splitlines()}
    herbal, shanghan = rows["神农本草经"]["extractors"], rows["伤寒论"]["extractors"]
    assert herbal["chosen_by"] == {"materia_medica": "title"} and herbal["materia_medica"]["entries"] > 300
    assert shanghan["chosen_by"] == {"formulas": "markup"} and shanghan["formulas"]["has_ingredient"] > 300
    with Graph.open(built) as g:
        rels = g.stats()["by_relation"]
        assert rels["has_ingredient"] > 400 and rels["has_flavour"] > 50 and rels["treats"] > 300
        # 伤寒论's 桂枝汤, its herbs resolved to the catalogue's and 神农本草经's substances
        gz = g.find_entity_id("桂枝汤", "formula")
        assert {"芍药", "甘草", "大枣"} <= {t["tail"] for t in g.triples_of(gz, "out", "has_ingredient")}


def _extracted_families(graph) -> dict[str, int]:
    """Triples (and book aliases) the pattern extractors wrote, by precision family."""
    from bencao.retrieval.ingest import formulas as fx
    from bencao.retrieval.ingest import materia_medica as mm

    by_origin = {mm.ORIGIN: mm.FAMILIES, fx.ORIGIN: fx.FAMILIES}
    out: dict[str, int] = {}
    with Graph.open(graph) as g:
        for t in g.iter_triples():
            for origin in {s["origin"] for s in g.triple_sources_of(t["id"])} & set(by_origin):
                fam = by_origin[origin][t["relation"]]
                out[fam] = out.get(fam, 0) + 1
        n_alias = sum(1 for *_, kind in g.iter_aliases() if kind == "book_synonym")
    if n_alias:
        out["alias"] = n_alias
    return out


def test_the_recipe_writes_the_default_families_and_reports_them(built):
    assert set(_extracted_families(built)) == DEFAULT_FAMILIES - {"meridian"}  # 神农本草经 states no 归经
    for line in (built / "reports" / "books.jsonl").read_text(encoding="utf-8").splitlines():
        assert json.loads(line)["extractors"]["families"] == [f for f in FAMILIES if f in DEFAULT_FAMILIES]


def test_a_family_switched_off_writes_no_triples_of_it(built, tmp_path, slice_dir, repo):
    graph = tmp_path / "two_families"
    rc = main(["graph", "build", "--config", str(repo / "configs" / "graph" / "classics.yaml"), "--graph", str(graph),
               f"root={slice_dir}", "index=false", "options.books-txt.families=[flavour_nature,formula_composition]"])
    assert rc == 0
    every, two = _extracted_families(built), _extracted_families(graph)
    assert every["treats"] > 300 and every["formula_treats"] > 100 and every["alias"] > 50  # the slice has them all
    assert two == {"flavour_nature": every["flavour_nature"], "formula_composition": every["formula_composition"]}
    with Graph.open(graph) as g:  # the catalogue's and 食疗方's own triples stay
        assert g.stats()["by_relation"].get("treats", 0) > 0
    rows = [json.loads(line) for line in (graph / "reports" / "books.jsonl").read_text(encoding="utf-8").splitlines()]
    assert [r["extractors"]["families"] for r in rows] == [["flavour_nature", "formula_composition"]] * 2


def test_the_graph_records_its_serving_recipe_and_the_front_ends_use_it(built, capsys):
    """graph/classics records serving/classics; ask/serve/infer/eval on the graph take it without --config."""
    from bencao.serving.cli import load_config
    from bencao.serving.config import recorded_serving_recipe

    assert recorded_serving_recipe(built) == "serving/classics"
    cfg = load_config(None, [], graph=built)
    assert cfg.retrieval.layers.therapy is False  # serving/classics' retrieval (the default recipe has it on)
    assert "serving/classics" in capsys.readouterr().err
    assert load_config(None, [], graph=built.parent / "elsewhere").retrieval.layers.therapy is True  # no graph there: defaults
    rc = main(["ask", "--graph", str(built), "--json", "大枣的功效是什么？"])
    assert rc == 0
    out = capsys.readouterr()
    assert "serving recipe: serving/classics" in out.err
    assert json.loads(out.out)["evidence"]["snippets"]


def test_an_unknown_serving_recipe_is_refused_before_the_build(tmp_path, slice_dir, repo, capsys):
    graph = tmp_path / "g"
    rc = main(["graph", "build", "--config", str(repo / "configs" / "graph" / "classics.yaml"), "--graph", str(graph),
               f"root={slice_dir}", "index=false", "serving=serving/no-such-recipe"])
    assert rc != 0
    err = capsys.readouterr().err
    assert "serving/no-such-recipe" in err and "Traceback" not in err
    assert not (graph / "graph.sqlite").exists()
