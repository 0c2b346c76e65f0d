"""LLM-free formula extractor: the formula books' (方书) entries → formula, ingredients with doses, indications.

The formula books write an entry in a few fixed forms::

    <篇名>六君子汤 / 属性：治脾脏不和，不进饮食… / 人参 白术（各一两） 橘红 半夏（汤洗七次）… / 上 咀，每服四钱…   (济生方)
    <篇名>疹疮 / 属性：\\x加味宣风散\\x / 治肾虚证，疹疮变黑。 / 鸡心槟榔（二个） 陈皮（去白）…          (世医得效方)
    <篇名>省风汤 / 属性：防风（去芦） 半夏（姜制，各一钱）… / 中风，口眼僻，痰涎壅盛者，此方主之。      (医方考)
    治肝脏风。筋脉抽掣。…宜服羌活散方。 / 羌活（三分） 白术（三分）…                              (太平圣惠方)
    桂枝汤方∶ / 桂枝（去皮，三两） 芍药（三两）… / 上五味，以水七升…                               (伤寒论)

An entry starts at a formula name — a section title, a 【…】 subheading (the books' ``\\x…\\x``), a
``X方∶`` line or a ``宜服X方`` sentence — whose name ends in 汤 散 丸 膏 丹 饮 煎 (a bare ``…方`` or a
category such as 风证通治方 is not a name). :func:`extract_book` adds (layer ``book``, origin
``pattern:formula``, confidence 0.6, the snippet that says it as provenance):

- ``has_ingredient`` formula → substance, from the ingredient line(s) (names separated by spaces,
  each with an optional （dose, preparation）; 各 gives the dose to the names before it since the
  last dose), with ``dose`` and ``preparation`` as triple attributes. A name is taken only when it is
  a known substance (the catalogue, the herbals already ingested, this book's entries), directly or
  after a processing prefix (炙甘草 → 甘草, recorded as ``as_written``): the corpus's line breaks and
  lost characters run names together (川芎当归), and an unknown string is never made a herb;
- ``treats`` formula → symptom, from the 治…/主治… sentence of the entry, the 宜服 sentence's 治…
  clause, or 医方考's ``…者，此方主之`` (pieces classified as in the materia-medica extractor).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterable

from bencao.retrieval.graph.store import DocumentBuilder
from bencao.retrieval.ingest.materia_medica import _METHOD_PIECE, _PAREN, classify_piece
from bencao.retrieval.ingest.provenance import SectionSnippets
from bencao.retrieval.ingest.substances import SubstanceNames, repair_name

CONFIDENCE = 0.6
ORIGIN = "pattern:formula"
LAYER = "book"
RELATIONS = {
    "has_ingredient": ("an ingredient of a formula or dish (with its dose and preparation as attributes when given)", "formula", "substance"),
    "treats": ("an indication the formula (or substance) is used for (the book's 治…/主治… clause)", "formula", "symptom"),
}
FAMILIES = {"has_ingredient": "formula_composition", "treats": "formula_treats"}

_SUFFIX = r"(?:饮子|丸子|汤|散|丸|膏|丹|饮|煎)"
_NAME = re.compile(rf"^[\u4e00-\u9fff]{{1,10}}?{_SUFFIX}$")
_NOT_NAME = re.compile(r"通治|诸|门$|论|类|法|第|卷|附|又|一方|^治|^主|^凡|^用|^上|^右|歌|总|说|辨|^服|^煎|^以|^如|^其|^此|^宜|^每|^和|^去|^同|^入|^若|^或|^再|^先|^后|^即|方[一二三四五六七八九十]")
_ZHUZHI_AFTER = re.compile(r"^(.+?)者[，,]?此方主之")
_METHOD = re.compile(r"^(?:上|右|以上|已上)[\u4e00-\u9fff]{0,4}(?:味|件|药|为|锉|捣|咀|各|同|细|研|除|共|等|用|一|二|三|四|五|六|七|八|九|十|并|\s)")
_METHOD_AFTER = re.compile(r"(?<=[）\s])(?:上|右|以上|已上)(?:件|为|药|锉|捣|咀|细|粗|同|等|[一二三四五六七八九十]+味)"
                           r"|(?<=）)(?:为(?:细|粗)?末|水煎|共为|研末)")
_DOSE_UNIT = "两钱分厘毫斤升合枚个片铢粒字茎根条只把握撮匙盏斗杯碗寸尺张朵对具块段节钟"
_DOSE = re.compile(rf"^(各)?((?:[一二三四五六七八九十百千半两\d．.]+(?:[{_DOSE_UNIT}])+[一二三四五六七八九十半]*)+|等分|少许|适量)$")
_DOSE_LEAD = re.compile(rf"^(各)?((?:[一二三四五六七八九十百千半两]+(?:[{_DOSE_UNIT}])+[半]?)+)([\u4e00-\u9fff].*)$")
_DOSE_TRAIL = re.compile(rf"^([\u4e00-\u9fff]*?[^\d一二三四五六七八九十百千半两各])(各)?((?:[一二三四五六七八九十百千半]+(?:[{_DOSE_UNIT}])+[半]?)+)$")
_SOURCE_NOTE = re.compile(r"河间|丹溪|东垣|仲景|海藏|洁古|钱氏|钱乙|局方|千金|外台|和剂|圣惠|良方|直指|宝鉴|拔萃|济生|三因|本事|《[^》]*》")
_PREP_PREFIX = "炙生熟炒煨制酒醋姜蜜焦炮净川广真新陈嫩老鲜干"
_TOKEN = re.compile(r"^([\u4e00-\u9fff]{1,8})((?:（[^（）]*）)*)$")


@dataclass
class Ingredient:
    name: str
    dose: str | None = None
    prep: str | None = None
    each: bool = False  # the dose was written 各… (applies to the names before it)
    barrier: bool = False  # a 各 whose dose is unreadable (各两): no dose passes it


@dataclass
class Formula:
    name: str
    ingredients: list[Ingredient] = field(default_factory=list)
    list_start: int = 0  # where its ingredient list starts in the section's text (provenance of the ingredients)
    treats: list[tuple[str, str]] = field(default_factory=list)  # (indication, the piece as written)
    span: tuple[int, int] = (0, 0)  # where the entry is in its section's text (for provenance)


def is_formula_name(name: str) -> bool:
    name = name.strip()
    return bool(_NAME.match(name)) and not _NOT_NAME.search(name) and len(name) >= 2


# --------------------------------------------------------------------------- ingredient lines


def _split_tokens(para: str) -> list[str]:
    """Space-separated tokens; a closing paren followed by a name also separates (a lost space)."""
    para = re.sub(r"）(?=[\u4e00-\u9fff])", "） ", para)
    return [t for t in re.split(r"\s+", para.strip()) if t]


def parse_ingredient_line(para: str) -> list[Ingredient] | None:
    """``人参 白术（各一两） 半夏（汤洗七次）`` → ingredients; None when the paragraph is not such a line.

    A token the corpus damaged (a lost character shows as a space: ``芎 （三分）``, an unclosed paren)
    is dropped; the line must be mostly well-formed tokens.
    """
    m = _METHOD_AFTER.search(para)
    if m:
        para = para[: m.start()]  # the method line joined on (…丹参（三分）上件药。捣粗罗为散。)
    if "。" in _PAREN.sub("", para) or len(para) < 4:
        return None
    toks = _split_tokens(para)
    if len(toks) < 2 or (not _TOKEN.match(toks[0]) and len(toks[0]) > 8):
        return None  # fewer than two names, or prose ran into the list (…神效煎方茯苓皮 草果皮 …)
    out: list[Ingredient] = []
    good = 0
    for i, tok in enumerate(toks):
        m = _TOKEN.match(tok)
        if not m or (i + 1 < len(toks) and toks[i + 1].startswith("（") and not m.group(2)):
            # unreadable, or 芎 （三分）: a lost character between name and dose; no 各 dose passes it
            out.append(Ingredient("", barrier=True))
            continue
        good += 1
        ing = Ingredient(m.group(1), barrier=re.search(r"各|阙|缺|以上|已上", m.group(2)) is not None)
        for inner in re.findall(r"（([^（）]*)）", m.group(2)):
            preps: list[str] = []
            inner = re.sub(r"(?<=[一二三四五六七八九十])、(?=[一二三四五六七八九十])", "", inner)  # 二、三钱 → 二三钱
            for piece in re.split(r"[，、。,；]", inner):
                piece = piece.strip()
                if not piece or _SOURCE_NOTE.fullmatch(piece):
                    continue  # （河间）: where the formula comes from, not how to prepare
                piece = re.sub(r"^(?:以上|已上|上)(?=各)", "", piece)
                d = _DOSE.match(piece) or _DOSE_LEAD.match(piece)
                t = None if d else _DOSE_TRAIL.match(piece)
                if d:
                    ing.dose = d.group(2)
                    ing.each = bool(d.group(1))
                    if d.lastindex and d.lastindex >= 3 and d.group(3):
                        preps.append(d.group(3))
                elif t:
                    preps.append(t.group(1))
                    ing.dose, ing.each = t.group(3), bool(t.group(2))
                else:
                    preps.append(piece)
            if preps:
                ing.prep = "，".join(preps)
        out.append(ing)
    if good < max(2, int(0.6 * len(toks))):
        return None
    # 各: the dose of a 各-name applies to the names without a dose before it (since the last dose,
    # an unreadable token or a 各 whose dose was lost: 半夏（姜制各两）)
    for i, ing in enumerate(out):
        if ing.each and ing.dose:
            j = i - 1
            while j >= 0 and out[j].dose is None and not out[j].barrier:
                out[j].dose = ing.dose
                j -= 1
    return [ing for ing in out if ing.name]


_COMMA_ITEM = re.compile(rf"^([\u4e00-\u9fff]{{2,6}}?)(各)?((?:[一二三四五六七八九十百半]+[{_DOSE_UNIT}])+[一二三四五六七八九十半]*)?$")


def parse_comma_list(text: str) -> list[Ingredient]:
    """医学入门's 防风、羌活各三钱，甘草一分，水煎… → ingredients, up to the first piece that is not one."""
    out: list[Ingredient] = []
    for piece in re.split(r"[、，]", text.split("。")[0]):
        m = _COMMA_ITEM.match(piece.strip())
        if not m:
            break
        ing = Ingredient(m.group(1), dose=m.group(3), each=bool(m.group(2)))
        out.append(ing)
        if ing.each and ing.dose:
            for prev in reversed(out[:-1]):
                if prev.dose is not None:
                    break
                prev.dose = ing.dose
    return out


# --------------------------------------------------------------------------- indications


_LEAD_CONJ = ("或时", "并", "及", "或", "兼", "亦", "又", "并治", "兼治", "亦治", "及治", "又治", "治", "疗", "主")
_PEOPLE = re.compile(r"(?:男子|妇人|女人|女子|丈夫|小儿|大人|老人|室女|产妇|婴儿|男妇|老幼|童男|童女)+")
_STOP = ("加", "宜服", "并宜", "服", "宜", "此方", "一切", "不拘", "久服", "常服", "悉皆", "皆治", "并皆", "但是", "不问", "无问", "大人", "小儿")


def _treats(formula: Formula, clause: str) -> None:
    """Indications of a 治… clause: its pieces that read as indications, up to the first that does not belong."""
    if re.search(r"[（(〔]", clause):
        clause = _PAREN.sub("", clause)
        clause = re.split(r"[（(]", clause)[0]  # an unclosed note (医方集解's commentary) ends the clause
    if clause.startswith(("因", "由")):
        return  # 治因雨露所袭，或坐卧湿地…: the causes, not the illness
    pieces: list[str] = []
    for segment in re.split(r"[，；。,;]", clause):
        items = segment.split("、")
        if any(re.search(rf"等分|[一二三四五六七八九十半][{_DOSE_UNIT}]", it) for it in items):
            break  # 水龙骨、白藓皮、黄柏各一钱: the ingredients, not the illnesses
        pieces += items
    for raw in pieces:
        piece = raw.strip()
        if not piece:
            continue
        if re.search(r"\s", raw):
            continue  # a character was lost here (疳痢湿 ,  癖坚积): not a name
        if piece.startswith(_STOP):
            break
        if _PEOPLE.fullmatch(piece):
            continue  # 治男子、妇人上热下虚之疾: who, not what
        for _ in range(2):  # 及主客忤 → 客忤
            for conj in _LEAD_CONJ:
                if piece.startswith(conj) and len(piece) > len(conj) + 1:
                    piece = piece[len(conj):]
                    break
        if piece.endswith("方") and len(piece) > 2:
            piece = piece[:-1]  # 治漏下方 (千金: the formula for 漏下)
        piece = re.sub(r"(?<=..)(?:等|诸)(?:证|症|疾|病|患)$", "", piece)  # 梦遗精滑等证 → 梦遗精滑
        if _METHOD_PIECE.search(piece) or re.search(rf"服|丸|为末|上件|右件|每|[一二三四五六七八九十半][{_DOSE_UNIT}]", piece):
            break  # the clause turned into how to take it, or into the ingredients (螺青一钱)
        c = classify_piece(piece)
        if c is not None and c[0] == "treats":
            if (repair_name(c[1]), piece) not in formula.treats:
                formula.treats.append((repair_name(c[1]), piece))


_RECIPE_DONE = re.compile(r"为(?:细|粗)?末|为丸|为散|水煎|煎服|咀|上件|右件|上为|右为")


def _body(formula: Formula, paras: list[tuple[int, str]], treats_clause: str | None = None) -> None:
    """Read one entry's (offset, paragraph)s: the 治 sentence, the first ingredient line(s), 此方主之."""
    if treats_clause:
        _treats(formula, treats_clause)
    seen_ingredients = False
    for k, (off, p) in enumerate(paras[:4]):
        if _METHOD.match(p):
            break
        if p.startswith(("治", "主治", "疗")) and not seen_ingredients:
            if not formula.treats:
                _treats(formula, p[2:] if p.startswith("主治") else p[1:])
            if _RECIPE_DONE.search(p):
                break  # the whole recipe was in this paragraph: what follows is another one
            continue
        ings = parse_ingredient_line(p)
        if ings:
            if not seen_ingredients:
                formula.list_start = off
            formula.ingredients += ings
            seen_ingredients = True
            if _METHOD_AFTER.search(p):
                break
            continue
        if k == 0 and not seen_ingredients:
            commas = parse_comma_list(p)
            if len(commas) >= 2:
                formula.list_start = off
                formula.ingredients += commas
                seen_ingredients = True
                m = re.search(r"。(治.+?)(?:。|$)", p)
                if m and not formula.treats:
                    _treats(formula, m.group(1)[1:])
                continue
        if seen_ingredients:
            break
    for _, p in paras[:6]:
        m = _ZHUZHI_AFTER.match(p)
        if m and not formula.treats:
            _treats(formula, m.group(1))


# markers of an entry start anywhere in a section's text: 【名】, 名方∶ on its own line, …宜服名方。;
# 宜服此方 / 又方 start an unnamed entry (a boundary only: its ingredients belong to no named formula)
_MARKERS = re.compile(rf"【([^】]{{1,12}})】|(?:^|\n|。)([\u4e00-\u9fff]{{1,10}}?{_SUFFIX})方(?:[∶:]|(?=\n|$))"
                      rf"|宜服([\u4e00-\u9fff]{{1,10}}?{_SUFFIX})(?=方|[。，]|$)方?[。，]?|(宜服此方|又方|一方)"
                      rf"|(?:[，。]|^)([\u4e00-\u9fff]{{1,10}}?{_SUFFIX})主之。方[一二三四五六七八九十]+。"
                      rf"|(?<=。)([\u4e00-\u9fff]{{1,10}}?{_SUFFIX})方(?=。)")


def _split(text: str, title: str) -> list[tuple[str | None, int, int, int, str | None]]:
    """(name or None, span start, body start, end, 治 clause of a 宜服 sentence) per entry of a section."""
    starts: list[tuple[int, int, str | None, str | None]] = []  # (span start, body start, name, clause)
    for m in _MARKERS.finditer(text):
        if m.group(4) or m.group(6):
            # 宜服此方 / 又方, or 圣惠方's …人参散方。 without 宜服: an entry starts whose 治 clause is not read
            # here (where it starts is not sure), so only the entry before ends
            starts.append((m.start(), m.end(), None, None))
            continue
        name = m.group(1) or m.group(2) or m.group(3) or m.group(5)
        if m.group(1):
            name = re.sub(r"^(?:〔[^〕]*〕|（[^）]*）)+", "", name).strip()  # 【〔丁时发〕人参散】: the source, then the name
        if not is_formula_name(name):
            if m.group(1):
                starts.append((m.start(), m.end(), None, None))  # 【洗阴肿核痛】, 【又方】: another entry starts
            continue
        clause, begin = None, m.start()
        if m.group(5):
            # 伤寒论: 12．太阳中风，…，桂枝汤主之。方一。 — the numbered clause names the indications
            lo = max(0, m.start() - 150, starts[-1][1] if starts else 0)
            before = text[lo: m.start() + 1]
            nums = list(re.finditer(r"\d+[．.]", before))
            if nums:
                clause, begin = before[nums[-1].end():], lo + nums[-1].start()
        elif m.group(3):
            # 宜服X方: the indications are the 治… sentences just before it, from the last sentence that opens with 治
            lo = max(0, m.start() - 200, starts[-1][1] if starts else 0)
            before = text[lo: m.start()]
            if before.endswith(("服后", "服之后")):
                starts.append((m.start(), m.end(), name, None))  # 服后宜服启脾散: what it follows, not what it treats
                continue
            k = max(before.rfind("。治"), before.rfind("\n治"))
            k = k + 1 if k >= 0 else (0 if before.startswith("治") else -1)
            if k >= 0:
                clause, begin = before[k + 1:], lo + k
        starts.append((begin, m.end(), name, clause))
    out: list[tuple[str | None, int, int, int, str | None]] = []
    if is_formula_name(title.strip()):
        out.append((title.strip(), 0, 0, starts[0][0] if starts else len(text), None))
    for j, (begin, body, name, clause) in enumerate(starts):
        end = starts[j + 1][0] if j + 1 < len(starts) else len(text)
        out.append((name, begin, body, max(end, body), clause))
    return out


def find_formulas(title: str, text: str) -> list[Formula]:
    """The formula entries of one section (see the module doc for the forms recognised)."""
    out: list[Formula] = []
    for name, begin, body, end, clause in _split(text, title):
        if name is None:
            continue
        paras, pos = [], body
        for line in text[body:end].split("\n"):
            if line.strip():
                paras.append((pos + len(line) - len(line.lstrip()), line.strip()))
            pos += len(line) + 1
        f = Formula(repair_name(name), span=(begin, end), list_start=body)
        _body(f, paras, clause)
        if f.ingredients or f.treats:
            out.append(f)
    return out


# --------------------------------------------------------------------------- builder


def _known(names: SubstanceNames, local: set[str], name: str) -> tuple[str, str | None] | None:
    """(substance name to use, as written when it differs) for an ingredient, or None if unknown."""
    if name in local or names.resolve(name) is not None:
        return name, None
    if len(name) >= 3 and name[0] in _PREP_PREFIX:
        base = name[1:]
        if base in local or names.resolve(base) is not None:
            return base, name
    return None


def declare_relations(b: DocumentBuilder) -> None:
    for name, (desc, head, tail) in RELATIONS.items():
        b.relation(name, desc, head, tail)


def extract_book(b: DocumentBuilder, sections: list[tuple[str, str, list[tuple[str, str]]]], names: SubstanceNames,
                 local_substances: Iterable[str] = (), relations: Iterable[str] | None = None) -> Counter[str]:
    """Add the formula entries of every section (title, text, snippets) of one book; returns counts."""
    keep = set(relations) if relations is not None else set(RELATIONS)
    local = set(local_substances)
    stats: Counter[str] = Counter()
    for title, text, snips in sections:
        if not snips:
            continue
        where = SectionSnippets(text, snips)
        for f in find_formulas(title, text):
            facts: list[tuple[str, str, str, str, dict[str, Any]]] = []
            if "has_ingredient" in keep:
                for ing in f.ingredients:
                    known = _known(names, local, repair_name(ing.name))
                    if known is None:
                        stats["ingredients_unknown"] += 1
                        continue
                    as_written = ing.name if known[0] != ing.name else None
                    attrs = {k: v for k, v in (("dose", ing.dose), ("preparation", ing.prep), ("as_written", as_written)) if v}
                    facts.append(("has_ingredient", known[0], "substance", ing.name, attrs))
            if "treats" in keep:
                # an indication that is a known substance is an ingredient list run on (…，归尾、乌药各二钱): it ends them
                for t, piece in f.treats:
                    if _known(names, local, t) is not None:
                        break
                    facts.append(("treats", t, "symptom", piece, {}))
            # an ingredient is found from its list on (not in the name: 人参燕窝百合汤), an indication in the entry
            placed = [(fact, where.locate([fact[3]], f.list_start if fact[0] == "has_ingredient" else f.span[0], f.span[1]))
                      for fact in facts]
            stats["unlocated"] += sum(1 for _, sid in placed if sid is None)
            placed = [(fact, sid) for fact, sid in placed if sid is not None]
            if not placed:
                continue
            fid = b.entity(f.name, "formula", layer=LAYER)
            stats["formulas"] += 1
            for (rel, tail, ttype, _, attrs), sid in placed:
                tid = names.entity(b, tail) if ttype == "substance" else b.entity(tail, ttype, layer=LAYER)
                b.triple(fid, rel, tid, confidence=CONFIDENCE, layer=LAYER, origin=ORIGIN, snippet=sid, attributes=attrs or None)
                stats[rel] += 1
    return stats
