"""Answer generation: the prompt from Evidence, reply parsing, the empty-evidence fallback, the CoT model."""

from __future__ import annotations

import pytest

from bencao.retrieval.evidence import Evidence, LinkedEntity, PathHit, SnippetHit, TripleHit
from bencao.serving.answer import AnswerConfig, build_messages, not_in_kb, parse_reply, references, sources_block
from bencao.serving.cot import parse_triples
from bencao.serving.tasks import Query


def _evidence() -> Evidence:
    return Evidence(
        question="大枣的性味是什么？",
        entities=[LinkedEntity(id="E1", name="大枣", type="substance", score=1.0,
                               attributes={"flavour": ["甘"], "effects": ["补中益气", "养血安神"], "contraindications": ["湿盛中满者慎用"]})],
        triples=[TripleHit(id="T1", head_id="E1", head="大枣", relation="has_flavour", tail_id="E2", tail="甘", confidence=0.9, score=0.8)],
        paths=[PathHit(entities=["E1", "E2"], names=["大枣", "甘"], relations=["has_flavour"], triple_ids=["T1"], confidences=[0.9],
                       text="大枣 —has_flavour→ 甘", score=0.734)],
        snippets=[
            SnippetHit(id="P1", text="味甘，平。主心腹邪气，安中养脾。", path=["神农本草经", "卷一", "上经", "大枣"], score=0.9),
            SnippetHit(id="P2", text="枣，味甘，温。", path=["食疗本草", "卷上", "枣"], score=0.5),
            SnippetHit(id="P3", text="大枣甘平，补中。", path=["推理", "大枣"], score=0.1, document_kind="reasoning"),
        ],
    )


def test_prompt_numbers_facts_passages_paths_and_attributes_in_one_citation_list():
    msgs = build_messages(Query("大枣的性味是什么？"), _evidence())
    assert [m["role"] for m in msgs] == ["system", "user"]
    user = msgs[1]["content"]
    assert "问题：大枣的性味是什么？" in user
    # one numbered list: the passages first (the question's own BM25 hits, then fused order), then the knowledge-base
    # fact, the path and the entity's attributes
    assert "[1] 神农本草经 › 卷一 › 上经 › 大枣：味甘，平。主心腹邪气，安中养脾。" in user
    assert "[2] 食疗本草 › 卷上 › 枣：枣，味甘，温。" in user
    assert "[3] 推理 › 大枣（模型生成的推理，非原文）：大枣甘平，补中。" in user  # teacher reasoning is cited as generated
    assert "[4] 大枣味甘\n" in user
    assert "[5] 推理路径：大枣 —has_flavour→ 甘" in user
    assert "[6] 大枣（substance）：" in user and "contraindications: 湿盛中满者慎用" in user and "effects: 补中益气、养血安神" in user
    assert user.index("[1] ") < user.index("[6] ") < user.rindex("回答")
    assert "[1]" in msgs[0]["content"]  # the system prompt asks for bracketed citations


def test_a_fact_names_the_passage_it_was_read_from_and_cites_like_a_passage():
    from bencao.serving.answer import generator_context

    ev = _evidence()
    ev.triples[0].snippet_ids = ["P1"]
    ctx = generator_context(Query("大枣的性味是什么？"), ev)
    fact = next(it for it in ctx.items if it.kind == "fact")
    assert fact.line() == f"[{fact.n}] 大枣味甘〔神农本草经 › 卷一 › 上经 › 大枣〕"
    cited = parse_reply(f"大枣味甘 [{fact.n}]。", ctx.references()).citations
    assert cited[0]["kind"] == "fact" and cited[0]["snippet_id"] == "P1" and cited[0]["triple_id"] == "T1"
    assert cited[0]["text"].startswith("味甘，平")  # the passage that asserts the fact


def test_a_character_budget_cuts_the_context_and_the_last_passage_fits():
    from bencao.serving.answer import generator_context

    from bencao.serving.context import ContextConfig

    facts_first = AnswerConfig(context=ContextConfig(order=["facts", "passages", "paths", "entities"]))
    full = generator_context(Query("大枣的性味是什么？"), _evidence(), facts_first)
    for budget in (40, 60, 90):
        ctx = generator_context(Query("大枣的性味是什么？"), _evidence(), facts_first, budget_chars=budget)
        assert 0 < len(ctx.text) <= budget and ctx.text.startswith("[1] 大枣味甘")
        assert len(ctx.items) < len(full.items) and ctx.truncated > 0
    # a passage is cut to what is left rather than dropped when at least min_item_chars remain
    cfg = AnswerConfig(context=ContextConfig(min_item_chars=10, order=["facts", "passages", "paths", "entities"]))
    ctx = generator_context(Query("大枣的性味是什么？"), _evidence(), cfg, 30)
    assert [it.kind for it in ctx.items] == ["fact", "passage"] and ctx.items[-1].text.endswith("…") and len(ctx.text) <= 30


def test_prompt_language_follows_question_and_limits_apply():
    ev = _evidence()
    en = build_messages(Query("What is the flavour of jujube?"), ev, AnswerConfig(max_snippets=1, max_snippet_chars=4))[1]["content"]
    assert en.startswith("Task: answer the question")
    assert "Question: What is the flavour of jujube?" in en
    assert "[1] 神农本草经 › 卷一 › 上经 › 大枣: 味甘，…" in en and "[2] 大枣 has flavour 甘" in en
    assert "食疗本草" not in en


def test_references_carry_snippet_id_heading_and_text():
    refs = references(_evidence())
    assert [(r["n"], r["snippet_id"], r["generated"]) for r in refs] == [(1, "P1", False), (2, "P2", False), (3, "P3", True)]
    assert refs[0]["path"] == ["神农本草经", "卷一", "上经", "大枣"] and refs[0]["text"].startswith("味甘")
    # the JSON form (as /v1/retrieve returns it) numbers the same way
    back = Evidence.from_dict(_evidence().to_dict())
    assert [r["snippet_id"] for r in references(back)] == ["P1", "P2", "P3"] and back == _evidence()


@pytest.mark.parametrize(
    "reply, cited, invalid",
    [
        ("大枣味甘 [1]，性平[1][2]。", [1, 2], []),
        ("大枣味甘【2】，性平【1】。", [2, 1], []),
        ("Sweet [1, 2] and neutral [1-2].", [1, 2], []),
        ("味甘[1，2]", [1, 2], []),
        ("味甘 [7] 平 [2]", [2], [7]),
        ("NOT_IN_KB 证据不涉及此问 [1]", [1], []),
        ("<think>maybe [1]</think>味甘。", [], []),
        ("no citations at all", [], []),
    ],
)
def test_reply_parsing_maps_citation_numbers_to_references(reply, cited, invalid):
    parsed = parse_reply(reply, references(_evidence()))
    assert [c["n"] for c in parsed.citations] == cited
    assert parsed.invalid_citations == invalid
    assert "<think>" not in parsed.answer
    for c in parsed.citations:
        assert c["snippet_id"] == f"P{c['n']}" and c["heading"]


def test_sources_block_and_not_in_kb_wording():
    refs = references(_evidence())
    cites = parse_reply("味甘[2]", refs).citations
    assert sources_block("大枣？", cites) == "来源:\n[2] 食疗本草 › 卷上 › 枣"
    assert sources_block("jujube?", cites).startswith("Sources:\n[2] ")
    assert sources_block("jujube?", []) == ""
    gen = parse_reply("甘[3]", refs).citations
    assert gen[0]["generated"] and sources_block("大枣？", gen) == "来源:\n[3] 推理 › 大枣 （模型生成的推理，非原文）"
    assert "知识库" in not_in_kb("大枣的性味是什么？") and "knowledge base has nothing" in not_in_kb("What is X?")
    assert "knowledge base" in not_in_kb("大枣？", AnswerConfig(language="en"))


@pytest.mark.parametrize(
    "reply, expected",
    [
        ('思考……\n[["大枣", "性味", "?"], ["大枣", "功效", "?"]]', [("大枣", "性味", "?"), ("大枣", "功效", "?")]),
        ('```json\n[{"head": "人参", "relation": "功效", "tail": "补气"}]\n```', [("人参", "功效", "补气")]),
        ("（大枣，性味，甘）\n（大枣，功效，补中益气）", [("大枣", "性味", "甘"), ("大枣", "功效", "补中益气")]),
        ("(生姜, 归经, 胃)\n(生姜, 功效, 止呕)", [("生姜", "归经", "胃"), ("生姜", "功效", "止呕")]),
        ("1. ginger | treats | nausea\n2. ginger -> contraindicated_with -> ?",
         [("ginger", "treats", "nausea"), ("ginger", "contraindicated_with", "?")]),
        ("ginger -> warms -> stomach", [("ginger", "warms", "stomach")]),
        ('["大枣", "性味", "甘"]', [("大枣", "性味", "甘")]),
        ("nothing structured here", []),
        ('[["?", "relation", "?"]]', []),
    ],
)
def test_cot_reply_parsing(reply, expected):
    got = [(t["head"], t["relation"], t["tail"]) for t in parse_triples(reply)]
    assert got == expected


def test_cot_parsing_dedups_and_limits():
    reply = '[["a","r","b"],["a","r","b"],["c","r","d"],["e","r","f"]]'
    assert len(parse_triples(reply, limit=2)) == 2
    assert len(parse_triples(reply)) == 3


def test_cot_prompt_is_the_sft_training_form():
    from bencao.data_gen.sft_format import ASK, SYSTEM
    from bencao.serving.cot import cot_messages

    zh = cot_messages("大枣的功效是什么？")
    assert zh[0]["content"] == SYSTEM["zh"] and zh[1]["content"].endswith(ASK["triples"]["zh"])
    en = cot_messages("What does ginger treat?")
    assert en[0]["content"] == SYSTEM["en"] and en[1]["content"] == "What does ginger treat?\n\n" + ASK["triples"]["en"]


def test_cot_json_form_decodes_under_the_schema_and_repairs():
    """``cot.form: json``: the JSON prompt, the schema (with maxItems) sent to an engine that decodes under one, a
    reply that breaks the schema repaired once, the triples kept in order without duplicates; ``text`` unchanged."""
    import json as _json

    import pytest
    from llm_fixtures import ScriptedClient

    from bencao.serving.cot import ASK_JSON, CotConfig, CotDecomposer

    class Grammar(ScriptedClient):
        supports_json_schema = True

        def __init__(self, *a, **k):
            super().__init__(*a, **k)
            self.params = []

        def _call_once(self, messages, params):
            self.params.append(params)
            return super()._call_once(messages, params)

    good = _json.dumps({"triples": [{"head": "大枣", "relation": "性味", "tail": "?"}, {"head": "大枣", "relation": "性味", "tail": "?"},
                                    {"head": "大枣", "relation": "归经", "tail": "?"}]}, ensure_ascii=False)
    client = Grammar([good, '{"triples": []}', good], max_concurrency=1)
    cot = CotDecomposer(client, CotConfig(form="json", max_triples=4))
    out = cot.decompose_many(["大枣的性味是什么？", "山药归什么经？"])
    assert out[0]["error"] is None and out[0]["triples"] == [{"head": "大枣", "relation": "性味", "tail": "?"},
                                                             {"head": "大枣", "relation": "归经", "tail": "?"}]
    assert out[1]["error"] is None and len(out[1]["triples"]) == 2  # repaired: the empty list broke minItems
    assert client.calls[0][1]["content"].endswith(ASK_JSON["zh"]) and len(client.calls) == 3
    assert client.params[0]["json_schema"]["properties"]["triples"]["maxItems"] == 4
    with pytest.raises(ValueError, match="cot.form"):
        CotConfig(form="yaml")


def test_shipped_serving_recipes_load(repo):
    from bencao.serving.config import load_serve_config

    recipes = sorted((repo / "configs" / "serving").glob("*.yaml"))
    assert {r.stem for r in recipes} >= {"default", "local", "endpoint"}
    for r in recipes:
        cfg = load_serve_config(r)
        assert cfg.api.max_concurrency >= 1 and cfg.infer.batch_size >= 1
    assert load_serve_config(repo / "configs/serving/default.yaml").generator is None
    local = load_serve_config(repo / "configs/serving/local.yaml", ["api.port=9000"])
    assert local.cot.llm.backend == "local-hf" and local.api.port == 9000


def test_excerpt_keeps_the_run_of_sentences_with_the_question_words_and_an_options_passage_around_the_option():
    from bencao.serving.context import excerpt

    text = ("甲乙丙丁，戊己庚辛。" * 10 + "患者恶寒发热，头身疼痛，呕吐，宜藿香正气散。" + "壬癸子丑，寅卯辰巳。" * 10)
    w = {"恶寒": 3.0, "发热": 3.0, "呕吐": 2.0, "头身": 1.0}
    ex = excerpt(text, w, 40)
    assert "恶寒发热" in ex and "呕吐" in ex and len(ex) <= 42 and ex.startswith("…") and ex.endswith("…")
    assert excerpt("短文。", w, 40) == "短文。"
    far = "藿香正气散，主治外感风寒。" + "甲乙丙丁，戊己庚辛。" * 10 + "恶寒发热，呕吐。"
    assert "藿香正气散" in excerpt(far, w, 30, focus=["藿香正气散"])
    assert "藿香正气散" not in excerpt(far, w, 30)


def test_excerpt_mode_renders_more_passages_into_the_same_budget():
    from bencao.serving.answer import generator_context
    from bencao.serving.context import ContextConfig

    long = "主心腹邪气，安中养脾。" + "无关的文字。" * 60
    ev = Evidence(question="大枣主心腹邪气吗？", snippets=[SnippetHit(id=f"P{i}", text=long, path=["神农本草经", f"卷{i}"]) for i in range(6)],
                  stats={"terms": {"心腹": 3.0, "邪气": 3.0, "大枣": 2.0}})
    whole = generator_context(Query("大枣主心腹邪气吗？"), ev, AnswerConfig(context=ContextConfig(budget_chars=600)))
    ex = generator_context(Query("大枣主心腹邪气吗？"), ev, AnswerConfig(context=ContextConfig(budget_chars=600, passage_mode="excerpt",
                                                                                      excerpt_chars=60)))
    assert len(ex.items) > len(whole.items) and all("心腹邪气" in it.text for it in ex.items)
