"""What a yes/no question asks: its subject, and the condition it asks the subject to be related to.

"生姜能治疗消渴吗", "Does ginger help with nausea?", "Is almond a drupe fruit?": a yes/no question
(:func:`is_yes_no`) names a subject (the first linked entity that is not itself a condition: a food, a
herb, a dish) and asks about a condition — what is left of the question once the subject, the
yes/no words and the relation's wording (能, 治疗, 吗; does, help with) are taken out
(:func:`condition_text`: 消渴, nausea, drupe fruit). iDISK's rule answers it only from a fact linking
the subject to that condition (:func:`names_match` tells whether a fact's other end names it).
"""

from __future__ import annotations

import re

from bencao.retrieval.index.lexical import light_stem
from bencao.text import has_cjk, norm_key, tokenize

_YES_NO_ZH = re.compile(r"(吗|嘛|(?<![什怎这那多])么|否|不)\s*[?？!！。.]*\s*$|是否|能否|可否|能不能|可不可以|可以不可以|会不会|是不是|有没有"
                        r"|对不对|好不好|行不行|宜不宜|适不适合|适合不适合|管不管用|有没有用")
_YES_NO_EN = re.compile(r"^\s*(does|do|did|is|are|was|were|can|could|will|would|should|shall|may|might|has|have|had|must)\b|\bwhether\b",
                        re.IGNORECASE)

#: The wording of a yes/no question and of the relation it asks about, never part of the condition.
CUE_WORDS_ZH = frozenset("""能否 可否 是否 能不能 可不可以 可以不可以 会不会 是不是 有没有 对不对 好不好 行不行 宜不宜 适不适合 适合不适合 管不管用 有没有用
可以 能够 能 可 会 吗 嘛 么 呢 否 不 啊 呀 吧 治疗 治 疗 医治 主治 用于 用来 适合 适用 适宜 宜 帮助 有助于 有助 有益于 有益 有用 有效 管用 对 对于 于 的 了
有 是 属于 一种 一类 种 吃 食用 服用 服 多吃 常吃 经常 缓解 改善 预防 防止 防治 降低 减轻 减少 治愈 根治 帮 让 使 人 者 用 好 效果 作用 功效 病 症""".split())
CUE_WORDS_EN = frozenset("""does do did is are was were can could will would should shall may might has have had must whether a an the of
in on to it its be been being really actually truly help helps helped helping with for against treat treats treated treating treatment
cure cures cured curing heal heals relieve relieves relieving reduce reduces reducing lower lowers lowering prevent prevents preventing
improve improves improving ease eases easing fight fights fighting good effective effect effects work works useful benefit benefits
beneficial used use kind type sort form any some people patients someone me i you my your eat eating eaten take taking taken drink
drinking remedy remedies there that this""".split())

#: Types of entities that are a disorder, not the subject a question asks about (when it names something else too).
CONDITION_TYPES = frozenset({"symptom", "disease", "syndrome"})
# Verbs an indication is written with (止呕 → 呕, 除烦 → 烦): the condition is also matched without them.
_REMOVAL = ("止", "除", "去", "治", "疗", "解", "散", "逐", "辟", "消除", "缓解", "降低", "降", "减轻", "改善", "预防", "防止")


def is_yes_no(question: str) -> bool:
    """'生姜能治疗消渴吗？', '大枣是否有毒', 'Does ginger help with nausea?', 'Is almond a nut?'."""
    q = question.strip()
    return bool(_YES_NO_ZH.search(q)) if has_cjk(q) else bool(_YES_NO_EN.search(q))


def condition_text(question: str, subject_mentions: list[str], stopwords: frozenset[str] = frozenset()) -> str:
    """The question without its subject and its yes/no and relation wording: '生姜能治疗消渴吗' → '消渴',
    'Does durian lower blood pressure?' → 'blood pressure'. Empty when nothing is left."""
    q = norm_key(question)
    for m in sorted({norm_key(x) for x in subject_mentions if x}, key=len, reverse=True):
        if m:
            q = q.replace(m, " | ")
    if has_cjk(question):
        keep = [t for t in tokenize(q) if has_cjk(t) and t not in CUE_WORDS_ZH and t not in stopwords]
        return "".join(keep)
    words = re.findall(r"[a-z0-9][a-z0-9'-]*", q)
    keep = [w for w in words if w not in CUE_WORDS_EN and w not in stopwords]
    return " ".join(keep)


def _variants(cond: str) -> list[str]:
    out = [cond]
    for verb in _REMOVAL:
        if cond.startswith(verb) and len(cond) > len(verb):
            out.append(cond[len(verb):])
    return out


def _stems(text: str) -> set[str]:
    return {light_stem(w) for w in re.findall(r"[a-z0-9]+", norm_key(text)) if w not in CUE_WORDS_EN}


def names_match(condition: str, name: str) -> bool:
    """Does an entity ``name`` name the asked ``condition``? Chinese: the same, or one inside the other
    (呕 in 呕吐; 止呕 → 呕; a name inside the condition only when it is at least half of it and two
    characters long: 热 is no answer to 热病). English: every word of the condition is among the name's
    words (nausea → nausea and vomiting; blood pressure ↛ blood)."""
    c, n = norm_key(condition), norm_key(name)
    if not c or not n:
        return False
    if has_cjk(c):
        for v in _variants(c):
            if v == n or (v in n and (len(v) >= 2 or len(n) <= 3)) or (n in v and len(n) >= 2 and 2 * len(n) >= len(v)):
                return True
        return False
    want, have = _stems(c), _stems(n)
    return bool(want) and want <= have
