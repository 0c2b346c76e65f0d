"""Synthetic TCM-DiffRAG-size graph inputs, written in the loaders' own formats.

    .venv/bin/python bench/synth.py --scale 0.01 --out out/bench/synth-1pct

Scale 1.0 is TCM-DiffRAG's corpus: 433,950 snippets in a book → volume → section tree and
about 8 triples per snippet (~3.5 M triples) over ~500 k entities. What is written:

- ``entities/entities-NNN.csv`` (``kb-csv`` + ``mappings/entities.yaml``): every entity with its
  KB id, a Chinese canonical name, an English synonym and a type (substance, symptom, effect,
  formula, disease, chemical, food); at most 100 k rows a file.
- ``books/book-NNN.jsonl`` (``sections-jsonl`` with ``materia_medica: true``): books of at most
  10 k sections; a section is one substance entry in the classics' form (味…，性…，毒。主…，…。
  久服…。一名…。) followed by commentary paragraphs, one snippet each. The real LLM-free
  materia-medica extractor turns each entry into triples (flavour, nature, toxicity, treats,
  has_effect, long-use effects) whose provenance is the snippet that states them (M1), and
  resolves the substance and symptom names to the KB entities through the alias table.
- ``relations/relations-NNN.csv`` (``kb-csv`` + ``mappings/relations.yaml``): the rest of the
  triples as curated edges with a confidence and a source per row (record provenance), at most
  250 k rows a file. Heads and tails are drawn from a Zipf law over each type, so degrees follow
  a power law (a few hubs, a long tail).
- ``recipe.yaml``: the ``bencao graph build`` recipe over the files above (``index: false``;
  the benchmark builds indexes as a separate, separately timed step).
- ``queries.jsonl``: a fixed set of questions (Chinese and English) naming graph entities.
- ``synth.json``: scale, seed and the counts written.

Everything is a pure function of ``(scale, seed)``: two runs write identical files.
"""

from __future__ import annotations

import argparse
import csv
import itertools
import json
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

FULL_SNIPPETS = 433_950
FULL_ENTITIES = 500_000
TRIPLES_PER_SNIPPET = 8.0
COMMENTARY_PARAS = 3  # snippets per section = 1 (the entry) + COMMENTARY_PARAS
SECTIONS_PER_VOLUME = 50
SECTIONS_PER_BOOK = 10_000
ENTITY_ROWS_PER_FILE = 100_000
RELATION_ROWS_PER_FILE = 250_000
MAX_TOKENS = 128  # snippet budget given to the book loader (sentences are packed up to it): ~4 snippets a section

# Parallel Chinese / English vocabularies (names are products of these pools).
BODY = [("腹", "abdominal"), ("胸", "chest"), ("胁", "flank"), ("腰", "lumbar"), ("膝", "knee"), ("心", "heart"), ("肺", "lung"),
        ("脾", "spleen"), ("胃", "stomach"), ("肝", "liver"), ("肾", "kidney"), ("头", "head"), ("目", "eye"), ("喉", "throat"),
        ("齿", "tooth"), ("骨", "bone"), ("筋", "sinew"), ("肌", "muscle"), ("皮", "skin"), ("背", "back"), ("项", "neck"),
        ("肩", "shoulder"), ("足", "foot"), ("手", "hand"), ("耳", "ear"), ("鼻", "nose"), ("口", "mouth"), ("舌", "tongue"),
        ("唇", "lip"), ("肠", "bowel"), ("胞", "uterine"), ("脐", "umbilical"), ("腕", "wrist"), ("踝", "ankle")]
STATE = [("痛", "pain"), ("满", "fullness"), ("胀", "distension"), ("痹", "numbness"), ("肿", "swelling"), ("痒", "itching"),
         ("冷", "coldness"), ("热", "heat"), ("闷", "oppression"), ("虚", "deficiency"), ("急", "spasm"), ("结", "binding"),
         ("积", "accumulation"), ("泄", "leakage"), ("逆", "counterflow"), ("燥", "dryness"), ("湿", "dampness"), ("疮", "sores"),
         ("烦", "vexation"), ("瘀", "stasis"), ("麻", "tingling"), ("重", "heaviness"), ("僵", "stiffness"), ("寒", "chill"),
         ("风", "wind"), ("劳", "exhaustion"), ("弱", "weakness"), ("枯", "withering"), ("疼", "ache"), ("坠", "sagging")]
EFFECT_VERB = [("益", "benefit"), ("补", "tonify"), ("安", "calm"), ("养", "nourish"), ("通", "unblock"), ("利", "free"),
               ("明", "brighten"), ("强", "strengthen"), ("润", "moisten"), ("温", "warm"), ("滋", "enrich"), ("调", "regulate"),
               ("和", "harmonise"), ("暖", "heat"), ("壮", "invigorate"), ("助", "assist"), ("宣", "diffuse"), ("开", "open"),
               ("行", "move"), ("固", "secure")]
EFFECT_OBJ = [("气", "qi"), ("血", "blood"), ("阴", "yin"), ("阳", "yang"), ("精", "essence"), ("津", "fluids"), ("神", "spirit"),
              ("脉", "vessels"), ("髓", "marrow"), ("液", "humours")]
QUALITY = [("黄", "yellow"), ("白", "white"), ("赤", "red"), ("紫", "purple"), ("青", "green"), ("黑", "black"), ("金", "golden"),
           ("山", "mountain"), ("野", "wild"), ("海", "sea"), ("石", "rock"), ("水", "water"), ("大", "great"), ("小", "small"),
           ("香", "fragrant"), ("细", "fine"), ("蔓", "creeping"), ("木", "tree"), ("甜", "sweet"), ("粗", "coarse"), ("胡", "foreign"),
           ("天", "heavenly"), ("地", "earth"), ("红", "crimson")]
PLANT = [("芪", "milkvetch"), ("芩", "skullcap"), ("参", "ginseng"), ("术", "atractylodes"), ("芍", "peony"), ("归", "angelica"),
         ("芎", "lovage"), ("苓", "poria"), ("草", "herb"), ("藤", "vine"), ("莲", "lotus"), ("桑", "mulberry"), ("菊", "chrysanthemum"),
         ("兰", "orchid"), ("竹", "bamboo"), ("松", "pine"), ("柏", "cypress"), ("桂", "cinnamon"), ("枣", "jujube"), ("杏", "apricot"),
         ("桃", "peach"), ("梅", "plum"), ("姜", "ginger"), ("蒜", "garlic"), ("葱", "scallion"), ("韭", "leek"), ("芥", "mustard"),
         ("薯", "yam"), ("芋", "taro"), ("豆", "bean"), ("麦", "wheat"), ("稻", "rice"), ("粟", "millet"), ("瓜", "melon"),
         ("葵", "mallow"), ("蓬", "fleabane"), ("蒿", "wormwood"), ("艾", "mugwort"), ("蓼", "knotweed"), ("荷", "lotus-leaf"),
         ("芝", "lingzhi"), ("菌", "mushroom"), ("榆", "elm"), ("椒", "pepper"), ("橘", "tangerine")]
PART = [("根", "root"), ("叶", "leaf"), ("花", "flower"), ("子", "seed"), ("实", "fruit"), ("皮", "bark"), ("茎", "stem"),
        ("仁", "kernel"), ("汁", "juice"), ("须", "rootlet"), ("节", "node"), ("壳", "husk"), ("膏", "paste"), ("粉", "powder"),
        ("蕊", "stamen"), ("苗", "sprout")]
PLACE = [("川", "Sichuan"), ("广", "Guangdong"), ("云", "Yunnan"), ("浙", "Zhejiang"), ("闽", "Fujian"), ("蜀", "Shu"), ("秦", "Qin"),
         ("楚", "Chu"), ("吴", "Wu"), ("越", "Yue"), ("北", "northern"), ("南", "southern"), ("东", "eastern"), ("西", "western"),
         ("辽", "Liaodong"), ("晋", "Jin"), ("滇", "Dian"), ("黔", "Qian")]
FORM = [("汤", "decoction"), ("散", "powder"), ("丸", "pill"), ("饮", "drink"), ("膏", "paste"), ("丹", "elixir"), ("煎", "brew"),
        ("酒", "wine")]
DISEASE_WORD = [("病", "disease"), ("证", "syndrome"), ("厥", "collapse"), ("痿", "atrophy"), ("疳", "malnutrition"), ("痈", "abscess"),
                ("疽", "carbuncle"), ("疟", "malaria"), ("痢", "dysentery"), ("咳", "cough"), ("喘", "wheezing"), ("痉", "convulsion"),
                ("瘿", "goitre"), ("黄", "jaundice"), ("淋", "strangury"), ("癃", "retention")]
CHEM_SUFFIX = [("苷", "oside"), ("素", "in"), ("酸", "ic acid"), ("醇", "ol"), ("碱", "ine"), ("酮", "one"), ("烯", "ene"), ("酯", "ester")]
CHEM_LETTER = ["A", "B", "C", "D", "E", "I", "II", "III"]
FOOD_PREP = [("干", "dried"), ("鲜", "fresh"), ("炒", "roasted"), ("蒸", "steamed"), ("腌", "pickled"), ("熟", "cooked"), ("生", "raw"),
             ("陈", "aged"), ("焦", "charred"), ("嫩", "tender")]
FOOD_NOUN = [("饼", "cake"), ("粥", "congee"), ("羹", "soup"), ("糕", "pastry"), ("面", "noodles"), ("酱", "sauce"), ("茶", "tea"),
             ("脯", "preserve"), ("米", "grain"), ("肉", "meat")]
FLAVOURS = "甘苦辛咸酸"
NATURES = ["寒", "微寒", "平", "温", "微温", "大热", "凉"]
TOXICITY = ["无毒", "无毒", "无毒", "小毒", "有毒"]
HABITATS = ["山谷", "川泽", "平泽", "田野", "池泽", "山阳"]
VARIANT = "甲乙丙丁戊己庚辛壬癸"

#: entity type → share of all entities (substance is set by the section count instead)
TYPE_SHARE = {"symptom": 0.26, "effect": 0.09, "formula": 0.16, "disease": 0.10, "chemical": 0.09, "food": 0.08}
#: KB relations: (name, head type, tail type, share of the KB rows, description)
KB_RELATIONS = [
    ("treats", "substance", "disease", 0.20, "the substance is used for the disease"),
    ("has_ingredient", "formula", "substance", 0.18, "the formula contains the substance"),
    ("indicated_for", "formula", "disease", 0.10, "the formula is indicated for the disease"),
    ("contains_compound", "substance", "chemical", 0.14, "the substance contains the compound"),
    ("compound_effect", "chemical", "effect", 0.08, "the compound has the pharmacological effect"),
    ("has_symptom", "disease", "symptom", 0.14, "the disease presents with the symptom"),
    ("pairs_with", "substance", "substance", 0.06, "the two substances are prescribed together"),
    ("food_for", "food", "symptom", 0.05, "the food is recommended for the symptom"),
    ("made_from", "food", "substance", 0.05, "the food is made from the substance"),
]
SOURCES = ["synth-pharmacopoeia", "synth-formulary", "synth-clinical-db", "synth-literature"]


@dataclass
class Entity:
    id: str
    zh: str
    en: str
    type: str


def scaled_counts(scale: float) -> dict[str, int]:
    """How many snippets, sections, entities and triples a scale asks for."""
    if not 0 < scale <= 4:
        raise ValueError(f"scale {scale} outside (0, 4]")
    snippets = max(40, round(FULL_SNIPPETS * scale))
    sections = max(10, round(snippets / (1 + COMMENTARY_PARAS)))
    entities = max(400, round(FULL_ENTITIES * scale))
    return {"snippets": sections * (1 + COMMENTARY_PARAS), "sections": sections, "entities": entities,
            "triples": round(TRIPLES_PER_SNIPPET * sections * (1 + COMMENTARY_PARAS))}


def _names(kind: str, n: int, rng: np.random.Generator) -> list[tuple[str, str]]:
    """``n`` distinct (Chinese, English) names of one kind; variants 甲乙… / 'type N' once a pool is used up."""
    if kind == "substance":
        pools = [itertools.product(QUALITY, PLANT, PART), itertools.product(PLACE, QUALITY, PLANT, PART)]
    elif kind == "symptom":
        pools = [itertools.product(BODY, STATE), itertools.product(BODY, BODY, STATE), itertools.product(BODY, STATE, STATE),
                 itertools.product(BODY, BODY, STATE, STATE)]
    elif kind == "effect":
        pools = [itertools.product(EFFECT_VERB, BODY, EFFECT_OBJ), itertools.product(EFFECT_VERB, BODY, BODY, EFFECT_OBJ)]
    elif kind == "formula":
        pools = [itertools.product(QUALITY, PLANT, FORM), itertools.product(QUALITY, PLANT, PLANT, FORM),
                 itertools.product(PLACE, QUALITY, PLANT, FORM)]
    elif kind == "disease":
        pools = [itertools.product(BODY, DISEASE_WORD), itertools.product(BODY, STATE, DISEASE_WORD),
                 itertools.product(BODY, BODY, STATE, DISEASE_WORD)]
    elif kind == "chemical":
        pools = [itertools.product(PLANT, CHEM_SUFFIX, [(c, c) for c in CHEM_LETTER]),
                 itertools.product(QUALITY, PLANT, CHEM_SUFFIX, [(c, c) for c in CHEM_LETTER])]
    elif kind == "food":
        pools = [itertools.product(FOOD_PREP, PLANT, FOOD_NOUN), itertools.product(FOOD_PREP, QUALITY, PLANT, FOOD_NOUN)]
    else:
        raise ValueError(kind)
    out: list[tuple[str, str]] = []
    seen: set[str] = set()
    for pool in pools:
        combos = list(pool)
        rng.shuffle(combos)  # type: ignore[arg-type]
        for combo in combos:
            zh = "".join(c[0] for c in combo)
            if zh in seen:
                continue
            seen.add(zh)
            en = _english(kind, combo)
            out.append((zh, en))
            if len(out) >= n:
                return out
    base = list(out)
    k = 0
    while len(out) < n:  # pools used up: numbered variants
        zh, en = base[k % len(base)]
        v = k // len(base)
        out.append((VARIANT[v % 10] + zh + ("" if v < 10 else str(v // 10)), f"{en} type {v + 2}"))
        k += 1
    return out


def _english(kind: str, combo: tuple) -> str:
    words = [c[1] for c in combo]
    if kind == "chemical":
        *pre, suffix, letter = words
        return " ".join([*pre[:-1], pre[-1] + suffix, letter])
    if kind == "effect":
        return f"{words[0]} {' '.join(words[1:-1])} {words[-1]}"
    return " ".join(words)


def make_entities(scale: float, seed: int) -> tuple[dict[str, list[Entity]], dict[str, int]]:
    counts = scaled_counts(scale)
    rng = np.random.default_rng(seed)
    n_other = max(0, counts["entities"] - counts["sections"])
    share_total = sum(TYPE_SHARE.values())
    per_type = {"substance": counts["sections"] + max(1, counts["sections"] // 10)}  # a few substances only in the KB
    for t, s in TYPE_SHARE.items():
        per_type[t] = max(20, round(n_other * s / share_total))
    prefix = {"substance": "SUB", "symptom": "SYM", "effect": "EFF", "formula": "FOR", "disease": "DIS", "chemical": "CHE", "food": "FOO"}
    ents: dict[str, list[Entity]] = {}
    for t, n in per_type.items():
        names = _names(t, n, rng)
        ents[t] = [Entity(f"{prefix[t]}{i:07d}", zh, en, t) for i, (zh, en) in enumerate(names)]
    return ents, counts


def zipf_choice(rng: np.random.Generator, n: int, size: int, a: float = 1.05, offset: float = 2.0) -> np.ndarray:
    """Indices in [0, n) with P(i) ∝ 1 / (i + offset)^a: a power-law degree distribution."""
    w = 1.0 / np.power(np.arange(n, dtype=np.float64) + offset, a)
    cdf = np.cumsum(w)
    cdf /= cdf[-1]
    return np.minimum(np.searchsorted(cdf, rng.random(size), side="right"), n - 1)


def _perm(rng: np.random.Generator, n: int) -> np.ndarray:
    return rng.permutation(n)


# --------------------------------------------------------------------------- writers


def _write_csv(path: Path, header: list[str], rows: list[list]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    with open(tmp, "w", encoding="utf-8", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)
    tmp.replace(path)


def write_entities(out: Path, ents: dict[str, list[Entity]]) -> int:
    rows = [[e.id, e.zh, e.type, e.en] for lst in ents.values() for e in lst]
    for i in range(0, len(rows), ENTITY_ROWS_PER_FILE):
        _write_csv(out / "entities" / f"entities-{i // ENTITY_ROWS_PER_FILE:03d}.csv", ["id", "name", "type", "english"],
                   rows[i : i + ENTITY_ROWS_PER_FILE])
    return len(rows)


def make_kb_triples(ents: dict[str, list[Entity]], n_rows: int, rng: np.random.Generator) -> list[tuple[int, int, int, int, float, int]]:
    """(relation index, head type index, head index, tail index, confidence, source index) rows, distinct triples."""
    out: list[tuple] = []
    perms = {t: _perm(rng, len(lst)) for t, lst in ents.items()}  # hub order per type
    for r, (name, ht, tt, share, _desc) in enumerate(KB_RELATIONS):
        want = round(n_rows * share)
        if want <= 0:
            continue
        nh, nt = len(ents[ht]), len(ents[tt])
        seen: set[int] = set()
        rows: list[tuple] = []
        tries = 0
        while len(rows) < want and tries < 6:
            m = int((want - len(rows)) * 1.3) + 16
            h = perms[ht][zipf_choice(rng, nh, m, a=0.9)]
            # tails: a power law too, but mixed with a uniform draw so the long tail is reached
            tz = perms[tt][zipf_choice(rng, nt, m, a=1.0)]
            tu = rng.integers(0, nt, m)
            t = np.where(rng.random(m) < 0.7, tz, tu)
            conf = np.clip(rng.beta(5.0, 2.0, m), 0.01, 1.0).round(3)
            src = rng.integers(0, len(SOURCES), m)
            for hi, ti, c, s in zip(h.tolist(), t.tolist(), conf.tolist(), src.tolist()):
                if ht == tt and hi == ti:
                    continue
                key = hi * nt + ti
                if key in seen:
                    continue
                seen.add(key)
                rows.append((r, hi, ti, c, s))
                if len(rows) >= want:
                    break
            tries += 1
        out.extend(rows)
    return out


def write_relations(out: Path, ents: dict[str, list[Entity]], rows: list[tuple]) -> int:
    csv_rows = []
    for r, hi, ti, c, s in rows:
        name, ht, tt, _share, _desc = KB_RELATIONS[r]
        csv_rows.append([ents[ht][hi].id, name, ents[tt][ti].id, f"{c:.3f}", SOURCES[s]])
    for i in range(0, len(csv_rows), RELATION_ROWS_PER_FILE):
        _write_csv(out / "relations" / f"relations-{i // RELATION_ROWS_PER_FILE:03d}.csv",
                   ["head_id", "relation", "tail_id", "confidence", "source"], csv_rows[i : i + RELATION_ROWS_PER_FILE])
    return len(csv_rows)


def _entry_text(rng: np.random.Generator, ents: dict[str, list[Entity]], sym_idx: np.ndarray, eff_idx: np.ndarray,
                alias: str) -> str:
    fl = "".join(rng.choice(list(FLAVOURS), size=int(rng.integers(1, 3)), replace=False))
    nature = NATURES[int(rng.integers(len(NATURES)))]
    tox = TOXICITY[int(rng.integers(len(TOXICITY)))]
    syms = "、".join(ents["symptom"][i].zh for i in sym_idx)
    effs = "，".join(ents["effect"][i].zh for i in eff_idx)
    hab = HABITATS[int(rng.integers(len(HABITATS)))]
    return f"味{fl}，{nature}，{tox}。主{syms}，{effs}。久服轻身。一名{alias}。生{hab}。"


_COMMENTARY = [
    "{a}与{b}同用，治{d}，{s}者尤宜。",
    "《{book}》云：{a}能{e}，医家多用之。",
    "凡{s}日久，以{a}配{b}煎服，其效甚速。",
    "{f}中有{a}，取其{e}之功。",
    "今人以{a}代{b}，治{d}亦验。",
    "{a}入{organ}经，善疗{s}，兼治{d}。",
    "方书载{f}，用{a}为君，主{d}。",
]
_BOOK_NAMES = ["本经疏证", "药性论", "本草拾遗", "日华子本草", "本草衍义", "汤液本草", "本草蒙筌", "本草经集注"]


def _commentary(rng: np.random.Generator, ents: dict[str, list[Entity]], sub: Entity, zipf: dict[str, np.ndarray], pos: dict[str, int],
                min_chars: int = 110, max_chars: int = 140) -> str:
    def pick(t: str) -> Entity:
        i = pos[t]
        pos[t] = (i + 1) % len(zipf[t])
        return ents[t][int(zipf[t][i])]

    out = ""
    while len(out) < min_chars:
        tpl = _COMMENTARY[int(rng.integers(len(_COMMENTARY)))]
        s = tpl.format(a=sub.zh, b=pick("substance").zh, d=pick("disease").zh, s=pick("symptom").zh, e=pick("effect").zh,
                       f=pick("formula").zh, book=_BOOK_NAMES[int(rng.integers(len(_BOOK_NAMES)))], organ=BODY[int(rng.integers(12))][0])
        if len(out) + len(s) > max_chars and out:
            break
        out += s
    return out


def write_books(out: Path, ents: dict[str, list[Entity]], n_sections: int, rng: np.random.Generator) -> dict[str, int]:
    subs = ents["substance"][:n_sections]
    n_sym, n_eff = len(ents["symptom"]), len(ents["effect"])
    # mention streams drawn once from the power law (cheap per section)
    stream = 4096
    zipf = {t: _perm(rng, len(ents[t]))[zipf_choice(rng, len(ents[t]), stream, a=0.9)] for t in ("substance", "disease", "symptom", "effect", "formula")}
    pos = {t: 0 for t in zipf}
    sym_perm, eff_perm = _perm(rng, n_sym), _perm(rng, n_eff)
    n_books = math.ceil(n_sections / SECTIONS_PER_BOOK)
    written = {"books": n_books, "sections": 0, "entries": 0}
    for bi in range(n_books):
        book = f"合成本草第{bi + 1}部"
        path = out / "books" / f"book-{bi:03d}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".jsonl.tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            part = subs[bi * SECTIONS_PER_BOOK : (bi + 1) * SECTIONS_PER_BOOK]
            for si, sub in enumerate(part):
                volume = f"卷{si // SECTIONS_PER_VOLUME + 1}"
                k_sym, k_eff = int(rng.integers(2, 5)), int(rng.integers(1, 3))
                sym = sym_perm[zipf_choice(rng, n_sym, k_sym, a=0.8)]
                eff = eff_perm[zipf_choice(rng, n_eff, k_eff, a=0.8)]
                sym, eff = np.unique(sym), np.unique(eff)
                alias = ents["substance"][(bi * SECTIONS_PER_BOOK + si + n_sections) % len(ents["substance"])].zh[::-1]
                paras = [_entry_text(rng, ents, sym, eff, alias)]
                paras += [_commentary(rng, ents, sub, zipf, pos) for _ in range(COMMENTARY_PARAS)]
                rec = {"book": book, "path": [book, volume, sub.zh], "title": sub.zh, "text": "\n".join(paras)}
                f.write(json.dumps(rec, ensure_ascii=False) + "\n")
                written["sections"] += 1
                written["entries"] += 1
        tmp.replace(path)
    return written


def write_mappings(out: Path) -> None:
    (out / "mappings").mkdir(parents=True, exist_ok=True)
    (out / "mappings" / "entities.yaml").write_text(
        "description: synthetic TCM KB entities (bench/synth.py)\n"
        "entities:\n  id_column: id\n  name_column: name\n  type_column: type\n  layer: terminology\n"
        "  aliases:\n    - {column: english, kind: synonym}\n", encoding="utf-8")
    (out / "mappings" / "relations.yaml").write_text(
        "description: synthetic TCM KB relations with confidence and source per edge (bench/synth.py)\n"
        "relations:\n  head_column: head_id\n  tail_column: tail_id\n  relation_column: relation\n"
        "  confidence_column: confidence\n  source_column: source\n  layer: imported\n  on_missing: error\n", encoding="utf-8")


def write_recipe(out: Path, scale: float) -> None:
    (out / "recipe.yaml").write_text(
        f"# Synthetic graph at scale {scale} written by bench/synth.py.\n"
        "#   bencao graph build --config recipe.yaml --graph DIR\n"
        "# KB entities first (books resolve their substance/symptom names to them), then the books with\n"
        "# the materia-medica extractor (M1 triples), then the KB relation files (record provenance).\n"
        f"name: synth-{scale}\nroot: .\nindex: false\nsources:\n"
        "  - format: kb-csv\n    path: entities/entities-*.csv\n    options: {mapping: mappings/entities.yaml}\n    licence: synthetic\n"
        f"  - format: sections-jsonl\n    path: books/book-*.jsonl\n    options: {{materia_medica: true, max_tokens: {MAX_TOKENS}}}\n    licence: synthetic\n"
        "  - format: kb-csv\n    path: relations/relations-*.csv\n    options: {mapping: mappings/relations.yaml}\n    licence: synthetic\n",
        encoding="utf-8")


def write_queries(out: Path, ents: dict[str, list[Entity]], n_sections: int, rng: np.random.Generator, n: int = 200) -> int:
    """A fixed query set: a mix of hub and tail entities, Chinese and English, one to three entities each."""
    qs: list[dict] = []
    subs = ents["substance"][:n_sections]
    for i in range(n):
        kind = i % 5
        s = subs[int(zipf_choice(rng, len(subs), 1, a=0.6)[0])]
        sym = ents["symptom"][int(rng.integers(len(ents["symptom"])))]
        dis = ents["disease"][int(rng.integers(len(ents["disease"])))]
        frm = ents["formula"][int(rng.integers(len(ents["formula"])))]
        if kind == 0:
            q = f"{s.zh}有什么功效？"
        elif kind == 1:
            q = f"{sym.zh}可以用什么药？{s.zh}合适吗？"
        elif kind == 2:
            q = f"{frm.zh}的组成是什么，能治{dis.zh}吗？"
        elif kind == 3:
            q = f"What does {s.en} treat?"
        else:
            q = f"Which herbs are used for {dis.en} with {sym.en}?"
        qs.append({"id": f"q{i:03d}", "question": q})
    with open(out / "queries.jsonl", "w", encoding="utf-8") as f:
        for q in qs:
            f.write(json.dumps(q, ensure_ascii=False) + "\n")
    return len(qs)


def generate(out: str | Path, scale: float = 1.0, seed: int = 8) -> dict:
    """Write every input file of a synthetic graph at ``scale`` into ``out``; returns ``synth.json``'s content."""
    t0 = time.perf_counter()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    ents, counts = make_entities(scale, seed)
    rng = np.random.default_rng(seed + 1)
    n_entities = write_entities(out, ents)
    books = write_books(out, ents, counts["sections"], rng)
    # the extractor gives ~10 triples per entry; the KB relation files bring the rest
    est_book_triples = round(counts["sections"] * 9.5)
    kb_rows = make_kb_triples(ents, max(100, counts["triples"] - est_book_triples), rng)
    n_rel = write_relations(out, ents, kb_rows)
    write_mappings(out)
    write_recipe(out, scale)
    n_q = write_queries(out, ents, counts["sections"], rng)
    meta = {"scale": scale, "seed": seed, "target": counts, "entities": n_entities,
            "entities_by_type": {t: len(v) for t, v in ents.items()}, "kb_relation_rows": n_rel, **books,
            "snippets_expected": books["sections"] * (1 + COMMENTARY_PARAS), "queries": n_q,
            "seconds": round(time.perf_counter() - t0, 1)}
    (out / "synth.json").write_text(json.dumps(meta, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
    return meta


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scale", type=float, default=1.0, help="1.0 = TCM-DiffRAG size (434k snippets, ~3.5M triples); 0.01 = 1%%")
    ap.add_argument("--seed", type=int, default=8)
    ap.add_argument("--out", required=True, help="output directory")
    args = ap.parse_args(argv)
    meta = generate(args.out, args.scale, args.seed)
    print(json.dumps(meta, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
