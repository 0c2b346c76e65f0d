"""MLKG-RAG's case layer: consultation records, patient index, disease-tree classification,
therapy retrieval down the tree, cross-layer links."""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path

import pytest

from bencao.cli import main
from bencao.errors import BencaoError, InputError
from bencao.retrieval.graph.store import Graph
from bencao.retrieval.ingest.registry import ingest_file
from bencao.retrieval.search.case_entities import PatientInfo, get_understander, register_understander, split_case_entities
from bencao.retrieval.search.cases import CasesConfig, PatientIndex, Similarity, classify_cases, dice, disease_tree
from bencao.retrieval.search.layers import case_therapy, link_layers

REPO = Path(__file__).resolve().parents[1]
CASES = REPO / "data" / "sample" / "cases"
HASHING = {"kinds": ["entities"], "dense_kinds": ["entities"], "shared_cache": False,
           "embedder": {"backend": "hashing", "model": "char-ngram-hash-384", "languages": ["*"]}}


def _hashing_embedder():
    """bench/standin.py's character-n-gram hashing embedder: reads Chinese (not semantics), offline, instant."""
    if str(REPO / "bench") not in sys.path:
        sys.path.insert(0, str(REPO / "bench"))
    importlib.import_module("standin")


def _graph(path: Path) -> Graph:
    g = Graph.create(path)
    b = g.builder(source="本草", kind="book", format="books-txt", content_key="k")
    sec = b.section("本草")
    snip = b.snippet(sec, "萝卜，主消渴。")
    b.triple(b.entity("萝卜粥", "dish"), "treats", b.entity("消渴", "symptom"), confidence=0.9, layer="book", origin="t", snippet=snip)
    b.entity("小麦粥", "dish")
    b.entity("口干", "symptom", aliases=[("口燥", "synonym")])
    g.commit(b)
    return g


def test_understanding_splits_patient_from_disease_information():
    info = split_case_entities("患者，女，65岁，有高血压病史。口干多饮，小便频数，舌红少苔，脉细数。")
    assert (info.patient.sex, info.patient.age, info.patient.age_group) == ("female", 65, "elderly")
    assert info.patient.history == ["高血压病"]
    assert [(d.text, d.category) for d in info.disease] == [("口干", "symptom"), ("多饮", "symptom"), ("小便频数", "symptom"),
                                                           ("舌红", "tongue"), ("少苔", "coating"), ("脉细数", "pulse")]
    child = split_case_entities("男，8岁。咳嗽三天，发热。既往体健。")
    assert (child.patient.sex, child.patient.age_group, child.patient.history) == ("male", "child", [])
    en = split_case_entities("A 45-year-old woman with a history of hypertension and diabetes complains of headache.")
    assert (en.patient.sex, en.patient.age_group, en.patient.history) == ("female", "middle_aged", ["hypertension", "diabetes"])
    assert [d.text for d in en.disease] == ["headache"]  # the history is patient information, not a complaint


def test_graph_aliases_and_a_swapped_in_understander(tmp_path):
    """The graph's disease-type names count, found by their aliases (口燥 → 口干's entity); and the
    stage can be swapped for anything with understand(text) -> CaseInfo (e.g. an LLM)."""
    g = _graph(tmp_path / "g")
    info = get_understander("rules", graph=g).understand("老人口燥，胸中烦热")
    d = {x.text: x for x in info.disease}
    assert d["口燥"].entity_id == g.find_entity_id("口干") and info.patient.age_group == "elderly"

    @register_understander("fixed")
    class Fixed:
        def __init__(self, **kw):
            pass

        def understand(self, text):
            return split_case_entities("女，70岁。口干。")

    assert get_understander("fixed").understand("anything").patient.sex == "female"
    with pytest.raises(Exception, match="unknown case understander"):
        get_understander("nope")
    g.close()


@pytest.fixture()
def case_graph(tmp_path) -> Graph:
    g = _graph(tmp_path / "g")
    ingest_file(g, "disease-tree", CASES / "disease_tree_example.yaml")
    ingest_file(g, "cases-jsonl", CASES / "cases_example.jsonl")
    yield g
    g.close()


def test_cases_loader_one_chunk_per_patient(case_graph):
    g = case_graph
    idx = PatientIndex.of(g)
    assert len(idx.cases) == 60
    c1 = next(c for c in idx.cases.values() if c["case_id"] == "ex001")
    assert (c1["sex"], c1["age"], c1["age_group"], c1["history"]) == ("female", 37, "young_adult", ["慢性胃炎"])
    doc = next(d for d in g.documents() if d["format"] == "cases-jsonl")
    assert doc["kind"] == "case" and doc["n_snippets"] == 60 and doc["meta"]["cases"] == 60
    rel = {t["relation"]: t for t in g.triples_of(c1["id"], "out")}
    assert {"presents", "treated_with"} <= set(rel)
    presents = sorted(t["tail"] for t in g.triples_of(c1["id"], "out", "presents"))
    assert presents == sorted(["消渴", "口干", "小便数"])  # 舌焦 is neither in the lexicon nor a name this graph knows
    # the record's terms are case-layer entities (the book's 消渴 is reached by `graph link-layers`), the dish one the graph knows
    tails = g.get_entities(t["tail_id"] for t in g.triples_of(c1["id"], "out"))
    assert all(e["layer"] == "case" for e in tails.values()) and g.find_entity_id("消渴") not in tails
    assert (tails[rel["treated_with"]["tail_id"]]["name"], tails[rel["treated_with"]["tail_id"]]["type"]) == ("萝卜粥", "dish")
    snip = g.snippets_of_triple(rel["presents"]["id"])[0]
    assert snip["text"].startswith("病例 ex001（女，青年，37岁；既往：慢性胃炎）") and "治疗：萝卜粥" in snip["text"]
    # dialogue records: the turns are the text
    c5 = next(c for c in idx.cases.values() if c["case_id"] == "ex005")
    text = g.snippets_of_triple(g.triples_of(c5["id"], "out", "presents")[0]["id"])[0]["text"]
    assert "医生：哪里不舒服？" in text and "患者：自述" in text


def test_cases_csv_and_bad_records(tmp_path):
    g = _graph(tmp_path / "g")
    doc, added, counts = ingest_file(g, "cases-csv", CASES / "cases_example.csv")
    assert added and len(PatientIndex.of(g).cases) == 10
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"case_id": "a", "text": "口干"}) + "\n" + json.dumps({"case_id": "a", "text": "咳嗽"}) + "\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"bad.jsonl:line 2: duplicate case_id 'a' \(first at line 1\)"):
        ingest_file(g, "cases-jsonl", bad)
    bad.write_text(json.dumps({"case_id": "b", "sex": "unknown", "text": "口干"}) + "\n", encoding="utf-8")
    with pytest.raises(InputError, match="line 1: sex 'unknown' is not a sex"):
        ingest_file(g, "cases-jsonl", bad)
    bad.write_text(json.dumps({"case_id": "c"}) + "\n", encoding="utf-8")
    with pytest.raises(InputError, match="neither 'text' nor 'dialogue'"):
        ingest_file(g, "cases-jsonl", bad)
    nocol = tmp_path / "n.csv"
    nocol.write_text("id,sex\n1,女\n", encoding="utf-8")
    with pytest.raises(InputError, match="missing column 'text'"):
        ingest_file(g, "cases-csv", nocol)
    assert len(PatientIndex.of(g).cases) == 10  # nothing half-written
    g.close()


def test_patient_index_filters(case_graph):
    idx = PatientIndex.of(case_graph)
    women = idx.filter(sex="女")
    assert women and women == idx.filter(sex="F") == idx.filter(sex="female")
    old_diabetic = idx.filter(age_group="老年", history="糖尿")
    assert old_diabetic == idx.filter(age_group="elderly", history=["糖尿病"])
    for cid in old_diabetic:
        assert idx.cases[cid]["age_group"] == "elderly" and any("糖尿" in h for h in idx.cases[cid]["history"])
    assert set(idx.filter(sex="男")) | set(women) == set(idx.cases)
    with pytest.raises(BencaoError, match="not a sex"):
        idx.filter(sex="x")


def test_classification_descends_the_tree(case_graph):
    g = case_graph
    _, roots = disease_tree(g)
    assert len(roots) == 8 and sum(len(r.children) for r in roots) == 22
    report = classify_cases(g, None, CasesConfig())
    assert report["classified"] == 60 and report["similarity"] == "lexical"
    leaf = {t["head"]: t["attributes"]["level2"] for t in g.iter_triples(relation="classified_as")}
    assert leaf["病例 ex001"] == "消渴" and leaf["病例 ex004"] == "中风" and leaf["病例 ex058"] == "痔"
    # classifying again replaces the previous document
    first = report["document"]
    again = classify_cases(g, None, CasesConfig(similarity="lexical", beam=1))
    docs = [d["id"] for d in g.documents() if d["format"] == "case-classification"]
    assert docs == [again["document"]] and (again["document"] == first or first in again["replaced"])
    # a stated diagnosis that names a leaf decides
    d = g.dir / "one.jsonl"
    d.write_text(json.dumps({"case_id": "dx", "text": "患者咳嗽。", "diagnosis": "泄泻"}, ensure_ascii=False) + "\n", encoding="utf-8")
    ingest_file(g, "cases-jsonl", d)
    r = classify_cases(g, None, CasesConfig())
    assert r["by_method"]["diagnosis"] >= 1
    assert {t["head"]: t["attributes"]["level2"] for t in g.iter_triples(relation="classified_as")}["病例 dx"] == "泄泻"


def test_therapy_retrieval_returns_the_leafs_cases_for_the_patient(case_graph):
    g = case_graph
    classify_cases(g, None)
    res = case_therapy(g, None, "女，68岁，有糖尿病史。口干多饮，小便频数，怎么食疗？")
    assert [lvl[0]["name"] for lvl in res.path] == ["气血津液病类", "消渴"]
    assert res.patient == {"age_group": "elderly", "sex": "female", "age": 68, "history": ["糖尿病"]}
    assert res.disease == ["口干", "多饮", "小便频数"] and res.similarity == "lexical"
    assert res.cases and all(c["classification"][1]["name"] == "消渴" for c in res.cases)
    best = max(len(c["patient_match"]) for c in res.cases)
    assert all(len(c["patient_match"]) == best for c in res.cases)  # the closest patients only
    snips = res.snippets()
    assert snips[0].via == ["therapy-case"] and snips[0].case["classification"] == ["气血津液病类", "消渴"]
    assert snips[0].to_dict()["classification"] == ["气血津液病类", "消渴"]  # the evidence JSON keeps the case fields flat
    # an explicit patient narrows it: men of 50–59 with diabetes among the 消渴 cases
    men = case_therapy(g, None, "口干，小便频数", patient=PatientInfo("middle_aged", "male", None, ["糖尿病"]))
    assert men.cases and all(set(c["patient_match"]) == {"age_group", "sex", "history:糖尿病"} for c in men.cases)
    # no tree / nothing classified: empty, with the reason
    assert "no disease information" not in " ".join(res.notes)


def test_therapy_without_classification_says_why(tmp_path):
    g = _graph(tmp_path / "g")
    res = case_therapy(g, None, "口干")
    assert not res.cases and "no classified cases" in res.notes[0]
    g.close()


def test_link_layers_with_an_embedder_that_reads_chinese(case_graph):
    """With an embedder that reads Chinese the case layer is linked through its case terms (never
    whole records); with English MiniLM the Chinese entities are skipped and counted."""
    from bencao.retrieval.index import open_indexes, update_indexes

    _hashing_embedder()
    g = case_graph
    b = g.builder(source="terms", kind="ontology", format="test-terms", content_key="terms")
    b.entity("消渴病", "disease", layer="terminology", description="口渴多饮、小便频数的病证。")
    b.entity("中风病", "disease", layer="terminology", description="猝然昏仆，口眼斜，半身不遂。")
    g.commit(b)
    update_indexes(g, HASHING)
    ix = open_indexes(g, HASHING)
    report = link_layers(g, ix, source_layer="terminology", target_layer="case", delta=0.9)
    n_terms = g.conn.execute("SELECT COUNT(*) FROM entities WHERE layer='case' AND type != 'case'").fetchone()[0]
    assert report["source"] == 2 and report["target"] == n_terms >= 10 and report["source_unreadable"] == 0
    assert (report["exact"], report["dense"], report["links"]) == (0, 2, 2)
    first_doc = report["document"]
    again = link_layers(g, ix, source_layer="terminology", target_layer="case", delta=0.9)  # replaces, no duplicate document
    assert len([d for d in g.documents() if d["format"] == "layer-links"]) == 1 and again["links"] == report["links"]
    assert again["document"] == first_doc or first_doc in again["replaced"]
    classify_cases(g, ix, CasesConfig(similarity="dense"))  # the hashing vectors read Chinese: dense works
    # 消渴病's nearest case-layer entity is the term 消渴 (no patient record is a link end)
    linked = {g.get_entity(s)["name"]: g.get_entity(d) for s, d in g.conn.execute("SELECT src_id, dst_id FROM links WHERE kind='explains'")}
    assert (linked["消渴病"]["name"], linked["消渴病"]["layer"]) == ("消渴", "case") and linked["中风病"]["name"] == "中风"
    assert all(e["type"] != "case" for e in linked.values())
    res = case_therapy(g, ix, "口干多饮，小便频数", CasesConfig(similarity="dense", k_cases=60))
    assert res.similarity == "dense"
    ex046 = next(c for c in res.cases if c["name"] == "病例 ex046")  # 消渴、口干、小便频数: explained through its term 消渴
    assert [e["name"] for e in ex046["explanations"]] == ["消渴病"] and ex046["explanations"][0]["description"].startswith("口渴多饮")


def test_link_layers_reports_what_minilm_cannot_read(case_graph):
    from bencao.retrieval.index import open_indexes

    g = case_graph
    ix = open_indexes(g, {"kinds": [], "dense_kinds": [], "shared_cache": False})
    report = link_layers(g, ix, source_layer="classification", target_layer="case", delta=0.35)
    # class names written as case terms (消渴, 中风 ...) link by name; MiniLM reads none of the others
    assert report["exact"] > 0 and report["dense"] == 0 and report["source"] == 30
    assert report["source_unreadable"] == 30 - len({s for s, _ in g.conn.execute("SELECT src_id, dst_id FROM links")})
    assert report["languages"] == ["en"] and report["links"] == report["exact"]
    with pytest.raises(BencaoError, match="no entity of layer 'nope'"):
        link_layers(g, ix, source_layer="nope", target_layer="case")


def test_similarity_modes():
    assert dice("口干多饮", "口干") == pytest.approx(2 * 1 / (3 + 1))
    assert Similarity(None, "auto", ["口干"]).mode == "lexical"
    with pytest.raises(BencaoError, match="similarity=dense"):
        Similarity(None, "dense", ["口干"])


def test_cli_cases_and_link_layers(tmp_path, capsys):
    g = _graph(tmp_path / "g")
    g.close()
    d = str(tmp_path / "g")
    assert main(["graph", "add", str(CASES / "disease_tree_example.yaml"), "--graph", d, "--format", "disease-tree"]) == 0
    assert main(["graph", "add", str(CASES / "cases_example.jsonl"), "--graph", d, "--format", "cases-jsonl"]) == 0
    capsys.readouterr()

    def documents() -> int:
        assert main(["graph", "stats", "--graph", d, "--json"]) == 0
        return json.loads(capsys.readouterr().out)["documents"]

    # --dry-run files nothing; the deprecated --retrieval-config is still read (as --set retrieval=...; no index here: unused)
    before = documents()
    assert main(["graph", "cases", "classify", "--graph", d, "--dry-run", "--retrieval-config", "configs/retrieval/default.yaml"]) == 0
    assert "would file 60 of 60 cases" in capsys.readouterr().out
    assert documents() == before
    assert main(["graph", "cases", "classify", "--graph", d, "--set", "retrieval=configs/retrieval/default.yaml"]) == 0
    out = capsys.readouterr().out
    assert "filed 60 of 60 cases" in out and "气血津液病类 / 消渴" in out
    assert main(["graph", "cases", "list", "--graph", d, "--sex", "女", "--age-group", "老年", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows and all(r["sex"] == "female" and r["age_group"] == "elderly" for r in rows)
    assert main(["graph", "cases", "therapy", "口干多饮，小便频数", "--graph", d, "--sex", "男"]) == 0
    out = capsys.readouterr().out
    assert "level 2: 消渴" in out and "治疗：" in out
    assert main(["graph", "link-layers", "--graph", d, "--source", "terminology", "--target", "case"]) == 2
    assert "no entity of layer 'terminology'" in capsys.readouterr().err
    # by default the name links only: the embedding step is opt-in (its links were judged less precise)
    assert main(["graph", "link-layers", "--graph", d, "--source", "book", "--target", "case"]) == 0
    out = capsys.readouterr().out
    assert "4 links book → case: 4 by name;" in out and " by embedding with" not in out and "--embedding adds" in out
    # the embedder's options without --embedding: one usage line, nothing linked anew
    assert main(["graph", "link-layers", "--graph", d, "--source", "book", "--target", "case", "--delta", "0.2"]) == 2
    assert "add --embedding" in capsys.readouterr().err
    # --embedding, no index, Chinese layers, no trained static-zh model here: the name links, and how to train one
    assert main(["graph", "link-layers", "--graph", d, "--source", "book", "--target", "case", "--embedding"]) == 0
    out = capsys.readouterr().out
    assert "4 links book → case" in out and "4 by name, 0 by embedding with no embedder" in out
    assert "no embedder here reads Chinese" in out and "--config embed/static-zh" in out
    assert main(["graph", "link-layers", "--graph", d, "--source", "book", "--target", "case", "--embedding",
                 "--set", "index.dense_kinds=[]"]) == 0
    out = capsys.readouterr().out
    assert "4 links book → case" in out and "cannot read" in out and "retrieval/static-zh" in out


def test_retriever_adds_the_case_therapy_with_one_call(case_graph):
    from bencao.retrieval.search.retriever import Retriever

    classify_cases(case_graph, None)
    ev = Retriever(case_graph).retrieve("女，68岁，有糖尿病史。口干多饮，小便频数，怎么食疗？")
    assert any("therapy-case" in s.via for s in ev.snippets)


def test_disease_tree_csv_and_errors(tmp_path):
    g = Graph.create(tmp_path / "g")
    csv_tree = tmp_path / "tree.csv"
    csv_tree.write_text("level1,level1_code,level2,level2_code,keywords\n气血津液病类,BNV,消渴,BNV060,口干|多饮\n气血津液病类,BNV,虚劳,BNV090,\n肺系病类,BNF,咳嗽,,咳痰\n",
                        encoding="utf-8")
    ingest_file(g, "disease-tree", csv_tree)
    doc, roots = disease_tree(g)
    assert [(r.name, [c.name for c in r.children]) for r in roots] == [("气血津液病类", ["消渴", "虚劳"]), ("肺系病类", ["咳嗽"])]
    assert roots[0].children[0].keywords == ["口干", "多饮"] and roots[0].children[0].code == "BNV060"
    assert g.entities_by_alias("BNV060")[0]["name"] == "消渴"  # codes are xref aliases
    bad = tmp_path / "bad.yaml"
    bad.write_text("classes:\n  - {name: 肺系病类, children: [{keywords: [x]}]}\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"bad.yaml:class 0.0: every class needs a non-empty 'name'"):
        ingest_file(g, "disease-tree", bad)
    bad.write_text("name: x\n", encoding="utf-8")
    with pytest.raises(InputError, match="'classes' list"):
        ingest_file(g, "disease-tree", bad)
    with pytest.raises(BencaoError, match="no disease tree 'nope'"):
        disease_tree(g, "nope")
    g.close()


def test_llm_classifier_chooses_the_leaf_and_the_rule_backs_it_up(case_graph):
    prompts = []

    def llm(prompt: str) -> str:
        prompts.append(prompt)
        leaves = [line for line in prompt.splitlines() if line[:1].isdigit()]
        if "ex001" in prompt:
            return "```json\n{\"choice\": %d}\n```" % next(i for i, x in enumerate(leaves) if x.endswith("/ 痔"))
        return "I am not sure."  # unreadable: the rule decides

    report = classify_cases(case_graph, None, CasesConfig(), llm=llm)
    assert report["by_method"]["llm"] == 1 and report["by_method"]["lexical"] == 59
    leaf = {t["head"]: t["attributes"]["level2"] for t in case_graph.iter_triples(relation="classified_as")}
    assert leaf["病例 ex001"] == "痔" and leaf["病例 ex002"] == "消渴"
    assert len(prompts) == 60 and "气血津液病类 / 消渴" in prompts[0]
