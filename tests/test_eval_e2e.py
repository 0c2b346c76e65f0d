"""`bencao eval` end to end on a small graph built from the bundled sample data (lexical indexes only)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bencao.cli import main

OPTS = {"A": "味辛，温", "B": "味甘，微寒", "C": "味苦，寒", "D": "味咸，平"}
BENCHES = {
    "herb_mcq": [
        {"id": "m1", "task": "mcq", "question": "《神农本草经》记载人参的性味是", "options": OPTS, "answer": ["B"], "lang": "zh", "source": "shennong"},
        {"id": "m2", "task": "mcq", "question": "《神农本草经》记载甘草的性味是", "options": {**OPTS, "B": "味甘，平"}, "answer": ["B"], "lang": "zh", "source": "shennong"},
    ],
    "herb_tf": [
        {"id": "t1", "task": "tf", "statement": "人参味甘，微寒，主补五脏。", "answer": True, "lang": "zh"},
        {"id": "t2", "task": "tf", "statement": "丹沙味咸，大热，有大毒。", "answer": False, "lang": "zh"},
    ],
    "herb_rec": [
        {"id": "r1", "task": "rec", "query": "补五脏，安精神", "candidates": ["人参", "丹沙", "甘草"], "gold": ["人参"], "lang": "zh"},
    ],
    "food_el": [
        {"id": "e1", "task": "el", "mention": "almond", "gold_ids": ["FOODON:00003523"], "lang": "en"},
        {"id": "e2", "task": "el", "mention": "garlic", "gold_ids": ["FOODON:00003582", "FOODON:03305208"], "lang": "en"},
        {"id": "e3", "task": "el", "mention": "qwzx blorp", "gold_ids": ["FOODON:00002473"], "lang": "en"},
    ],
}


@pytest.fixture(scope="module")
def small_graph(tmp_path_factory, repo) -> Path:
    d = tmp_path_factory.mktemp("eval_graph")
    (d / "index.yaml").write_text("index:\n  dense_kinds: []\n", encoding="utf-8")
    (d / "recipe.yaml").write_text(f"""name: eval-small
root: {repo}
index: true
index_config: {d / 'index.yaml'}
sources:
  - {{format: catalog-csv, path: data/sample/mfh_catalog/mfh_catalog_106.csv}}
  - {{format: foodon-jsonl, path: data/sample/foodon/foodon_demo_subset.jsonl}}
  - {{format: books-txt, path: data/sample/tcm_classics/txt/000-神农本草经.txt, options: {{materia_medica: true}}}}
""", encoding="utf-8")
    assert main(["graph", "build", "--config", str(d / "recipe.yaml"), "--graph", str(d / "g")]) == 0
    return d / "g"


@pytest.fixture(scope="module")
def bench_files(tmp_path_factory) -> list[Path]:
    d = tmp_path_factory.mktemp("eval_benches")
    paths = []
    for name, recs in BENCHES.items():
        p = d / f"{name}.jsonl"
        p.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in recs), encoding="utf-8")
        paths.append(p)
    return paths


def _run(bench_files, graph, out, system, capsys):
    args = ["eval", "--graph", str(graph), "--system", system, "--out", str(out), "--no-progress", "--set", "n_resamples=200"]
    for p in bench_files:
        args += ["--bench", str(p)]
    code = main(args)
    assert code == 0, capsys.readouterr().err
    return json.loads((out / "metrics.json").read_text(encoding="utf-8"))


def test_retrieval_system_reports_evidence_and_links(small_graph, bench_files, tmp_path, capsys):
    out = tmp_path / "retrieval"
    m = _run(bench_files, small_graph, out, "retrieval", capsys)
    assert set(m) == set(BENCHES)
    retrieval = {f"{name}@{k}" for name in ("answer_recall", "distractor_rate", "margin") for k in (5, 10, 20)}
    assert set(m["herb_mcq"]) == {"task", "n", "evidence_contains_gold", "evidence_holds_gold_parts", "ci95", "context_precision",
                                  "context_recall", "context_entity_recall", "mrr", "passages@10", "passage_chars@10",
                                  *retrieval}  # evidence only (its coverage, context and question-only retrieval metrics), no answers
    # the question alone finds 人参's and 甘草's entries (their 性味 is the gold option), no distractor's text
    assert (m["herb_mcq"]["answer_recall@10"], m["herb_mcq"]["margin@10"]) == (1.0, 1.0)
    assert "tf" not in {p["task"] for p in map(json.loads, (out / "predictions.jsonl").read_text(encoding="utf-8").splitlines())
                        if "retrieval" in p}  # no answer text to find
    assert m["herb_mcq"]["evidence_holds_gold_parts"] >= m["herb_mcq"]["evidence_contains_gold"]
    preds = {json.loads(line)["key"]: json.loads(line) for line in (out / "predictions.jsonl").read_text(encoding="utf-8").splitlines()}
    assert len(preds) == 8
    ren = preds["herb_mcq/m1"]
    assert ren["evidence"]["snippet_ids"] and ren["evidence_contains_gold"] is True  # 人参's entry: 味甘，微寒
    # entity linking: exact labels and synonyms link, nonsense abstains
    el = m["food_el"]
    assert (el["acc_at_1"], el["abstain_rate"], el["acc_at_1_answered"]) == (pytest.approx(2 / 3), pytest.approx(1 / 3), 1.0)
    assert preds["food_el/e1"]["prediction"]["chosen_id"] == "FOODON:00003523"
    assert preds["food_el/e3"]["prediction"]["abstained"] is True
    assert (out / "metrics.png").exists() and "### Entity linking (el)" in (out / "report.md").read_text(encoding="utf-8")


def test_llm_free_system_answers_every_task(small_graph, bench_files, tmp_path, capsys):
    pytest.importorskip("bencao.serving.graph_answerer")
    out = tmp_path / "llm-free"
    m = _run(bench_files, small_graph, out, "llm-free", capsys)
    for name in ("herb_mcq", "herb_tf"):
        assert {"accuracy", "evidence_contains_gold", "abstain_rate"} <= set(m[name])
    assert {"hits_at_1", "precision", "recall", "f1"} <= set(m["herb_rec"])
    assert {"acc_at_1", "abstain_rate", "retry_rate"} <= set(m["food_el"])
    preds = [json.loads(line) for line in (out / "predictions.jsonl").read_text(encoding="utf-8").splitlines()]
    mcq = [p for p in preds if p["task"] == "mcq"]
    assert all(set(p["prediction"]["ranking"]) <= set("ABCD") for p in mcq)
    assert any(p["evidence"].get("snippet_ids") for p in mcq)
    # 人参's own entry in the graph names its nature and flavour: the graph-grounded answer finds it
    assert next(p for p in mcq if p["id"] == "m1")["prediction"]["answer"] == ["B"]


def test_llm_system_with_retrieval_puts_graph_evidence_in_the_prompt(small_graph, bench_files, tmp_path):
    from bencao.evaluation.bench_format import load_bench
    from bencao.evaluation.runner import evaluate, read_predictions
    from bencao.llm.local_server import create_app, serve_in_thread
    from bencao.serving.config import load_serve_config
    from tests.llm_fixtures import ScriptedClient

    client = ScriptedClient(lambda messages: "答案：B", model="scripted")
    bench = load_bench(bench_files[0])  # herb_mcq: gold B for both
    with serve_in_thread(create_app(client)) as base_url:
        cfg = load_serve_config(None, ["n_resamples=0", "answerer=generator", "generator.backend=openai", "generator.model=scripted",
                                       f"generator.base_url={base_url}", "generator.max_retries=0", "retrieval.index.dense_kinds=[]"])
        m = evaluate([bench], "llm", small_graph, tmp_path / "out", cfg, progress=False)
    assert m["herb_mcq"]["accuracy"] == 1.0 and m["herb_mcq"]["evidence_contains_gold"] == 1.0
    prompt = next(c[-1]["content"] for c in client.calls if "人参的性味" in c[-1]["content"])
    assert prompt.startswith("参考资料：") and "味甘，微寒" in prompt.split("问题：")[0]  # 人参's entry, before the question
    assert "[1] 神农本草经 › " in prompt  # numbered like every generator prompt
    pred = read_predictions(tmp_path / "out")["herb_mcq/m1"]
    assert pred["evidence"]["snippet_ids"] and pred["extra"]["reply"] == "答案：B"


def test_report_is_written_without_matplotlib(small_graph, bench_files, tmp_path, monkeypatch, capsys):
    """`make demo`'s install has no [eval] extra: eval still scores and writes its report, minus the plot."""
    import sys

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    out = tmp_path / "e"
    assert main(["eval", "--bench", str(bench_files[0]), "--graph", str(small_graph), "--out", str(out)]) == 0
    report = (out / "report.md").read_text(encoding="utf-8")
    assert "## Summary" in report and "No plot: it needs matplotlib" in report and not (out / "metrics.png").exists()
