"""Variant writings of classical drug names: 栝楼 = 栝蒌, 薯蓣 = 署豫 = 署预.

The classics write one name with interchangeable characters (异体字 and 通假字 in drug names). A
mention that names no entity as written is looked up once more with each character replaced by its
variants (:func:`variant_keys`), and only names the graph has are ever matched, so the fold never
invents a name. The table is short and every group is attested by the corpus itself:

- 蒌/楼 — 栝楼 (神农本草经, 本草经集注, 本草备要 …) and 栝蒌 (本草纲目's entry; 食疗本草's 栝蒌（瓜蒌）);
  本草纲目 on the name: "栝蒌，即果臝二字音转也 … 后人又转为栝蒌";
- 蓣/预/豫 and 薯/署 — 神农本草经's entry 署豫 "（旧作薯蓣，《御览》作署豫）"; 本草纲目's 薯蓣 【释名】 "薯蓣 (音诸预)";
- 栝/括 — 括蒌 beside 栝蒌 (本草经集注, 本草蒙筌).

A linked variant is reported as such ("variant writing of '栝蒌'") in the link's rationale; a name that
names nothing, in any writing, may name a part's entry (栝楼 → 栝蒌根, ":data:`PARTS`").
"""

from __future__ import annotations

import itertools

from bencao.text import norm_key

#: Groups of characters a classical drug name is written with interchangeably (see the module docstring).
VARIANT_GROUPS: tuple[str, ...] = ("蒌楼", "蓣预豫", "薯署", "栝括")
_OF = {ch: group for group in VARIANT_GROUPS for ch in group}
#: Characters that name a part of a drug after its name: 栝蒌根, 枸杞叶, 莲子, 桃仁 (a name that names nothing may
#: still name a part's entry: 栝楼 → 栝蒌根).
PARTS = "根实子仁皮叶花茎苗汁肉核心"
#: Most variant keys tried for one mention (a name of many variant characters).
MAX_KEYS = 16


def variant_keys(key: str) -> list[str]:
    """Other writings of the matching key ``key`` (a ``norm_key``), itself excluded, at most :data:`MAX_KEYS`."""
    key = norm_key(key)
    options = [_OF.get(ch, ch) for ch in key]
    if all(len(o) == 1 for o in options):
        return []
    out = []
    for combo in itertools.product(*options):
        k = "".join(combo)
        if k != key:
            out.append(k)
            if len(out) >= MAX_KEYS:
                break
    return out
