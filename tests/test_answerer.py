"""LLM-free answers from the evidence: multiple choice, true/false, ranking, 'not in the knowledge base'."""

from __future__ import annotations

import pytest
from retrieval_graphs import build_tcm_graph

from bencao.errors import BencaoError
from bencao.retrieval.search import Retriever
from bencao.serving.config import load_serve_config
from bencao.serving.graph_answerer import GraphAnswerer


class _Asker:
    """Retrieval, then the answerer on that Evidence — as the pipeline does."""

    def __init__(self, retriever: Retriever, answerer: GraphAnswerer):
        self.r, self.a = retriever, answerer

    def mcq(self, q, options):
        ev = self.r.retrieve(q, options=list(options.values()))
        return {**self.a.answer_mcq(q, options, ev), "evidence": ev}

    def tf(self, statement):
        return self.a.answer_tf(statement, self.r.retrieve(statement))

    def rank(self, q, cands):
        return self.a.rank_candidates(q, cands, self.r.retrieve(q, options=cands))

    def answer(self, q):
        return self.a.answer(q, self.r.retrieve(q))


@pytest.fixture(scope="module")
def graph(tmp_path_factory):
    g = build_tcm_graph(tmp_path_factory.mktemp("tcm") / "g")
    yield g
    g.close()


@pytest.fixture(scope="module")
def ask(graph):
    return _Asker(Retriever(graph), GraphAnswerer())


def test_mcq_picks_the_option_the_graph_supports(ask):
    res = ask.mcq("山药的功效是什么？", {"A": "温中止血", "B": "补中益气", "C": "安中养脾", "D": "清热解毒"})
    assert res["answer"] == ["B"] and res["ranking"][0] == "B" and not res["abstained"]
    assert res["scores"]["B"] > res["scores"]["D"]
    assert res["evidence"].entities


def test_mcq_abstains_without_support(ask):
    res = ask.mcq("Which planet is largest?", {"A": "Jupiter", "B": "Mars"})
    assert res["abstained"] and res["answer"] == []
    with pytest.raises(BencaoError):
        ask.a.answer_mcq("山药", {}, ask.r.retrieve("山药"))


def test_true_false(ask):
    assert ask.tf("干姜味辛，温。")["answer"] is True
    res = ask.tf("干姜不温。")
    assert res["answer"] is not True
    assert ask.tf("The moon is made of cheese")["abstained"]


def test_rank_candidates(ask):
    res = ask.rank("味甘的药物", ["干姜", "大枣", "山药"])
    assert set(res["ranking"][:2]) == {"大枣", "山药"}
    assert "干姜" not in res["selected"] or res["scores"]["干姜"] < res["scores"]["大枣"]


def test_free_answer_cites_or_says_not_in_kb_in_the_questions_language(ask):
    res = ask.answer("大枣有什么作用？")
    assert not res["abstained"] and "安中养脾" in res["answer"] and "[1]" in res["answer"]
    res = ask.answer("How do black holes evaporate?")
    assert res["abstained"] and res["answer"] == "The knowledge base has nothing on this question."
    res = ask.answer("黑洞如何蒸发？")
    assert res["abstained"] and res["answer"] == "知识库中没有找到与该问题相关的内容。"


def _first_fact(answer: str) -> str:
    return next(line for line in answer.splitlines() if "(confidence" in line or "（置信度" in line)


@pytest.mark.parametrize("question, fact", [
    ("山药有什么功效？", "山药的功效：补中益气"),  # 功效 → has_effect before the more confident flavour/nature facts, in Chinese
    ("山药的性味", "山药味甘"),
    ("乾薑的性", "干姜性温"),                    # traditional characters fold to simplified, in the mention and the keyword
    ("What are the effects of 山药?", "山药 has effect 补中益气"),
    ("What does 山药 treat?", "山药 has effect"),  # no treats triple here: has_effect is the table's second choice
    ("What is the nature of 干姜?", "干姜 has nature 温"),
])
def test_free_answer_lists_the_asked_relation_first(ask, question, fact):
    res = ask.answer(question)
    assert not res["abstained"] and fact in _first_fact(res["answer"]), res["answer"]


def test_the_asked_facts_cite_the_passage_they_were_read_from(graph):
    """Through the one answering pipeline: the facts the question asks for come with the [n] of their source."""
    from bencao.serving.pipeline import AnswerPipeline

    pipe = AnswerPipeline(graph.dir, load_serve_config(None, ["retrieval.micro.anchored_triples=2"]))
    res = pipe.answer_many(["山药的功效是什么？"])[0]
    line = _first_fact(res["answer"])
    assert line.startswith("山药的功效：补中益气") and line.endswith("]"), res["answer"]
    n = int(line.rsplit("[", 1)[1].rstrip("]"))
    ref = next(r for r in res["references"] if r["n"] == n)
    source = next(s for s in res["evidence"]["snippets"] if s["id"] == ref["snippet_id"])
    assert ref["heading"].endswith("山药") and "补中益气" in source["text"]


def test_chinese_answers_have_no_english_relation_names(ask):
    text = ask.answer("山药")["answer"]
    assert "has_" not in text and "has flavour" not in text and "confidence" not in text
    assert "山药味甘（置信度 0.90：仅见于《神农本草经》） [1]" in text  # the confidence says how many sources give the fact


def test_free_answer_without_intent_orders_by_confidence_and_table_is_configurable(ask):
    assert ask.a.intent_relations("山药") == []
    assert "山药味甘" in _first_fact(ask.answer("山药")["answer"])  # 0.9 before has_effect 0.8
    assert ask.a.intent_relations("大枣的性味") == ["has_flavour", "has_nature"]
    cfg = load_serve_config(None, ["graph_answer.intents={用途: [has_effect]}"])
    assert cfg.graph_answer.intents == {"用途": ["has_effect"]}
    custom = _Asker(ask.r, GraphAnswerer(cfg.graph_answer))
    assert custom.a.intent_relations("山药的性味") == []
    assert "山药的功效" in _first_fact(custom.answer("山药的用途")["answer"])


def test_option_queries_give_each_option_its_retrieval_support(graph):
    from bencao.retrieval.search.macro import holds_option

    r = Retriever(graph)
    options = ["温中止血", "安中养脾", "清热解毒"]
    ev = r.retrieve("哪味药主胸满咳逆上气？", options=options)
    # question + option over the passages that hold the option: 干姜's entry holds 温中止血 and the question's words
    assert len(ev.option_support) == 3 and ev.option_support[0] > ev.option_support[1] > 0 and ev.option_support[2] == 0
    assert any("option:0" in s.via and "温中止血" in s.text for s in ev.snippets)
    res = GraphAnswerer().answer_mcq("哪味药主胸满咳逆上气？", dict(zip("ABC", options)), ev)
    assert res["ranking"][0] == "A"
    assert holds_option("治胸满，温中止血。", "温中止血") and holds_option("肾俞主之，太溪亦可", "肾俞、太溪")
    assert not holds_option("肾俞主之", "肾俞、太溪")
    off = Retriever(graph, load_serve_config(None, ["macro.option_queries=false"]).retrieval).retrieve("哪味药主胸满咳逆上气？", options=options)
    assert off.option_support == []


def test_exception_questions_choose_the_least_supported_option(ask):
    options = {"A": "补中益气", "B": "温中止血", "C": "安中养脾"}
    off = _Asker(ask.r, GraphAnswerer(load_serve_config(None, ["graph_answer.exception_rule=false"]).graph_answer))
    assert not off.mcq("下列哪项不是山药的功效", options)["exception"]
    # with too little support for the options the rule says nothing: the least supported of unsupported options is noise
    assert not ask.mcq("下列哪项不是黑洞的性质", {"A": "蒸发", "B": "自旋", "C": "吸积"})["exception"]
    pos = ask.mcq("山药的功效是", options)
    neg = ask.mcq("下列哪项不是山药的功效", options)
    assert pos["answer"] == ["A"] and not pos["exception"]
    assert neg["exception"] and neg["answer"] != ["A"] and neg["ranking"][-1] == "A"
    assert ask.a.is_exception_question("All of the following are symptoms EXCEPT")  # cues match case-folded
    assert ask.a.is_exception_question("Which of these is not true of ginger?")


def test_a_syndrome_option_is_held_without_its_classifying_suffix():
    from bencao.retrieval.search.macro import holds_option

    assert holds_option("小儿急惊，肝热动风，四肢抽搐。", "肝热动风证")
    assert holds_option("湿热中阻则胃失和降，呕恶不食。", "湿热中阻，胃失和降证")
    assert not holds_option("湿热中阻，呕恶不食。", "湿热中阻，胃失和降证")
    assert not holds_option("见如此。", "证") and holds_option("见证如此。", "证")  # a bare suffix is not stripped to nothing
