"""LLM-free materia-medica extractor: the formulaic entries of the herbals → triples.

The classics describe a substance in fixed clauses::

    大枣   味甘，平。主心腹邪气，安中养脾……久服，轻身、长年。……生平泽。   (神农本草经)
    枸杞〈寒〉   （一）无毒。……                                              (食疗本草)
    酸枣   味酸甘，平，无毒。主心腹寒热，邪结气聚，除烦。                    (饮膳正要)
    萝摩∶味甘、平。一名苦丸。无毒。……   (several entries in one section, 千金食治)
    【冬霜】 味甘性寒。……                (饮食须知)

:func:`extract_section` recognises an entry (a short substance title whose text opens with a
flavour 味…, a nature, 有毒/无毒, or — with a 〈nature〉 title — a 主 clause) and adds, with the
snippet that says it as provenance (layer ``book``, origin ``pattern:materia_medica``,
confidence 0.6, below curated sources):

- ``has_flavour`` → flavour (甘 苦 辛 咸 酸 淡 涩; 味甘辛 gives two), ``has_nature`` → nature as
  written (寒 微寒 大热 温 凉 平 冷 …), ``toxicity`` → 有毒/无毒/小毒/大毒 (also an attribute);
- ``treats`` → symptom: the 主… clause split on 、，； (a removal verb 除/止/去/杀/治/疗/解/破/散/逐/辟
  is dropped: 除烦 → 烦);
- ``has_effect`` → effect: the tonic phrases of the 主 clause (益气, 安五脏, 补…) and the 久服… clause;
- aliases from 一名X (and a modern name in the title, 薯蓣（山药）), kind ``synonym``;
- attributes ``flavour``, ``nature``, ``toxicity``, ``habitat`` (生山谷 → 山谷).

It never touches prefaces (序), chapter headings, or recipes (食疗方's 〔食品〕〔主疗〕 form, dishes
that open with what they cure): precision matters more than recall.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Iterable

from bencao.retrieval.graph.store import DocumentBuilder

CONFIDENCE = 0.6
ORIGIN = "pattern:materia_medica"
LAYER = "book"

FLAVOURS = "甘苦辛咸酸淡涩"
_NATURE = r"(?:大|微|小)?(?:寒|热|温|凉|平|冷)"
NATURE_RE = re.compile(rf"^性?({_NATURE})$")
TOX_RE = re.compile(r"^(有|无|小|大)毒$")
FLAVOUR_RE = re.compile(rf"^味([{FLAVOURS}、]+)(.*)$")
# the opening of an entry's first sentence
HEADER_RE = re.compile(rf"^(味[{FLAVOURS}]|性?{_NATURE}[，、。]|(有|无|小|大)毒)")

RELATIONS = {
    "has_flavour": ("the substance's flavour (味), as the book states it", "substance", "flavour"),
    "has_nature": ("the substance's nature (性: 寒 热 温 凉 平 …), as the book states it", "substance", "nature"),
    "treats": ("an indication the substance is used for (the book's 主… clause)", "substance", "symptom"),
    "has_effect": ("an effect of the substance (益气, 安五脏, 久服轻身 …)", "substance", "effect"),
    "toxicity": ("whether the book calls the substance toxic (有毒/无毒/小毒/大毒)", "substance", "toxicity"),
}

# Titles that are never a substance entry.
_NOT_ENTRY_TITLE = re.compile(r"序|论|篇|第|卷|凡例|目录|附录|总|诸|类$|品$|法$|门$|经$")
# Tonic/regulating verbs: the phrase is an effect, kept whole.
_EFFECT_PREFIXES = ("安", "养", "益", "补", "通", "和", "利", "明", "轻身", "长", "强", "坚", "填", "壮", "润", "悦", "美", "好",
                    "耐", "令人", "延年", "不老", "不饥", "调", "厚", "充", "开", "滋", "暖", "温", "聪", "平", "生肌", "生津", "续",
                    "助", "宜", "下", "宣", "实", "驻", "黑", "乌", "变", "化", "行", "浓", "定", "保", "增", "荡", "推")
# Indications that open like an effect phrase (温疟 is a disease, not 温 + 疟).
_WHOLE_INDICATIONS = ("消渴", "温疟", "温病", "温毒", "坚积", "下血", "下痢", "下利")
# Removal verbs: the object is the indication (除烦 → 烦).
_REMOVAL = ("除", "止", "去", "杀", "治", "疗", "解", "破", "散", "逐", "辟", "消")
# One-character objects that are indications (止渴 → 渴); other one-character objects (消谷, 逐水) keep the phrase as an effect.
_ONE_CHAR_SYMPTOMS = set("渴烦痛痢泄咳嗽喘呕吐疟痹疝肿汗痒疮癣胀满闷悸热寒风痰湿")
# A piece with these is prose, not a name of an indication or effect.
_PROSE = re.compile(r"[如若者之其也以而则可不勿忌能所为与及又云曰是此乃即或但凡每皆亦矣焉乎人仍]|[0-9０-９]|(?<![宿伤停积])食$|^[食多]")
# A removal verb inside an indication means two clauses ran together (破症除瘕, 熨除痈肿).
_INNER_VERB = re.compile(r"[除止去杀治疗解破散逐辟养益补]|生津|生肌")
_PROSE_EFFECT = re.compile(r"[如若者其也以而则可勿忌所与又云曰是此乃即或但凡每皆亦矣焉乎]|[0-9０-９]")
_PAREN = re.compile(r"（[^（）]*）|\([^()]*\)|〔[^〕]*〕")
_ALIAS = re.compile(r"[一又]名([\u4e00-\u9fff]{1,6})")
_HABITAT = re.compile(r"(?:^|[，。；])生([\u4e00-\u9fff]{0,3}(?:谷|泽|土|野|海|池|山|原|中|上))(?=[，。；]|$)")
_SUBENTRY = re.compile(rf"^(?:【([\u4e00-\u9fff]{{1,8}})】\s*|([\u4e00-\u9fff]{{1,8}})[∶:])(?=味[{FLAVOURS}]|性?{_NATURE}[，、。])")
_ITEM_NO = re.compile(r"^（[一二三四五六七八九十]+）")
_TITLE_NATURE = re.compile(rf"〈({_NATURE})〉")


@dataclass
class Fact:
    relation: str
    tail: str
    tail_type: str
    needle: str  # text to locate the snippet that says it


@dataclass
class Entry:
    name: str
    aliases: list[str] = field(default_factory=list)
    facts: list[Fact] = field(default_factory=list)
    attributes: dict[str, list[str]] = field(default_factory=dict)
    anchor: str = ""  # text at the start of the entry, to find its first snippet

    def add(self, relation: str, tail: str, tail_type: str, needle: str) -> None:
        if tail and not any(f.relation == relation and f.tail == tail for f in self.facts):
            self.facts.append(Fact(relation, tail, tail_type, needle))

    def attr(self, key: str, value: str) -> None:
        vals = self.attributes.setdefault(key, [])
        if value not in vals:
            vals.append(value)


def declare_relations(b: DocumentBuilder) -> None:
    for name, (desc, head, tail) in RELATIONS.items():
        b.relation(name, desc, head, tail)


# --------------------------------------------------------------------------- titles


def clean_title(title: str) -> tuple[str, list[str], str | None] | None:
    """``枸杞〈寒〉`` → (枸杞, [], 寒); ``薯蓣（山药）`` → (薯蓣, [山药], None); None if not a substance name.

    A parenthesis at the start restores a lost character (（榧）子 → 榧子); after the name it gives
    the modern name (an alias). Titles naming several things (山鸡、野鸡) are refused.
    """
    t = title.strip()
    nature = None
    m = _TITLE_NATURE.search(t)
    if m:
        nature = m.group(1)
        t = _TITLE_NATURE.sub("", t).strip()
    aliases: list[str] = []
    lead = re.match(r"^（([\u4e00-\u9fff]{1,4})）", t)
    if lead:
        t = lead.group(1) + t[lead.end():]
    for inner in re.findall(r"（([^（）]*)）", t):
        for a in re.split(r"[、，,]", inner):
            if re.fullmatch(r"[\u4e00-\u9fff]{1,8}", a.strip()):
                aliases.append(a.strip())
    name = re.sub(r"（[^（）]*）", "", t).strip()
    if not re.fullmatch(r"[\u4e00-\u9fff]{1,8}", name) or _NOT_ENTRY_TITLE.search(name):
        return None
    return name, [a for a in aliases if a != name], nature


# --------------------------------------------------------------------------- clauses


def _sentences(text: str) -> list[str]:
    return [s for s in re.split(r"(?<=[。！？])", text) if s.strip()]


def _pieces(clause: str) -> list[str]:
    """Split a clause on 、，；. A part label (大黄蜂子∶主…) ends the clause: what follows is about the part."""
    m = re.search(r"[，、；]?[\u4e00-\u9fff]{1,6}[∶:]", clause)
    if m:
        clause = clause[: m.start()]
    return [p.strip() for p in re.split(r"[，、；,;]", clause.strip("。；，")) if p.strip()]


def _ends_clause(piece: str) -> bool:
    """Pieces after which the clause is no longer about indications: habitat, synonyms, warnings."""
    return piece.startswith(("不可", "勿", "忌", "多食", "久食", "一名")) or _HABITAT.fullmatch(piece) is not None


def classify_piece(piece: str) -> tuple[str, str] | None:
    """One piece of a 主 clause → ("treats", indication) or ("has_effect", effect), or None for prose."""
    if not 1 <= len(piece) <= 10 or not re.fullmatch(r"[\u4e00-\u9fff]+", piece):
        return None
    if piece.startswith(_WHOLE_INDICATIONS):
        return ("treats", piece)
    for verb in _REMOVAL:
        if piece.startswith(verb) and len(piece) > len(verb):
            obj = piece[len(verb):]
            if _PROSE.search(obj) or _INNER_VERB.search(obj):
                return None
            if len(obj) == 1 and obj not in _ONE_CHAR_SYMPTOMS:
                return None if verb in ("治", "疗") else ("has_effect", piece)
            return ("treats", obj)
    if piece.startswith(_EFFECT_PREFIXES):
        return None if _PROSE_EFFECT.search(piece[1:]) else ("has_effect", piece)
    if len(piece) < 2 or _PROSE.search(piece) or _INNER_VERB.search(piece):
        return None
    return ("treats", piece)


def _main_clause(entry: Entry, clause: str, explicit: bool) -> None:
    """The 主 clause (``explicit``) or a verb-initial sentence right after the header."""
    found: list[tuple[str, str, str]] = []
    for piece in _pieces(clause):
        if piece.startswith("久服"):
            _long_use(entry, piece)
            break
        if _ends_clause(piece):
            break
        c = classify_piece(piece)
        if c is None:
            if not explicit:
                return  # an implicit clause must be all verb phrases, or it is not one
            continue
        if not explicit and c[0] == "treats" and not piece.startswith(_REMOVAL):
            return
        found.append((c[0], c[1], piece))
    for rel, tail, piece in found:
        entry.add(rel, tail, "symptom" if rel == "treats" else "effect", piece)


def _long_use(entry: Entry, clause: str) -> None:
    """久服… → effects (轻身, 延年, 不老, 通神明 …)."""
    body = clause[2:] if clause.startswith("久服") else clause
    for piece in _pieces(body):
        if 2 <= len(piece) <= 8 and re.fullmatch(r"[\u4e00-\u9fff]+", piece) and not _PROSE_EFFECT.search(piece) \
                and not piece.startswith(("不可", "勿", "多", "损", "伤", "发", "动", "一名")) and not _HABITAT.fullmatch(piece):
            entry.add("has_effect", piece, "effect", piece)


def _header(entry: Entry, sentence: str) -> str | None:
    """Parse 味甘，平，无毒 / 味甘性平 / 冷，无毒 ; returns the rest of the sentence from 主 on, if any."""
    in_flavours = False
    for i, tok in enumerate(re.split(r"[，、,]", sentence.rstrip("。；"))):
        tok = tok.strip()
        m = FLAVOUR_RE.match(tok)
        if m or (in_flavours and len(tok) == 1 and tok in FLAVOURS):  # 味甘、辛、热: 辛 is a flavour too
            for ch in m.group(1) if m else tok:
                if ch in FLAVOURS:
                    entry.add("has_flavour", ch, "flavour", sentence[:6])
                    entry.attr("flavour", ch)
            in_flavours = True
            tok = m.group(2).strip() if m else ""
            if not tok:
                continue
        in_flavours = False
        if NATURE_RE.match(tok):
            nat = NATURE_RE.match(tok).group(1)  # type: ignore[union-attr]
            entry.add("has_nature", nat, "nature", tok)
            entry.attr("nature", nat)
        elif TOX_RE.match(tok):
            entry.add("toxicity", tok, "toxicity", tok)
            entry.attr("toxicity", tok)
        elif tok.startswith("主"):
            parts = re.split(r"[，、,]", sentence.rstrip("。；"))
            return "，".join([tok] + [p.strip() for p in parts[i + 1:]])
        elif len(tok) > 4:
            return None
    return None


def parse_entry(name: str, text: str, title_nature: str | None = None, title_aliases: Iterable[str] = ()) -> Entry | None:
    """Parse one substance entry's text; None when it does not read as one."""
    paras = [p.strip() for p in text.split("\n") if p.strip()]
    if not paras:
        return None
    main = _ITEM_NO.sub("", paras[0]).strip()
    main_clean = _PAREN.sub("", _PAREN.sub("", main)).strip()
    opens_header = HEADER_RE.match(main_clean) is not None
    if not opens_header and not (title_nature and main_clean.startswith("主")):
        return None
    entry = Entry(name, anchor=main[:12])
    for a in title_aliases:
        if a != name and a not in entry.aliases:
            entry.aliases.append(a)
    if title_nature:
        entry.add("has_nature", title_nature, "nature", main[:6])
        entry.attr("nature", title_nature)
    sents = _sentences(main_clean)
    rest = sents
    if opens_header:
        tail = _header(entry, sents[0])
        rest = sents[1:]
        if tail:
            _main_clause(entry, tail[1:], explicit=True)
    implicit_ok = opens_header
    for k, s in enumerate(rest):
        s = s.strip()
        if TOX_RE.match(s.rstrip("。")):
            tox = s.rstrip("。")
            entry.add("toxicity", tox, "toxicity", tox)
            entry.attr("toxicity", tox)
            continue
        if s.startswith("主") or (implicit_ok and k == 0 and s.startswith("治")):
            # 治… right after the header reads as the 主 clause (饮膳正要: 味甘辛，大热，有毒。治心腹寒热…)
            _main_clause(entry, s[1:], explicit=True)
            implicit_ok = False
        elif s.startswith("久服"):
            _long_use(entry, s)
            implicit_ok = False
        elif implicit_ok and k == 0 and s.startswith(_REMOVAL + _EFFECT_PREFIXES):
            _main_clause(entry, s, explicit=False)
            implicit_ok = False
        else:
            implicit_ok = False
    for m in _HABITAT.finditer(main_clean):
        entry.attr("habitat", m.group(1))
    # aliases: the main text and the cited herbals (《名医》曰, 《吴普》曰), not the editor's notes (案∶)
    for p in paras:
        if p is not paras[0] and not re.match(r"^《(名医|吴普)[^》]*》曰", p):
            continue
        for m in _ALIAS.finditer(_PAREN.sub("", p)):
            a = m.group(1)
            if a != name and a not in entry.aliases:
                entry.aliases.append(a)
    if not entry.facts:
        return None
    return entry


def find_entries(title: str, text: str) -> list[Entry]:
    """The entries of one section: the section itself, or the 名∶味… / 【名】味… entries inside it."""
    cleaned = clean_title(title)
    if cleaned is not None:
        name, aliases, nature = cleaned
        e = parse_entry(name, text, nature, aliases)
        if e is not None:
            return [e]
    if re.search(r"序", title):
        return []
    out: list[Entry] = []
    paras = [p.strip() for p in text.split("\n") if p.strip()]
    for i, p in enumerate(paras):
        m = _SUBENTRY.match(p)
        if not m:
            continue
        name = m.group(1) or m.group(2)
        if len(name) < 2 or _NOT_ENTRY_TITLE.search(name) or name.startswith("凡"):
            continue
        body = p[m.end():]
        # the entry runs on until the next entry
        for q in paras[i + 1:]:
            if _SUBENTRY.match(q) or q.startswith("【"):
                break
            body += "\n" + q
        e = parse_entry(name, body)
        if e is not None:
            e.anchor = p[:12]
            out.append(e)
    return out


# --------------------------------------------------------------------------- builder


def _locate(snippets: list[tuple[str, str]], start: int, needle: str) -> str:
    for sid, text in snippets[start:]:
        if needle and needle in text:
            return sid
    return snippets[start][0]


def add_entry(b: DocumentBuilder, entry: Entry, snippets: list[tuple[str, str]], book: str | None = None) -> dict[str, int]:
    """Write one entry: the substance entity, its aliases and attributes, and one triple per fact."""
    start = next((i for i, (_, t) in enumerate(snippets) if entry.anchor and entry.anchor in t), 0)
    sub = b.entity(entry.name, "substance", layer=LAYER, attributes={k: list(v) for k, v in entry.attributes.items()},
                   aliases=[(a, "synonym") for a in entry.aliases])
    counts: Counter[str] = Counter()
    for f in entry.facts:
        tail = b.entity(f.tail, f.tail_type, layer=LAYER)
        b.triple(sub, f.relation, tail, confidence=CONFIDENCE, layer=LAYER, origin=ORIGIN,
                 snippet=_locate(snippets, start, f.needle))
        counts[f.relation] += 1
    return dict(counts)


def extract_section(b: DocumentBuilder, title: str, text: str, snippets: list[tuple[str, str]], book: str | None = None) -> list[dict[str, int]]:
    """Find the substance entries of one section and add them; returns per-entry triple counts."""
    if not snippets:
        return []
    return [add_entry(b, e, snippets, book) for e in find_entries(title, text)]
