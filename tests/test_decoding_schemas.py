"""Structured stages on an engine that decodes under a JSON Schema (llama.cpp, vLLM, ``llm.json_schema: true``).

Small real models break free-form formats: they copy the prompt's placeholders (``关系1``), repeat one item until their
token budget runs out, and read a list numbered from 0 as numbered from 1 (bench/llm_roles.py, issue 35). Each stage
therefore sends a schema a grammar can enforce — the graph's relations as an enum, at most as many items as the stage
keeps, a shown candidate's number — while replies are still validated as before, so an engine without grammars gets
the same per-item checks.
"""

from __future__ import annotations

import json
import re
import shutil
from typing import Any

import pytest

from bencao.data_gen.ledger import Ledger
from bencao.llm.structured import complete_json
from bencao.serving.planner import PathPlanner
from tests.llm_fixtures import ScriptedClient


class SchemaClient(ScriptedClient):
    """A scripted engine that decodes under a schema: records the ``json_schema`` each request carried."""

    supports_json_schema = True

    def __init__(self, script: Any, **kw: Any):
        super().__init__(script, **kw)
        self.schemas: list[dict[str, Any] | None] = []

    def _call_once(self, messages, params):  # noqa: ANN001, ANN202
        self.schemas.append(params.get("json_schema"))
        return super()._call_once(messages, params)


ENVELOPE = {"type": "object", "required": ["triples"], "properties": {"triples": {"type": "array"}}}


def test_a_teacher_step_sends_its_schema_through_the_ledger(tmp_path):
    """`bencao data extract` / `data cot` ask through the ledger's metered client: the schema must reach the engine
    (it did not: `llm.json_schema: true` was silently ignored by every teacher step)."""
    inner = SchemaClient(['{"triples": []}'])
    metered = Ledger(tmp_path / "ledger.json").client(inner, "extract_triples")
    res = complete_json(metered, [{"role": "user", "content": "抽取"}], ENVELOPE)
    assert res.ok and inner.schemas == [ENVELOPE]


def test_decode_schema_is_sent_and_the_reply_is_validated_against_the_schema():
    strict = {"type": "object", "required": ["triples"], "properties": {"triples": {"type": "array", "maxItems": 1}}}
    inner = SchemaClient(['{"triples": [1, 2]}'])  # what an engine without grammars may send: valid for the envelope
    res = complete_json(inner, [{"role": "user", "content": "x"}], ENVELOPE, decode_schema=strict)
    assert inner.schemas == [strict] and res.ok and res.value == {"triples": [1, 2]}
    plain = ScriptedClient(['{"triples": []}'])  # an engine without schemas is sent none
    assert complete_json(plain, [{"role": "user", "content": "x"}], ENVELOPE, decode_schema=strict).ok


RELATIONS = [{"name": "treats", "description": "an indication", "head_type": "substance", "tail_type": "symptom"},
             {"name": "has_flavour", "description": "a flavour", "head_type": None, "tail_type": None}]


def test_the_planner_decodes_under_the_graphs_relations_and_still_drops_unknown_ones():
    inner = SchemaClient([json.dumps({"paths": [["~treats", "has_flavour"], ["made_up"]], "rationale": "r"})])
    plan = PathPlanner(inner, RELATIONS, max_paths=4, max_hops=3).plan_many(["治咳嗽的药味道如何？"], ["zh"], [[]])[0]
    paths = inner.schemas[0]["properties"]["paths"]
    assert paths["maxItems"] == 4 and paths["items"]["maxItems"] == 3 and paths["items"]["minItems"] == 1
    assert set(paths["items"]["items"]["enum"]) == {"treats", "has_flavour", "~treats", "~has_flavour"}
    assert plan.paths == [("~treats", "has_flavour")] and plan.dropped == [["made_up"]]


@pytest.fixture(scope="module")
def tcm_graph(tmp_path_factory):
    from tests.retrieval_graphs import build_tcm_graph

    d = tmp_path_factory.mktemp("tcm") / "g"
    build_tcm_graph(d).close()
    return d


def test_the_selector_numbers_candidates_from_one_and_decodes_a_shown_number(tcm_graph):
    """Candidates are numbered 1, 2, ... as in the scorer's prompt; "choice": 1 is the first one shown."""
    from bencao.retrieval.graph.store import Graph
    from bencao.retrieval.linking import EntityLinker, LinkerLLMs, LinkingConfig

    sel = SchemaClient(lambda m: '{"choice": 1, "confidence": 0.9, "rationale": "同名"}')
    sco = SchemaClient(lambda m: '{"confidence": 0.9, "rationale": "同一药物", "alternatives": []}')
    with Graph.open(tcm_graph, read_only=True) as g:
        linker = EntityLinker(g, LinkingConfig(selector="llm", retry=False), llms=LinkerLLMs(sel, sco, None))
        res = linker.link("薯蓣")
    user = sel.calls[0][-1]["content"]
    assert "\n1. 山药" in user and "\n0. " not in user
    assert res.chosen_id is not None and res.label == "山药" and not res.abstained
    fenced = re.search(r"<(candidates-[0-9a-f]+)>(.*)</\1>", user, re.S)  # the candidates' fence carries a per-prompt nonce
    shown = len(re.findall(r"^\d+\. ", fenced.group(2), re.M))
    assert sel.schemas[0]["properties"]["choice"]["enum"] == [-1, *range(1, shown + 1)]
    assert sco.schemas[0]["properties"]["alternatives"]["maxItems"] == 3


def test_extract_decodes_triples_under_the_relation_set(tmp_path):
    from bencao.data_gen.extract import ExtractConfig, run_extract
    from bencao.llm import LLMConfig
    from tests.data_gen_helpers import build_graph

    base = build_graph(tmp_path / "graph")
    g = tmp_path / "g2"
    shutil.copytree(base, g)
    reply = {"triples": [{"head": "大枣", "relation": "treats", "tail": "心腹邪气", "confidence": 0.9},
                         {"head": "大枣", "relation": "上药百二十种", "tail": "甘"}]}  # an engine without grammars: one unknown
    inner = SchemaClient(lambda m: json.dumps(reply, ensure_ascii=False))
    cfg = ExtractConfig(graph=str(g), output=str(tmp_path / "out"), documents=["神农本草经"], sections=["大枣"], limit=1,
                        relations=["treats", "has_flavour"], attributes=False, progress=False, llm=LLMConfig(max_concurrency=1),
                        max_triples=5)
    summary = run_extract(cfg, client=inner)
    assert inner.schemas[0]["properties"]["triples"]["maxItems"] == 5  # a grammar stops the list before the token budget does
    triples = inner.schemas[0]["properties"]["triples"]["items"]
    assert sorted(triples["properties"]["relation"]["enum"]) == ["has_flavour", "treats"]
    assert triples["properties"]["head"]["maxLength"] == cfg.max_entity_chars
    # written in the prompt's order: a grammar makes the model write the relation before the tail
    assert list(triples["properties"])[:4] == ["head", "head_type", "relation", "tail"]
    assert summary["triples"] == 1 and summary["dropped"] == {"unknown_relation": 1}


@pytest.mark.parametrize("lang, question", [("zh", "山药有什么功效？"), ("en", "What does yam do?")])
def test_the_understanding_prompt_shows_a_worked_example_not_placeholders(lang, question):
    """The 0.5B model copied the output line's placeholders ("原文", "as written") as mentions; the prompt now shows a
    worked example whose every mention is written in its example question, and sends entity/keyword bounds."""
    from bencao.prompting import render
    from bencao.serving.understand import QuestionUnderstanding

    user = render("understand", lang, question=question)[-1]["content"]
    example_q = re.search(r"(?:问题：“|Question: \")(.+?)(?:”|\")\n", user).group(1)
    example = json.loads(re.search(r"^(?:输出：|Reply: )(\{.+\})$", user, re.M).group(1))
    mentions = [e["mention"] for e in example["entities"]]
    assert len(mentions) >= 3 and all(m in example_q for m in mentions)
    assert all(k in example_q for k in example["keywords"])
    assert '"mention": "原文"' not in user and '"mention": "as written"' not in user and user.rstrip().endswith(("输出。", "form."))
    inner = SchemaClient(['{"entities": [{"mention": "山药"}], "keywords": ["山药"]}'])
    got = QuestionUnderstanding(inner, max_entities=5).understand_many([question], [lang])[0]
    assert [m.text for m in got.mentions] == ["山药"]
    assert inner.schemas[0]["properties"]["entities"]["maxItems"] == 5 and inner.schemas[0]["properties"]["keywords"]["maxItems"] == 12


def test_the_understanding_decode_schema_bounds_names_and_roles():
    """A vignette's symptom list ran the 0.5B past its token budget inside the JSON: the decode schema bounds each
    name's length, the roles to the three the stage reads, and the history list; the stage's own schema stays loose."""
    import jsonschema

    from bencao.serving.understand import SCHEMA, decoding_schema

    decode = decoding_schema(8)
    ok = {"entities": [{"mention": "恶寒发热", "type": "symptom", "role": "disease"}, {"mention": "大枣", "role": "question"}],
          "keywords": ["恶寒"], "patient": {"sex": "男", "history": ["胸痹"]}}
    jsonschema.validate(ok, decode)
    for bad in ({"entities": [{"mention": "恶" * 25}]}, {"entities": [{"mention": "大枣", "role": "condition"}]},
                {"entities": [], "patient": {"history": ["a", "b", "c", "d", "e"]}}):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, decode)
        jsonschema.validate(bad, SCHEMA)  # the reply is still read under the loose schema (unknown roles become "question")
