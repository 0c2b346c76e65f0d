"""食疗方 recipes JSONL: macro tree, dish entities, has_ingredient/treats triples with snippet provenance."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bencao.errors import InputError
from bencao.retrieval.graph.store import Graph
from bencao.retrieval.ingest.recipes import ingredient_names, symptom_names
from bencao.retrieval.ingest.registry import ingest_file


@pytest.fixture()
def recipes(sample_dir: Path) -> Path:
    return sample_dir / "tcm_classics" / "shiliaofang_recipes.jsonl"


@pytest.fixture()
def graph(tmp_path: Path) -> Graph:
    return Graph.create(tmp_path / "g")


def _dish(g: Graph, name: str) -> dict:
    (d,) = [e for e in g.entities_by_alias(name) if e["type"] == "dish"]
    return d


def _tails(g: Graph, entity_id: str, relation: str) -> list[str]:
    return sorted(t["tail"] for t in g.triples_of(entity_id, "out", relation=relation))


def test_macro_tree_book_category_recipe_snippet(graph: Graph, recipes: Path) -> None:
    doc_id, added, counts = ingest_file(graph, "recipes-jsonl", recipes)
    assert added and counts["snippets"] == 61
    sections = graph.sections_of(doc_id)
    root = sections[0]
    assert (root["title"], root["level"]) == ("食疗方", 0)
    assert [c["title"] for c in graph.child_sections(root["id"])] == ["第一类·植物类食疗方", "第二类·动物类食疗方"]
    luobo = next(s for s in sections if s["title"] == "萝卜粥")
    assert luobo["path"] == ["食疗方", "第一类·植物类食疗方", "萝卜粥"]
    (snip,) = graph.snippets_of_section(luobo["id"])
    assert snip["text"] == "萝卜粥\n原料：大萝卜五个。\n主治：消渴、舌焦、口干、小便数。\n制法：煮熟，绞取汁，用粳米三合，同水并汁，煮粥食之。"
    assert graph.get_document(doc_id)["kind"] == "book"


def test_luobo_zhou_exact_triples_with_snippet_provenance(graph: Graph, recipes: Path) -> None:
    ingest_file(graph, "recipes-jsonl", recipes)
    dish = _dish(graph, "萝卜粥")
    assert dish["attributes"]["category"] == "第一类·植物类食疗方"
    assert dish["attributes"]["method"].startswith("煮熟，绞取汁")
    # The name is kept as written (大萝卜): size words are part of names such as 大蒜 and 小麦.
    assert _tails(graph, dish["id"], "has_ingredient") == ["大萝卜"]
    assert _tails(graph, dish["id"], "treats") == sorted(["消渴", "舌焦", "口干", "小便数"])
    for t in graph.triples_of(dish["id"], "out"):
        assert (t["confidence"], t["layer"]) == (0.9, "book")
        (snip,) = graph.snippets_of_triple(t["id"])
        assert snip["path"] == ["食疗方", "第一类·植物类食疗方", "萝卜粥"]
    assert graph.get_entity(graph.triples_of(dish["id"], "out", relation="treats")[0]["tail_id"])["type"] == "symptom"


def test_more_real_recipes(graph: Graph, recipes: Path) -> None:
    ingest_file(graph, "recipes-jsonl", recipes)
    assert _tails(graph, _dish(graph, "葛粉羹")["id"], "has_ingredient") == sorted(["葛根", "荆芥穗", "豉"])
    assert _tails(graph, _dish(graph, "小麦粥")["id"], "treats") == ["口干", "消渴"]
    assert "手足不遂" in _tails(graph, _dish(graph, "葛粉羹")["id"], "treats")  # broken over two lines in the source
    # Two recipes named 生地黄粥 are one dish with both recipe ids and the union of ingredients.
    dihuang = _dish(graph, "生地黄粥")
    assert len(dihuang["attributes"]["recipe_ids"]) == 2
    assert _tails(graph, dihuang["id"], "has_ingredient") == ["生地黄", "酸枣仁"]
    # A narrative (how the recipe was found) gives no treats triple.
    assert _tails(graph, _dish(graph, "牛子煎荜茇法")["id"], "treats") == []


@pytest.mark.parametrize("text, names", [
    ("大萝卜五个。", ["大萝卜"]),
    ("小麦，不以多少。", ["小麦"]),
    ("粳米三合", ["粳米"]),
    ("羊肉（一脚子，煮熟）", ["羊肉"]),
    ("葛根半斤∶捣取粉四两；荆芥穗一两；豉三合。", ["葛根", "荆芥穗", "豉"]),
    ("冬麻子二两，炒去皮，研。白粟米三合，薄荷叶一两，荆芥穗一两。", ["冬麻子", "白粟米", "薄荷叶", "荆芥穗"]),
    ("熟羊脂五两、熟羊髓五两、白沙蜜五两、炼净、生姜汁一合、生地黄汁五合。", ["熟羊脂", "熟羊髓", "白沙蜜", "生姜", "生地黄"]),
    ("羊肝、肚、肾、心、肺，各一具，汤洗净，牛酥一两", ["羊肝", "羊肚", "羊肾", "羊心", "羊肺", "牛酥"]),
    ("羊骨五、七块带肉，萝卜一枚，切作大片", ["羊骨", "萝卜"]),
    ("鹿角新者长二、三寸，烧令赤，", ["鹿角"]),
    ("陈\n皮一钱，去白，盐少许。", ["陈皮", "盐"]),
])
def test_ingredient_names(text: str, names: list[str]) -> None:
    assert ingredient_names(text) == names


def test_symptom_names() -> None:
    assert symptom_names("治虚劳、腰痛、咳嗽、肺痿、骨蒸。") == ["虚劳", "腰痛", "咳嗽", "肺痿", "骨蒸"]
    assert symptom_names("中风、燥热、口干、手足不遂、及皮肤热疮。") == ["中风", "燥热", "口干", "手足不遂", "皮肤热疮"]


def test_ingredients_merge_with_catalogue_substances(graph: Graph, recipes: Path, sample_dir: Path) -> None:
    ingest_file(graph, "catalog-csv", sample_dir / "mfh_catalog" / "mfh_catalog_106.csv")
    ingest_file(graph, "recipes-jsonl", recipes)
    shanyao = [e for e in graph.entities_by_alias("山药") if e["type"] == "substance"]
    assert len(shanyao) == 1 and shanyao[0]["attributes"]["mfh_id"] == "MFH006"
    dishes = {t["head"] for t in graph.triples_of(shanyao[0]["id"], "in", relation="has_ingredient")}
    assert {"山药", "山药粥"} <= dishes
    # 生姜 is a listed kind of the catalogue's 姜: the recipe ingredient lands on that entity.
    (shengjiang,) = [e for e in graph.entities_by_alias("生姜") if e["type"] == "substance"]
    assert graph.triples_of(shengjiang["id"], "in", relation="has_ingredient")
    assert [t["tail"] for t in graph.triples_of(shengjiang["id"], "out", relation="variant_of")] == ["姜"]


def test_bad_record_names_file_and_line(graph: Graph, recipes: Path, tmp_path: Path) -> None:
    lines = recipes.read_text(encoding="utf-8").splitlines()
    rec = json.loads(lines[2])
    rec["ingredients"] = ["马齿菜"]
    lines[2] = json.dumps(rec, ensure_ascii=False)
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"bad\.jsonl:line 3: 'ingredients' must be a string"):
        ingest_file(graph, "recipes-jsonl", bad)
    assert graph.counts()["documents"] == 0
