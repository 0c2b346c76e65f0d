"""The leakage guard: `data cot --exclude` never distils evaluation questions, the manifest records what was
distilled, and `eval` flags or refuses the items whose reasoning is in the graph."""

from __future__ import annotations

import json
import shutil

import pytest

from bencao.data_gen.cot import CotDistillConfig, run_cot
from bencao.data_gen.leakage import distilled_questions, question_key, read_exclusions
from bencao.errors import BencaoError, InputError
from bencao.evaluation.bench_format import load_bench
from bencao.evaluation.runner import evaluate, read_predictions
from bencao.evaluation.systems import RandomSystem
from bencao.retrieval.graph.store import Graph
from bencao.serving.config import load_serve_config
from tests.data_gen_helpers import QUESTIONS, build_graph, write_questions
from tests.llm_fixtures import ScriptedClient
from tests.test_data_gen_cot import _teacher_script


@pytest.fixture(scope="module")
def graph_dir(tmp_path_factory):
    return build_graph(tmp_path_factory.mktemp("g") / "graph")


def _lines(path):
    return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]


def test_question_key_ignores_form_but_not_content():
    opts = {"A": "半夏", "B": "人参"}
    base = question_key("下列哪味药主治头眩胸胀？", opts)
    # traditional characters, full-width/ASCII punctuation and spaces, option order and letter case: same question
    assert question_key("下列哪味藥主治頭眩胸脹?", {"b": "人參", "a": "半夏"}) == base
    assert question_key(" 下列哪味药 主治头眩胸胀 ", opts) == base
    # other options or another stem: another question
    assert question_key("下列哪味药主治头眩胸胀？", {"A": "半夏", "B": "黄连"}) != base
    assert question_key("下列哪味药主治头痛？", opts) != base
    assert question_key("Which of the following is correct?", {"A": "x"}) != question_key("Which of the following is correct?", {"A": "y"})


def test_exclusions_match_by_id_and_by_question_text(tmp_path):
    f = tmp_path / "ex.jsonl"
    f.write_text(json.dumps({"id": "bench-7"}) + "\n" + json.dumps({"question": "主治泄利寒熱的是哪一種?"}, ensure_ascii=False) + "\n",
                 encoding="utf-8")
    ex = read_exclusions([f])
    assert ex.match("bench-7", "anything") == ["id"]
    # a bare question line excludes that stem whatever the options
    assert ex.match("other", "主治泄利寒热的是哪一种？", {"A": "殷孽", "B": "远志"}) == ["question"]
    assert ex.match("other", "主治头痛的是哪一种？") == []
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "x"}\n{"answer": "A"}\n', encoding="utf-8")
    with pytest.raises(InputError, match=r"bad.jsonl:line 2: an exclude line needs an 'id' or a 'question'"):
        read_exclusions([bad])


def _distil(graph_dir, tmp_path, exclude=()):
    """The LLM teacher (scripted) over three zh questions; returns (graph copy, summary, the client)."""
    g2 = tmp_path / "graph"
    shutil.copytree(graph_dir, g2)
    qs = [QUESTIONS[0], dict(QUESTIONS[0], id="q-zh-1b", question="哪味药主治头眩胸胀？"), dict(QUESTIONS[0], id="q-zh-1c", question="半夏主治什么？")]
    q = write_questions(tmp_path / "q.jsonl", qs)
    client = ScriptedClient(_teacher_script)
    cfg = CotDistillConfig(graph=str(g2), input=str(q), output=str(tmp_path / "out"), teacher="llm", languages=["zh"], progress=False,
                           exclude=[str(p) for p in exclude])
    return g2, run_cot(cfg, client=client), client


def test_cot_exclude_never_asks_the_teacher_about_excluded_questions(graph_dir, tmp_path):
    bench = write_questions(tmp_path / "bench.jsonl", [dict(QUESTIONS[0], id="q-zh-1")])  # the benchmark record itself
    lines = tmp_path / "lines.jsonl"
    lines.write_text(json.dumps({"question": "哪味藥主治頭眩胸脹"}, ensure_ascii=False) + "\n", encoding="utf-8")  # traditional, no punctuation
    g2, summary, client = _distil(graph_dir, tmp_path, exclude=[bench, lines])
    assert summary["excluded"]["questions"] == 2 and set(summary["excluded"]["ids"]) == {"q-zh-1", "q-zh-1b"}
    assert summary["total"] == 1 and summary["done"] == 1
    asked = " ".join(m["content"] for call in client.calls for m in call)
    assert "半夏主治什么" in asked and "哪味药主治头眩胸胀" not in asked
    rows = _lines(tmp_path / "out" / "train.jsonl") + _lines(tmp_path / "out" / "eval.jsonl")
    assert {r["question_id"] for r in rows} == {"q-zh-1c"}
    # the manifest records exactly the distilled question, by id and by text
    rec = json.loads((g2 / "manifest.json").read_text(encoding="utf-8"))["distilled"]
    assert rec["ids"] == ["q-zh-1c"] and rec["question_keys"] == [question_key("半夏主治什么？", QUESTIONS[0]["options"])]
    assert summary["distilled"] == 1


def test_eval_flags_and_refuses_items_whose_reasoning_is_in_the_graph(graph_dir, tmp_path):
    g2, summary, _ = _distil(graph_dir, tmp_path)
    assert summary["distilled"] == 3
    # a benchmark: one record by the distilled id, one by the same text under another id, one clean
    recs = [dict(QUESTIONS[0], id="q-zh-1"), dict(QUESTIONS[0], id="other-id", question="半夏主治什麼?"),
            dict(QUESTIONS[1], id="clean")]
    bench = load_bench(write_questions(tmp_path / "dev_mcq.jsonl", recs))
    assert set(distilled_questions(g2).ids) == {"q-zh-1", "q-zh-1b", "q-zh-1c"}
    cfg = load_serve_config(None, ["n_resamples=0"])
    out = tmp_path / "eval"
    metrics = evaluate([bench], "random", g2, out, cfg, progress=False, system=RandomSystem(None, cfg, None))
    preds = read_predictions(out)
    assert preds["dev_mcq/q-zh-1"]["leaked"] is True and preds["dev_mcq/q-zh-1"]["leak_match"] == ["id", "question"]
    assert preds["dev_mcq/other-id"]["leak_match"] == ["question"]
    assert "leaked" not in preds["dev_mcq/clean"]
    assert metrics["dev_mcq"]["leaked"] == 2 and metrics["dev_mcq"]["n"] == 3
    assert "**Leaked records**: dev_mcq: 2 of 3" in (out / "report.md").read_text(encoding="utf-8")
    refuse = load_serve_config(None, ["n_resamples=0", "eval.on_leak=refuse"])
    with pytest.raises(BencaoError, match=r"2 record\(s\) to evaluate were distilled into this graph"):
        evaluate([bench], "random", g2, tmp_path / "eval2", refuse, progress=False, system=RandomSystem(None, refuse, None))
    assert not (tmp_path / "eval2" / "predictions.jsonl").exists()
    # a graph without reasoning documents flags nothing
    m2 = evaluate([bench], "random", graph_dir, tmp_path / "eval3", refuse, progress=False, system=RandomSystem(None, refuse, None))
    assert "leaked" not in m2["dev_mcq"]
    # removing the reasoning of a question and recording again un-flags it
    g = Graph.open(g2)
    doc = next(d for d in g.documents() if d["kind"] == "reasoning" and d["meta"]["question_id"] == "q-zh-1")
    g.remove_document(doc["id"])
    from bencao.data_gen.leakage import record_distilled

    assert record_distilled(g)["ids"] == ["q-zh-1b", "q-zh-1c"]
    g.close()


def test_cli_exclude_is_repeatable_and_counts_in_the_summary(graph_dir, tmp_path, capsys):
    from bencao.cli import main

    q = write_questions(tmp_path / "q.jsonl")
    ex1 = write_questions(tmp_path / "ex1.jsonl", [QUESTIONS[0]])
    ex2 = tmp_path / "ex2.jsonl"
    ex2.write_text(json.dumps({"id": "q-en-1"}) + "\n", encoding="utf-8")
    assert main(["data", "cot", "--graph", str(graph_dir), "--input", str(q), "--output", str(tmp_path / "out"),
                 "--exclude", str(ex1), "--exclude", str(ex2), "progress=false"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["excluded"]["questions"] == 2 and summary["total"] == len(QUESTIONS) - 2
    rows = _lines(tmp_path / "out" / "train.jsonl") + _lines(tmp_path / "out" / "eval.jsonl")
    assert not {"q-zh-1", "q-en-1"} & {r["question_id"] for r in rows}
    assert main(["data", "cot", "--graph", str(graph_dir), "--input", str(q), "--output", str(tmp_path / "o2"),
                 "--exclude", str(tmp_path / "missing.jsonl")]) == 2
    assert "missing.jsonl: exclude file not found" in capsys.readouterr().err


def test_cot_half_distils_one_half_and_no_duplicate_of_the_other(graph_dir, tmp_path):
    """`data cot --half a`: the teacher never sees a half-b question, nor a half-a record that repeats one."""
    from bencao.cli import main
    from bencao.data_gen.leakage import half_of

    assert [half_of(i) for i in ("q0", "q1", "q4", "q6")] == ["a", "b", "a", "a"]
    qs = [dict(QUESTIONS[0], id="q0"), dict(QUESTIONS[0], id="q1", question="哪味药主治头眩胸胀？"),
          dict(QUESTIONS[0], id="q4", question="哪味藥主治頭眩胸脹"), dict(QUESTIONS[0], id="q6", question="半夏主治什么？")]
    q = write_questions(tmp_path / "q.jsonl", qs)
    g2 = tmp_path / "graph"
    shutil.copytree(graph_dir, g2)
    client = ScriptedClient(_teacher_script)
    cfg = CotDistillConfig(graph=str(g2), input=str(q), output=str(tmp_path / "out"), teacher="llm", languages=["zh"], progress=False,
                           half="a")
    summary = run_cot(cfg, client=client)
    # q1 is half b; q4 is half a but the same question as q1 (traditional characters, no punctuation)
    assert set(summary["excluded"]["ids"]) == {"q1", "q4"} and summary["excluded"]["half_kept"] == "a"
    asked = " ".join(m["content"] for call in client.calls for m in call)
    assert "题目：哪味" not in asked and "题目：下列哪味药主治头眩胸胀" in asked and "题目：半夏主治什么" in asked
    rows = _lines(tmp_path / "out" / "train.jsonl") + _lines(tmp_path / "out" / "eval.jsonl")
    assert {r["question_id"] for r in rows} <= {"q0", "q6"} and rows
    assert main(["data", "cot", "--graph", str(g2), "--input", str(q), "--output", str(tmp_path / "o2"), "--half", "c"]) == 2
