"""bench/llm_roles.py end to end at a tiny size: every role through the real CLI against a scripted model behind the
project's own OpenAI-compatible server (no real model). Checks the counts, rates and table it reports, not speed."""

from __future__ import annotations

import importlib
import json
import re
import sys
from pathlib import Path

import pytest

from llm_loopback import scripted_endpoint, stage_of
from serving_helpers import serving_graph

BENCH = Path(__file__).resolve().parents[1] / "bench"


def _load():
    if str(BENCH) not in sys.path:
        sys.path.insert(0, str(BENCH))
    return importlib.import_module("llm_roles")


def route(messages: list[dict[str, str]]) -> str:
    """Replies by the stage's prompt: well-formed for every stage, one selector reply that names no candidate."""
    system = messages[0]["content"] if messages[0]["role"] == "system" else ""
    user = messages[-1]["content"]
    if "检索证据评审员" in system or "retrieval evidence" in system:  # the context judge
        if '"entities"' in user:
            return json.dumps({"entities": [{"entity": "甘", "in_context": True}]}, ensure_ascii=False)
        n = int(re.search(r"共 (\d+) 个", user).group(1))
        return json.dumps({"verdicts": [1] * n})
    if "阅卷人" in system:  # cot_judge
        return '{"answer": ["A"]}'
    if "一步一步地推理" in system:  # cot_reason
        q = re.search(r"题目：(.+)", user).group(1)  # one reasoning per question: no two identical later requests
        return json.dumps({"reasoning": f"{q}大枣味甘，主心腹邪气。", "conclusion": "A. 大枣"}, ensure_ascii=False)
    if "知识抽取专家" in system and "推理：" in user:  # cot_extract
        return json.dumps({"triples": [{"head": "大枣", "relation": "味", "tail": "甘"}]}, ensure_ascii=False)
    if "知识抽取专家" in system:  # extract_triples, a fixed relation set: one triple from the text, one not in it
        text = user.split("）：\n", 1)[1].split("\n\n输出格式", 1)[0]
        run = re.search(r"[\u4e00-\u9fff]{4,}", text).group(0)
        return json.dumps({"triples": [{"head": run[:2], "relation": "has_flavour", "tail": run[2:4], "confidence": 0.9},
                                       {"head": run[:2], "relation": "has_flavour", "tail": "不在文中的词", "confidence": 0.9}]},
                          ensure_ascii=False)
    if system.startswith("你是中医药专家。"):  # cot_decompose
        return json.dumps({"triples": [{"head": "大枣", "relation": "味", "tail": "甘"}]}, ensure_ascii=False)
    stage = stage_of(messages)
    if stage == "understand":
        q = re.findall(r"^(?:问题|Question)[：:]\s*(.+)$", user, re.M)[-1]
        return json.dumps({"entities": [{"mention": q[:2], "type": "herb", "role": "question"}, {"mention": "外星人", "type": "x"}],
                           "keywords": [q[:2]]}, ensure_ascii=False)
    if stage == "select":
        mention = re.search(r"(?:提及|Mention)[：:]\s*(.+)", user).group(1).strip()
        return json.dumps({"choice": -1 if mention == "量子" else 1, "confidence": 0.9, "rationale": "same name"})
    if stage == "score":
        return '{"confidence": 0.9, "rationale": "same", "alternatives": []}'
    if stage == "synonyms":
        return '{"synonyms": []}'
    if stage == "plan":
        return json.dumps({"paths": [["treats"], ["~treats", "made_up"]], "rationale": "r"})
    if stage == "cot":  # cot.form: json (the role's recipe); the line form otherwise
        if "只输出 JSON" in user or "JSON only" in user:
            return json.dumps({"triples": [{"head": "大枣", "relation": "has_flavour", "tail": "甘"},
                                           {"head": "不存在的东西", "relation": "关系", "tail": "尾"}]}, ensure_ascii=False)
        return "（大枣，has_flavour，甘）\n（不存在的东西，关系，尾）"
    if stage == "generate_qa":
        return "它味甘[1]，见[9]。"
    raise AssertionError(f"unexpected request: {system[:60]} | {user[:80]}")


@pytest.fixture(scope="module")
def graph(tmp_path_factory):
    return serving_graph(tmp_path_factory)


def _dev(tmp_path: Path, graph: Path, roles) -> Path:
    from bencao.retrieval.graph.store import Graph

    dev = tmp_path / "dev"
    dev.mkdir()
    with Graph.open(graph, read_only=True) as g:
        dazao = g.find_entity_id("大枣")
    mcq = [{"id": f"tcm-{i}", "task": "mcq", "question": q, "options": {"A": "大枣", "B": "丁香"}, "answer": ["A"], "lang": "zh"}
           for i, q in enumerate(["大枣的味是什么？", "安中养脾用何药？", "主心腹邪气的是？", "何药味甘？", "大枣主治什么？", "补中益气用何物？"])]
    half = [r for r in mcq if roles.half_a(r["id"])]
    assert len(half) >= 2, "the fixture needs two records in the distilled half"
    (dev / "tcmbench_mcq.jsonl").write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in mcq), encoding="utf-8")
    en = [{"id": "mmlu-0", "task": "mcq", "question": "Which is a fruit?", "options": {"A": "jujube", "B": "salt"}, "answer": ["A"], "lang": "en"}]
    (dev / "mmlu_nutrition.jsonl").write_text("".join(json.dumps(r) + "\n" for r in en), encoding="utf-8")
    el = [{"id": "el-1", "task": "el", "mention": "大枣", "gold_ids": [dazao], "lang": "zh"},
          {"id": "el-2", "task": "el", "mention": "量子", "gold_ids": ["NONE:1"], "lang": "zh"}]
    (dev / "cafeteria_fcd_el.jsonl").write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in el), encoding="utf-8")
    return dev


def test_every_role_runs_through_the_cli_and_the_table_reports_it(graph, tmp_path, capsys):
    roles = _load()
    dev = _dev(tmp_path, graph, roles)
    results = tmp_path / "RESULTS.md"
    with scripted_endpoint(route) as ep:
        rc = roles.main(["--base-url", ep.base_url, "--model", "scripted", "--work", str(tmp_path / "work"), "--dev", str(dev),
                         "--graph", str(graph), "--el-graph", str(graph), "--n-understand", "2", "--n-planner", "2", "--n-cot", "2",
                         "--n-link", "2", "--n-generator", "2", "--n-judge", "1", "--n-extract", "2", "--n-distill", "2", "--append", str(results)])
        n_calls = len(ep.calls)
    assert rc == 0
    res = {r: json.loads((tmp_path / "work" / r / "result.json").read_text(encoding="utf-8")) for r in roles.ROLES}
    assert all(r["ran"] for r in res.values()), {k: v.get("error") for k, v in res.items()}
    # every request the server answered is counted once, by the role that made it (the scripted server has /stats)
    assert sum(r["requests"] for r in res.values()) == n_calls
    assert {k: r["requests"] for k, r in res.items()} == {k: r["cache_requests"] for k, r in res.items()}
    # understanding: one verbatim mention and one invented per question
    u = res["understand"]
    assert u["items"] == 2 and u["valid"] == [2, 2] and u["quality"] == pytest.approx(0.5)
    # linking: the LLM-free linker and the LLM linker in the same run, paired
    link = res["link"]["details"]
    assert link["rules"]["acc@1"] == 0.5 and link["llm"]["acc@1"] == 0.5 and link["difference"][0] == 0.0
    assert link["llm"]["abstention"] == 0.5 and link["stages"]["selector"][1] >= 1
    # planner: "made_up" is the one step of three outside the schema
    assert res["planner"]["quality"] == pytest.approx(2 / 3) and res["planner"]["valid"] == [2, 2]
    # the CoT model: two triples a question, one whose head links and whose relation is the graph's
    assert res["cot"]["valid"] == [2, 2] and res["cot"]["quality"] == pytest.approx(0.5)
    import yaml

    assert yaml.safe_load((tmp_path / "work" / "recipes" / "cot.yaml").read_text(encoding="utf-8"))["cot"]["form"] == "json"
    # generator: [1] names evidence, [9] does not
    g = res["generator"]
    assert g["items"] == 2 and g["valid"] == [0, 2] and g["details"]["citations_named_given"] == [2, 4]
    answers = [json.loads(x) for x in (tmp_path / "work" / "generator" / "answers.jsonl").read_text(encoding="utf-8").splitlines()]
    ok = sum(1 for a in answers for c in a["citations"] if c["supported"])  # "它味甘[1]": does passage [1] say 味甘?
    assert g["details"]["citations_supported"] == [ok, 4] and g["quality"] == pytest.approx(ok / 4)
    # judge: every reply usable; extract: half the triples are in the snippet; distill: records for both questions
    assert res["judge"]["valid"][0] == res["judge"]["valid"][1] > 0
    assert res["extract"]["items"] == 2 and res["extract"]["quality"] == pytest.approx(0.5)
    assert (tmp_path / "work" / "extract" / "judge_sample.tsv").read_text(encoding="utf-8").count("\n") == 3
    assert res["distill"]["valid"] == [2, 2] and res["distill"]["quality"] == 1.0
    assert res["distill"]["details"]["leakage_guard"]["recorded"]
    # the section: the table with a row per role, the linking table, the commands a user runs
    text = results.read_text(encoding="utf-8")
    assert text.count("| yes |") == len(roles.ROLES) and "Paired difference (LLM − LLM-free), 2 mentions" in text
    for cmd in ("bencao eval --bench", "bencao infer", "bencao data extract", "bencao data cot"):
        assert cmd in text
    assert "serving/small-llm" in text and f"--llm scripted@{ep.base_url}" in text
    # verdicts written after the run are read by --report-only (a rerun of the role would wipe its folder)
    sample = (tmp_path / "work" / "extract" / "judge_sample.tsv").read_text(encoding="utf-8").splitlines()[1:]
    judged = tmp_path / "judged.tsv"
    judged.write_text("# by hand\nkey\tverdict\n" + "".join(f"{line.split(chr(9))[0]}\t{v}\n" for line, v in zip(sample, "10")), encoding="utf-8")
    roles.JUDGED = judged
    try:
        assert roles.main(["--base-url", "http://127.0.0.1:9/v1", "--model", "scripted", "--work", str(tmp_path / "work"), "--dev", str(dev),
                           "--graph", str(graph), "--report-only"]) == 0
    finally:
        roles.JUDGED = roles.REPO / "bench" / "judged" / "llm_extract.tsv"
    assert "judged 1/2 (50 %) of a sample correct" in capsys.readouterr().out
