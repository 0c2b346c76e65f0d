"""`bencao graph build/add/remove/stats` as a user runs them (in-process through the real CLI)."""

from __future__ import annotations

import json

import pytest

from bencao.cli import main

SUBSET = "data/sample/foodon/foodon_demo_subset.jsonl"


def _recipe(tmp_path, repo, extra_sources=""):
    p = tmp_path / "recipe.yaml"
    p.write_text(
        f"name: tiny\nroot: {repo}\nindex: false\nsources:\n  - format: foodon-jsonl\n    path: {SUBSET}\n    licence: CC BY 4.0\n" + extra_sources,
        encoding="utf-8",
    )
    return p


def _stats(capsys, graph):
    capsys.readouterr()
    assert main(["graph", "stats", "--graph", str(graph), "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_build_stats_add_remove_roundtrip(tmp_path, repo, capsys):
    graph = tmp_path / "g"
    assert main(["graph", "build", "--config", str(_recipe(tmp_path, repo)), "--graph", str(graph)]) == 0
    s = _stats(capsys, graph)
    assert set(s) >= {"documents", "sections", "snippets", "entities", "triples", "by_layer", "by_entity_type", "by_relation"}
    assert s["documents"] == 1 and s["entities"] == 757 and s["by_relation"]["is_a"] > 0 and s["by_layer"] == {"imported": s["triples"]}

    extra = tmp_path / "extra.jsonl"
    extra.write_text(json.dumps({"id": "X:1", "label": "红枣", "synonyms": ["大棗"], "parents": ["FOODON:03316347"]}, ensure_ascii=False) + "\n", encoding="utf-8")
    assert main(["graph", "add", "--graph", str(graph), "--format", "foodon-jsonl", str(extra)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("added D")
    doc_id = out.split()[1]
    s2 = _stats(capsys, graph)
    assert s2["entities"] == 758
    assert main(["graph", "add", "--graph", str(graph), "--format", "foodon-jsonl", str(extra)]) == 0
    assert capsys.readouterr().out.startswith("unchanged")

    assert main(["graph", "remove", "--graph", str(graph), doc_id]) == 0
    s3 = _stats(capsys, graph)
    assert {k: s3[k] for k in ("documents", "entities", "triples")} == {k: s[k] for k in ("documents", "entities", "triples")}
    manifest = json.loads((graph / "manifest.json").read_text())
    assert [h["op"] for h in manifest["history"]][-3:] == ["build", "add", "remove"]
    assert manifest["counts"]["entities"] == 757


def test_failed_build_leaves_previous_graph(tmp_path, repo, capsys):
    graph = tmp_path / "g"
    assert main(["graph", "build", "--config", str(_recipe(tmp_path, repo)), "--graph", str(graph)]) == 0
    before = _stats(capsys, graph)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "X:1", "label": "ok"}\n{"id": oops}\n', encoding="utf-8")
    recipe = _recipe(tmp_path, repo, f"  - format: foodon-jsonl\n    path: {bad}\n")
    assert main(["graph", "build", "--config", str(recipe), "--graph", str(graph)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()  # progress lines (stderr is not a terminal), then the error
    errors = [line for line in lines if line.startswith("error: ")]
    assert errors == lines[-1:] and "bad.jsonl:line 2: malformed JSON" in errors[0]
    assert _stats(capsys, graph) == before
    assert not list(tmp_path.glob(".g.building-*"))


@pytest.mark.parametrize(
    "argv, message",
    [
        (["graph", "stats", "--graph", "{tmp}/missing"], "no graph here"),
        (["graph", "remove", "--graph", "{graph}", "Dunknown"], "no document 'Dunknown'"),
        (["graph", "add", "--graph", "{graph}", "--format", "nope", "{tmp}/x.jsonl"], "unknown format 'nope'"),
        (["graph", "add", "--graph", "{graph}", "--format", "foodon-jsonl", "{tmp}/absent.jsonl"], "absent.jsonl: file not found"),
        (["graph", "build", "--config", "{tmp}/none.yaml", "--graph", "{graph}"], "none.yaml: config file not found"),
    ],
)
def test_user_mistakes_get_one_line_errors(tmp_path, repo, capsys, argv, message):
    graph = tmp_path / "g"
    assert main(["graph", "build", "--config", str(_recipe(tmp_path, repo)), "--graph", str(graph)]) == 0
    (tmp_path / "x.jsonl").write_text('{"id": "X:1", "label": "a"}\n')
    capsys.readouterr()
    argv = [a.format(tmp=tmp_path, graph=graph) for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and message in err and len(err.splitlines()) == 1


def test_recipe_with_unknown_key_is_refused(tmp_path, repo, capsys):
    p = tmp_path / "r.yaml"
    p.write_text(f"root: {repo}\nsources: []\nindx: false\n")
    assert main(["graph", "build", "--config", str(p), "--graph", str(tmp_path / "g")]) == 2
    assert "unknown key(s) indx" in capsys.readouterr().err


def test_every_command_has_help(capsys):
    for argv in (["--help"], ["graph", "--help"], ["graph", "build", "--help"], ["graph", "add", "--help"], ["graph", "remove", "--help"], ["graph", "stats", "--help"]):
        assert main(argv) == 0
        assert "Usage" in capsys.readouterr().out
