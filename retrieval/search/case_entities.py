"""Question / case understanding for the clinical-case layer (TCM MLKG-RAG): patient vs disease information.

MLKG-RAG's first stage reads a consultation (a case record or a user's question) into two kinds of
entities: **patient information** (age group, sex, past history), which filters the patient index,
and **disease information** (symptoms, signs, tongue, pulse, diseases), which descends the disease
classification tree. The paper does this with an LLM; here it is a swappable stage:

    understander = get_understander("rules", graph=g)        # LLM-free: lexicon + the graph's aliases
    info = understander.understand("患者，女，65岁，有高血压史。口干多饮，小便频数，舌红少苔。")
    info.patient.age_group == "elderly"; info.patient.sex == "female"; info.patient.history == ["高血压"]
    [d.text for d in info.disease] == ["口干", "多饮", "小便频数", "舌红少苔"]

An LLM version implements the same protocol (``understand(text) -> CaseInfo``) and registers
itself with :func:`register_understander`; nothing downstream changes.

The rules: sex from explicit statements (``患者，女，``, ``女，45岁``, ``女性``, "female"); age from
``N岁``/"N years old" mapped to the lexicon's bands, or an age-group word (老年, 小儿); history from
the lexicon's patterns (``有…史``, ``既往…``), denials dropped; disease information = the graph's
names of entities of ``disease_types`` found in the text (longest match, jieba for Chinese) plus the
lexicon's words and tongue/pulse patterns. History items are not disease information.
"""

from __future__ import annotations

import functools
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Protocol

from bencao.errors import ConfigError
from bencao.text import has_cjk, norm_key

DEFAULT_LEXICON = Path(__file__).with_name("case_lexicon.yaml")


@dataclass
class PatientInfo:
    age_group: str | None = None  # canonical key of the lexicon's age_groups (elderly, child, ...)
    sex: str | None = None  # male | female
    age: int | None = None
    history: list[str] = field(default_factory=list)

    def is_empty(self) -> bool:
        return not (self.age_group or self.sex or self.history)


@dataclass
class DiseaseMention:
    text: str  # as written in the source text
    category: str  # symptom | disease | tongue | coating | pulse | the graph entity's type
    entity_id: str | None = None  # the graph entity it names, when known
    start: int = -1


@dataclass
class CaseInfo:
    patient: PatientInfo
    disease: list[DiseaseMention]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class Understander(Protocol):
    def understand(self, text: str) -> CaseInfo: ...


# --------------------------------------------------------------------------- lexicon


@dataclass
class Lexicon:
    sex: dict[str, list[str]]
    age_groups: dict[str, dict[str, Any]]
    history_patterns: list[str]
    history_negations: list[str]
    disease_patterns: dict[str, str]
    disease_words: dict[str, list[str]]
    disease_types: list[str]

    def sex_key(self, value: str | None) -> str | None:
        """'女', 'F', 'Female' → 'female' (None when not a sex word)."""
        k = norm_key(str(value or ""))
        for key, words in self.sex.items():
            if k == key or k in {norm_key(w) for w in words}:
                return key
        return None

    def age_group_key(self, value: str | None) -> str | None:
        k = norm_key(str(value or ""))
        if not k:
            return None
        for key, spec in self.age_groups.items():
            if k == norm_key(key) or k in {norm_key(w) for w in spec.get("words", [])}:
                return key
        return None

    def age_group_of(self, age: int) -> str | None:
        for key, spec in self.age_groups.items():
            lo, hi = spec.get("ages", [None, None])
            if lo is not None and lo <= age <= hi:
                return key
        return None


def _is_strs(v: Any) -> bool:
    return isinstance(v, list) and all(isinstance(x, str) for x in v)


def _lexicon_problem(key: str, v: Any) -> str | None:
    """What is wrong with the lexicon's value of ``key`` (None when it has the expected shape)."""
    if key in ("history_patterns", "history_negations", "disease_types"):
        return None if _is_strs(v) else "expected a list of strings"
    if key in ("sex", "disease_words"):
        ok = isinstance(v, dict) and all(isinstance(k, str) and _is_strs(x) for k, x in v.items())
        return None if ok else "expected a mapping of names to lists of strings"
    if key == "disease_patterns":
        ok = isinstance(v, dict) and all(isinstance(k, str) and isinstance(x, str) for k, x in v.items())
        return None if ok else "expected a mapping of categories to regular expressions (strings)"
    if key == "age_groups":
        if not isinstance(v, dict):
            return "expected a mapping of age groups to {ages: [lowest, highest], words: [...]}"
        for name, spec in v.items():
            ages = spec.get("ages", [None, None]) if isinstance(spec, dict) else None
            if (not isinstance(spec, dict) or not _is_strs(spec.get("words", [])) or not isinstance(ages, list) or len(ages) != 2
                    or not all(a is None or (isinstance(a, int) and not isinstance(a, bool)) for a in ages)
                    or (ages[0] is None) != (ages[1] is None)):
                return f"{name}: expected {{ages: [lowest, highest], words: [...]}}"
    return None


@functools.lru_cache(maxsize=8)
def _read_lexicon(path: str) -> Lexicon:
    from bencao.config import read_yaml_file

    p = Path(path)
    data = read_yaml_file(p) or {}
    base = {} if p == DEFAULT_LEXICON else (read_yaml_file(DEFAULT_LEXICON) or {})
    if not isinstance(data, dict):
        raise ConfigError(f"{p}: a case lexicon is a mapping (sex, age_groups, history_patterns, ...), not a {type(data).__name__}")
    unknown = sorted(str(k) for k in set(data) - set(Lexicon.__dataclass_fields__))
    if unknown:
        raise ConfigError(f"{p}: case lexicon has unknown key(s) {', '.join(unknown)}; known: {', '.join(Lexicon.__dataclass_fields__)}")
    merged = {**base, **data}
    for key in Lexicon.__dataclass_fields__:
        if key not in merged:
            raise ConfigError(f"{p}: case lexicon lacks the key {key!r}")
        problem = _lexicon_problem(key, merged[key])
        if problem:
            raise ConfigError(f"{p}: case lexicon key {key!r}: {problem}")
    lex = Lexicon(**{k: merged[k] for k in Lexicon.__dataclass_fields__})
    for name, pat in [*(("history_patterns", x) for x in lex.history_patterns), *lex.disease_patterns.items()]:
        try:
            re.compile(pat)
        except re.error as exc:
            raise ConfigError(f"{p}: {name}: bad regular expression {pat!r}: {exc}") from None
    return lex


def load_lexicon(path: str | Path | None = None) -> Lexicon:
    return _read_lexicon(str(Path(path) if path else DEFAULT_LEXICON))


# --------------------------------------------------------------------------- the rules

_AGE_RE = re.compile(r"(\d{1,3})[\s-]*(?:岁|周岁|歲|years?[\s-]*old|y/?o\b)")
_SEX_CJK_RE = re.compile(r"(?:患者|病人|病者|^)[\s,，:：、]*(男|女)(?:性|士)?[\s,，、;；。]|(男|女)(?:性)?[\s,，、]*\d{1,3}\s*岁|\d{1,3}\s*岁[\s,，、]*(男|女)")
_SPLIT_RE = re.compile(r"[、，,；;及和与/]|\band\b")


def _word_in(word: str, text: str) -> int:
    """Position of a lexicon word in normalised text (-1): CJK words of ≥2 characters as
    substrings, other words on word boundaries."""
    w = norm_key(word)
    if not w:
        return -1
    if has_cjk(w):
        return text.find(w) if len(w) >= 2 else -1
    m = re.search(rf"(?<![a-z]){re.escape(w)}(?![a-z])", text)
    return m.start() if m and len(w) >= 3 else -1


class RuleUnderstander:
    """LLM-free understanding: the lexicon plus, when a graph is given, its alias tables."""

    name = "rules"

    def __init__(self, graph: Any = None, lexicon: str | Path | Lexicon | None = None, base_keys: Any = None):
        self.g = graph
        self.lex = lexicon if isinstance(lexicon, Lexicon) else load_lexicon(lexicon)
        self._base_keys = base_keys
        self._types_of: dict[str, tuple[str, str]] = {}

    # -- patient information
    def patient(self, text: str) -> PatientInfo:
        key = norm_key(text)
        info = PatientInfo()
        m = _AGE_RE.search(key)
        if m:
            info.age = int(m.group(1))
            info.age_group = self.lex.age_group_of(info.age)
        if info.age_group is None:
            hits = sorted((pos, k) for k, spec in self.lex.age_groups.items() for w in spec.get("words", []) if (pos := _word_in(w, key)) >= 0)
            info.age_group = hits[0][1] if hits else None
        m = _SEX_CJK_RE.search(key)
        if m:
            info.sex = "male" if (m.group(1) or m.group(2) or m.group(3)) == "男" else "female"
        else:
            hits = sorted((pos, k) for k, words in self.lex.sex.items() for w in words if (pos := _word_in(w, key)) >= 0)
            info.sex = hits[0][1] if hits else None
        info.history = self.history(key)
        return info

    def history(self, key: str) -> list[str]:
        out: list[str] = []
        neg = [norm_key(n) for n in self.lex.history_negations]
        for pat in self.lex.history_patterns:
            for m in re.finditer(pat, key):
                for part in _SPLIT_RE.split(m.group(1)):
                    item = re.sub(r"史$", "", part.strip(" .:")).strip()
                    if not item or any(item == n or item.startswith(n) for n in neg) or item in out:
                        continue
                    out.append(item)
        return out

    # -- disease information
    def disease(self, text: str, exclude: list[str] = ()) -> list[DiseaseMention]:
        key = norm_key(text)
        taken = [False] * len(key)
        found: list[DiseaseMention] = []
        # spans of past-history items are patient information, never disease information
        for item in exclude:
            for m in re.finditer(re.escape(norm_key(item)), key):
                for i in range(m.start(), m.end()):
                    taken[i] = True

        def take(start: int, end: int, category: str, entity_id: str | None = None) -> None:
            if start < 0 or any(taken[start:end]):
                return
            for i in range(start, end):
                taken[i] = True
            found.append(DiseaseMention(text[start:end] if len(text) == len(key) else key[start:end], category, entity_id, start))

        for category, pat in self.lex.disease_patterns.items():
            for m in re.finditer(pat, key):
                take(m.start(), m.end(), category)
        for mention in self._graph_mentions(text):
            k = norm_key(mention)
            pos = key.find(k)
            while pos >= 0 and any(taken[pos:pos + len(k)]):
                pos = key.find(k, pos + 1)
            eid, typ = self._types_of.get(k, (None, "symptom"))
            take(pos, pos + len(k), typ, eid)
        words = sorted(((w, cat) for cat, ws in self.lex.disease_words.items() for w in ws), key=lambda x: -len(norm_key(x[0])))
        for w, cat in words:
            k = norm_key(w)
            pos = _word_in(w, key)
            while pos >= 0:
                take(pos, pos + len(k), cat)
                nxt = key.find(k, pos + 1) if has_cjk(k) else -1
                pos = nxt
        return sorted(found, key=lambda d: d.start)

    def _graph_mentions(self, text: str) -> list[str]:
        """Names of the graph's disease-type entities in ``text`` (alias-table matches, longest first)."""
        if self.g is None:
            return []
        from bencao.retrieval.search.mentions import extract_mentions

        base = self._base_keys if self._base_keys is not None else {}
        out = []
        for m in extract_mentions(self.g, text, base, min_cjk_chars=2, limit=50):
            k = norm_key(m)
            if k not in self._types_of:
                row = self.g.conn.execute(
                    "SELECT e.id, e.type FROM aliases a JOIN entities e ON e.id = a.entity_id WHERE a.norm=? ORDER BY (a.kind='name') DESC, e.rowid",
                    (k,)).fetchall()
                typed = [(r[0], r[1]) for r in row if r[1] in self.lex.disease_types]
                self._types_of[k] = typed[0] if typed else ("", "")
            if self._types_of[k][1]:
                out.append(m)
        return out

    def understand(self, text: str) -> CaseInfo:
        patient = self.patient(text)
        return CaseInfo(patient, self.disease(text, exclude=patient.history))


UNDERSTANDERS: dict[str, Callable[..., Understander]] = {"rules": RuleUnderstander}


def register_understander(name: str) -> Callable[[Callable[..., Understander]], Callable[..., Understander]]:
    """Register another understanding stage (e.g. an LLM that returns the same :class:`CaseInfo`)."""
    def deco(factory: Callable[..., Understander]) -> Callable[..., Understander]:
        UNDERSTANDERS[name] = factory
        return factory

    return deco


def get_understander(name: str = "rules", **kwargs: Any) -> Understander:
    if name not in UNDERSTANDERS:
        raise ConfigError(f"unknown case understander {name!r}; known: {', '.join(sorted(UNDERSTANDERS))}")
    return UNDERSTANDERS[name](**kwargs)


def split_case_entities(text: str, graph: Any = None, lexicon: str | Path | None = None) -> CaseInfo:
    """Patient vs disease information of ``text`` with the LLM-free rules (see the module docstring)."""
    return RuleUnderstander(graph, lexicon).understand(text)


def patient_info(block: dict[str, Any] | None, lexicon: Lexicon | None = None) -> PatientInfo:
    """A patient block from elsewhere (the question-understanding LLM's ``{"age_group": "老年", "sex": "女",
    "history": ["糖尿病"]}``) as a :class:`PatientInfo` in the lexicon's canonical keys.

    Age groups and sexes are read through the lexicon's words (老年 → elderly, 女 → female; an age
    ``"68岁"`` or ``68`` → its band); a value the lexicon does not know is left out rather than refused
    (an LLM's free text must not stop retrieval). History items that only deny (无, 否认) are dropped.
    """
    lex = lexicon or load_lexicon()
    block = block or {}
    info = PatientInfo()
    raw_age = block.get("age")
    if isinstance(raw_age, (int, float)) and not isinstance(raw_age, bool):
        info.age = int(raw_age)
    group = str(block.get("age_group") or "").strip()
    if group:
        m = re.fullmatch(r"(\d{1,3})\s*(?:岁|周岁|years? old)?", group)
        if m and info.age is None:
            info.age = int(m.group(1))
        else:
            info.age_group = lex.age_group_key(group)
    if info.age_group is None and info.age is not None:
        info.age_group = lex.age_group_of(info.age)
    info.sex = lex.sex_key(str(block.get("sex") or "").strip()) if block.get("sex") else None
    hist = block.get("history") or []
    negations = {norm_key(w) for w in lex.history_negations}
    info.history = [str(h).strip() for h in ([hist] if isinstance(hist, str) else hist)
                    if norm_key(str(h)) and norm_key(str(h)) not in negations]
    return info
