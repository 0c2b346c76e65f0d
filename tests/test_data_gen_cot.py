"""CoT distillation: the LLM-free kg-paths teacher on a real sample graph, and the LLM teacher with a scripted responder."""

from __future__ import annotations

import json

import pytest

from bencao.data_gen.cot import CotDistillConfig, answers_match, run_cot
from bencao.data_gen.qa_input import read_qa
from bencao.llm import LLMConfig, LLMError
from bencao.llm.cache import CachedClient
from bencao.retrieval.graph.store import Graph
from tests.data_gen_helpers import QUESTIONS, build_graph, write_questions
from tests.llm_fixtures import ScriptedClient


@pytest.fixture(scope="module")
def graph_dir(tmp_path_factory):
    return build_graph(tmp_path_factory.mktemp("g") / "graph")


def _lines(path):
    return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]


def test_kg_paths_teacher_writes_well_formed_records_about_real_entities(graph_dir, tmp_path):
    q = write_questions(tmp_path / "q.jsonl")
    out = tmp_path / "out"
    summary = run_cot(CotDistillConfig(graph=str(graph_dir), input=str(q), output=str(out), teacher="kg-paths", progress=False))
    assert summary["total"] == 6 and summary["done"] == 4
    assert summary["skipped_by_reason"] == {"bad_record": 1, "answer_not_linked": 1}
    train, ev = _lines(out / "train.jsonl"), _lines(out / "eval.jsonl")
    assert len(train) + len(ev) == 8 and ev, "both task forms of 4 questions, some held out"
    # split by entity: no split key on both sides
    assert not {r["split_key"] for r in train} & {r["split_key"] for r in ev}
    g = Graph.open(graph_dir)
    for r in train + ev:
        assert [m["role"] for m in r["messages"]] == ["system", "user", "assistant"]
        assert r["form"] in ("reasoning", "triples") and r["teacher"] == "kg-paths"
        assert all(g.get_entity(e) for e in r["entities"]) and r["triple_ids"]
        assert all(g.get_triple(t) for t in r["triple_ids"])
    zh = next(r for r in train + ev if r["id"] == "q-zh-1::triples")
    assert zh["messages"][-1]["content"] == "（半夏，treats，头眩胸胀）"
    reasoning = next(r for r in train + ev if r["id"] == "q-zh-1::reasoning")["messages"][-1]["content"]
    assert "头眩胸胀" in reasoning and reasoning.endswith("答案：A. 半夏")
    from datasets import load_from_disk

    dd = load_from_disk(str(out / "hf"))
    assert dd["train"].num_rows == len(train) and "messages" in dd["train"].column_names
    assert "## Intended use" in (out / "README.md").read_text(encoding="utf-8")
    skipped = _lines(out / "cot.skipped.jsonl")
    assert {s["item_id"]: s["reason"] for s in skipped}["q-noans"] == "bad_record"


def test_answers_match_letters_and_free_text():
    items = {i.id: i for i in read_qa(write_questions_tmp())}
    assert answers_match(items["q-zh-1"], ["A"]) and answers_match(items["q-zh-1"], "答案是 A")
    assert not answers_match(items["q-zh-1"], ["A", "B"]) and not answers_match(items["q-zh-1"], "B")
    assert answers_match(items["q-en-2"], "Polysaccharide") and not answers_match(items["q-en-2"], "monosaccharide")


def write_questions_tmp():
    import tempfile
    from pathlib import Path

    return write_questions(Path(tempfile.mkdtemp()) / "q.jsonl")


def _teacher_script(messages):
    """A well-behaved teacher: replies by prompt step (recognised from the template text)."""
    user = messages[-1]["content"] if messages[-1]["role"] == "user" else ""
    if len(messages) > 2 and messages[-2]["role"] == "assistant":
        return json.dumps({"triples": [{"head": "半夏", "relation": "主治", "tail": "头眩胸胀"}]}, ensure_ascii=False)
    if "分解为三元组" in user or "Break the knowledge" in user:
        return json.dumps({"triples": [{"head": "半夏", "relation": "主治", "tail": "头眩胸胀"}]}, ensure_ascii=False)
    if "逐步推理" in user and "conclusion" in user:
        return json.dumps({"reasoning": "头眩胸胀由痰饮上逆所致；半夏燥湿化痰、降逆，古籍载其主头眩胸胀。", "conclusion": "A"}, ensure_ascii=False)
    if "Using the knowledge below" in user:
        return json.dumps({"reasoning": "Maltose is made of two glucose units, so it is a disaccharide.", "conclusion": "A"})
    if "只根据下面的推理" in user or "using only the reasoning" in user:
        return '{"answer": ["A"]}'
    if "推理中用到" in user or "Write every piece" in user:
        if "Maltose" in user:
            return '{"triples": [{"head": "maltose", "relation": "is_a", "tail": "disaccharide"}]}'
        return "这不是JSON"  # malformed: repaired once (see the first branch)
    raise AssertionError(f"unexpected prompt: {user[:80]}")


def test_llm_teacher_end_to_end_with_scripted_replies(graph_dir, tmp_path):
    import shutil

    g2 = tmp_path / "graph"
    shutil.copytree(graph_dir, g2)
    recs = [QUESTIONS[0], QUESTIONS[2], QUESTIONS[4], {"id": "q-fr", "question": "Quelle est la plante qui soigne la toux?",
                                                        "answer": "le thym", "lang": "fr"}]
    q = write_questions(tmp_path / "q.jsonl", recs)
    out = tmp_path / "out"
    client = ScriptedClient(_teacher_script)
    cfg = CotDistillConfig(graph=str(g2), input=str(q), output=str(out), teacher="llm", languages=["zh"], progress=False,
                    llm=LLMConfig(max_concurrency=2))
    summary = run_cot(cfg, client=CachedClient(client, out / "llm_cache.sqlite"))
    assert summary["done"] == 1
    assert summary["skipped_by_reason"] == {"bad_record": 1, "unexpected_language": 2}
    rows = _lines(out / "train.jsonl") + _lines(out / "eval.jsonl")
    assert {r["form"] for r in rows} == {"reasoning", "triples"}
    r = next(r for r in rows if r["form"] == "triples")
    assert r["messages"][-1]["content"] == "（半夏，主治，头眩胸胀）" and r["teacher"] == "llm:scripted"
    # the personalized layer: the reasoning is a document, its triple cites it (M2)
    g = Graph.open(g2)
    t = g.get_triple(r["triple_ids"][0])
    assert t["layer"] == "personal" and t["head"] == "半夏" and t["relation"] == "主治"
    src = g.triple_sources_of(t["id"])[0]
    assert src["kind"] == "M2" and "痰饮" in g.get_snippet(src["snippet_id"])["text"]
    ledger = json.loads((out / "ledger.json").read_text())
    assert ledger["steps"]["cot_extract"]["requests"] == 2  # one malformed reply + one repair
    assert summary["ledger"]["requests"] == 5

    # a replay from the cache alone gives the same dataset and asks nothing
    before = (out / "train.jsonl").read_text() + (out / "eval.jsonl").read_text()
    for f in ("cot.records.jsonl",):
        (out / f).unlink()
    dead = ScriptedClient([])
    run_cot(cfg, client=CachedClient(dead, out / "llm_cache.sqlite", replay_only=True))
    assert dead.calls == [] and (out / "train.jsonl").read_text() + (out / "eval.jsonl").read_text() == before


def test_judge_mismatch_and_endpoint_failures_are_skips(graph_dir, tmp_path):
    def script(messages):
        user = messages[-1]["content"]
        if "只根据下面的推理" in user:
            return '{"answer": ["B"]}'
        if "主治泄利寒热" in user and "分解" in user:
            return LLMError("HTTP 400 refused", kind="rejected")
        return _teacher_script(messages)

    q = write_questions(tmp_path / "q.jsonl", QUESTIONS[:2])
    cfg = CotDistillConfig(graph=str(graph_dir), input=str(q), output=str(tmp_path / "out"), teacher="llm", progress=False, write_personal=False)
    s = run_cot(cfg, client=ScriptedClient(script))
    assert s["done"] == 0 and s["skipped_by_reason"] == {"judge_mismatch": 1, "cot_decompose_llm_error": 1}


def test_resume_after_a_kill_has_no_duplicates_and_nothing_missing(graph_dir, tmp_path):
    qs = [dict(QUESTIONS[0], id=f"q{i}") for i in range(6)]
    q = write_questions(tmp_path / "q.jsonl", qs)
    cfg = CotDistillConfig(graph=str(graph_dir), input=str(q), output=str(tmp_path / "out"), teacher="llm", progress=False,
                    write_personal=False, llm=LLMConfig(max_concurrency=1))
    asked = {"n": 0}

    def killing(messages):
        if "分解为三元组" in messages[-1]["content"]:
            asked["n"] += 1
            if asked["n"] == 4:
                raise KeyboardInterrupt  # the job is killed while asking about the 4th question
        return _teacher_script(messages)

    with pytest.raises(KeyboardInterrupt):
        run_cot(cfg, client=ScriptedClient(killing, max_concurrency=1))
    done = _lines(tmp_path / "out" / "cot.records.jsonl")
    # one request at a time, two questions in flight: when q3 is asked, at least one of q0..q2 is done and
    # which ones is up to the scheduler; q3 onwards never started
    ids = {d["item_id"] for d in done}
    assert ids and ids <= {"q0", "q1", "q2"} and len(done) == len(ids)
    s = run_cot(cfg, client=ScriptedClient(_teacher_script))
    assert s["done_before"] == len(ids) and s["done"] == 6 - len(ids)
    rows = _lines(tmp_path / "out" / "train.jsonl") + _lines(tmp_path / "out" / "eval.jsonl")
    ids = [r["id"] for r in rows]
    assert len(ids) == len(set(ids)) == 12
