"""Issue 32: answers a TCM reader can trust — classical names found, conflicting sources attributed, "not in the
knowledge base" when the asked relation is absent, every fact with its sources; and issue 33 item 4's LLM-free half:
a passage addressed to the reader is never printed as an answer, in any script or width.

The graph: the MFH catalogue, the FoodOn demo subset, iDISK's 400 ingredients and four classics (神农本草经, 食疗本草,
饮膳正要, 千金食治), lexical indexes; built once for the module (a few seconds)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bencao.retrieval.evidence import Evidence, LinkedEntity, SnippetHit, TripleHit
from bencao.serving.graph_answerer import GraphAnswerer

REPO = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).parent / "fixtures"

RECIPE = """\
name: trust-test
root: {root}
index: true
index_config: retrieval/lexical
sources:
  - format: catalog-csv
    path: data/sample/mfh_catalog/mfh_catalog_106.csv
  - format: foodon-jsonl
    path: data/sample/foodon/foodon_demo_subset.jsonl
    title: FoodOn
  - format: kb-csv
    path: data/sample/idisk/DSI_names_400.csv
    title: iDISK 2.0 dietary supplement ingredients
    options: {{mapping: configs/graph/idisk_dsi.yaml}}
  - format: books-txt
    path: data/sample/tcm_classics/txt/000-神农本草经.txt
    options: {{materia_medica: auto}}
  - format: books-txt
    path: data/sample/tcm_classics/txt/004-食疗本草.txt
    options: {{materia_medica: auto}}
  - format: books-txt
    path: data/sample/tcm_classics/txt/009-饮膳正要.txt
    options: {{materia_medica: auto}}
  - format: books-txt
    path: data/sample/tcm_classics/txt/523-千金食治.txt
    options: {{materia_medica: auto}}
"""


def build_trust_graph(base: Path) -> Path:
    from bencao.retrieval.build import build_graph, load_build_config

    recipe = base / "recipe.yaml"
    recipe.write_text(RECIPE.format(root=REPO), encoding="utf-8")
    cfg, root = load_build_config(recipe)
    build_graph(cfg, root, base / "graph")
    return base / "graph"


@pytest.fixture(scope="module")
def graph(tmp_path_factory) -> Path:
    return build_trust_graph(tmp_path_factory.mktemp("trust"))


@pytest.fixture(scope="module")
def pipe(graph):
    from bencao.serving.config import load_serve_config
    from bencao.serving.pipeline import AnswerPipeline

    return AnswerPipeline(graph, load_serve_config("serving/default"))


def ask(pipe, question: str) -> dict:
    return pipe.answer_many([question])[0]


def cited(res: dict, line: str) -> list[dict]:
    """The references an answer line cites ([n])."""
    import re

    ns = [int(n) for n in re.findall(r"\[(\d+)\]", line)]
    return [r for r in res["references"] if r["n"] in ns]


# --------------------------------------------------------------------------- item 1: classical names


def test_a_classical_name_finds_the_canonical_substance_and_its_book_entry(pipe):
    res = ask(pipe, "薯蓣有什么功效？")
    lines = res["answer"].splitlines()
    assert not res["abstained"] and lines[0] == "薯蓣：即山药（别名，见《食疗本草》）", res["answer"]
    ents = {e["name"]: e for e in res["evidence"]["entities"] if "question" in e["roles"]}
    assert "'薯蓣' (book_variant, 食疗本草)" in ents["山药"]["rationale"]  # linking says which alias matched
    assert "署豫" in ents and "same-name" in ents["署豫"]["via"]  # 神农本草经's entry (旧作薯蓣) is the same substance
    shen = [ln for ln in lines if ln.startswith("署豫的功效：") and "《神农本草经》" in ln]
    assert shen and all(r["path"][0] == "神农本草经" for r in cited(res, shen[0])), res["answer"]


def test_a_variant_writing_finds_the_entries_of_that_name(pipe):
    res = ask(pipe, "栝楼的功效")
    lines = res["answer"].splitlines()
    assert not res["abstained"] and lines[0] == "栝楼：见栝蒌根（书中以其部位立条，见《神农本草经》）", res["answer"]
    fact = next(ln for ln in lines if ln.startswith("栝蒌根主治消渴"))
    assert [r["path"][-1] for r in cited(res, fact)] == ["栝蒌根"]
    assert any(r["path"][-1] == "栝蒌（瓜蒌）" for r in res["references"])  # 食疗本草's entry, headed in the other writing


# --------------------------------------------------------------------------- item 2: conflicting sources attributed


def test_conflicting_natures_are_given_source_by_source_with_their_citations(pipe):
    res = ask(pipe, "大枣的性味")
    lines = res["answer"].splitlines()
    assert lines[0] == "大枣的性味，各来源所载不同：", res["answer"]
    shen = next(ln for ln in lines if ln.startswith("《神农本草经》："))
    qian = next(ln for ln in lines if ln.startswith("《千金食治》："))
    assert shen.startswith("《神农本草经》：味甘，性平 [") and qian.startswith("《千金食治》：味甘、辛，性热 [")
    assert [r["path"][0] for r in cited(res, shen)] == ["神农本草经"] and [r["path"][0] for r in cited(res, qian)] == ["千金食治"]
    # the confidence shown is explained: how many sources, how they agree
    assert "性平 0.60（仅见于《神农本草经》；另有1个来源作热）" in res["answer"]
    assert "味甘 0.60（2个来源同载：《神农本草经》《千金食治》）" in res["answer"]


def test_the_generator_sees_each_value_with_the_books_that_give_it(pipe):
    from bencao.serving.answer import generator_context
    from bencao.serving.tasks import Query

    ev = Evidence.from_dict(ask(pipe, "大枣的性味")["evidence"])
    ctx = generator_context(Query("大枣的性味"), ev)
    line = next(it.text for it in ctx.items if it.kind == "entity" and it.text.startswith("大枣"))
    assert "nature: 平 (《神农本草经》); 热 (《千金食治》)" in line and "flavour: 甘 (《神农本草经》、《千金食治》); 辛 (《千金食治》)" in line


def test_a_fact_line_names_its_sources_and_how_they_agree():
    def t(tail, rel, sources, conf=0.6):
        return TripleHit(id=f"T{tail}", head_id="Z", head="大枣", relation=rel, tail_id=f"X{tail}", tail=tail, confidence=conf,
                         sources=sources)

    ev = Evidence(question="大枣的功效", entities=[LinkedEntity(id="Z", name="大枣", mention="大枣", roles=["question"], confidence=1)],
                  triples=[t("安中养脾", "has_effect", ["神农本草经", "千金食治"]), t("补中益气", "has_effect", ["千金食治"])])
    res = GraphAnswerer().answer("大枣的功效", ev)
    assert "大枣的功效：安中养脾（置信度 0.60：2个来源同载：《神农本草经》《千金食治》） [神农本草经]" in res["answer"], res["answer"]
    assert "大枣的功效：补中益气（置信度 0.60：仅见于《千金食治》） [千金食治]" in res["answer"]


# --------------------------------------------------------------------------- item 3: iDISK's rule


@pytest.mark.parametrize("question, not_said", [
    ("生姜能治疗消渴吗", "主消渴"),                       # 瓠子汤's 主消渴 holds 生姜汁, but no fact ties 生姜 to 消渴
    ("Does ginger help with nausea?", "ginger root is a root"),
    ("Can honey cure diabetes?", "drawn can"),
])
def test_not_in_the_knowledge_base_when_no_fact_links_the_entity_to_the_condition(pipe, question, not_said):
    res = ask(pipe, question)
    first = res["answer"].splitlines()[0]
    assert res["abstained"] and first in ("知识库中没有找到与该问题相关的内容。", "The knowledge base has nothing on this question."), res["answer"]
    answer_part = res["answer"].split("\n", 1)[1] if "\n" in res["answer"] else ""
    assert not_said not in res["answer"].split("Related")[0].split("相关内容")[0]
    if answer_part:  # what was found is offered as related, under a line saying it is no answer
        assert answer_part.splitlines()[0] in ("相关内容（并非对该问题的回答）：", "Related (not an answer to the question):")


def test_a_fact_linking_the_entity_to_the_condition_answers(pipe):
    res = ask(pipe, "生姜能止呕吗？")
    assert not res["abstained"] and "生姜主治呕（置信度 0.60：仅见于《饮膳正要》） [" in res["answer"], res["answer"]
    res = ask(pipe, "Is almond a drupe fruit?")
    assert not res["abstained"] and "almond is a drupe fruit (confidence 1.00; 1 source: FoodOn) [FoodOn]" in res["answer"]


def test_abstention_set_precision_and_recall(pipe):
    """The constructed set (tests/fixtures/abstention/questions.jsonl: 32 answerable, 32 not, Chinese and English):
    abstention precision and recall both at least 0.9 (bench/abstention.py prints the table; bench/RESULTS.md)."""
    import sys

    sys.path.insert(0, str(REPO / "bench"))
    from abstention import measure

    rows = [json.loads(ln) for ln in (FIXTURES / "abstention" / "questions.jsonl").read_text(encoding="utf-8").splitlines() if ln.strip()]
    assert len(rows) >= 60 and sum(r["answerable"] for r in rows) * 2 == len(rows) and {r["lang"] for r in rows} == {"zh", "en"}
    res = measure(pipe, rows)["all"]
    assert res["precision"] >= 0.9 and res["recall"] >= 0.9, res


def test_yes_no_questions_and_their_conditions():
    from bencao.serving.question_shape import condition_text, is_yes_no, names_match

    assert all(is_yes_no(q) for q in ["生姜能治疗消渴吗？", "大枣是否有毒", "Does ginger help with nausea?", "Is almond a nut?"])
    assert not any(is_yes_no(q) for q in ["山药有什么功效？", "这是什么", "What does honey treat?"])
    assert condition_text("生姜能治疗消渴吗", ["生姜"]) == "消渴"
    assert condition_text("Does durian lower blood pressure?", ["durian"]) == "blood pressure"
    assert names_match("止呕", "呕") and names_match("消渴", "热中消渴") and names_match("nausea", "nausea and vomiting")
    assert not names_match("热病", "热") and not names_match("blood pressure", "blood")


# --------------------------------------------------------------------------- issue 33 item 4: no sentence addressed to the reader


def _variants() -> list[dict]:
    return [json.loads(ln) for ln in (FIXTURES / "injection" / "addressed_variants.jsonl").read_text(encoding="utf-8").splitlines() if ln.strip()]


@pytest.mark.parametrize("row", _variants(), ids=lambda r: r["variant"])
def test_a_passage_addressed_to_the_reader_is_never_an_answer_in_any_script(row):
    from bencao.serving.screening import addressed_to_reader

    assert addressed_to_reader(row["text"])
    subject = row["subject"]
    zh = row["lang"] == "zh"
    legit = f"{subject}，味甘，平。主补中益气。" if zh else f"{subject.capitalize()} is sweet; {subject} is used to support digestion."
    for question in ([f"{subject}有什么功效？", f"{subject}能补中益气吗？"] if zh else [f"What is {subject} used for?", f"Is {subject} toxic?"]):
        ev = Evidence(question=question,
                      entities=[LinkedEntity(id="E1", name=subject, mention=subject, roles=["question"], confidence=1.0, score=1.0)],
                      snippets=[SnippetHit(id="P1", text=f"{subject}。{row['text']}", path=["注入", subject], score=0.9),
                                SnippetHit(id="P2", text=legit, path=["本草", subject], score=0.5)])
        res = GraphAnswerer().answer(question, ev)
        assert row["claim"] not in res["answer"].lower() and "[1]" not in res["answer"], (question, res["answer"])


def test_the_sources_own_directions_are_not_taken_for_instructions():
    from bencao.serving.screening import addressed_to_reader

    for text in ["孕妇忌服。", "医者必须详察病情。", "病人服之，三日愈。", "Take with warm water; do not exceed 10 g a day.",
                 "The patient should avoid cold food.", "告之以其败，语之以其善。", "凡服此药，忌食生冷。"]:
        assert not addressed_to_reader(text), text
    for book in sorted((REPO / "data" / "sample" / "tcm_classics" / "txt").glob("*.txt")):
        flagged = [ln for ln in book.read_text(encoding="utf-8").splitlines() if ln.strip() and addressed_to_reader(ln)]
        assert flagged == [], (book.name, flagged[:3])
