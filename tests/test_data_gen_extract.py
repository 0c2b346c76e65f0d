"""`bencao data extract`: relation-schema selection, constrained triples, attributes, one removable derived document.

Exact orchestration with a scripted teacher; one run through the real CLI against a loopback
OpenAI-compatible server backed by a tiny local model (its text is noise: skips, no crash).
"""

from __future__ import annotations

import json
import re
import shutil

import pytest

from bencao.data_gen.extract import ExtractConfig, run_extract
from bencao.errors import BencaoError
from bencao.llm import LLMConfig
from bencao.llm.cache import CachedClient
from bencao.retrieval.graph.store import Graph
from bencao.retrieval.ingest.registry import ingest_file
from tests.data_gen_helpers import SAMPLE, build_graph
from tests.llm_fixtures import ScriptedClient


@pytest.fixture(scope="module")
def base_graph(tmp_path_factory):
    d = build_graph(tmp_path_factory.mktemp("g") / "graph")
    g = Graph.open(d)
    ingest_file(g, "recipes-jsonl", SAMPLE / "tcm_classics" / "shiliaofang_recipes.jsonl")
    g.close()
    return d


@pytest.fixture
def graph_dir(base_graph, tmp_path):
    d = tmp_path / "graph"
    shutil.copytree(base_graph, d)
    return d


def _cfg(graph_dir, out, **kw):
    base = dict(graph=str(graph_dir), output=str(out), documents=["神农本草经", "shiliaofang"], sections=["人参", "大枣", "萝卜粥"],
                progress=False, llm=LLMConfig(max_concurrency=2))
    return ExtractConfig(**{**base, **kw})


def _title(user: str) -> str:
    m = re.search(r"出处：([^）)]*)[）)]", user)
    return m.group(1).split(" / ")[-1] if m else ""


def teacher(messages):
    """A teacher that answers by prompt step; the first reply about 大枣 is not JSON (repaired once)."""
    user = messages[-1]["content"]
    if len(messages) > 2 and messages[-2]["role"] == "assistant":  # the repair request
        assert "大枣" in messages[-3]["content"]
        return json.dumps({"triples": [{"head": "大枣", "relation": "性味", "tail": "甘", "confidence": 0.9},
                                       {"head": "大枣", "relation": "主治", "tail": "心腹邪气", "confidence": 0.8}]}, ensure_ascii=False)
    if "列出描述其中知识所需的关系类型" in user:
        rels = [{"name": "主治", "description": "主治的病证"}, {"name": "功效"}, {"name": "治疗"}, {"name": "性味"}]
        if "萝卜粥" in user:
            rels = [{"name": "组成", "description": "方中的食材", "head_type": "菜肴", "tail_type": "食物"}, {"name": "主治"}]
        return json.dumps({"relations": rels}, ensure_ascii=False)
    if "合并同义或重复的关系" in user:
        assert re.search(r"主治（\d）", user) and "已有关系：treats" in user
        return json.dumps({"relations": [{"name": "主治", "description": "主治的病证", "head_type": "药物", "tail_type": "病证", "merged_from": ["治疗"]},
                                         {"name": "功效"}, {"name": "性味"}, {"name": "组成"}]}, ensure_ascii=False)
    if "抽取知识三元组" in user:
        assert "- 主治" in user
        title = _title(user)
        if title == "人参" and "味甘，微寒" in user:
            return json.dumps({"triples": [
                {"head": "人参", "head_type": "药物", "relation": "主治", "tail": "惊悸", "tail_type": "症状", "confidence": 0.9},
                {"head": "人参", "relation": "功效", "tail": "明目", "confidence": 0.85},
                {"head": "人参", "relation": "治疗", "tail": "邪气", "confidence": 0.8},          # merged spelling → 主治
                {"head": "人参", "relation": "产地", "tail": "邯郸", "confidence": 0.9},          # not in the set → dropped
                {"head": "人参", "relation": "功效", "tail": "长生不老", "confidence": 0.9},       # not in the text → dropped
                {"head": "人参", "relation": "功效", "tail": "益智", "confidence": 0.1}]},          # below min_confidence
                ensure_ascii=False)
        if title == "大枣" and "味甘，平" in user:
            return "好的：(大枣, 主治, 心腹邪气)"
        if title == "萝卜粥":
            return json.dumps({"triples": [{"head": "萝卜粥", "head_type": "菜肴", "relation": "组成", "tail": "大萝卜", "tail_type": "食物"},
                                           {"head": "萝卜粥", "head_type": "菜肴", "relation": "主治", "tail": "消渴", "tail_type": "症状"}]},
                              ensure_ascii=False)
        return '{"triples": []}'
    if "为这些食物或菜肴实体填写属性" in user:
        assert "萝卜粥" in user and "人参" not in user.split("可用的属性")[0]
        return json.dumps({"entities": [{"name": "萝卜粥", "attributes": {"indications": ["消渴", "口干"], "colour": "白"}},
                                        {"name": "白粥", "attributes": {"effects": ["养胃"]}}]}, ensure_ascii=False)
    raise AssertionError(f"unexpected prompt: {user[:80]}")


def _steps(calls):
    names = {"列出描述其中知识所需的关系类型": "candidates", "合并同义或重复的关系": "merge", "抽取知识三元组": "triples",
             "为这些食物或菜肴实体填写属性": "attributes"}
    out = []
    for msgs in calls:
        first_user = next(m["content"] for m in msgs if m["role"] == "user")
        out.append(next(v for k, v in names.items() if k in first_user))
    return out


def _lines(path):
    return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]


def test_schema_selection_constrained_triples_attributes_and_one_removable_document(graph_dir, tmp_path):
    out = tmp_path / "out"
    g0 = Graph.open(graph_dir)
    before = g0.counts()
    g0.close()
    client = ScriptedClient(teacher)
    s = run_extract(_cfg(graph_dir, out), client=CachedClient(client, out / "llm_cache.sqlite"))

    rels = json.loads((out / "relations.json").read_text(encoding="utf-8"))
    assert rels["selection"] == "teacher" and [r["name"] for r in rels["relations"]] == ["主治", "功效", "性味", "组成"]
    assert rels["relations"][0]["merged_from"] == ["治疗"]
    assert {c["name"]: c["count"] for c in rels["candidates"]}["主治"] == 4
    n_snips = s["total"]
    assert s["done"] == n_snips and s["skipped"] == 0 and s["relations"] == ["主治", "功效", "性味", "组成"]
    assert s["dropped"] == {"unknown_relation": 1, "not_in_text": 1, "low_confidence": 1, "attribute_unknown_key": 1,
                            "attribute_unknown_entity": 1}
    assert s["triples"] == 7 and s["attributes"] == 1
    steps = _steps(client.calls)
    assert steps.count("merge") == 1 and steps.count("attributes") == 1
    assert steps.count("triples") == n_snips + 1  # one repair
    assert s["ledger"]["requests"] == len(client.calls)
    prompt = next(m[-1]["content"] for m, st in zip(client.calls, steps) if st == "triples")
    assert "- 主治：主治的病证 [药物 → 病证]\n- 功效\n- 性味\n- 组成\n" in prompt

    g = Graph.open(graph_dir)
    doc = g.get_document(s["graph"]["document"])
    assert doc["kind"] == "derived" and doc["format"] == "extraction" and doc["meta"]["relations"] == s["relations"]
    got = {(t["head"], t["relation"], t["tail"]) for t in g.iter_triples() if t["origin"] == "llm:scripted"}
    assert got == {("人参", "主治", "惊悸"), ("人参", "功效", "明目"), ("人参", "主治", "邪气"), ("大枣", "性味", "甘"),
                   ("大枣", "主治", "心腹邪气"), ("萝卜粥", "组成", "大萝卜"), ("萝卜粥", "主治", "消渴")}
    for t in g.iter_triples():
        if t["origin"] == "llm:scripted":
            assert t["layer"] == "book"
            (src,) = g.triple_sources_of(t["id"])
            assert src["kind"] == "M1" and src["document_id"] == doc["id"]
            assert t["head"] in " ".join(g.get_snippet(src["snippet_id"])["path"]) + g.get_snippet(src["snippet_id"])["text"]
    # existing entities are reused (人参 of the catalogue/book, the 萝卜粥 dish); new ones get the mapped type
    ginseng = g.entities_by_alias("人参")
    assert len(ginseng) == 1 and ginseng[0]["type"] == "substance"
    (dish,) = [e for e in g.entities_by_alias("萝卜粥") if e["type"] == "dish"]
    assert dish["attributes"]["indications"] == ["消渴", "口干"] and "colour" not in dish["attributes"]
    assert g.entities_by_alias("惊悸")[0]["type"] == "symptom"
    g.close()

    # the whole run comes out as a group through the real CLI
    from bencao.cli import main

    assert main(["graph", "remove", doc["id"], "--graph", str(graph_dir)]) == 0
    g = Graph.open(graph_dir)
    assert g.counts() == before
    (dish,) = [e for e in g.entities_by_alias("萝卜粥") if e["type"] == "dish"]
    assert "indications" not in dish["attributes"]
    g.close()


def test_replay_from_the_cache_asks_nothing_and_gives_the_same_document(graph_dir, tmp_path):
    out = tmp_path / "out"
    first = run_extract(_cfg(graph_dir, out), client=CachedClient(ScriptedClient(teacher), out / "llm_cache.sqlite"))
    for f in ("extract.records.jsonl", "relations.json"):
        (out / f).unlink()
    dead = ScriptedClient([])
    again = run_extract(_cfg(graph_dir, out), client=CachedClient(dead, out / "llm_cache.sqlite", replay_only=True))
    assert dead.calls == []
    assert again["graph"]["document"] == first["graph"]["document"] and again["graph"]["added"] is False
    assert again["triples"] == first["triples"] and again["ledger"]["cache_hits"] > 0


def test_resume_after_a_kill_has_no_duplicates_and_reuses_the_relation_set(graph_dir, tmp_path):
    out = tmp_path / "out"
    asked = {"n": 0}

    def killing(messages):
        if "抽取知识三元组" in messages[-1]["content"]:
            asked["n"] += 1
            if asked["n"] == 3:
                raise KeyboardInterrupt  # killed while asking about the third snippet
        return teacher(messages)

    cfg = _cfg(graph_dir, out, llm=LLMConfig(max_concurrency=1))
    with pytest.raises(KeyboardInterrupt):
        run_extract(cfg, client=ScriptedClient(killing, max_concurrency=1))
    done = _lines(out / "extract.records.jsonl")
    assert len(done) == 2 and not (out / "extract.graph.json").exists()
    g = Graph.open(graph_dir)
    assert not [d for d in g.documents() if d["kind"] == "derived"]  # the graph is written only at the end
    g.close()

    fresh = ScriptedClient(teacher)
    s = run_extract(cfg, client=fresh)
    assert s["done_before"] == 2 and s["done"] == s["total"] - 2 and s["relations_reused"] is True
    assert "candidates" not in _steps(fresh.calls) and "merge" not in _steps(fresh.calls)
    recs = _lines(out / "extract.records.jsonl")
    assert len({r["item_id"] for r in recs}) == len(recs) == s["total"]
    assert s["triples"] == 7


def test_a_later_run_replaces_the_output_dirs_document(graph_dir, tmp_path):
    out = tmp_path / "out"
    small = run_extract(_cfg(graph_dir, out, sections=["人参"]), client=ScriptedClient(teacher))
    big = run_extract(_cfg(graph_dir, out), client=ScriptedClient(teacher))
    assert big["graph"]["previous_removed"] == small["graph"]["document"] != big["graph"]["document"]
    g = Graph.open(graph_dir)
    assert [d["id"] for d in g.documents() if d["kind"] == "derived"] == [big["graph"]["document"]]
    g.close()


def test_fixed_relations_skip_selection_and_bad_filters_are_one_line_errors(graph_dir, tmp_path):
    c = ScriptedClient(teacher)
    s = run_extract(_cfg(graph_dir, tmp_path / "out", relations=["主治"], sections=["人参"], attributes=False), client=c)
    assert s["relation_selection"] == "fixed" and set(_steps(c.calls)) == {"triples"}
    assert s["triples"] == 1 and s["dropped"] == {"unknown_relation": 5}  # 功效 ×3, 产地, 治疗 (merged only by a selection)
    with pytest.raises(BencaoError, match="no document matches 'no-such-book'"):
        run_extract(_cfg(graph_dir, tmp_path / "o2", documents=["no-such-book"]), client=c)
    with pytest.raises(BencaoError, match="no snippet to extract from"):
        run_extract(_cfg(graph_dir, tmp_path / "o3", sections=["不存在的章节"]), client=c)


def test_cli_against_a_loopback_server_with_a_tiny_local_model(graph_dir, tmp_path, capsys):
    """Plumbing only: the real openai client, HTTP, and a real model whose text is noise."""
    from bencao.cli import main
    from bencao.llm.local_hf import LocalHFClient
    from bencao.llm.local_server import create_app, serve_in_thread
    from tests.llm_fixtures import tiny_model, tiny_tokenizer

    tok = tiny_tokenizer()
    local = LocalHFClient(tiny_model(tok), tok, name="tiny-qwen2", batch_size=4)
    out = tmp_path / "out"
    with serve_in_thread(create_app(local)) as base_url:
        rc = main(["data", "extract", "--graph", str(graph_dir), "--document", "神农本草经", "--section", "人参", "--limit", "1", "--output", str(out),
                   "--concurrency", "2", "llm.backend=openai", "llm.model=tiny-qwen2", f"llm.base_url={base_url}", "llm.max_tokens=8",
                   "llm.temperature=0", "schema_sample=1", "max_relations=3", "max_snippet_chars=60", "progress=false"])
    assert rc == 0
    s = json.loads(capsys.readouterr().out)
    assert s["relation_selection"] == "graph" and s["schema_skipped_by_reason"]  # noise → the graph's relations
    assert s["total"] == 1 and s["skipped"] == 1 and s["done"] == 0
    assert set(s["skipped_by_reason"]) <= {"extract_triples_not_json", "extract_triples_schema"}
    assert s["ledger"]["requests"] == 4 and s["graph"]["document"] is None  # candidates + repair, triples + repair
    assert not (out / "relations.json").exists()  # a graph fallback is asked again next time


def test_a_refused_snippet_is_skipped_and_an_unreachable_teacher_stops_schema_selection(graph_dir, tmp_path):
    from bencao.llm import LLMError

    def refusing(messages):
        if "抽取知识三元组" in messages[-1]["content"] and "萝卜粥" in messages[-1]["content"]:
            return LLMError("HTTP 400 refused", kind="rejected")
        return teacher(messages)

    s = run_extract(_cfg(graph_dir, tmp_path / "out"), client=ScriptedClient(refusing))
    assert s["skipped_by_reason"] == {"extract_triples_llm_error": 1} and s["done"] == s["total"] - 1
    skipped = _lines(tmp_path / "out" / "extract.skipped.jsonl")
    assert len(skipped) == 1 and "refused" in skipped[0]["detail"]
    down = ScriptedClient(lambda m: LLMError("scripted: timed out", retryable=True, kind="timeout"), max_retries=1)
    with pytest.raises(BencaoError, match="the teacher failed on all 4 schema-selection requests"):
        run_extract(_cfg(graph_dir, tmp_path / "o2"), client=down)
    assert not (tmp_path / "o2" / "relations.json").exists()
