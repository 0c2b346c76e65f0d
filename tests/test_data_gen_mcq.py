"""`bencao data mcq`: graph facts and benchmark questions as multiple-choice items in the prompt the letter scorer
reads, with true answers, distractors that are not true of the asked entity, one half of the benchmark only."""

from __future__ import annotations

import json
import re
import random

import pytest

from bencao.data_gen.leakage import half_of
from bencao.data_gen.mcq import McqConfig, graph_items, run_mcq
from bencao.retrieval.graph.store import Graph
from tests.data_gen_helpers import build_graph


@pytest.fixture(scope="module")
def graph_dir(tmp_path_factory):
    return build_graph(tmp_path_factory.mktemp("g") / "graph")


def _lines(path):
    return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]


def _scored_prompt(question, options, task="mcq", context=None):
    """What bench/eval_llm.py and the serving pipeline send when they score option letters."""
    from bencao.serving.answer import AnswerConfig, build_messages
    from bencao.serving.context import RenderedContext
    from bencao.serving.tasks import Query

    ctx = RenderedContext.from_text(context) if context else None
    return _blank(build_messages(Query(question=question, task=task, options=options), None, AnswerConfig(), context=ctx, scoring=True))


def _blank(msgs):
    """The turns with each fence's per-prompt nonce blanked (every rendered prompt draws its own)."""
    from bencao.prompting import without_nonces

    return [{**m, "content": without_nonces(m["content"])} for m in msgs]


def test_graph_questions_have_a_true_answer_and_no_true_distractor(graph_dir):
    g = Graph.open(graph_dir, read_only=True)
    try:
        cfg = McqConfig(graph=str(graph_dir), relations=["has_effect", "treats", "has_flavour"], reverse_relations=["treats"],
                        per_relation=15, n_options=[4, 5])
        items = list(graph_items(g, cfg, random.Random(0)))
        assert {i["source"] for i in items} >= {"graph:has_effect:forward", "graph:treats:forward", "graph:treats:reverse",
                                                "graph:has_flavour:forward"}
        for it in items:
            t = it["triple"]
            forward = it["source"].endswith("forward")
            asked, right = (t["head_id"], t["tail_id"]) if forward else (t["tail_id"], t["head_id"])
            assert it["options"][it["answer"]] == g.get_entity(right)["name"]
            assert len(it["options"]) == len(it["distractors"]) + 1 and len(set(it["options"].values())) == len(it["options"])
            true_ids = {x["tail_id"] if forward else x["head_id"]
                        for x in g.triples_of(asked, "out" if forward else "in", relation=t["relation"])}
            for d in it["distractors"]:
                assert d not in true_ids, f"{it['options']}: a distractor is true of the asked entity"
                assert g.get_entity(d)["type"] == g.get_entity(right)["type"]
        # answer letters cycle evenly per option count
        for n in (4, 5):
            letters = [it["answer"] for it in items if len(it["options"]) == n]
            counts = [letters.count(c) for c in "ABCDE"[:n]]
            assert max(counts) - min(counts) <= 1, counts
    finally:
        g.close()


def test_records_are_the_scored_prompt_and_the_benchmark_half_is_kept(graph_dir, tmp_path):
    ids = [f"q{i}" for i in range(12)]
    a_ids = [i for i in ids if half_of(i) == "a"]
    b_ids = [i for i in ids if half_of(i) == "b"]
    opts = {"A": "半夏", "B": "人参", "C": "黄连", "D": "麝香"}
    recs = [{"id": i, "task": "mcq", "question": f"第{i}题：下列哪味药主治头眩？", "options": opts, "answer": ["A"]} for i in ids]
    recs[ids.index(a_ids[0])]["question"] = recs[ids.index(b_ids[0])]["question"]  # a half-a duplicate of a held-out question
    recs[ids.index(a_ids[1])]["answer"] = ["A", "C"]  # two gold letters: not one letter to learn
    recs.append({"id": "sd-1", "task": "sd", "question": "患者恶寒发热，无汗。", "options": {"A": "风寒", "B": "风热"}, "answer": ["A"]})
    bench = tmp_path / "dev.jsonl"
    bench.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in recs), encoding="utf-8")
    out = tmp_path / "mcq"
    summary = run_mcq(McqConfig(graph=str(graph_dir), output=str(out), relations=["has_effect"], reverse_relations=[], per_relation=8,
                                context_ratio=0.5, input=[str(bench)], half="a", eval_ratio=0.1))
    rows = _lines(out / "train.jsonl") + _lines(out / "eval.jsonl")
    bench_ids = {r["id"].removeprefix("bench-") for r in rows if r["form"] == "bench"}
    kept_a = set(a_ids[2:]) | ({"sd-1"} if half_of("sd-1") == "a" else set())
    assert bench_ids == kept_a
    assert summary["input"]["other_half"] == len(b_ids) + (half_of("sd-1") == "b")
    assert summary["input"]["excluded"] == 1 and summary["input"]["not_one_gold_letter"] == 1
    by_id = {r["id"]: r for r in recs}
    for r in rows:
        msgs = r["messages"]
        assert msgs[-1]["role"] == "assistant" and msgs[-1]["content"][:3] == "答案：" and len(msgs[-1]["content"]) == 4
        if r["form"] == "bench":
            rec = by_id[r["id"].removeprefix("bench-")]
            assert _blank(msgs[:-1]) == _scored_prompt(rec["question"], rec["options"], rec["task"]), r["id"]
            assert msgs[-1]["content"] == "答案：" + rec["answer"][0]
            continue
        user = msgs[1]["content"]
        question = user.split("问题：", 1)[1].split("\n", 1)[0]
        options = dict(line.split(". ", 1) for line in user.split("问题：", 1)[1].splitlines()[1:] if ". " in line)
        context = None
        fence = re.search(r"<(evidence-[0-9a-f]+)>\n", user)
        if fence:
            inside = user.split(fence.group(0), 1)[1].split(f"\n</{fence.group(1)}>", 1)[0]
            context = "\n".join(x for x in inside.splitlines() if x.startswith("["))
        assert _blank(msgs[:-1]) == _scored_prompt(question, options, "mcq", context), r["id"]
        assert msgs[-1]["content"][-1] in options
    assert {r["form"] for r in rows} == {"mcq", "mcq-context", "bench"}
    assert any("[1] " in r["messages"][1]["content"] and "〔" in r["messages"][1]["content"] for r in rows if r["form"] == "mcq-context")
    card = (out / "README.md").read_text(encoding="utf-8")
    assert "答案：<letter>" in card and (out / "hf").is_dir()


def test_cli_mixes_cot_data_and_needs_templates(graph_dir, tmp_path, capsys):
    from bencao.cli import main

    cot = tmp_path / "cot"
    cot.mkdir()
    msgs = [{"role": "user", "content": "半夏主治什么？"}, {"role": "assistant", "content": "（半夏，treats，头眩）"}]
    (cot / "train.jsonl").write_text(json.dumps({"id": "c1", "form": "triples", "messages": msgs, "split_key": "E1"}, ensure_ascii=False)
                                     + "\n", encoding="utf-8")
    assert main(["data", "mcq", "--graph", str(graph_dir), "--output", str(tmp_path / "o"), "--mix", str(cot),
                 "-s", "relations=[has_effect]", "-s", "per_relation=5"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["mixed"] == {"train": 1, "eval": 0}
    rows = _lines(tmp_path / "o" / "train.jsonl")
    assert any(r["id"] == "c1" and r["source"] == "mix:cot" and r["messages"] == msgs for r in rows)
    assert main(["data", "mcq", "--graph", str(graph_dir), "--output", str(tmp_path / "o2"), "-s", "relations=[is_a]"]) == 2
    assert "relations ['is_a'] have no question template" in capsys.readouterr().err
    assert main(["data", "mcq", "--graph", str(graph_dir), "--output", str(tmp_path / "o3"), "--mix", str(tmp_path / "nothing")]) == 2
    assert "nothing/train.jsonl: mix: no train.jsonl in this directory" in capsys.readouterr().err
