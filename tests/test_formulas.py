"""The LLM-free formula extractor and the rule that picks the books each extractor reads."""

from __future__ import annotations

from pathlib import Path

import pytest

from bencao.retrieval.graph.store import Graph
from bencao.retrieval.ingest.book_kinds import formulas_reason, materia_medica_reason
from bencao.retrieval.ingest.formulas import ORIGIN, find_formulas, is_formula_name, parse_ingredient_line
from bencao.retrieval.ingest.registry import ingest_file

TXT = Path(__file__).resolve().parents[1] / "data" / "sample" / "tcm_classics" / "txt"
SHANGHAN = TXT / "457-伤寒论.txt"
SHENNONG = TXT / "000-神农本草经.txt"
CATALOG = Path(__file__).resolve().parents[1] / "data" / "sample" / "mfh_catalog" / "mfh_catalog_106.csv"

# 太平圣惠方's form: the indications, then 宜服X方, the ingredient line, the method; an unnamed 宜服此方 after it
SHENGHUI = ("治肝脏风。筋脉抽掣。口眼偏斜。四肢疼痛。宜服羌活散方。\n"
            "羌活（三分） 白术（三分） 麻黄（三分去根节） 川芎当归（一两） 丹参（三分）\n"
            "上件药。捣粗罗为散。每服三钱。\n"
            "治肝脏风。上焦虚热。宜服此方。\n"
            "柏子仁（一两） 麻黄（一两）\n"
            "上件药。捣罗为末。")
# 世医得效方's form: formula names as \x…\x subheadings (【】 after cleaning), 各 doses
DEXIAO = ("【加味宣风散】\n治肾虚证，疹疮变黑。\n鸡心槟榔（二个） 陈皮（去白） 青皮（去穣） 甘草（炙。各二钱半）\n上为末。"
          "去麦不【独圣散】治疹疮陷入不发。\n穿山甲（汤洗净，炒令焦黄） 甘草（一钱） 芎 （三分）\n上为末。")


def test_formula_names():
    assert is_formula_name("羌活散") and is_formula_name("加味宣风散") and is_formula_name("桂枝去桂加茯苓白术汤")
    assert not is_formula_name("风证通治方") and not is_formula_name("中风方四十一道") and not is_formula_name("民望方")
    assert not is_formula_name("上为散") and not is_formula_name("散")


def test_ingredient_lines_with_doses_preparations_and_each():
    ings = parse_ingredient_line("鸡心槟榔（二个） 陈皮（去白） 青皮（去穣） 甘草（炙。各二钱半）")
    assert [(i.name, i.dose, i.prep) for i in ings] == [("鸡心槟榔", "二个", None), ("陈皮", "二钱半", "去白"),
                                                         ("青皮", "二钱半", "去穣"), ("甘草", "二钱半", "炙")]
    # 圣惠方 writes dose and preparation in one note; a lost character (芎 （三分）) drops only that name
    ings = parse_ingredient_line("麻黄（三分去根节） 芎 （三分） 丹参（三分）")
    assert [(i.name, i.dose, i.prep) for i in ings] == [("麻黄", "三分", "去根节"), ("丹参", "三分", None)]
    assert parse_ingredient_line("上件药。捣粗罗为散。每服三钱。") is None


def test_the_forms_of_the_formula_books_give_separate_entries():
    fs = {f.name: f for f in find_formulas("治肝风诸方", SHENGHUI)}
    assert set(fs) == {"羌活散"}  # 宜服此方 is unnamed: its 柏子仁 is no one's
    qh = fs["羌活散"]
    assert [t for t, _ in qh.treats] == ["肝脏风", "筋脉抽掣", "口眼偏斜", "四肢疼痛"]
    assert [i.name for i in qh.ingredients] == ["羌活", "白术", "麻黄", "川芎当归", "丹参"]  # 川芎当归: a name the check below refuses
    fs = {f.name: f for f in find_formulas("疹疮", DEXIAO)}
    assert set(fs) == {"加味宣风散", "独圣散"}
    assert [t for t, _ in fs["加味宣风散"].treats] == ["肾虚证", "疹疮变黑"]
    assert [(i.name, i.dose) for i in fs["独圣散"].ingredients] == [("穿山甲", None), ("甘草", "一钱")]  # 芎 （…）: a lost character


def test_only_known_substances_become_ingredients(tmp_path):
    book = tmp_path / "圣惠方.txt"
    book.write_text("<篇名>圣惠方\n<目录>卷一\n<篇名>治肝风诸方\n内容：" + SHENGHUI.replace("\n", "\n") + "\n", encoding="utf-8")
    herbal = tmp_path / "本草.txt"
    herbal.write_text("<篇名>小本草\n" + "".join(f"<篇名>{n}\n内容：味苦，平。主风寒。\n" for n in ("羌活", "白术", "麻黄", "丹参", "柏子仁")),
                      encoding="utf-8")
    g = Graph.create(tmp_path / "g")
    ingest_file(g, "books-txt", herbal, {"materia_medica": "auto"})
    doc, _, _ = ingest_file(g, "books-txt", book, {"formulas": "auto"})
    f = next(e for e in g.iter_entities("formula"))
    assert f["name"] == "羌活散"
    comp = {t["tail"]: t["attributes"] for t in g.triples_of(f["id"], "out", "has_ingredient")}
    assert comp == {"羌活": {"dose": "三分"}, "白术": {"dose": "三分"}, "麻黄": {"dose": "三分", "preparation": "去根节"},
                    "丹参": {"dose": "三分"}}  # 川芎当归 is unknown: not a herb; 柏子仁 belongs to the unnamed formula
    meta = g.get_document(doc)["meta"]
    assert meta["formulas"]["ingredients_unknown"] == 1 and meta["books"][0]["extractors"]["chosen_by"] == {"formulas": "title"}


# the errors of the first judged sample (bench/extraction_precision/round1/), as the corpus writes them
YOUKE = ("治霍乱烦渴。【香豆散】\n藿香 肉豆蔻（各一两） 白扁豆 人参（各半两） 甘草（炙，一分）为末。每一钱，水八分盏，煎四分。\n"
         "【〔丁时发〕人参散】 治虚热及吐利烦渴。\n人参 茯苓 桔梗（各半两） 生犀角 甘草（炙。各一分）上为末。\n"
         "【四物汤】（见第二十一）\n【三因加减四斤丸】 治肾、肝虚。\n肉苁蓉（酒浸） 牛膝（酒浸） 木瓜（干） 熟地黄（各等分）\n上为细末。\n"
         "【洗阴肿核痛】治丈夫阴肿如斗，核中痛。\n雄黄末 矾石（研各一两）\n水煮洗之。\n"
         "【二青散】 治阳毒诸疮，红肿痛痒，热未成者立消。水龙骨、白藓皮、黄柏各一钱，为末。\n"
         "【茯苓饮】治积饮〔停水在心下〕，胸满。\n茯苓 人参（各一钱五分） 橘皮（一钱二分五厘）")


def test_headings_doses_and_clauses_of_the_first_judged_sample():
    fs = {f.name: f for f in find_formulas("胎疾", YOUKE)}
    # a 【〔source〕name】 heading is a formula; any other 【…】 heading ends the entry before it
    assert {i.name for i in fs["香豆散"].ingredients} == {"藿香", "肉豆蔻", "白扁豆", "人参", "甘草"}
    assert {i.name for i in fs["人参散"].ingredients} == {"人参", "茯苓", "桔梗", "生犀角", "甘草"}
    assert "四物汤" not in fs and {i.name for i in fs["三因加减四斤丸"].ingredients} == {"肉苁蓉", "牛膝", "木瓜", "熟地黄"}
    assert "矾石" not in {i.name for f in fs.values() for i in f.ingredients}
    # an indication clause ends where the text stops describing the illness (…者立消) or at a dose
    assert [t for t, _ in fs["二青散"].treats] == ["阳毒诸疮", "红肿痛痒"]
    # commentary in 〔〕 is not an indication; 一钱二分五厘 is one dose
    assert [t for t, _ in fs["茯苓饮"].treats] == ["积饮", "胸满"]
    assert [(i.name, i.dose) for i in fs["茯苓饮"].ingredients][-1] == ("橘皮", "一钱二分五厘")
    # a 各 whose dose was lost (各两) stops the 各 dose after it from reaching the names before it
    ings = parse_ingredient_line("泽泻 茯苓 半夏（姜制各两） 青皮 干姜（各五钱）")
    assert [(i.name, i.dose) for i in ings] == [("泽泻", None), ("茯苓", None), ("半夏", None), ("青皮", "五钱"), ("干姜", "五钱")]
    # prose run into a list is not a list
    assert parse_ingredient_line("效治一切水肿单腹胀蛊胀神效煎方茯苓皮 草果皮 五加皮 大腹皮") is None


def test_clauses_and_doses_of_the_second_judged_sample():
    text = ("【湿郁汤】 治因雨露所袭，或坐卧湿地，皆为湿郁。\n苍术 白术（各一钱）\n"
            "【秘传降气汤】 治男子、妇人上热下虚之疾，痰涎壅盛。\n紫苏子 半夏（各一钱）\n"
            "【乌龙膏】 治诸疮毒肿。木鳖肉、半夏各一两，草乌三钱。\n"
            "【启脾丸】 治小儿惊风。\n人参 白术（各一钱）\n上为末。治急惊风症，服后宜服启脾散。\n"
            "【坯煎散】 治夹惊伤寒。\n羌活 川芎 白僵蚕（去丝。以上分两元本阙） 脑麝（各少许）\n"
            "【何人饮】 治疟。\n何首乌（自三钱以至一两） 陈皮（二、三钱） 淡竹叶（河间）")
    fs = {f.name: f for f in find_formulas("杂方", text)}
    assert fs["湿郁汤"].treats == []  # the causes, not the illness
    assert [t for t, _ in fs["秘传降气汤"].treats] == ["痰涎壅盛"]  # 男子、妇人: who, not what
    assert [t for t, _ in fs["乌龙膏"].treats] == ["诸疮毒肿"]  # 木鳖肉、半夏各一两: the ingredients
    assert "启脾散" not in fs  # 服后宜服启脾散: what it follows, not what it treats
    assert {(i.name, i.dose) for i in fs["坯煎散"].ingredients} == {("羌活", None), ("川芎", None), ("白僵蚕", None), ("脑麝", "少许")}
    assert {(i.name, i.dose, i.prep) for i in fs["何人饮"].ingredients} >= {("陈皮", "二三钱", None), ("淡竹叶", None, None)}
    # 圣惠方's …人参散方。 without 宜服 ends the entry before it: its list is not 草豆蔻散's
    shenghui = ("治脚气。发动呕逆。宜服草豆蔻散方。\n草豆蔻（一两） 吴茱萸（一分）\n上件药。捣筛为散。\n"
                "治脚气呕逆。心乱不能下食。人参散方。\n人参（一两） 赤茯苓（一两）\n上件药。捣筛为散。")
    fs = {f.name: f for f in find_formulas("治脚气呕逆诸方", shenghui)}
    assert set(fs) == {"草豆蔻散"} and {i.name for i in fs["草豆蔻散"].ingredients} == {"草豆蔻", "吴茱萸"}
    assert [t for t, _ in fs["草豆蔻散"].treats] == ["脚气"]


def test_ingredient_provenance_is_the_list_not_the_name(tmp_path):
    book = tmp_path / "医方.txt"
    long_before = "润肺清金，治久嗽。" * 30
    book.write_text("<篇名>医方\n<篇名>肺门\n内容：【人参燕窝百合汤】 " + long_before + "\n内容：燕窝（三钱） 百合（五钱） 人参（一钱）\n",
                    encoding="utf-8")
    herbal = tmp_path / "本草.txt"
    herbal.write_text("<篇名>小本草\n" + "".join(f"<篇名>{n}\n内容：味甘，平。主虚劳。\n" for n in ("燕窝", "百合", "人参")),
                      encoding="utf-8")
    g = Graph.create(tmp_path / "g")
    ingest_file(g, "books-txt", herbal, {"materia_medica": "auto"})
    ingest_file(g, "books-txt", book, {"formulas": True, "max_tokens": 64})
    f = g.find_entity_id("人参燕窝百合汤", "formula")
    for t in g.triples_of(f, "out", "has_ingredient"):
        (s,) = g.snippets_of_triple(t["id"])
        assert t["tail"] + "（" in s["text"], (t["tail"], s["text"][:40])


@pytest.fixture(scope="module")
def shanghan(tmp_path_factory):
    g = Graph.create(tmp_path_factory.mktemp("f"))
    ingest_file(g, "catalog-csv", CATALOG)
    ingest_file(g, "books-txt", SHENNONG, {"materia_medica": "auto", "formulas": "auto"})
    doc, _, _ = ingest_file(g, "books-txt", SHANGHAN, {"materia_medica": "auto", "formulas": "auto"})
    yield g, doc
    g.close()


def test_shanghan_formulas_with_doses_and_indications(shanghan):
    g, doc = shanghan
    assert g.get_document(doc)["meta"]["books"][0]["extractors"]["chosen_by"] == {"formulas": "markup"}
    guizhi = g.find_entity_id("桂枝汤", "formula")
    comp = {t["tail"]: t["attributes"].get("dose") for t in g.triples_of(guizhi, "out", "has_ingredient")}
    assert {"芍药": "三两", "甘草": "二两", "生姜": "三两", "大枣": "十二枚"}.items() <= comp.items()
    assert {"头痛", "发热", "汗出", "恶风"} <= {t["tail"] for t in g.triples_of(guizhi, "out", "treats")}
    for t in g.triples_of(guizhi, "out"):
        assert t["origin"] == ORIGIN and t["layer"] == "book"
        for s in g.snippets_of_triple(t["id"]):  # provenance: the snippet says it
            assert (t["attributes"].get("as_written") or t["tail"]) in s["text"], (t["tail"], s["text"][:50])


def test_the_book_rule():
    assert materia_medica_reason("auto", "神农本草经", []) == "title" and materia_medica_reason("auto", "饮膳正要", []) == "title"
    assert materia_medica_reason("auto", "伤寒论", [("辨太阳病", "太阳之为病，脉浮。")]) is None
    assert materia_medica_reason(False, "神农本草经", []) is None and materia_medica_reason(True, "伤寒论", []) == "option"
    assert formulas_reason("auto", "太平圣惠方", []) == "title" and formulas_reason("auto", "医方集解", []) == "title"
    assert formulas_reason("auto", "徐批叶天士晚年方案真本", []) is None  # 方案: case records
    herbal_sections = [(f"药{i}", "味甘，平，无毒。主寒热。") for i in range(12)]
    assert materia_medica_reason("auto", "名医别录", herbal_sections) == "title"
    assert materia_medica_reason("auto", "某书", herbal_sections) == "markup"
    named = [(f"{a}{b}散", "治某病。") for a in "甲乙丙" for b in "子丑寅卯"]
    assert formulas_reason("auto", "某书", [("卷首", "")] * 3 + named) == "markup"
    assert formulas_reason("auto", "某书", [("卷首", "")] * 40 + named) is None
