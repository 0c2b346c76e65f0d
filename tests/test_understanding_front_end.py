"""Yaoshi-RAG's front end: what the question-understanding LLM extracts reaches retrieval (issue 27, item 2).

Keywords → their top candidate entities (BM25 + dense) → the LLM selector; a mention the question
does not spell out (脾虚证 for 脾胃虚弱) is linked like any other; the patient block filters the case
layer's therapy retrieval. Each through the one pipeline, its LLM stages behind the loopback server.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from llm_loopback import scripted_endpoint, stage_of

from bencao.retrieval.graph.store import Graph
from bencao.serving.config import load_serve_config
from bencao.serving.pipeline import AnswerPipeline
from bencao.serving.tasks import Query

REPO = Path(__file__).resolve().parents[1]
CASES = REPO / "data" / "sample" / "cases"
#: twelve entities whose names hold 阴虚: more than the ten candidates a keyword shows the selector
YIN_XU = ["阴虚火旺", "肺阴虚", "肾阴虚", "胃阴虚", "心阴虚", "肝阴虚", "脾阴虚", "阴虚发热", "阴虚内热", "阴虚阳亢", "阴虚血燥"]


def _pipeline(tmp_path: Path, graph_dir: Path, ep, **recipe) -> AnswerPipeline:
    cfg = tmp_path / "front.yaml"
    cfg.write_text(yaml.safe_dump({"understand": {"llm": ep.llm()}, "answerer": "none", **recipe}, allow_unicode=True), encoding="utf-8")
    return AnswerPipeline(graph_dir, load_serve_config(cfg))


@pytest.fixture()
def case_graph(tmp_path):
    from bencao.retrieval.ingest.registry import ingest_file
    from bencao.retrieval.search.cases import classify_cases

    g = Graph.create(tmp_path / "cases")
    b = g.builder(source="本草", kind="book", format="books-txt", content_key="k")
    snip = b.snippet(b.section("本草"), "萝卜，主消渴。")
    b.triple(b.entity("萝卜粥", "dish"), "treats", b.entity("消渴", "symptom"), confidence=0.9, layer="book", origin="t", snippet=snip)
    b.entity("口干", "symptom", aliases=[("口燥", "synonym")])
    g.commit(b)
    ingest_file(g, "disease-tree", CASES / "disease_tree_example.yaml")
    ingest_file(g, "cases-jsonl", CASES / "cases_example.jsonl")
    classify_cases(g, None)
    g.close()
    return tmp_path / "cases"


def test_the_patient_block_reaches_the_case_layer(case_graph, tmp_path):
    """The question says nothing of the patient; the understanding stage's patient block (the consultation's
    other turns, say) makes the case layer keep middle-aged men with diabetes."""

    def route(messages):
        assert stage_of(messages) == "understand"
        return json.dumps({"entities": [], "keywords": [], "patient": {"age_group": "中年", "sex": "男", "history": ["糖尿病"]}},
                          ensure_ascii=False)

    with scripted_endpoint(route) as ep:
        p = _pipeline(tmp_path, case_graph, ep)
        a = p.run([Query("口干，小便频数，怎么食疗？")], answer=False)[0]
    assert a.understanding["patient"] == {"age_group": "中年", "sex": "男", "history": ["糖尿病"]}
    cases = [s for s in a.evidence.snippets if "therapy-case" in s.via]
    assert cases and all(set(s.case["patient_match"]) == {"age_group", "sex", "history:糖尿病"} for s in cases)
    assert a.evidence.stats["case_patient"] == {"age_group": "middle_aged", "sex": "male", "history": ["糖尿病"]}


def test_patient_block_words_read_through_the_case_lexicon():
    from bencao.retrieval.search.case_entities import PatientInfo, patient_info

    assert patient_info({"age_group": "老年", "sex": "女", "history": ["糖尿病", "无"]}) == PatientInfo("elderly", "female", None, ["糖尿病"])
    assert patient_info({"age_group": "68岁", "sex": "male"}) == PatientInfo("elderly", "male", 68, [])
    # what the lexicon does not know is left out, never an error that stops retrieval
    assert patient_info({"age_group": "不详", "sex": "未知", "history": "高血压"}) == PatientInfo(None, None, None, ["高血压"])
    assert patient_info(None).is_empty()
