"""Grounding of the LLM teacher: the Retriever over the graph's indexes by default, the alias/BM25 grounder without them."""

from __future__ import annotations

import json
import shutil

import pytest

from bencao.data_gen.cot import CotDistillConfig, run_cot
from bencao.data_gen.grounding import make_grounder, resolve_grounding
from bencao.data_gen.personal import write_reasoning
from bencao.errors import ConfigError
from bencao.llm import LLMConfig
from bencao.retrieval.graph.store import Graph
from tests.data_gen_helpers import QUESTIONS, build_graph, write_questions
from tests.llm_fixtures import ScriptedClient
from tests.test_data_gen_cot import _teacher_script

BANXIA = "神农本草经 / 卷三 / 下经 / 半夏"
QUERY = [{"head": "半夏", "relation": "主治", "tail": "头眩胸胀"}]


@pytest.fixture(scope="module")
def plain_graph(tmp_path_factory):
    return build_graph(tmp_path_factory.mktemp("plain") / "graph")


@pytest.fixture(scope="module")
def indexed_graph(plain_graph, tmp_path_factory):
    from bencao.retrieval.index.build import IndexConfig, update_indexes

    d = tmp_path_factory.mktemp("indexed") / "graph"
    shutil.copytree(plain_graph, d)
    with Graph.open(d) as g:
        update_indexes(g, IndexConfig(dense_kinds=[]))  # BM25 only: no embedder needed for Chinese
    return d


def test_auto_picks_the_retriever_only_when_the_graph_has_indexes(plain_graph, indexed_graph):
    with Graph.open(plain_graph) as g:
        assert resolve_grounding("auto", g) == "graph"
        with pytest.raises(ConfigError, match="unknown strategy 'nope'"):
            resolve_grounding("nope", g)
    with Graph.open(indexed_graph) as g:
        assert resolve_grounding("auto", g) == "retriever" and resolve_grounding("graph", g) == "graph"


def test_retriever_grounding_gives_book_evidence_and_never_teacher_output(indexed_graph, tmp_path):
    d = tmp_path / "graph"
    shutil.copytree(indexed_graph, d)
    with Graph.open(d) as g:
        ground = make_grounder("auto", g, k_triples=6, k_snippets=2)
        ev = ground("下列哪味药主治头眩胸胀？", QUERY)
        assert 0 < len(ev.triples) <= 6 and all(t["layer"] != "personal" for t in ev.triples)
        assert any(t["head"] == "半夏" for t in ev.triples)
        assert BANXIA in [s["source"] for s in ev.snippets] and "头眩胸胀" in next(s["text"] for s in ev.snippets if s["source"] == BANXIA)
        assert len({s["id"] for s in ev.snippets}) == len(ev.snippets)

        # an earlier reasoning text supports a book triple (M2) and adds a personal one: neither comes back
        doc, tids, _ = write_reasoning(g, question_id="q", question="半夏主治？", reasoning="半夏燥湿化痰，主头眩胸胀，亦主咽痛。",
                                       triples=[{"head": "半夏", "relation": "treats", "tail": "头眩胸胀"},
                                                {"head": "半夏", "relation": "主治", "tail": "咽痛"}], model="m", confidence=0.6)
        reasoning_snips = {s["id"] for s in g.iter_snippets(doc)}
        assert {g.get_triple(t)["layer"] for t in tids} == {"book", "personal"}
        ev2 = make_grounder("retriever", g, k_triples=30, k_snippets=10)("半夏主治什么？", QUERY + [{"head": "半夏", "relation": "主治", "tail": "咽痛"}])
        assert ev2.triples and all(t["layer"] != "personal" for t in ev2.triples)
        assert not reasoning_snips & {s["id"] for s in ev2.snippets}
        assert BANXIA in [s["source"] for s in ev2.snippets]


def test_llm_teacher_grounds_through_the_retriever_by_default(indexed_graph, tmp_path):
    d = tmp_path / "graph"
    shutil.copytree(indexed_graph, d)
    client = ScriptedClient(_teacher_script)
    q = write_questions(tmp_path / "q.jsonl", [QUESTIONS[0]])
    s = run_cot(CotDistillConfig(graph=str(d), input=str(q), output=str(tmp_path / "out"), teacher="llm", languages=["zh"], progress=False,
                          llm=LLMConfig(max_concurrency=1)), client=client)
    assert s["grounding"] == "retriever" and s["done"] == 1
    reason = next(m[-1]["content"] for m in client.calls if "逐步推理" in m[-1]["content"])
    evidence = reason.split("相关原文：")[1]
    assert BANXIA in evidence and "（半夏，" in reason.split("相关原文：")[0]
    rows = [json.loads(x) for x in (tmp_path / "out" / "train.jsonl").read_text(encoding="utf-8").splitlines() if x]
    rows += [json.loads(x) for x in (tmp_path / "out" / "eval.jsonl").read_text(encoding="utf-8").splitlines() if x]
    assert {r["form"] for r in rows} == {"reasoning", "triples"}
