"""`make eval-corpus` on a two-book slice (CI's smoke test of the corpus run) and `graph build --skip-current`.

The slice is two books copied at test time into a temporary folder given as CORPUS: from the real
corpus (``../shared/data/corpus/tcm_ancient_books``, this project's machines; outside the product) when it is there, else
the same two books of the bundled sample. The make target runs exactly as a user runs it (the
classics recipe with every index, then the LLM-free evaluation) on three records written here.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bencao.cli import main
from bencao.retrieval.graph.store import Graph
from bencao.retrieval.graph.versions import current_version

BOOKS = ("000-神农本草经", "457-伤寒论")

MCQ = [
    {"id": "m1", "task": "mcq", "question": "《神农本草经》记载：味甘，微寒，主补五脏，安精神，定魂魄，止惊悸的药物是",
     "options": {"A": "人参", "B": "大黄", "C": "芍药", "D": "生姜"}, "answer": ["A"], "lang": "zh"},
    {"id": "m2", "task": "mcq", "question": "太阳中风，啬啬恶寒，淅淅恶风，翕翕发热，鼻鸣干呕者，主之以",
     "options": {"A": "桂枝汤", "B": "大承气汤", "C": "白虎汤", "D": "小柴胡汤"}, "answer": ["A"], "lang": "zh"},
]
SD = [
    {"id": "s1", "task": "sd", "question": "太阳病，发热，汗出，恶风，脉缓。其证候是",
     "options": {"A": "太阳中风证", "B": "阳明腑实证", "C": "少阳证", "D": "太阴病证", "E": "少阴寒化证", "F": "厥阴病证",
                 "G": "太阳伤寒证", "H": "阳明经证", "I": "蓄血证", "J": "结胸证"}, "answer": ["A"], "lang": "zh"},
]


def _slice(repo: Path, dest: Path) -> str:
    """Two books into ``dest``: the corpus's own .txt.gz files when the corpus is at hand, else the sample's."""
    dest.mkdir()
    corpus = (repo / ".." / "shared" / "data" / "corpus" / "tcm_ancient_books").resolve()
    if all((corpus / f"{b}.txt.gz").exists() for b in BOOKS):
        for b in BOOKS:
            shutil.copy(corpus / f"{b}.txt.gz", dest)
        return "corpus"
    for b in BOOKS:
        shutil.copy(repo / "data" / "sample" / "tcm_classics" / "txt" / f"{b}.txt", dest)
    return "sample"


def _make(repo: Path, *args: str) -> subprocess.CompletedProcess:
    bin_dir = Path(sys.executable).parent
    venv = Path(sys.prefix)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    # -o: the install stamp counts as made (this test runs inside an installed environment)
    return subprocess.run(["make", "--no-print-directory", "-o", f"{venv}/.installed-dev", f"VENV={venv}", f"BIN={bin_dir}",
                           "eval-corpus", *args], cwd=repo, capture_output=True, text=True, env=env, timeout=600)


@pytest.fixture(scope="module")
def corpus_run(tmp_path_factory, repo):
    if shutil.which("make") is None or not (Path(sys.executable).parent / "bencao").exists():
        pytest.skip("needs make and the bencao command of this environment")
    tmp = tmp_path_factory.mktemp("eval_corpus")
    source = _slice(repo, tmp / "books")
    benches = []
    for name, recs in (("slice_mcq", MCQ), ("slice_sd", SD)):
        p = tmp / f"{name}.jsonl"
        p.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in recs), encoding="utf-8")
        benches.append(str(p))
    args = (f"CORPUS={tmp / 'books'}", f"CORPUS_GRAPH={tmp / 'graph'}", f"CORPUS_OUT={tmp / 'out'}", f"CORPUS_BENCH={' '.join(benches)}")
    first = _make(repo, *args)
    assert first.returncode == 0, first.stderr[-3000:]
    version = current_version(tmp / "graph")
    second = _make(repo, *args)
    assert second.returncode == 0, second.stderr[-3000:]
    return {"tmp": tmp, "source": source, "first": first, "second": second, "version": version}


def test_eval_corpus_builds_the_slice_through_the_classics_recipe_with_its_indexes(corpus_run):
    graph = corpus_run["tmp"] / "graph"
    with Graph.open(graph, read_only=True) as g:
        titles = [d["title"] for d in g.documents()]
    assert titles == ["mfh_catalog_106", "神农本草经", "伤寒论", "食疗方"]
    m = json.loads((graph / "manifest.json").read_text(encoding="utf-8"))
    assert m["books"]["books"] == 2 and m["books"]["snippet_chars"] == m["books"]["body_chars"] + m["books"]["added_chars"]
    assert set(m["indexes"]["lexical"]) == {"entities", "triples", "snippets", "sections"}
    assert m["build"]["key"] and m["build"]["generation"] > 0


def test_eval_corpus_scores_the_three_records_and_writes_the_report(corpus_run):
    out = corpus_run["tmp"] / "out"
    metrics = json.loads((out / "metrics.json").read_text(encoding="utf-8"))
    assert {k: (v["task"], v["n"]) for k, v in metrics.items()} == {"slice_mcq": ("mcq", 2), "slice_sd": ("sd", 1)}
    preds = {p["key"]: p for p in map(json.loads, (out / "predictions.jsonl").read_text(encoding="utf-8").splitlines())}
    assert sorted(preds) == ["slice_mcq/m1", "slice_mcq/m2", "slice_sd/s1"]
    # 人参's entry of 神农本草经 is in the slice: the evidence must hold the gold option
    assert preds["slice_mcq/m1"]["evidence_contains_gold"] is True
    assert "slice_mcq" in (out / "report.md").read_text(encoding="utf-8")


def test_a_second_run_keeps_the_current_graph_and_resumes_the_evaluation(corpus_run):
    assert "is current" in corpus_run["second"].stdout
    assert current_version(corpus_run["tmp"] / "graph") == corpus_run["version"]
    lines = (corpus_run["tmp"] / "out" / "predictions.jsonl").read_text(encoding="utf-8").splitlines()
    assert len(lines) == 3


def test_a_missing_corpus_folder_is_a_one_line_error(repo, tmp_path):
    if shutil.which("make") is None:
        pytest.skip("needs make")
    r = _make(repo, f"CORPUS={tmp_path / 'absent'}", f"CORPUS_GRAPH={tmp_path / 'g'}")
    assert r.returncode != 0 and f"CORPUS={tmp_path / 'absent'}: no such folder" in r.stderr
    assert not (tmp_path / "g").exists()


# --- graph build --skip-current -----------------------------------------------------------------------

BOOK = "<篇名>人参\n内容：味甘，微寒。主补五脏，安精神。\n<篇名>大黄\n内容：味苦，寒。主下瘀血。\n"


@pytest.fixture
def small(tmp_path):
    (tmp_path / "books").mkdir()
    (tmp_path / "books" / "001-本草.txt").write_text(BOOK, encoding="utf-8")
    recipe = tmp_path / "r.yaml"
    recipe.write_text("name: small\nroot: books\nindex: false\nsources:\n  - {format: books-txt, path: '*.txt'}\n", encoding="utf-8")
    return tmp_path, ["graph", "build", "--config", str(recipe), "--graph", str(tmp_path / "g"), "--skip-current"]


def _store(graph: Path) -> str:
    with Graph.open(graph, read_only=True) as g:
        return g.store_id()


def test_skip_current_keeps_a_graph_built_from_the_same_inputs(small, capsys):
    tmp, cmd = small
    assert main(cmd) == 0
    sid = _store(tmp / "g")
    capsys.readouterr()
    assert main(cmd) == 0
    assert "is current" in capsys.readouterr().out and _store(tmp / "g") == sid
    assert main(cmd[:-1]) == 0  # without the flag: always a new build
    assert _store(tmp / "g") != sid


def test_skip_current_rebuilds_when_a_book_or_the_recipe_changed(small):
    tmp, cmd = small
    assert main(cmd) == 0
    sid = _store(tmp / "g")
    with open(tmp / "books" / "001-本草.txt", "a", encoding="utf-8") as fh:
        fh.write("<篇名>甘草\n内容：味甘，平。\n")
    assert main(cmd) == 0
    sid2 = _store(tmp / "g")
    assert sid2 != sid
    with Graph.open(tmp / "g", read_only=True) as g:
        assert "甘草" in {s["title"] for s in g.iter_sections()}
    assert main([*cmd, "name=other"]) == 0  # another recipe setting
    assert _store(tmp / "g") != sid2


def test_skip_current_rebuilds_a_graph_written_to_after_its_build(small):
    tmp, cmd = small
    assert main(cmd) == 0
    sid = _store(tmp / "g")
    extra = tmp / "extra.txt"
    extra.write_text("<篇名>生姜\n内容：味辛，微温。\n", encoding="utf-8")
    assert main(["graph", "add", "--graph", str(tmp / "g"), "--format", "books-txt", str(extra)]) == 0
    assert main(cmd) == 0
    with Graph.open(tmp / "g", read_only=True) as g:
        assert g.store_id() != sid and [d["source"] for d in g.documents()] == ["001-本草.txt"]
