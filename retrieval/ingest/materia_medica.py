"""LLM-free materia-medica extractor: the formulaic entries of the herbals → triples.

The herbals describe a substance in fixed clauses, in a few house styles::

    大枣   味甘，平。主心腹邪气，安中养脾……久服，轻身、长年。一名干枣。生平泽。   (神农本草经)
    枸杞〈寒〉   （一）无毒。……                                              (食疗本草)
    黄连   味苦，性寒无毒，入心经。主心火炎，目疾暴发……                      (雷公炮制药性解)
    甘草   气平，味甘，阳也。无毒。入足厥阴经、太阴经、少阴经。              (汤液本草)
    百部   润肺，杀虫 / 甘苦微温。能润肺……                                   (本草备要: effects, then 性味)
    甘草   【释名】蜜甘、蜜草… 【气味】甘，平，无毒。… 【主治】五脏六腑寒热邪气…  (本草纲目)
    萝摩∶味甘、平。一名苦丸。无毒。……   (several entries in one section, 千金食治)

:func:`find_entries` recognises an entry (a short substance title whose text opens with a 性味
header: 味/性/气 clauses, a bare 甘苦微温, 有毒/无毒; or labelled 【气味】/【主治】 fields) and
:func:`extract_book` adds, with the snippet that says it as provenance (layer ``book``, origin
``pattern:materia_medica``, confidence 0.6, below curated sources):

- ``has_flavour`` → flavour (味甘辛 → 甘, 辛), ``has_nature`` → nature as written (微寒, 大热);
- ``toxicity`` → 有毒/无毒/小毒/大毒/微毒 (also an attribute);
- ``enters_meridian`` → meridian, from 入…经 in the entry's own opening (入手太阴、足阳明经 →
  肺经, 胃经; 入肝胆二经 → 肝经, 胆经) or an 【归经】 field; a channel without hand/foot is skipped;
- ``treats`` → symptom: the 主… clause (or 【主治】) split on 、，； (a removal verb 除/止/去/杀/治/疗/
  解/破/散/逐/辟 is dropped: 除烦 → 烦); ``has_effect`` → effect: tonic phrases (益气, 安五脏, 清神),
  the 久服… clause, and the effect line that opens an entry (本草备要's 润肺，杀虫);
- aliases from 一名X, 【释名】 and a modern name in the title (薯蓣（山药）), kind ``book_synonym``;
- with the books' ``name_variants`` option, other names of kind ``book_variant`` (docs/aliases.md):
  ``default`` — the editor's notes on how the name was written (署豫 （旧作薯蓣，《御览》作署豫）: 薯蓣) and a
  title's modern name that names a curated substance (鸡头子（芡实）: the entry *is* the catalogue's 芡实, so
  its facts go to 芡实 and 鸡头子 becomes 芡实's alias; a titled section with no extractable entry, 薯蓣（山药）,
  still gives the alias 薯蓣 → 山药); ``all`` — also 亦名/别名/俗名/俗呼/俗称 X at the start of a clause and
  every title pair (an entity named by the title when neither name is known: 栝蒌（瓜蒌）), judged below
  the precision bar; ``off``. A title's parenthesis is no name when it is a note (一类而四名, 蝥牟二音),
  when the section treats it as a second item (童便（秋石）: "秋石，人童便…") or denies it (非真龙蛋草).

**Names stay apart.** An entry's name resolves to an existing substance only through that
substance's name or curated aliases (catalogue variants, ontology synonyms), never through an alias
another book extracted, so a book's 一名 cannot capture a later entry (沙参 一名知母 in 神农本草经
does not make 知母 resolve to 沙参). An 一名 alias that is the name of another entry of the same
book, of a substance already in the graph, or the 一名 of two entries, is not made an alias: it is
kept in the entry's attribute ``other_names`` only.

**Entries without a heading.** When the heading of an entry was lost and its text runs on under the
previous one (枸杞 under 槐实 in 神农本草经), a later paragraph that opens a new 性味 header ends the
previous entry; its facts go to the name the text gives it (``《吴普》曰∶枸杞，一名…`` with 枸杞 among
its own 一名) or, without such a name, to nobody.

It never touches prefaces (序), chapter headings, or recipes (食疗方's 〔食品〕〔主疗〕 form, dishes
that open with what they cure): precision matters more than recall (the figures per relation family
are measured on a judged sample: bench/extraction_precision/).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Iterable, Sequence

from bencao.retrieval.graph.store import DocumentBuilder
from bencao.retrieval.ingest.provenance import SectionSnippets
from bencao.retrieval.ingest.substances import BOOK_ALIAS_KIND, BOOK_VARIANT_KIND, SubstanceNames, repair_name

CONFIDENCE = 0.6
ORIGIN = "pattern:materia_medica"
LAYER = "book"
ALIAS_KIND = BOOK_ALIAS_KIND
VARIANT_KIND = BOOK_VARIANT_KIND

FLAVOURS = "甘苦辛咸酸淡涩"
_NATURE = r"(?:大|微|小|稍)?(?:寒|热|温|凉|平|冷)"
_TOX = r"(?:有|无|小|大|微)毒"
NATURE_RE = re.compile(rf"^性?({_NATURE})$")
TOX_RE = re.compile(rf"^({_TOX})$")
FLAVOUR_RE = re.compile(rf"^味([{FLAVOURS}、]+)(.*)$")
# the opening of an entry's first sentence (the classic form: 味甘，平 / 平，无毒 / 有毒)
HEADER_RE = re.compile(rf"^(味[{FLAVOURS}]|性?{_NATURE}[，、。]|{_TOX})")

RELATIONS = {
    "has_flavour": ("the substance's flavour (味), as the book states it", "substance", "flavour"),
    "has_nature": ("the substance's nature (性: 寒 热 温 凉 平 …), as the book states it", "substance", "nature"),
    "treats": ("an indication the substance is used for (the book's 主… clause)", "substance", "symptom"),
    "has_effect": ("an effect of the substance (益气, 安五脏, 久服轻身 …)", "substance", "effect"),
    "toxicity": ("whether the book calls the substance toxic (有毒/无毒/小毒/大毒)", "substance", "toxicity"),
    "enters_meridian": ("a meridian the substance enters (归经: 入…经), as the book states it", "substance", "meridian"),
}
#: relation → the precision family it is measured in (bench/extraction_precision/)
FAMILIES = {"has_flavour": "flavour_nature", "has_nature": "flavour_nature", "toxicity": "toxicity",
            "enters_meridian": "meridian", "treats": "treats", "has_effect": "effect"}

# Titles that are never a substance entry.
_NOT_ENTRY_TITLE = re.compile(r"^五脏|^六腑|序|论|篇|第|卷|凡例|目录|附录|总|诸|类$|品$|法$|门$|经$|部$|方$|汤$|散$|丸$|歌|赋|说|辨|解$|考|例|图|表"
                              r"|之[一二三四五六七八九十]|^[治主]|科|用药|[上中下]$")
# Tonic/regulating verbs: the phrase is an effect, kept whole.
_EFFECT_PREFIXES = ("安", "养", "益", "补", "通", "和", "利", "明", "轻身", "长", "强", "坚", "填", "壮", "润", "悦", "美", "好",
                    "耐", "令人", "延年", "不老", "不饥", "调", "厚", "充", "开", "滋", "暖", "温", "聪", "平", "生肌", "生津", "续",
                    "助", "宜", "下", "宣", "实", "驻", "黑", "乌", "变", "化", "行", "浓", "定", "保", "增", "荡", "推",
                    "清", "泻", "醒", "健", "固", "敛", "收", "涩", "升", "降", "发", "透", "燥", "凉", "活", "舒", "缓", "镇", "宁", "排",
                    "出", "起", "泄")
# Indications that open like an effect phrase (温疟 is a disease, not 温 + 疟).
_WHOLE_INDICATIONS = ("消渴", "温疟", "温病", "温毒", "坚积", "下血", "下痢", "下利", "下重", "发热", "发黄", "发狂", "发背", "清盲",
                      "坚满", "坚痛", "坚硬", "好唾", "好睡", "好眠", "好忘", "好怒", "好惊", "好卧", "好悲",
                      "泻痢", "泻泄", "清涕", "清谷", "固瘕", "通身", "黑疸", "黑子", "长虫", "收引", "坚瘕", "坚症", "化脓",
                      "行步", "发落", "发秃", "暖气", "坚气", "泻利", "泻血", "出血", "泄泻", "泄痢", "泄利", "泄精", "泄注", "泄澼", "破伤风")
# Removal verbs: the object is the indication (除烦 → 烦).
_REMOVAL = ("除", "止", "去", "杀", "治", "疗", "解", "破", "散", "逐", "辟", "消", "住")
# One-character objects of 去 that are parts cut off in processing (去芦, 去皮, 去心): an instruction, not an effect
_PART_REMOVED = set("芦皮心毛节核子足翅头尾土粗白瓤壳油苗须膜筋根")
# One-character objects that are indications (止渴 → 渴); other one-character objects (消谷, 逐水) keep the phrase as an effect.
_ONE_CHAR_SYMPTOMS = set("渴烦痛痢泄咳嗽喘呕吐疟痹疝肿汗痒疮癣胀满闷悸热寒风痰湿聋")
# A piece with these is prose, not a name of an indication or effect.
_PROSE = re.compile(r"[如若者之其也以而则可不勿忌能所为与及又云曰是此乃即或但凡每皆亦矣焉乎人仍用宜得同须当合于故误并非因致犹呼医尺□]|^恐|(?<!无)名|一应|许$|无问|不问|自死|^加|^[一二三四五六七八九十百]+种|传$|^堪|已(?:退|愈|止|除|平|安)|无度$|^牵引|^由|^上攻|^攻|^有|仙药|灵丹|要药|圣药|神药|良药|[0-9０-９]|(?<![宿伤停积])食$|^[食多]"
                    r"|(?:蒸|煮|炒|炙|捣|研|煎|熬|浸|渍|烧|焙|晒|曝|拌|绞)(?:过|熟|令|末|汁|服|之)|过$|^生|^熟")
# A removal verb inside an indication means two clauses ran together (破症除瘕, 熨除痈肿).
_INNER_VERB = re.compile(r"[除止去杀治疗解破散逐辟养益补化宽清收排堕]|生津|生肌|明目")
# A verb that makes the piece an action on the body (缩小便, 抑肝气, 断血, 接骨, 肥健, 压丹石), not a disorder
_ACTION = re.compile(r"^(?:缩|抑|建|断(?!续)|接|压|肥健)")
# A piece that tells how to use the drug (煮汁服, 烧灰, 酒服方寸匕, 捣敷): the rest of the sentence is method
_METHOD_PIECE = re.compile(r"^(?:捣|取|服|煮|研|敷|涂|摩|洗|浴|滴|点|含|嚼|熏|灸|烧|熨|贴|煎|作|同|入|生研|熟|以|用|为末|每)"
                           r"|取汁|服之|水服|酒服|煮汁|为末|为粉|方寸匕|立已|立愈|即愈|即瘥|神验|神效|良$|佳$|验$|瘥$|愈$|效$"
                           r"|服$|灰$|煎汤|汁服|末服|研服|调服|饮之|食之|敷之|涂之|洗之|贴之|切|炒|磨|(?:晒|曝|阴|焙|烘|风)干"
                           r"|立消|立效|如神|神妙|甚效|甚妙|极效|熨|杵|纳|刮|灌|掰|敷|等分|[一二三四五六七八九十半][斤两钱分升合]")
_PROSE_EFFECT = re.compile(r"[如若者其也以而则可勿忌所与又云曰是此乃即或但凡每皆亦矣焉乎用得同须当名□]|[0-9０-９]"
                           r"|(?:蒸|煮|炒|炙|捣|研|煎|熬|浸|渍|烧|焙|晒|曝|拌|绞)(?:过|熟|令|末|汁|服|之)|过$")
# 和 opens an effect only with what it harmonises (和中, 和胃); 和蚌粉 / 和诸药 is a method (mix with …)
_MIX = re.compile(r"^和(?![中胃血脾营卫气五百肝肺阴阳荣])")
# a piece that is a 性味 header word (苦寒, 无毒), a part's quality (肉润, 皮涩) or only body parts (五脏身体): no fact
_NOT_FACT = re.compile(rf"^(?:(?:微?[{FLAVOURS}]){{1,3}}{_NATURE}?|{_NATURE}|{_TOX}|[肉皮核仁子叶花根壳][{FLAVOURS}润燥温凉寒热平])$"
                       r"|^(?:[五六]?[脏腑]|身体?|四肢|[头面目耳鼻口舌齿腰膝足手心肝脾肺肾胃胆]|皮肤|肌肉|筋骨|骨节|关节|百节|九窍)+$")
_PAREN = re.compile(r"（[^（）]*）|\([^()]*\)|〔[^〕]*〕")
_ALIAS = re.compile(r"[一又]名[∶:]?([\u4e00-\u9fff]{2,5})(?=[，。、；）)]|$)")
# other names the books give besides 一名/又名 (kind book_variant)
# (at the start of a clause: 用牡荆俗名黄荆 names 牡荆, 吴俗名为壁虎 a local usage, not the entry)
_MORE_NAMES = re.compile(r"(?:^|(?<=[。，；、]))(?:亦名|别名|俗名为?|俗呼为?|俗称|俗谓之)[∶:]?([\u4e00-\u9fff]{2,5}?)也?(?=[，。、；）)]|$)")
# the editor's notes on how the entry's name was written: （旧作薯蓣，《御览》作署豫，是）
_WRITTEN_AS = re.compile(r"(?:旧|一|或|亦|古|本|》)作([\u4e00-\u9fff]{2,5})(?=[，。、；）)]|$)")
_NOTE_PARA = re.compile(r"^（[^（）]{2,60}）$")
_HABITAT = re.compile(r"(?:^|[，。；])生([\u4e00-\u9fff]{0,3}(?:谷|泽|土|野|海|池|山|原|中|上))(?=[，。；]|$)")
_SUBENTRY = re.compile(rf"^(?:【([\u4e00-\u9fff]{{1,8}})】\s*|([\u4e00-\u9fff]{{1,8}})[∶:])(?=味[{FLAVOURS}]|性?{_NATURE}[，、。])")
_ITEM_NO = re.compile(r"^（[一二三四五六七八九十]+）")
_TITLE_NATURE = re.compile(rf"〈({_NATURE})〉")
# a reading or a rank note in parentheses: （音梨）, （乌红切）, （余招反）, （为君）
_SUB_ITEM = re.compile(rf"^[\u4e00-\u9fff]{{2,5}}[，∶:](?:气味|味[{FLAVOURS}]|主)")
_READING = re.compile(r"^音|切$|反$|^为[君臣佐使]|^[上中下]品")
# 本草分经 files its drugs under the classes of the 十剂 written before the name: （补）人参, （攻）大黄
_CLASS_MARKS = set("补和攻散寒热温凉平泻涩润燥通宣轻重滑")
# Image references and source notes that open an entry's text in some herbals (滇南本草, 本草纲目)
_LEAD_NOISE = re.compile(r"^(?:\\r[^\\]*?\\p\w*\.bmp\\r|（《[^》]{1,8}》[^）]{0,6}）|[，。\s])+")
# A paragraph that quotes someone (案∶, 《名医》曰∶, 时珍曰∶): not the entry's own words
_QUOTE = re.compile(r"^(?:案|按|谨案|〔谨案〕|〔[^〕]{1,4}〕|《[^》]{1,12}》(?:曰|云)|[\u4e00-\u9fff]{1,4}(?:曰|云)[∶:])")
_FIELD = re.compile(r"【(气味|性味|味|主治|功用|功效|归经|释名)】")
_FIELD_NAMES = ("气味", "性味", "味", "主治", "功用", "功效", "归经", "释名", "集解", "修治", "发明", "附方", "正误", "校正", "附录", "前论",
                "禁忌", "炮制", "地", "时", "收", "用", "质", "色", "性", "气", "臭", "主", "制", "治", "合治", "名", "苗", "反", "助", "忌", "解", "行", "走")
_LABEL = re.compile(r"【([^】]{1,8})】")
_PART_WORDS = re.compile(r"^[根叶实子花茎皮肉苗仁核壳汁油胆肝血骨角乳脂髓脑齿甲毛粪屎尿卵心肾肺头尾蜕蜜膏蕊须芽节梢枝果蒂白黄赤青黑、及并]{1,4}$")
_SENT_SPLIT = re.compile(r"(?<=[。！？])")

# ---- 归经: channels and organs
_CHANNELS = {("手", "太阴"): "肺经", ("手", "阳明"): "大肠经", ("足", "阳明"): "胃经", ("足", "太阴"): "脾经",
             ("手", "少阴"): "心经", ("手", "太阳"): "小肠经", ("足", "太阳"): "膀胱经", ("足", "少阴"): "肾经",
             ("手", "厥阴"): "心包经", ("手", "少阳"): "三焦经", ("足", "少阳"): "胆经", ("足", "厥阴"): "肝经"}
_ORGANS = {"心包络": "心包经", "心包": "心包经", "包络": "心包经", "膀胱": "膀胱经", "大肠": "大肠经", "小肠": "小肠经",
           "三焦": "三焦经", "命门": "命门", "肺": "肺经", "心": "心经", "脾": "脾经", "肝": "肝经", "肾": "肾经", "胃": "胃经", "胆": "胆经"}
_MERIDIAN_SPAN = re.compile(r"(?:^|[，。；、\s（])(?:专|兼|能|并|而|又)?[入归]([手足太少阳明厥阴心包络肺脾肝肾胃胆膀胱大小肠三焦命门、与及并兼二三四五六十二]{1,24}?)"
                            r"(?:[二三四五六]|十二)?经(?:之)?(?:气分|血分)?(?=[，。；、）\s]|$)")
_MERIDIAN_TOKEN = re.compile(r"手足|手|足|太阴|少阴|厥阴|太阳|阳明|少阳|心包络|心包|包络|膀胱|大肠|小肠|三焦|命门|肺|心|脾|肝|肾|胃|胆|[、与及并兼二三四五六十]")


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
    variants: list[str] = field(default_factory=list)  # how the name was written, per the editor's notes (旧作X): kind book_variant
    marker_names: list[str] = field(default_factory=list)  # 亦名/别名/俗名/俗呼 X: kind book_variant with name_variants: all
    title_names: list[str] = field(default_factory=list)  # the modern name the title gives (薯蓣（山药）: 山药)
    facts: list[Fact] = field(default_factory=list)
    attributes: dict[str, list[str]] = field(default_factory=dict)
    anchor: str = ""  # text at the start of the entry
    span: tuple[int, int] = (0, 0)  # where the entry is in its section's text (for provenance)

    def add(self, relation: str, tail: str, tail_type: str, needle: str) -> None:
        tail = repair_name(tail)
        if tail and not any(f.relation == relation and f.tail == tail for f in self.facts):
            self.facts.append(Fact(relation, tail, tail_type, needle))

    def attr(self, key: str, value: str) -> None:
        vals = self.attributes.setdefault(key, [])
        if value not in vals:
            vals.append(value)

    def alias(self, name: str) -> None:
        name = repair_name(re.sub(r"(?<=..)也$", "", name))  # 一名戴星草也 → 戴星草
        if re.search(r"[名音者是故之、\s]", name):
            return  # a note, not a name: 根名鸢头, 赤者名绛矾, 射音夜, 故得名也
        if name and name != self.name and name not in self.aliases:
            self.aliases.append(name)

    def variant(self, name: str, marker: bool = False) -> None:
        name = repair_name(re.sub(r"(?<=..)也$", "", name))  # 俗呼为野生姜也 → 野生姜
        into = self.marker_names if marker else self.variants
        if name and name != self.name and name not in self.aliases and name not in into and not re.search(r"[名音者是故之、\s]", name):
            into.append(name)


def declare_relations(b: DocumentBuilder) -> None:
    for name, (desc, head, tail) in RELATIONS.items():
        b.relation(name, desc, head, tail)


# --------------------------------------------------------------------------- titles


def clean_title(title: str) -> tuple[str, list[str], str | None] | None:
    """``枸杞〈寒〉`` → (枸杞, [], 寒); ``薯蓣（山药）`` → (薯蓣, [山药], None); None if not a substance name.

    A parenthesis at the start restores a lost character (（榧）子 → 榧子), unless it classifies the
    entry (（热）草乌头 → 草乌头) or numbers a heading (（一）治咳化痰: not an entry); after the name it
    gives the modern name (an alias), unless it is a reading note (（音梨）, （乌红切）). ``【凌霄花】`` is
    凌霄花; ``黄芝一名金芝`` is 黄芝 with the alias 金芝; a number after the name (乌药二百八十二, 本草易读's
    entry numbers) goes. Titles naming several things (山鸡、野鸡) are refused.
    """
    t = title.strip()
    if t.startswith("【") and t.endswith("】"):
        t = t[1:-1].strip()
    nature = None
    m = _TITLE_NATURE.search(t)
    if m:
        nature = m.group(1)
        t = _TITLE_NATURE.sub("", t).strip()
    aliases: list[str] = []
    lead = re.match(r"^（([\u4e00-\u9fff]{1,4})）(?=[\u4e00-\u9fff])", t)
    if lead:
        inner = lead.group(1)
        if re.fullmatch(r"[一二三四五六七八九十]+", inner):
            return None  # a numbered heading, not an entry
        if _READING.search(inner):
            return None  # （私以切）耳实: the note stands for the lost first character (枲耳实)
        if re.fullmatch(_NATURE, inner) or inner in _CLASS_MARKS:
            t = t[lead.end():]  # a classification: 本草分经's （补）巴戟天, （散）天麻
        else:
            t = inner + t[lead.end():]
    if re.search(r"[\u4e00-\u9fff]（[^（）]*）（[^（）]*）[\u4e00-\u9fff]", t):
        return None  # 庵（音淹）（音闾）子: a second note stands for a lost character (庵闾子)
    for inner in re.findall(r"（([^（）]*)）", t):
        items = [a.strip() for a in re.split(r"[、，,]", inner) if a.strip()]
        if _READING.search(inner) or len(items) != 1:
            continue  # a reading note, or related drugs listed with the entry (丹砂（水银、轻粉）): no alias
        if re.fullmatch(r"[\u4e00-\u9fff]{2,8}", items[0]):
            aliases.append(items[0])
    name = re.sub(r"（[^（）]*）", "", t).strip()
    if "一名" in name:
        name, _, more = name.partition("一名")
        aliases += [a for a in re.split(r"[，]?一名", more) if a and "、" not in a]  # 白芝一名玉芝、素芝: not one name
    name = re.sub(r"(?<=[\u4e00-\u9fff])[一二三四五六七八九十百零]*[十百][一二三四五六七八九十百零]*$", "", name)  # 碱四百十八 → 碱
    if not re.fullmatch(r"[\u4e00-\u9fff]{1,8}", name) or _NOT_ENTRY_TITLE.search(name):
        return None
    return name, [a for a in aliases if a != name], nature


# --------------------------------------------------------------------------- clauses


def _sentences(text: str) -> list[str]:
    return [s for s in _SENT_SPLIT.split(text) if s.strip()]


def _pieces(clause: str) -> list[str]:
    """Split a clause on 、，；. A part label (大黄蜂子∶主…) ends the clause: what follows is about the part.
    A piece with a space in it lost a character there (贲豚螈 ，): it is marked with a ``□`` so it is no name."""
    m = re.search(r"[，、；]?[\u4e00-\u9fff]{1,6}[∶:]", clause)
    if m:
        clause = clause[: m.start()]
    out = []
    for p in re.split(r"[，、；,;]", clause.strip("。；，")):
        core = p.strip()
        if core:
            out.append(core + "□" if re.search(r"\S\s", p) else core)
    return out


def _ends_clause(piece: str) -> bool:
    """Pieces after which the clause is no longer about indications: habitat, synonyms, warnings."""
    return piece.startswith(("多食", "久食", "一名", "又名", "宜", "同", "得", "配", "用", "以")) \
        or re.search(r"不可|勿|忌|慎|禁", piece) is not None or _HABITAT.fullmatch(piece) is not None


def classify_piece(piece: str) -> tuple[str, str] | None:
    """One piece of a 主 clause → ("treats", indication) or ("has_effect", effect), or None for prose."""
    if not 1 <= len(piece) <= 10 or not re.fullmatch(r"[\u4e00-\u9fff]+", piece):
        return None
    if re.fullmatch(r"[心肝脾肺肾胃胆膀胱大小肠三焦五六脏腑]+", piece) or _NOT_FACT.search(piece) or _METHOD_PIECE.search(piece):
        return None  # an organ alone (治脾肾脏。) is where, not what; 苦寒 is the header, not an indication
    if piece.startswith("令") and not piece.startswith("令人"):
        return None  # 令强 (makes it strong): about the organ the clause names, no indication
    if piece.startswith("善") and len(piece) > 2:
        c = classify_piece(piece[1:])  # 善安心神 (good at calming the mind): an effect; 善忘 stays an indication
        return ("has_effect", piece[1:]) if c is not None and c[0] == "has_effect" else None
    if piece.startswith(_WHOLE_INDICATIONS):
        return None if _PROSE.search(piece) or _INNER_VERB.search(piece[2:]) else ("treats", piece)
    if piece.startswith("愈") and len(piece) > 1:  # 愈聋 (cures deafness) → 聋
        obj = piece[1:]
        bad = _PROSE.search(obj) or _INNER_VERB.search(obj) or _NOT_FACT.search(obj)
        return None if bad or (len(obj) == 1 and obj not in _ONE_CHAR_SYMPTOMS) else ("treats", obj)
    for verb in _REMOVAL:
        if piece.startswith(verb) and len(piece) > len(verb):
            obj = piece[len(verb):]
            if _PROSE.search(obj) or _INNER_VERB.search(obj) or _NOT_FACT.search(obj):
                return None  # 去皮肤（、骨节间风）: a body part alone is where, not what
            if len(obj) == 1 and obj not in _ONE_CHAR_SYMPTOMS:
                return None if verb in ("治", "疗", "住") or obj in _PART_REMOVED else ("has_effect", piece)
            return ("treats", obj)
    if piece.startswith(_EFFECT_PREFIXES):
        if len(piece) < 2 or _PROSE_EFFECT.search(piece[1:]) or _MIX.match(piece) or re.fullmatch(r".[大小]", piece):
            return None  # 通大 (cut off from 通大、小二肠), 和蚌粉 (a method)
        return ("has_effect", piece)
    if len(piece) < 2 or _PROSE.search(piece) or _INNER_VERB.search(piece) or _ACTION.match(piece):
        return None
    return ("treats", piece)


def _main_clause(entry: Entry, clause: str, explicit: bool) -> None:
    """The 主 clause (``explicit``) or a verb-initial sentence right after the header."""
    found: list[tuple[str, str, str]] = []
    for piece in _pieces(_PAREN.sub("", clause)):
        if piece.startswith("主") and len(piece) > 2 and explicit:
            piece = piece[1:]
        if piece.startswith("久服"):
            _long_use(entry, piece)
            break
        if _ends_clause(piece) or _METHOD_PIECE.search(piece):
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
        if piece.startswith(("不可", "勿", "多", "损", "伤", "发", "动", "一名", "畏", "恶", "反", "忌", "大如", "形", "色")) \
                or _HABITAT.fullmatch(piece) or _METHOD_PIECE.search(piece):
            break  # the clause is over: warnings, synonyms, antagonisms, what it looks like
        if 2 <= len(piece) <= 8 and re.fullmatch(r"[\u4e00-\u9fff]+", piece) and not _PROSE_EFFECT.search(piece):
            entry.add("has_effect", piece, "effect", piece)


def _effect_line(entry: Entry, para: str) -> bool:
    """本草备要/本草从新 open an entry with its effects (润肺，杀虫 / 宣、散郁、通心肾。): all pieces effect-like."""
    text = para.strip("。 ")
    if not 2 <= len(text) <= 24 or re.search(r"[^\u4e00-\u9fff，、]", text):
        return False
    pieces = [p for p in re.split(r"[，、]", text) if p]
    for p in pieces:
        if p.startswith(("一名", "又名")) and 4 <= len(p) <= 7:
            entry.alias(p[2:])
    pieces = [p for p in pieces if not p.startswith(("一名", "又名"))]
    got = [classify_piece(p) for p in pieces]
    if len(pieces) < 2 or any(g is None or len(p) < 2 for g, p in zip(got, pieces)):
        return False
    for (rel, tail), p in zip(got, pieces):  # type: ignore[misc]
        entry.add(rel, tail, "symptom" if rel == "treats" else "effect", p)
    return True


# --------------------------------------------------------------------------- 性味 headers

_T_FLAV = re.compile(rf"^(?:气味|味)((?:微?[{FLAVOURS}][、而]?)+)(?:而|性|气)?({_NATURE})?({_TOX})?$")
_T_NAT = re.compile(rf"^(?:性|气)({_NATURE})({_TOX})?$")
_T_BARE = re.compile(rf"^((?:微?[{FLAVOURS}]){{1,4}})({_NATURE})({_TOX})?$")
_T_NAT_ONLY = re.compile(rf"^({_NATURE})({_TOX})?$")
_T_ONE_FLAV = re.compile(rf"^微?([{FLAVOURS}])$")
_T_SKIP = re.compile(r"^(?:阳也|阴也|阳中之阴|阴中之阳|阴中微阳|阳中微阴|纯阳|纯阴|浮也|沉也|升也|降也|气薄味浓|味浓气薄|气浓味薄|味薄气浓"
                     r"|可升可降|沉而降|浮而升|升而浮|降而沉|阳中阴也|阴中阳也|阴也降也|阳也升也)$")


def _flavours(s: str) -> list[str]:
    return [ch for ch in s if ch in FLAVOURS]


def parse_header(entry: Entry, text: str) -> tuple[int, bool]:
    """Read a 性味 header at the start of ``text``; returns (characters consumed, header found).

    Tokens (split on ，、 across sentences) are read while each is a header token: 味/气味 + flavours
    (+ nature), 性/气 + nature, a bare 甘苦微温, a nature or flavour after one of those, 有毒/无毒, 入…经,
    and the 阳也/沉而降 remarks. A header needs a flavour, a 性/气 nature, or a nature with a toxicity.
    """
    pos = 0
    found_flav = found_nat = found_tox = explicit_nat = False
    in_flav = bare_first = False
    facts: list[tuple[str, str, str]] = []
    for m in re.finditer(r"[^，、。；]+[，、。；]?", text):
        tok = m.group(0).rstrip("，、。；").strip()
        if not tok:
            pos = m.end()
            continue
        hit = False
        if (fm := _T_FLAV.match(tok)) is not None:
            facts += [("has_flavour", f, tok) for f in _flavours(fm.group(1))]
            found_flav = in_flav = hit = True
            if fm.group(2):
                facts.append(("has_nature", fm.group(2), tok))
                found_nat = explicit_nat = True
            if fm.group(3):
                facts.append(("toxicity", fm.group(3), tok))
                found_tox = True
        elif (nm := _T_NAT.match(tok)) is not None:
            facts.append(("has_nature", nm.group(1), tok))
            found_nat = explicit_nat = hit = True
            in_flav = False
            if nm.group(2):
                facts.append(("toxicity", nm.group(2), tok))
                found_tox = True
        elif (bm := _T_BARE.match(tok)) is not None:
            facts += [("has_flavour", f, tok) for f in _flavours(bm.group(1))]
            facts.append(("has_nature", bm.group(2), tok))
            found_flav = found_nat = hit = True
            if bm.group(3):
                facts.append(("toxicity", bm.group(3), tok))
                found_tox = True
        elif (om := _T_NAT_ONLY.match(tok)) is not None:
            facts.append(("has_nature", om.group(1), tok))
            found_nat = hit = True
            if om.group(2):
                facts.append(("toxicity", om.group(2), tok))
                found_tox = True
            in_flav = False
        elif (in_flav or pos == 0) and (sm := _T_ONE_FLAV.match(tok)) is not None:
            # 甘，平，无毒 (本草纲目's 【气味】): a lone flavour opens the header, or continues 味甘、辛
            facts.append(("has_flavour", sm.group(1), tok))
            bare_first = bare_first or pos == 0
            in_flav = hit = True
        elif TOX_RE.match(tok):
            facts.append(("toxicity", tok, tok))
            found_tox = hit = True
            in_flav = False
        elif _T_SKIP.match(tok):
            hit = True
        elif _meridians(tok, whole=True):
            for mer in _meridians(tok, whole=True):
                facts.append(("enters_meridian", mer, tok))
            hit = True
        if not hit:
            break
        pos = m.end()
    found_flav = found_flav or (bare_first and (found_nat or found_tox))
    ok = found_flav or explicit_nat or (found_nat and found_tox) or (found_tox and pos > 0 and not found_nat)
    if not ok:
        return 0, False
    head_text = text[:pos].rstrip("，、。；")
    for rel, tail, needle in facts:
        needle = head_text if len(needle) < 4 and rel != "enters_meridian" else needle
        if rel == "has_flavour":
            entry.add(rel, tail, "flavour", needle)
            entry.attr("flavour", tail)
        elif rel == "has_nature":
            entry.add(rel, tail, "nature", needle)
            entry.attr("nature", tail)
        elif rel == "toxicity":
            entry.add(rel, tail, "toxicity", needle)
            entry.attr("toxicity", tail)
        else:
            entry.add(rel, tail, "meridian", needle)
            entry.attr("meridian", tail)
    return pos, True


# --------------------------------------------------------------------------- 归经


def _meridians(text: str, whole: bool = False) -> list[str]:
    """Meridians named by 入…经 phrases in ``text`` (``whole``: the text must be one such phrase)."""
    out: list[str] = []
    spans = [m.group(1) for m in _MERIDIAN_SPAN.finditer(text)]
    if whole:
        m = _MERIDIAN_SPAN.match(text)
        if not m or m.end() < len(text.rstrip("，。；、")):
            return []
        spans = [m.group(1)]
    for span in spans:
        toks = _MERIDIAN_TOKEN.findall(span)
        if "".join(toks) != span:
            continue  # something else in the span: not a plain list of channels
        foot_hand = [t for t in toks if t in ("手", "足", "手足")]
        trailing = "足" if span.endswith("足") else None
        side: list[str] = []
        names: list[str] = []
        ok = True
        for t in toks:
            if t in ("手", "足"):
                side = [t]
            elif t == "手足":
                side = ["手", "足"]
            elif t in ("太阴", "少阴", "厥阴", "太阳", "阳明", "少阳"):
                sides = side or ([trailing] if trailing else ([foot_hand[-1]] if len(foot_hand) == 1 else []))
                if not sides:
                    ok = False  # a channel without hand or foot is ambiguous
                    break
                names += [_CHANNELS[(sd, t)] for sd in sides]
            elif t in _ORGANS:
                names.append(_ORGANS[t])
        if ok:
            out += [n for n in names if n not in out]
    return out


def _meridian_facts(entry: Entry, text: str) -> None:
    for mer in _meridians(text):
        entry.add("enters_meridian", mer, "meridian", mer[:-1] if mer.endswith("经") else mer)
        entry.attr("meridian", mer)


# --------------------------------------------------------------------------- entries


def _aliases_in(text: str, pattern: re.Pattern[str] = _ALIAS) -> list[str]:
    """一名/又名 names in ``text`` (``pattern``: other name markers), except in a sentence about something else
    (勿误用钩吻，钩吻即野葛，…又名断肠草)."""
    text = _PAREN.sub("", text)
    out = []
    for m in pattern.finditer(text):
        before = text[max(text.rfind("。", 0, m.start()) + 1, 0): m.start()]
        if pattern is _MORE_NAMES and re.search(r"别有|又有|另有|一种", before):
            continue  # 别有一种…亦名鸡肠菜: the name of the other kind the sentence introduces
        if not re.search(r"[即误勿似非如若与或]", before):
            out.append(m.group(1))
    return out


def _split_fields(para: str) -> list[tuple[str, str]]:
    """``【气味】甘，平。【主治】…`` → [(气味, 甘，平。), (主治, …)]; text before the first label is ("", …).
    Any other label (【根】, 【角】, 【茯神】: a part or a related drug) is kept as ("part:根", …)."""
    out: list[tuple[str, str]] = []
    last, label = 0, ""
    for m in _LABEL.finditer(para):
        if m.start() > last or label:
            out.append((label, para[last:m.start()]))
        name = m.group(1)
        label, last = (name if name in _FIELD_NAMES else f"part:{name}"), m.end()
    out.append((label, para[last:]))
    return [(k, v.strip()) for k, v in out if v.strip() or k.startswith("part:")]


def _field_value(value: str) -> str:
    """A field's own words: up to the first quoted opinion (寇宗奭曰∶…)."""
    m = re.search(r"[\u4e00-\u9fff]{1,4}(?:曰|云)[∶:]", value)
    return value[: m.start()] if m else value


def _parse_fields(entry: Entry, paras: list[str]) -> bool:
    """Labelled entries (本草纲目, 要药分剂): 【气味】 → header, 【主治】 → main clause, 【归经】, 【释名】.

    本草纲目 describes parts under their own labels (\\x根\\x 【气味】…, then 【叶】, 【角】…): the fields of
    the first part are the entry's; from the second part label on, the facts are about another part
    (or a related drug: 【茯神】 under 茯苓) and are not the entry's.
    """
    found = False
    parts = 0
    for p in paras:
        if found and re.fullmatch(r"[\u4e00-\u9fff]{2,6}", p.strip()):
            return found  # 五色石英 on its own line, then its 【主治】: a related item after the entry's fields
        if re.fullmatch(r"【[^】]{1,8}】", p.strip()) and p.strip()[1:-1] not in _FIELD_NAMES:
            parts += 1  # a part on its own line (the books' \x根\x)
            if parts > 1 or found or not _PART_WORDS.match(p.strip()[1:-1]):
                return found
            continue
        prev = ""
        for label, value in _split_fields(p):
            if label in ("气味", "主治") and re.search(r"(?:^|[。）)\s])[\u4e00-\u9fff]{2,6}$", prev) and prev:
                return found  # 五色石英【主治】: a related item's fields, inline after the entry's
            prev = value
            if label.startswith("part:"):
                parts += 1
                if parts > 1 or found or not _PART_WORDS.match(label[5:]):
                    # a second part, a part after the entry's own fields (吴茱萸 … 【叶】), or another
                    # drug (【茯神】 under 茯苓): not this entry's facts
                    return found
                continue
            own = _field_value(value)
            if label in ("气味", "性味", "味"):
                found = parse_header(entry, own)[1] or found
            elif label == "主治":
                for s in _sentences(own):
                    _main_clause(entry, s[1:] if s.startswith("主") else s, explicit=True)
                found = True
            elif label in ("功用", "功效"):
                for s in _sentences(own):
                    _main_clause(entry, s, explicit=False)
            elif label == "归经":
                _meridian_facts(entry, own)
            elif label == "释名":
                for a in re.split(r"[、，]", _PAREN.sub("", own.split("。")[0])):
                    if a != a.strip() and a.strip():
                        continue  # 、 铁石: a space where a character was lost (熁铁石)
                    if re.fullmatch(r"[\u4e00-\u9fff]{2,5}", a.strip()) and a.strip() not in ("未详", "不详", "阙", "缺"):
                        entry.alias(a.strip())
    return found


def _opening(entry: Entry, main: str, title_nature: str | None) -> bool:
    """The entry's first paragraph: 性味 header, then 主/治/久服 clauses, 入…经, 一名, 生X (habitat)."""
    main = _ITEM_NO.sub("", _LEAD_NOISE.sub("", main)).strip()
    if main.startswith(entry.name + "，") or main.startswith(entry.name + "∶"):
        main = main[len(entry.name) + 1:]
    main_clean = _PAREN.sub("", _PAREN.sub("", main)).strip()
    entry.anchor = entry.anchor or main[:12]
    consumed, ok = parse_header(entry, main_clean)
    if not ok and not (title_nature and main_clean.startswith("主")):
        return False
    if title_nature:
        entry.add("has_nature", title_nature, "nature", main[:6])
        entry.attr("nature", title_nature)
    rest = main_clean[consumed:]
    first = True
    alternative = False
    for s in _sentences(rest):
        s = s.strip()
        if _SUB_ITEM.match(s) or re.match(r"^[\u4e00-\u9fff]{1,6}[∶:]", s):
            break  # 茯神，味甘，平。… / 其茎葱白∶平。…: a related drug or a part described after the entry
        after_alternative, alternative = alternative, s.startswith(("一云", "一曰", "或云", "一作"))
        if after_alternative and TOX_RE.match(s.rstrip("。")):
            continue  # 无毒。一云味辛。有毒。: another book's opinion
        if TOX_RE.match(s.rstrip("。")):
            tox = s.rstrip("。")
            entry.add("toxicity", tox, "toxicity", tox)
            entry.attr("toxicity", tox)
            continue
        if s.startswith("主") or (first and s.startswith("治")):
            # 治… right after the header reads as the 主 clause (饮膳正要: 味甘辛，大热，有毒。治心腹寒热…)
            _main_clause(entry, s[1:], explicit=True)
        elif s.startswith("久服"):
            _long_use(entry, s)
        elif first and s.startswith(_REMOVAL + _EFFECT_PREFIXES):
            _main_clause(entry, s, explicit=False)
        elif s.startswith(("入", "归", "专入")):
            _meridian_facts(entry, s)
        first = False
    for m in _HABITAT.finditer(main_clean):
        entry.attr("habitat", m.group(1))
    for a in _aliases_in(main):
        entry.alias(a)
    for a in _aliases_in(main, _MORE_NAMES):
        entry.variant(a, marker=True)
    return True


def parse_entry(name: str, text: str, title_nature: str | None = None, title_aliases: Iterable[str] = ()) -> Entry | None:
    """Parse one substance entry's text; None when it does not read as one."""
    paras = [p.strip() for p in text.split("\n") if p.strip()]
    if not paras:
        return None
    entry = Entry(repair_name(name))
    for a in title_aliases:
        entry.alias(a)
        entry.title_names.append(a)
    lead = _LEAD_NOISE.sub("", paras[0]).strip()
    if _NOTE_PARA.match(lead) and len(paras) > 1:  # （旧作薯蓣，《御览》作署豫，是） on its own line: a note on the name
        for m in _WRITTEN_AS.finditer(lead):
            entry.variant(m.group(1))
        paras = paras[1:]
    k = 0
    if _effect_line(entry, _LEAD_NOISE.sub("", paras[0])) and len(paras) > 1:
        k = 1  # 本草备要: the effect line, then the 性味 paragraph
    ok = _opening(entry, paras[k], title_nature)
    if not ok and k == 1:
        entry.facts.clear()
    if _FIELD.search(text):
        ok = _parse_fields(entry, paras) or ok
    if not ok:
        return None
    if k == 0 and len(paras) > 1 and not _QUOTE.match(paras[1]) and not _FIELD.search(paras[1]):
        # 汤液本草: 入足厥阴经… on its own line after the header
        if paras[1].startswith(("入", "归", "专入")):
            _meridian_facts(entry, paras[1].split("。")[0])
    # aliases of the cited herbals (《名医》曰, 《吴普》曰), not of the editor's notes (案∶)
    for p in paras[k + 1:]:
        if re.match(r"^《(名医|吴普)[^》]*》曰", p):
            for a in _aliases_in(p):
                entry.alias(a)
    if not entry.facts:
        return None
    return entry


def _embedded_name(paras: Sequence[str]) -> str | None:
    """The name an entry without a heading gives itself: 《吴普》曰∶枸杞，一名… with 枸杞 among its own 一名."""
    own = set(_aliases_in(paras[0]))
    for p in paras[1:]:
        m = re.match(r"^《[^》]{1,8}》曰[∶:]([\u4e00-\u9fff]{1,5})[，,]一名", p)
        if m and m.group(1) in own:
            return m.group(1)
    return None


def _paragraphs(text: str) -> list[tuple[int, str]]:
    """(offset, paragraph) for the non-blank paragraphs of a section's text."""
    out, pos = [], 0
    for line in text.split("\n"):
        if line.strip():
            out.append((pos + len(line) - len(line.lstrip()), line.strip()))
        pos += len(line) + 1
    return out


# a new entry's header run into the commentary before it (案∶…名为守宫槐。味苦，寒。主五内邪气…)
_INNER_HEADER = re.compile(rf"(?<=[。；])(?=味[{FLAVOURS}][{FLAVOURS}、]*[，、]{_NATURE}[，。][^。]{{0,8}}?主)")


def _split_embedded(paras: list[tuple[int, str]]) -> list[list[tuple[int, str]]]:
    """Split a section's paragraphs where a later paragraph opens a new 性味 header (a lost heading),
    also when that header was joined onto the end of a commentary paragraph."""
    cut: list[tuple[int, str]] = []
    for i, (off, p) in enumerate(paras):
        m = _INNER_HEADER.search(p) if i > 0 and _QUOTE.match(p) else None
        if m:
            cut += [(off, p[: m.start()]), (off + m.start(), p[m.start():])]
        else:
            cut.append((off, p))
    paras = cut
    groups: list[list[tuple[int, str]]] = [[]]
    for i, (off, p) in enumerate(paras):
        opens = i > 0 and HEADER_RE.match(_PAREN.sub("", p)) is not None and re.search(r"[主治]", p[:30]) is not None
        if opens and _QUOTE.match(paras[i - 1][1]):  # commentary, then a new entry's header
            groups.append([])
        groups[-1].append((off, p))
    return groups


def find_entries(title: str, text: str) -> list[Entry]:
    """The entries of one section: the section itself (and an entry whose heading was lost inside
    it), or the 名∶味… / 【名】味… entries inside it. Each entry's ``span`` is its part of ``text``."""
    paras = _paragraphs(text)
    cleaned = clean_title(title)
    if cleaned is not None:
        name, aliases, nature = cleaned
        groups = _split_embedded(paras)
        ends = [g[0][0] for g in groups[1:]] + [len(text)]
        e = parse_entry(name, "\n".join(p for _, p in groups[0]), nature, aliases)
        if e is not None:
            e.title_names = [a for a in e.title_names if title_pair_ok(title, a, text)]  # 童便（秋石）: a second item, not a name
            e.span = (0, ends[0])
            out = [e]
            for g, end in zip(groups[1:], ends[1:]):
                lost = _embedded_name([p for _, p in g])
                if lost is not None and lost != name:
                    e2 = parse_entry(lost, "\n".join(p for _, p in g))
                    if e2 is not None:
                        e2.anchor, e2.span = g[0][1][:12], (g[0][0], end)
                        out.append(e2)
            return out
    if re.search(r"序", title):
        return []
    out: list[Entry] = []
    for i, (off, p) in enumerate(paras):
        m = _SUBENTRY.match(p)
        if not m:
            continue
        name = m.group(1) or m.group(2)
        if len(name) < 2 or _NOT_ENTRY_TITLE.search(name) or re.search(r"[及与并]", name) or name.startswith("凡") or name.endswith(("曰", "云", "按", "案", "言", "镜", "录", "书", "论", "鉴", "编", "集", "志", "记", "传", "要")):
            continue
        body = p[m.end():]
        end = len(text)
        # the entry runs on until the next entry
        for off2, q in paras[i + 1:]:
            if _SUBENTRY.match(q) or q.startswith("【"):
                end = off2
                break
            body += "\n" + q
        e = parse_entry(name, body)
        if e is not None:
            e.anchor, e.span = p[:12], (off, end)
            out.append(e)
    return out


# --------------------------------------------------------------------------- builder


def add_entry(b: DocumentBuilder, entry: Entry, where: SectionSnippets, names: SubstanceNames, variants: str = "off") -> dict[str, int]:
    """Write one entry: the substance entity, its aliases and attributes, and one triple per fact
    whose words are found in the entry's span (the snippet that holds them is its provenance).

    An indication that names a substance (恶莽草: averse to 莽草; 解汞粉: resolves calomel) is an
    antagonism or an antidote use, not a disorder: it is not written."""
    entry.facts = [f for f in entry.facts if f.relation != "treats" or not names.is_substance(re.sub(r"^[恶畏反忌](?=..)", "", f.tail))]
    located = [(f, where.locate([f.needle, f.tail], *entry.span)) for f in entry.facts]
    located = [(f, sid) for f, sid in located if sid is not None]
    counts: Counter[str] = Counter()
    counts["unlocated"] = len(entry.facts) - len(located)
    if not located:
        return dict(counts)
    attrs: dict[str, list[str]] = {k: list(v) for k, v in entry.attributes.items()}
    canon = names.canonical_of(entry.name, entry.title_names, curated=variants != "all") if variants != "off" else None
    aliases, others = names.admit_aliases(entry.name, [a for a in entry.aliases if canon is None or a not in entry.title_names])
    mined = (entry.variants if variants != "off" else []) + (entry.marker_names if variants == "all" else [])
    kept, more = names.admit_aliases(entry.name, mined) if mined else ([], [])
    if others or more:
        attrs["other_names"] = others + more
    pairs = [(a, ALIAS_KIND) for a in aliases] + [(a, VARIANT_KIND) for a in kept]
    if canon is not None:  # 鸡头子（芡实）: the title says the entry is the catalogue's 芡实; 鸡头子 is its book name
        sub = names.entity(b, canon[1], attributes=attrs, aliases=[(entry.name, VARIANT_KIND), *pairs])
        counts["canonical"] += 1
    else:
        sub = names.entity(b, entry.name, attributes=attrs, aliases=pairs)
    for f, sid in located:
        tail = b.entity(f.tail, f.tail_type, layer=LAYER)
        b.triple(sub, f.relation, tail, confidence=CONFIDENCE, layer=LAYER, origin=ORIGIN, snippet=sid)
        counts[f.relation] += 1
    counts["aliases"] += len(aliases)
    counts["variants"] += len(kept)
    return dict(counts)


def title_pair_ok(title: str, modern: str, text: str) -> bool:
    """Is the title's parenthesised name another name of the entry, not a second item the section also treats
    (童便（秋石）: "秋石，人童便而煎熬…"), a name the text denies (土余瓜（龙蛋草）: "非真龙蛋草也"), or a note inside the
    name (鹈鹕（即淘鹅）油: the bird, not its oil)?"""
    bare = _TITLE_NATURE.sub("", title).strip()
    if not re.search(r"（[^（）]*）$", bare) or modern.startswith("即") or re.search(r"[名类音门而之者部]", modern):
        return False  # 附子乌头天雄侧子（一类而四名）, 盘蝥虫（蝥牟二音）, 药性（寒门）: notes, not names
    if re.search(rf"(?:^|[。；\n）])\s*(?:（[一二三四五六七八九十]+）)?{re.escape(modern)}[，∶:]", text):
        return False
    return not re.search(rf"非真?{re.escape(modern)}", text)


def title_names(b: DocumentBuilder, title: str, names: SubstanceNames, text: str = "", mode: str = "all") -> dict[str, int]:
    """A section titled as a substance with its modern name (薯蓣（山药）, 栝蒌（瓜蒌）) whose text gave no
    entry: the pair is still the book's statement that the two names are one thing. The title's name
    becomes an alias (kind ``book_variant``) of the curated substance the modern name names; when
    neither name is known, an entity named by the title carries the modern name as its alias (the
    section is its entry, found by its heading). Nothing when the title's name is another substance."""
    cleaned = clean_title(title)
    if cleaned is None or len(cleaned[1]) != 1 or len(cleaned[0]) < 2 or not title_pair_ok(title, cleaned[1][0], text):
        return {}
    name, (modern,), _ = cleaned
    canon = names.canonical_of(name, [modern], curated=mode != "all")
    if canon is not None:
        names.entity(b, canon[1], aliases=[(name, VARIANT_KIND)])
        return {"title_aliases": 1}
    if mode != "all" or names.resolve(name) is not None or names.resolve(modern) is not None or names.is_substance(modern):
        return {}
    names.entity(b, name, aliases=[(modern, VARIANT_KIND)])
    return {"title_entities": 1}


def extract_book(b: DocumentBuilder, sections: list[tuple[str, str, list[tuple[str, str]]]], names: SubstanceNames,
                 relations: Iterable[str] | None = None, variants: str = "off") -> Counter[str]:
    """Find the entries of every section (title, text, snippets) of one book and add them.

    Two passes: every entry of the book is found first, so an 一名 that names another entry of the
    book is known before any alias is written. ``relations`` limits the relations written (families
    below the precision bar are left out by default; see ``books.BookOptions``).
    """
    found: list[tuple[Entry, SectionSnippets]] = []
    with_entries: set[int] = set()
    for i, (title, text, snips) in enumerate(sections):
        if snips:
            where = SectionSnippets(text, snips)
            # a one-character name is most often a name that lost a character (黄 for 黄耆): only a known substance
            mine = [(e, where) for e in find_entries(title, text) if len(e.name) > 1 or names.resolve(e.name) is not None]
            if mine:
                with_entries.add(i)
            found += mine
    names.declare_entries([e.name for e, _ in found], [(e.name, a) for e, _ in found for a in e.aliases])
    keep = set(relations) if relations is not None else None
    stats: Counter[str] = Counter()
    for e, where in found:
        if keep is not None:
            e.facts = [f for f in e.facts if f.relation in keep]
            if "aliases" not in keep:
                e.aliases = []
        if not e.facts:
            continue
        stats["entries"] += 1
        stats.update(add_entry(b, e, where, names, variants=variants))
    if variants != "off":  # sections titled 薯蓣（山药） whose text gave no entry
        for i, (title, text, snips) in enumerate(sections):
            if snips and i not in with_entries:
                stats.update(title_names(b, title, names, text, variants))
    return stats

