"""bench/eval_llm.py end to end at a tiny scale: a tiny real Qwen2 as the reader (letter scores), the serving test
graph, the four conditions, resume, the table. No real model, no timing asserts."""

from __future__ import annotations

import importlib
import json
import re
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
    rows = {c: [json.loads(x) for x in (out_dir / f"{c}.jsonl").read_text(encoding="utf-8").splitlines()] for c in ev.DEFAULT_CONDITIONS}
    assert not (out_dir / "oracle.jsonl").exists()  # the upper bound is opt-in
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
    before = {c: (out_dir / f"{c}.jsonl").read_text(encoding="utf-8") for c in ev.DEFAULT_CONDITIONS}
    assert ev.main(args) == 0
    assert {c: (out_dir / f"{c}.jsonl").read_text(encoding="utf-8") for c in ev.DEFAULT_CONDITIONS} == before
    assert capsys.readouterr().out.endswith(table)
    # a second run (here the same model under another tag) compared with the first, with the decomposition check
    assert ev.main(args + ["--tag", "after", "--conditions", "closed", "--decompose", "1", "--decompose-tokens", "8",
                           "--compare-to", str(out_dir)]) == 0
    out = capsys.readouterr().out
    assert "| (a) closed book | mini | 2 |" in out and "+0.0 [+0.0, +0.0]" in out
    dec = [json.loads(x) for x in (out_dir / "after" / "decompose.jsonl").read_text(encoding="utf-8").splitlines()]
    assert [d["id"] for d in dec] == ["q0"] and "reply" in dec[0] and "Decomposition" in out
    comparison = json.loads((out_dir / "after" / "comparison.json").read_text(encoding="utf-8"))
    assert comparison["accuracy"][0]["condition"] == "closed" and comparison["accuracy"][0]["delta"] == [0.0, 0.0, 0.0]
    assert comparison["model"] == Path(model).name and str(tmp_path) not in json.dumps(comparison)


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


def test_decomposition_check_and_before_after_tables(tmp_path_factory, tmp_path):
    """The model's query triples are checked against the graph (head an entity, relation in the schema); a second run is
    compared with the first per record, accuracy and decomposition alike."""
    from bencao.retrieval.graph.store import Graph
    from llm_fixtures import ScriptedClient
    from serving_helpers import serving_graph

    ev = _load("eval_llm")
    g = Graph.open(serving_graph(tmp_path_factory), read_only=True)
    replies = {"q0": "（大枣，has_flavour，甘）\n（不存在之物，has_flavour，甘）\n（大枣，味道，甘）", "q1": "我不知道。"}
    client = ScriptedClient(lambda msgs: replies["q0" if "大枣" in msgs[-1]["content"] else "q1"])
    dec = ev.Decomposer(client, g)
    row = dec({"id": "q0", "question": "大枣的性味是什么？"})
    g.close()
    # asked exactly as the CoT model is asked in serving: the question alone
    from bencao.serving.cot import cot_messages

    assert client.calls[0] == cot_messages("大枣的性味是什么？")
    assert [(t["head_linked"], t["relation_in_schema"], t["valid"]) for t in row["triples"]] == [
        (True, True, True), (False, True, False), (True, False, False)]
    assert (row["n"], row["valid"], row["head_linked"], row["relation_in_schema"]) == (3, 1, 2, 2)
    # two runs over the same records: "before" valid 1 of 3 and nothing; "after" 2 of 2 and 1 of 1
    records = [("f", {"id": "q0"}), ("f", {"id": "q1"})]
    before, after = tmp_path / "before", tmp_path / "after"
    for d, rows, correct in ((before, [(3, 1), (0, 0)], [False, False]), (after, [(2, 2), (1, 1)], [True, False])):
        d.mkdir()
        (d / "decompose.jsonl").write_text("".join(json.dumps({"id": f"q{i}", "n": n, "valid": v, "head_linked": v, "relation_in_schema": n,
                                                               "triples": []}) + "\n" for i, (n, v) in enumerate(rows)), encoding="utf-8")
        (d / "closed.jsonl").write_text("".join(json.dumps({"id": f"q{i}", "correct": c, "pred": ["A"], "context_chars": 0}) + "\n"
                                                for i, c in enumerate(correct)), encoding="utf-8")
    text = ev.decompose_table(records, after, before)
    assert "| f | 2 | 1.50 | 100.0 [100.0, 100.0] |" in text  # 3 of 3 triples valid, 1.5 per question
    assert "| f | 2 | +83.3 " in text  # share per question: (1 − 1/3 + 1 − 0) / 2
    cmp = ev.compare_table(records, after, before, ["closed"])
    assert "| (a) closed book | f | 2 | 0.0 | 50.0 | +50.0 [+0.0, +100.0] |" in cmp
    pooled = [r for r in ev.decompose_rows(records, after, before) if r["file"] == "pooled"][0]
    assert pooled["delta_with_valid_triple"][0] == 0.5 and pooled["valid"][0] == 1.0


def test_oracle_condition_and_gold_coverage_split(tmp_path_factory, tmp_path, capsys):
    """The opt-in upper bound (BM25 given the gold option's text) and the gold_in flags: written as rows are scored,
    filled in by --coverage for rows scored without them (the same values), and the split table against closed book."""
    from llm_fixtures import save_tiny_model
    from serving_helpers import serving_graph

    graph = serving_graph(tmp_path_factory)
    model = save_tiny_model(tmp_path / "tiny")
    recs = [{"id": "q0", "task": "mcq", "question": "大枣的性味是什么？", "options": {"A": "甘温", "B": "苦寒", "C": "咸平"}, "answer": ["A"],
             "lang": "zh"},
            {"id": "q1", "task": "mcq", "question": "哪一味药主治心腹邪气？", "options": {"A": "咸平", "B": "苦寒", "C": "大枣"}, "answer": ["C"],
             "lang": "zh"}]
    bench = tmp_path / "mini.jsonl"
    bench.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in recs), encoding="utf-8")
    ev = _load("eval_llm")
    args = ["--graph", str(graph), "--bench", str(bench), "--model", model, "--dtype", "float32", "--budget-chars", "400",
            "--out", str(tmp_path / "out"), "--threads", "1", "--conditions", "closed,bm25,oracle"]
    assert ev.main(args) == 0
    out_dir = tmp_path / "out" / Path(model).name
    rows = {c: {r["id"]: r for r in map(json.loads, (out_dir / f"{c}.jsonl").read_text(encoding="utf-8").splitlines())}
            for c in ("closed", "bm25", "oracle")}
    assert all(r["gold_in"] is False and r["distractors_in"] == 0 for r in rows["closed"].values())
    assert rows["oracle"]["q1"]["gold_in"] is True  # the gold option's text is in the query, so in the passages found
    table = capsys.readouterr().out
    assert "(o) BM25 given the gold answer" in table and "oracle − closed" in table
    assert "| (o) BM25 given the gold answer | yes |" in table
    # rows scored before the flags existed: --coverage rebuilds their contexts and fills the same values in
    flags = {i: (r["gold_in"], r["distractors_in"]) for i, r in rows["bm25"].items()}
    stripped = [{k: v for k, v in r.items() if k not in ("gold_in", "distractors_in")} for r in rows["bm25"].values()]
    (out_dir / "bm25.jsonl").write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in stripped), encoding="utf-8")
    assert ev.main(args + ["--table-only", "--coverage"]) == 0
    assert ev.main([*args[:-1], "closed,oracle", "--tag", "alone"]) == 0  # the upper bound without (b) builds its own BM25
    again = {r["id"]: (r["gold_in"], r["distractors_in"]) for r in map(json.loads, (out_dir / "bm25.jsonl").read_text(encoding="utf-8").splitlines())}
    assert again == flags
    split = capsys.readouterr().out.split("| condition | context holds the gold option |")[1]
    assert sum(int(n) for n in re.findall(r"\| \(b\) plain BM25 passages \| (?:yes|no) \| (\d+) \|", split)) == 2
