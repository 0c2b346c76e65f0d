"""bench/eval_llm.py end to end at a tiny scale: a tiny real Qwen2 as the reader (letter scores), the serving test
graph, the four conditions, resume, the table. No real model, no timing asserts."""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "bench"


def _load(name: str):
    if str(BENCH) not in sys.path:
        sys.path.insert(0, str(BENCH))
    return importlib.import_module(name)


def test_four_conditions_same_budget_resume_and_table(tmp_path_factory, tmp_path, capsys):
    from llm_fixtures import save_tiny_model
    from serving_helpers import serving_graph

    graph = serving_graph(tmp_path_factory)
    model = save_tiny_model(tmp_path / "tiny")
    recs = [{"id": f"q{i}", "task": "mcq", "question": q, "options": {"A": "甘", "B": "苦", "C": "咸"}, "answer": ["A"], "lang": "zh"}
            for i, q in enumerate(["大枣的性味是什么？"])]
    recs.append({"id": "s0", "task": "sd", "question": "患者恶寒发热。", "options": {k: f"证{k}" for k in "ABCD"}, "answer": ["B", "C"],
                 "lang": "zh"})
    bench = tmp_path / "mini.jsonl"
    bench.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in recs), encoding="utf-8")
    ev = _load("eval_llm")
    args = ["--graph", str(graph), "--bench", str(bench), "--model", model, "--dtype", "float32", "--budget-chars", "300",
            "--out", str(tmp_path / "out"), "--threads", "1"]
    assert ev.main(args) == 0
    out_dir = tmp_path / "out" / Path(model).name
    rows = {c: [json.loads(x) for x in (out_dir / f"{c}.jsonl").read_text(encoding="utf-8").splitlines()] for c in ev.CONDITIONS}
    for c, rs in rows.items():
        assert [r["id"] for r in rs] == ["q0", "s0"]
        for r in rs:
            assert set(r["scores"]) >= {"A", "B", "C"} and r["pred"] == [max(r["scores"], key=r["scores"].get)]
            assert r["correct"] == (r["pred"][0] in r["gold"])
            assert r["context_chars"] <= 300 and (c != "closed" or r["context_chars"] == 0)
    assert rows["bencao"][0]["context_chars"] > 0 and rows["bm25"][0]["context_chars"] > 0
    table = capsys.readouterr().out
    table = table[table.index("| file |"):]  # (a library may log a line to stdout before it)
    assert "(c) bencao, question only" in table and "bencao − bm25" in table and "| pooled | 2 |" in table
    # a rerun scores nothing again (the files are unchanged) and prints the same table
    before = {c: (out_dir / f"{c}.jsonl").read_text(encoding="utf-8") for c in ev.CONDITIONS}
    assert ev.main(args) == 0
    assert {c: (out_dir / f"{c}.jsonl").read_text(encoding="utf-8") for c in ev.CONDITIONS} == before
    assert capsys.readouterr().out.endswith(table)


def test_the_served_context_is_what_retrieve_returns(tmp_path_factory):
    """The bencao condition reads /v1/retrieve's context; RenderedContext.from_text gives it back item by item."""
    from bencao.serving.context import RenderedContext
    from bencao.serving.pipeline import AnswerPipeline, PipelineConfig
    from serving_helpers import serving_graph

    pipe = AnswerPipeline(serving_graph(tmp_path_factory), PipelineConfig())
    ret = pipe.retrieve_dict("大枣的性味是什么？", budget_chars=500)
    ctx = RenderedContext.from_text(ret["context"], 500)
    assert ctx.text == ret["context"] and [it.n for it in ctx.items] == [c["n"] for c in ret["context_citations"]]
    assert len(ret["context"]) <= 500
