"""Structured recipe books as JSONL (食疗方): ``{recipe_id, name, category, ingredients, indications, method}``.

Macro tree: book (食疗方) → category (第一类·植物类食疗方) → recipe (萝卜粥), with one snippet holding
the recipe text. Micro: a ``dish`` entity (attributes: category, method, recipe_ids),
``has_ingredient`` triples to ``substance`` entities and ``treats`` triples to ``symptom``
entities, confidence 0.9 (curated structured text, not free prose), layer ``book``, with the
recipe snippet as provenance.

Ingredient names are parsed from classical measure phrases (see :func:`ingredient_names`):
quantities (五个, 三合, 半斤, 不以多少), parentheses and preparation notes (去白, 洗净, 切作片) are
cut; the name is kept as written, size words included — 大萝卜五个 gives 大萝卜, because 大蒜 and 小麦
are names too. 汁 (juice) is dropped (生姜汁 → 生姜), and a run of single characters after a name
shares its first character (羊肝、肚、肾 → 羊肝, 羊肚, 羊肾). Indications are split on 、，；。; a
narrative (a story of how the recipe was found) gives no ``treats`` triple.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from bencao.errors import InputError
from bencao.io import iter_jsonl, set_record
from bencao.retrieval.graph.store import DocumentBuilder
from bencao.retrieval.ingest.registry import register

CONFIDENCE = 0.9

_NUM = "一二三四五六七八九十百千半两数几0-9"
_UNITS = "个两斤合升钱枚只具对付副头块盏碗茎握张粒会分片尾把寸斗条根"
_QTY_RE = re.compile(rf"[{_NUM}]+[{_UNITS}]")
_RANGE_RE = re.compile(rf"([{_NUM}])、([{_NUM}])")  # 五、七块 → 五七块
_PAREN_RE = re.compile(r"（[^）]*）|\([^)]*\)")
_SPLIT_RE = re.compile(r"[、，,；;。∶:]")
#: A fragment starting with one of these is a preparation note or a measure, not an ingredient.
_NOT_NAME_START = ("去", "炒", "研", "切", "洗", "煮", "炼", "烧", "捣", "磨", "取", "绞", "浸", "酒浸", "汤洗", "细切", "烂煮",
                   "带", "全者", "新者", "新鲜", "生用", "为末", "即", "只", "各", "净", "不以多少", "少许")
#: Single characters that are preparation notes (熟 "cooked"), never an ingredient on their own.
_NOT_NAME = {"熟", "生", "净"}
#: Cut the name at the first of these (preparation or selection notes following the name).
_CUT_AT = ("去", "炒", "研", "切", "洗", "煮", "为末", "水绞", "带肉", "嫩", "新者", "新鲜", "全者", "不以多少", "少许")
_SYMPTOM_SPLIT_RE = re.compile(r"[、，,；;。]")
_SYMPTOM_MAX = 8


def _clean(text: str) -> str:
    return re.sub(r"\s*\n\s*", "", text).strip()


def _name_of(fragment: str) -> str | None:
    frag = fragment.strip().lstrip("及和并").strip()
    if not frag or frag in _NOT_NAME or frag[0] in _NUM or frag.startswith(_NOT_NAME_START):
        return None
    m = _QTY_RE.search(frag, 1)
    if m:
        frag = frag[: m.start()]
    for marker in _CUT_AT:
        i = frag.find(marker)
        if i > 0:
            frag = frag[:i]
    frag = frag.strip()
    if len(frag) > 1 and frag.endswith("汁"):
        frag = frag[:-1]
    return frag or None


def ingredient_names(text: str) -> list[str]:
    """Ingredient names in order, without duplicates, from a classical ingredient list."""
    text = _PAREN_RE.sub("", _clean(text))
    text = _RANGE_RE.sub(r"\1\2", text)
    names: list[str] = []
    prev: str | None = None
    for piece in _SPLIT_RE.split(text):
        name = _name_of(piece)
        if name is None:
            prev = None
            continue
        if len(piece.strip()) == 1 and prev is not None and len(prev) >= 2:
            name = prev[0] + name  # 羊肝、肚、肾: the organs of the same animal
        else:
            prev = name
        if name not in names:
            names.append(name)
    return names


def symptom_names(text: str) -> list[str]:
    """Indications split on 、，；。; an empty list for a narrative rather than a list of indications."""
    text = _clean(text)
    if "此方" in text or (len(text) > 40 and "、" not in text):
        return []
    out: list[str] = []
    for piece in _SYMPTOM_SPLIT_RE.split(text):
        s = piece.strip()
        if s.startswith("治") and len(s) > 1:
            s = s[1:]
        s = s.lstrip("及").strip()
        if s and len(s) <= _SYMPTOM_MAX and s not in out:
            out.append(s)
    return out


def recipe_text(rec: dict[str, Any]) -> str:
    parts = [rec["name"]]
    for label, key in (("原料", "ingredients"), ("主治", "indications"), ("制法", "method")):
        if rec.get(key):
            parts.append(f"{label}：{rec[key].strip()}")
    return "\n".join(parts)


def _book_title(path: Path, rec: dict[str, Any], options: dict[str, Any]) -> str:
    if options.get("book"):
        return str(options["book"])
    rid = str(rec.get("recipe_id") or "")
    if "#" in rid:
        return re.sub(r"^\d+-", "", rid.split("#", 1)[0]) or path.stem
    return path.stem


@register("recipes-jsonl", kind="book", options=("book",),
          description="recipe JSONL (食疗方): book → category → recipe snippet; dish has_ingredient substance, treats symptom")
def load_recipes_jsonl(b: DocumentBuilder, path: Path, options: dict[str, Any]) -> None:
    b.relation("has_ingredient", "the dish is made with the substance", "dish", "substance")
    b.relation("treats", "the dish is indicated for the symptom or disorder", "dish", "symptom")
    records = list(iter_jsonl(path, required=("name", "ingredients")))
    for lineno, rec in records:
        for key in ("name", "category", "ingredients", "indications", "method", "recipe_id"):
            if rec.get(key) is not None and not isinstance(rec[key], str):
                raise InputError(path, f"'{key}' must be a string", record=f"line {lineno}")
    book = b.section(_book_title(path, records[0][1], options))
    categories: dict[str, str] = {}
    n_ing = n_sym = 0
    for lineno, rec in records:
        set_record(f"line {lineno}")
        cat = (rec.get("category") or "").strip() or "(未分类)"
        if cat not in categories:
            categories[cat] = b.section(cat, parent=book)
        sec = b.section(rec["name"], parent=categories[cat], meta={"recipe_id": rec.get("recipe_id")})
        snip = b.snippet(sec, recipe_text(rec))
        attrs: dict[str, Any] = {"category": cat}
        if rec.get("method"):
            attrs["method"] = rec["method"].strip()
        if rec.get("recipe_id"):
            attrs["recipe_ids"] = [rec["recipe_id"]]
        dish = b.entity(rec["name"], "dish", attributes=attrs)
        ingredients = ingredient_names(rec["ingredients"])
        if not ingredients:
            b.meta.setdefault("recipes_without_parsed_ingredients", []).append(f"line {lineno}")
        for name in ingredients:
            b.triple(dish, "has_ingredient", b.entity(name, "substance"), confidence=CONFIDENCE, layer="book",
                     origin="recipes-jsonl", snippet=snip)
            n_ing += 1
        for name in symptom_names(rec.get("indications") or ""):
            b.triple(dish, "treats", b.entity(name, "symptom"), confidence=CONFIDENCE, layer="book",
                     origin="recipes-jsonl", snippet=snip)
            n_sym += 1
    b.meta.update({"recipes": len(records), "has_ingredient": n_ing, "treats": n_sym})
