"""Entity linking with abstention: mention → one graph entity, or an honest "no match".

Pipeline (FoodOntoRAG / iDISK / Yaoshi, without an LLM by default):

1. candidates: exact alias matches, normalised-name matches (plural → singular, generic
   qualifiers such as "(raw)" or "food product" removed), same-token-set matches, BM25 over
   names and aliases (``k_lexical``) and dense search over entity texts (``k_dense``);
2. fusion into tiers — exact label, exact synonym, normalised name (plural, generic qualifiers,
   word order), name without a specific qualifier ("dough (frozen)"), names covering every token
   of the mention, the rest — ordered inside a tier by dense cosine to the mention (read from the
   stored vector for candidates outside the dense top-k), then a name spelt exactly as the mention
   (case included), then the better-established concept (more names), then reciprocal rank fusion
   of the BM25 and dense ranks;
3. a selector (``rules``: exact-match preference; inside the top tier FoodOn's term for the food as
   bought ("onion (whole, raw)", "pork (raw)"), else the ontology's term with nothing more specified
   ("nut (unspecified variety)"), then the most specific concept along ``is_a``; or ``llm``
   (``linking.llm``: FoodOntoRAG's selector / Yaoshi-RAG's entity choice) with the same rubric,
   shown each candidate's label, synonyms, definition and parents; it may answer -1, "none fits");
4. a confidence and threshold ``tau``: the rules' tier confidence, or FoodOntoRAG's separate
   scorer (``linking.scorer.llm``: a second call that rates the chosen concept in [0, 1] with a
   rationale; below ``tau`` it proposes up to 3 alternatives with explanations, carried as
   ``LinkResult.alternatives``). Below ``tau`` one retry, one hop: a failure-aware synonym request
   (``linking.synonyms.llm``: up to ``linking.synonyms.max`` synonyms, the scorer's or selector's
   reason for rejecting the first pass in the prompt) whose synonyms re-run BM25 **and** dense
   search, the pooled candidates selected and scored again against the *original* mention; with
   no LLM the retry tries sub-phrases found in the alias table. Then abstention.

Every LLM reply is JSON validated against a schema with one repair turn
(:func:`bencao.llm.structured.complete_json`); prompts are ``bencao/prompts/link_*.{zh,en}.jinja``.
"""

from __future__ import annotations

import contextlib
import copy
import itertools
import os
import re
import sqlite3
import threading
from dataclasses import asdict, dataclass, field as dc_field
from typing import Any, Callable, Iterator

import numpy as np

from bencao.config import field
from bencao.errors import BencaoError
from bencao.llm.base import LLMConfig
from bencao.retrieval.graph.store import Graph
from bencao.retrieval.index.lexical import light_stem
from bencao.retrieval.ingest.substances import BOOK_NAME_KINDS
from bencao.retrieval.name_variants import PARTS, variant_keys
from bencao.text import has_cjk, norm_key, tokenize

#: Exact-match tiers and what a candidate of each tier is worth as confidence.
TIER_NAMES = {0: "exact label", 1: "exact synonym", 2: "normalised name", 3: "name without its qualifier", 4: "covers all tokens", 5: "similar"}
TIER_CONF = {0: 0.95, 1: 0.9, 2: 0.85, 3: 0.75, 4: 0.62}


@dataclass
class ScorerConfig:
    llm: LLMConfig | None = field(None, help="LLM that rates the chosen concept's fit in [0, 1] with a rationale (a second call); "
                                             "null = the rules' tier confidence. The threshold is linking.tau.")


@dataclass
class SynonymsConfig:
    llm: LLMConfig | None = field(None, help="LLM asked for synonyms when the first pass falls below tau (the failure reason in the "
                                             "prompt); null = the scorer's LLM, else the selector's, else rule variants (sub-phrases).")
    max: int = field(5, help="Most synonyms asked for and tried (FoodOntoRAG: 5).")


@dataclass
class LinkingConfig:
    k_lexical: int = field(15, help="Candidates from BM25 over entity names and aliases.")
    k_dense: int = field(15, help="Candidates from dense search over entity texts (when the embedder reads the mention's language).")
    rrf_k: int = field(60, help="Reciprocal-rank-fusion constant: score = Σ 1/(rrf_k + rank).")
    tau: float = field(0.5, help="Confidence threshold: below it (after one retry) the linker abstains.")
    min_dense: float = field(0.75, help="Cosine at which a dense-only candidate counts as a match (iDISK uses 0.75).")
    retry: bool = field(True, help="One synonym retry before abstaining.")
    selector: str = field("rules", help="Candidate selector: rules, or llm (needs linking.llm).")
    llm: LLMConfig | None = field(None, help="The entity-choice LLM (selector: llm), a bencao.llm block: backend, model, base_url, ...")
    scorer: ScorerConfig = field(default_factory=ScorerConfig, help="FoodOntoRAG's separate confidence scorer.")
    synonyms: SynonymsConfig = field(default_factory=SynonymsConfig, help="Failure-aware synonym retry.")
    prompts_dir: str | None = field(None, help="Directory of prompt templates that override bencao/prompts/link_*.jinja file by file.")
    max_candidates: int = field(10, help="Candidates reported per mention.")
    max_mention_chars: int = field(200, help="Longer mentions are refused with an error.")
    qualifiers: list[str] = field(default_factory=lambda: ["food product", "not further specified", "unspecified variety", "unspecified", "nfs", "nos"],
                                  help="Generic qualifiers that add no meaning: dropped from names (also in parentheses) to form the normalised key.")
    types: list[str] = field(default_factory=list, help="Only link to entities of these types (empty = any).")
    penalise_obsolete: bool = field(True, help="Entities whose name starts with 'obsolete' (deprecated terms) rank after every live candidate.")
    state_qualifiers: list[str] = field(default_factory=lambda: ["whole", "raw", "ripe", "fresh"],
                                        help="FoodOn names the food as bought or eaten 'X (whole, raw)' and gives it the synonym 'X': "
                                             "a synonym match whose label is the mention plus only these qualifiers counts as a label "
                                             "match and is preferred to the bare label (the plant-part or organism class).")
    unspecified_qualifiers: list[str] = field(default_factory=lambda: ["not further specified", "unspecified variety", "unspecified", "nfs", "nos"],
                                              help="Qualifiers by which an ontology names its term for a food with nothing more said ('dough not "
                                                   "further specified', 'nut (unspecified variety)'; LanguaL/FNDDS 'NFS'): among the candidates of "
                                                   "one tier such a term is preferred for a mention that carries no qualifier itself.")
    grouping_words: list[str] = field(default_factory=lambda: ["or"],
                                      help="Words that make a name disjunctive ('basil (whole or pieces)', 'broth or stock food "
                                           "product'): such grouping classes rank after the other candidates of their tier.")


@dataclass
class LinkResult:
    mention: str
    chosen_id: str | None
    label: str | None
    confidence: float
    rationale: str
    candidates: list[dict[str, Any]]
    retried: bool
    abstained: bool
    type: str | None = None
    first_pass: dict[str, Any] | None = None  # the choice before any retry: {id, label, confidence}
    selector_rationale: str | None = None
    scorer_rationale: str | None = None
    synonyms: list[str] = dc_field(default_factory=list)  # proposed by the synonym stage (LLM) or rule variants tried
    via_synonym: bool = False  # the final link came from the retry (LLM synonyms or rule variants), not the first pass
    # FoodOntoRAG's scorer on failure (its confidence below tau): up to 3 other concepts, each
    # {id (null for a name not among the candidates), label, explanation}; from the final choice's
    # scoring, else from the first pass's
    alternatives: list[dict[str, Any]] = dc_field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class LinkerLLMs:
    """The linker's LLM clients (bencao.llm protocol); any may be None."""

    selector: Any = None
    scorer: Any = None
    synonyms: Any = None

    @classmethod
    def from_config(cls, cfg: "LinkingConfig") -> "LinkerLLMs":
        from bencao.llm import make_client

        sel = make_client(cfg.llm) if cfg.llm is not None else None
        sco = make_client(cfg.scorer.llm) if cfg.scorer.llm is not None else None
        syn = make_client(cfg.synonyms.llm) if cfg.synonyms.llm is not None else (sco or sel)
        return cls(sel, sco, syn)


_PAREN = re.compile(r"\([^)]*\)|\[[^\]]*\]|（[^）]*）")


class _AliasTables:
    """Keys over the alias table: normalised name → entities (``base``), the same without specific
    parenthesised qualifiers (``stripped``), token set → entities (``bag``); and, per entity, its
    names, label, number of names, label keys and obsolescence (read from the store's alias rows of
    that entity when first asked, not for every entity at open).

    The three key maps of a graph with at least ``DISK_MIN_ALIASES`` aliases live in a SQLite file
    under ``<graph>/cache/`` keyed by the store's id, its write generation and the qualifiers, built
    once (``bencao graph index`` prepares it) and opened by every later process in milliseconds
    (1.1 M aliases: 70 s of Python dicts at each open before); smaller graphs build them in memory."""

    def __init__(self, g: Graph, qualifiers: list[str]):
        self.g = g
        self.qualifiers = [norm_key(q) for q in qualifiers]
        # compiled once: building the pattern per alias and qualifier was a third of opening a
        # 1 M-alias graph
        self._qual_res = [(q, re.compile(rf"(^|\s){re.escape(q)}($|\s)")) for q in self.qualifiers if q]
        self._memo: dict[tuple[str, bool], list[str]] = {}
        self._entities: dict[str, tuple[list[str], str, int, bool, set[str]]] = {}
        self._lock = threading.Lock()
        n_aliases = g.conn.execute("SELECT COALESCE(MAX(rowid), 0) FROM aliases").fetchone()[0]
        if n_aliases >= DISK_MIN_ALIASES:
            db = _alias_key_db(self, g)
            if db is not None:
                self.base, self.stripped, self.bag = (_KeyTable(db, k, self._lock) for k in range(3))
                return
        maps: tuple[dict, dict, dict] = ({}, {}, {})
        for kind, key, eid in self._key_rows():
            maps[kind].setdefault(key, set()).add(eid)
        self.base, self.stripped, self.bag = maps

    def bound(self, g: Graph) -> "_AliasTables":
        """A view that reads per-entity facts through ``g`` (the caller's open graph); maps and
        memos are shared with every other view of this state."""
        view = copy.copy(self)
        view.g = g
        return view

    def _key_rows(self) -> Iterator[tuple[int, Any, str]]:
        """(map, key, entity) for every alias: 0 base, 1 stripped, 2 bag (a sorted token tuple)."""
        for _norm, eid, alias, kind in self.g.iter_aliases():
            if kind == "xref":
                continue
            toks = self.base_tokens(alias, keep_parens=True)
            if not toks:
                continue
            yield 0, " ".join(toks), eid
            yield 2, tuple(sorted(set(toks))), eid  # 'beef (ground)' = 'ground beef'
            if _PAREN.search(alias):
                st = self.base_tokens(alias)
                if st:
                    yield 1, " ".join(st), eid

    # -- per entity, on demand
    def _entity(self, eid: str) -> tuple[list[str], str, int, bool, set[str]]:
        got = self._entities.get(eid)
        if got is None:
            names, label, n, obsolete, label_keys = [], "", 0, False, set()
            for norm, alias, kind in self.g.conn.execute(
                    "SELECT norm, alias, kind FROM aliases WHERE entity_id=? AND kind != 'xref' ORDER BY rowid", (eid,)):
                names.append(alias)
                if kind == "name":
                    label = label or alias
                    obsolete = obsolete or norm.startswith("obsolete")
                toks = self.base_tokens(alias, keep_parens=True)
                if toks:
                    n += 1
                    if kind == "name":
                        label_keys.add(" ".join(toks))
            if len(self._entities) > 100_000:
                self._entities.clear()
            got = self._entities[eid] = (names, label, n, obsolete, label_keys)
        return got

    def names_of(self, eid: str) -> list[str]:
        return self._entity(eid)[0]

    def label_of(self, eid: str) -> str:
        return self._entity(eid)[1]

    def n_names(self, eid: str) -> int:
        return self._entity(eid)[2]

    def is_obsolete(self, eid: str) -> bool:
        return self._entity(eid)[3]

    def label_keys(self, eid: str) -> set[str]:
        return self._entity(eid)[4]

    def _generic(self, text: str) -> bool:
        k = norm_key(text).strip(" ,;")
        return not k or k in self.qualifiers

    def base_tokens(self, text: str, keep_parens: bool = False) -> list[str]:
        memo = self._memo  # candidates' names recur across mentions and queries
        toks = memo.get((text, keep_parens))
        if toks is None:
            toks = self._base_tokens(text, keep_parens)
            if len(memo) < 200_000:
                memo[(text, keep_parens)] = toks
        return list(toks)

    def _base_tokens(self, text: str, keep_parens: bool) -> list[str]:
        if keep_parens:  # drop only parenthesised text that is itself a generic qualifier: '(food product)'
            text = _PAREN.sub(lambda m: " " if self._generic(m.group(0)[1:-1]) else " " + m.group(0)[1:-1] + " ", text)
        key = norm_key(text if keep_parens else _PAREN.sub(" ", text))
        for q, pat in self._qual_res:
            if q in key and pat.search(key):  # the substring test rules out almost every alias cheaply
                key = pat.sub(" ", key)
        return [_singular(t) for t in tokenize(key)]


#: Graphs with at least this many alias rows keep their alias key maps on disk (see ``_AliasTables``).
DISK_MIN_ALIASES = 50_000
_KEY_DB_VERSION = 1


class _KeyTable:
    """One key map of an on-disk alias key database: ``get(key) -> set of entity ids``, ``key in``."""

    def __init__(self, conn: sqlite3.Connection, kind: int, lock: threading.Lock):
        self.conn, self.kind, self.lock = conn, kind, lock

    @staticmethod
    def _k(key: Any) -> str:
        return "\x1f".join(key) if isinstance(key, tuple) else key

    def get(self, key: Any, default: Any = ()) -> Any:
        with self.lock:
            rows = self.conn.execute("SELECT eid FROM keys WHERE kind=? AND key=?", (self.kind, self._k(key))).fetchall()
        return {r[0] for r in rows} or default

    def __contains__(self, key: Any) -> bool:
        with self.lock:
            return self.conn.execute("SELECT 1 FROM keys WHERE kind=? AND key=? LIMIT 1", (self.kind, self._k(key))).fetchone() is not None


def _alias_key_db(tables: _AliasTables, g: Graph) -> sqlite3.Connection | None:
    """The alias key database for this store state and these qualifiers: opened when present, else
    built (temporary file + rename). None when the graph directory cannot hold it (read-only)."""
    from bencao.io import content_hash

    sid, gen = g.state_key()[1:3]
    path = g.dir / "cache" / f"alias-keys-v{_KEY_DB_VERSION}-{content_hash(sid, length=12)}-{gen}-{content_hash(*tables.qualifiers, length=8)}.sqlite"
    if not path.exists():
        from bencao.io import remove_stale_tmp

        if path.parent.is_dir():  # a build killed mid-write left its temporary file: nothing else removes it
            remove_stale_tmp(path.parent, "alias-keys-*.tmp-*")
        tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}-{threading.get_ident()}")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(tmp)
            conn.execute("PRAGMA journal_mode=OFF")
            conn.execute("PRAGMA synchronous=OFF")
            conn.execute("CREATE TABLE keys (kind INTEGER NOT NULL, key TEXT NOT NULL, eid TEXT NOT NULL)")
            rows = ((kind, _KeyTable._k(key), eid) for kind, key, eid in tables._key_rows())
            while True:
                batch = list(itertools.islice(rows, 100_000))
                if not batch:
                    break
                conn.executemany("INSERT INTO keys VALUES (?, ?, ?)", batch)
            conn.execute("CREATE INDEX keys_key ON keys(kind, key)")
            conn.commit()
            conn.close()
            os.replace(tmp, path)
        except (OSError, sqlite3.Error):
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            return None
        for old in path.parent.glob(f"alias-keys-v{_KEY_DB_VERSION}-*.sqlite"):
            if old != path and f"-{content_hash(*tables.qualifiers, length=8)}." in old.name:
                with contextlib.suppress(OSError):
                    old.unlink()
    try:
        return sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True, check_same_thread=False)
    except sqlite3.Error:
        return None


def prepare_alias_tables(g: Graph, config: "LinkingConfig | None" = None) -> None:
    """Build (and, for a large graph, save) the alias tables of the graph's current state, so the
    next process to link against it opens them at once (``bencao graph index`` calls this)."""
    _tables(g, (config or LinkingConfig()).qualifiers)


def _singular(token: str) -> str:
    """The plural fold of the matching keys: :func:`light_stem`, and '-ie' singulars spelt like their
    '-ies' plurals' stem ('cookies' → 'cooky' ← 'cookie'), so both forms meet on one key."""
    t = light_stem(token)
    if len(t) >= 5 and t.endswith("ie") and t.isascii() and t.isalpha():
        return t[:-2] + "y"
    return t


def _tied_ranks(hits: list[tuple[str, float]]) -> list[tuple[int, tuple[str, float]]]:
    """(rank, hit) with equal scores sharing the better rank: two identical names ('sugar', 'sugar')
    must not be told apart by the order in which an index happens to return its ties."""
    out: list[tuple[int, tuple[str, float]]] = []
    for i, (eid, s) in enumerate(hits):
        rank = out[-1][0] if out and round(s, 5) == round(out[-1][1][1], 5) else i
        out.append((rank, (eid, s)))
    return out


_TABLES: dict[tuple, _AliasTables] = {}
_TABLES_LOCK = threading.Lock()


def _tables(g: Graph, qualifiers: list[str]) -> _AliasTables:
    key = (*g.state_key(), tuple(qualifiers))  # state_key()[0] is the graph directory
    with _TABLES_LOCK:
        if key not in _TABLES:
            for k in [k for k in _TABLES if k[0] == key[0]]:
                del _TABLES[k]
            _TABLES[key] = _AliasTables(g, qualifiers)
        return _TABLES[key]


class EntityLinker:
    """``EntityLinker(graph, config).link("mention") -> LinkResult``.

    ``indexes`` (a :class:`bencao.retrieval.index.Indexes`) adds BM25 and dense candidates; without
    it only the alias tables are used. ``llms`` (:class:`LinkerLLMs`) are the selector, scorer and
    synonym clients; by default they are made from ``config`` (``linking.llm``,
    ``linking.scorer.llm``, ``linking.synonyms.llm``).
    """

    def __init__(self, graph: Graph, config: LinkingConfig | None = None, indexes: Any = None, llms: LinkerLLMs | None = None):
        self.g = graph
        self.cfg = config or LinkingConfig()
        self.indexes = indexes
        if self.cfg.selector not in SELECTORS:
            raise BencaoError(f"linking.selector {self.cfg.selector!r} is not one of {', '.join(SELECTORS)}")
        self.llms = llms if llms is not None else LinkerLLMs.from_config(self.cfg)
        if self.cfg.selector == "llm" and self.llms.selector is None:
            raise BencaoError("linking.selector 'llm' needs an LLM: set linking.llm (e.g. --set linking.llm.base_url=URL "
                              "--set linking.llm.model=NAME) or use selector: rules")
        self.tables = _tables(graph, self.cfg.qualifiers).bound(graph)
        self._ancestors: dict[str, set[str]] = {}
        self._dense_rows: tuple[Any, dict[str, int]] | None = None  # (dense index, entity id → row)

    # ------------------------------------------------------------------ public
    def link(self, mention: str, context: str | None = None) -> LinkResult:
        """Link ``mention``; ``context`` (the sentence, question or dish it occurs in) is shown to the LLM
        stages and decides between candidates that carry the same name (FoodOn's two "honey", three
        "sugar"): inside such a group, within a tier, the one closest by dense cosine to "mention —
        context" comes first. Candidates with different names keep their order."""
        if not isinstance(mention, str) or not mention.strip():
            raise BencaoError("mention is empty")
        if len(mention) > self.cfg.max_mention_chars:
            raise BencaoError(f"mention is {len(mention):,} characters, over the {self.cfg.max_mention_chars}-character limit (linking.max_mention_chars)")
        mention = mention.strip()
        cands = self._candidates(mention, context=context)
        choice = self._choose(mention, context, cands)
        first = self._brief(choice)
        sel_why = choice.get("selector_rationale") if choice else None
        sco_why = choice.get("scorer_rationale") if choice else None
        first_alts = list(choice.get("alternatives") or []) if choice else []
        retried, tried = False, []
        if (choice is None or choice["confidence"] < self.cfg.tau) and self.cfg.retry:
            retried = True
            if self.llms.synonyms is not None:
                choice, cands, tried = self._synonym_retry(mention, context, cands, choice)
            else:
                choice, cands, tried = self._variant_retry(mention, context, cands, choice)
            if choice is not None:
                sel_why = choice.get("selector_rationale", sel_why)
                sco_why = choice.get("scorer_rationale", sco_why)
        report = [self._report(c) for c in cands[: self.cfg.max_candidates]]
        alts = list(choice.get("alternatives") or []) if choice else []
        extra = {"first_pass": first, "selector_rationale": sel_why, "scorer_rationale": sco_why, "synonyms": tried,
                 "alternatives": alts or first_alts}
        if choice is None or choice["confidence"] < self.cfg.tau:
            why = choice["rationale"] + f"; confidence {choice['confidence']:.2f} < tau {self.cfg.tau}" if choice else "no candidate"
            return LinkResult(mention, None, None, round(choice["confidence"], 4) if choice else 0.0, f"abstained: {why}", report, retried,
                              True, **extra)
        ent = self.g.get_entity(choice["id"]) or {}
        return LinkResult(mention, choice["id"], ent.get("name"), round(choice["confidence"], 4), choice["rationale"], report, retried, False,
                          ent.get("type"), **extra, via_synonym=bool(choice.get("from_retry")))

    def _brief(self, choice: dict[str, Any] | None) -> dict[str, Any] | None:
        if choice is None:
            return None
        return {"id": choice["id"], "label": self.tables.label_of(choice["id"]), "confidence": round(choice["confidence"], 4)}

    def _choose(self, mention: str, context: str | None, cands: list[dict[str, Any]]) -> dict[str, Any] | None:
        """Selector, then (when configured) the separate scorer, both against ``mention`` as written."""
        choice = SELECTORS[self.cfg.selector](self, mention, cands, context)
        if choice is None:
            return None
        choice.setdefault("selector_rationale", choice["rationale"])
        if self.llms.scorer is not None and choice.get("abstain") is not True:
            choice = score_llm(self, mention, context, choice, cands)
        return choice

    def _variant_retry(self, mention: str, context: str | None, cands: list[dict[str, Any]],
                       choice: dict[str, Any] | None) -> tuple[dict[str, Any] | None, list[dict[str, Any]], list[str]]:
        """No synonym LLM: sub-phrases found in the alias table (right-most first), each linked on its own."""
        tried: list[str] = []
        for variant, how in self._variants(mention):
            tried.append(variant)
            vc = self._candidates(variant, lexical=False)
            vchoice = SELECTORS[self.cfg.selector](self, variant, vc, context)
            if vchoice is not None:
                vchoice = dict(vchoice, confidence=round(vchoice["confidence"] * 0.85, 4), from_retry=True,
                               rationale=f"retry with {how} {variant!r}: {vchoice['rationale']}")
                if choice is None or vchoice["confidence"] > choice["confidence"]:
                    choice = vchoice
                    known = {c["id"] for c in cands}
                    cands = cands + [c for c in vc if c["id"] not in known]
                if choice["confidence"] >= self.cfg.tau:
                    break
        return choice, cands, tried

    def _synonym_retry(self, mention: str, context: str | None, cands: list[dict[str, Any]],
                       choice: dict[str, Any] | None) -> tuple[dict[str, Any] | None, list[dict[str, Any]], list[str]]:
        """FoodOntoRAG's retry: synonyms asked with the failure reason, their BM25 + dense candidates pooled
        with the first pass's, one more selection and score against the original mention (one hop)."""
        if choice is None:
            reason = "no candidate concept was found" if not cands else "the selector found no candidate that fits"
        else:
            reason = choice.get("scorer_rationale") or choice.get("selector_rationale") or choice["rationale"]
        rejected = self.tables.label_of(choice["id"]) if choice else None
        synonyms = synonyms_llm(self, mention, context, reason, rejected)
        if not synonyms:
            return choice, cands, []
        pool = {c["id"]: c for c in cands}
        for syn in synonyms:
            for c in self._candidates(syn, lexical=True):
                c = dict(c, via=[*c["via"], f"synonym:{syn}"])
                cur = pool.get(c["id"])
                if cur is None or (c["tier"], -c["rrf"]) < (cur["tier"], -cur["rrf"]):
                    pool[c["id"]] = c
        merged = self._order(list(pool.values()))
        second = self._choose(mention, context, merged)
        if second is not None:
            second["rationale"] = f"after synonyms {', '.join(synonyms)}: {second['rationale']}"
            second["from_retry"] = True
            if choice is None or second["confidence"] > choice["confidence"]:
                return second, merged, synonyms
        return choice, merged, synonyms

    # ------------------------------------------------------------------ candidates
    def _candidates(self, mention: str, lexical: bool = True, context: str | None = None) -> list[dict[str, Any]]:
        key = norm_key(mention)
        m_toks = self.tables.base_tokens(mention, keep_parens=True)
        m_set = set(m_toks)
        pool: dict[str, dict[str, Any]] = {}

        def add(eid: str, tier: int, via: str) -> dict[str, Any]:
            c = pool.get(eid)
            if c is None:
                c = pool[eid] = {"id": eid, "tier": tier, "via": [via], "rrf": 0.0, "lexical": None, "dense": None}
            else:
                if tier < c["tier"]:
                    c["tier"] = tier
                if via not in c["via"]:
                    c["via"].append(via)
            return c

        # each alias row with its document, the earliest document first (the one said to give the name)
        exact = self.g.conn.execute(
            "SELECT a.entity_id, a.kind, a.alias, COALESCE(NULLIF(d.title, ''), d.source), e.layer FROM aliases a "
            "JOIN documents d ON d.id = a.document_id JOIN entities e ON e.id = a.entity_id WHERE a.norm=? ORDER BY d.rowid", (key,)).fetchall()
        via_exact = "exact"
        if not exact and has_cjk(key) and len(key) >= 2:
            # 栝楼 for 栝蒌: a variant writing of a classical name (bencao.retrieval.name_variants); then the entry a
            # book gives a part of it under its own name (栝楼 → 神农本草经's 栝蒌根), as a book's name of its own
            sql = ("SELECT a.entity_id, a.kind, a.alias, COALESCE(NULLIF(d.title, ''), d.source), e.layer FROM aliases a "
                   "JOIN documents d ON d.id = a.document_id JOIN entities e ON e.id = a.entity_id WHERE a.norm=?")
            for v in variant_keys(key):
                exact = self.g.conn.execute(sql + " ORDER BY d.rowid", (v,)).fetchall()
                if exact:
                    via_exact = "variant writing"
                    break
            for v in ([] if exact else [key, *variant_keys(key)]):
                exact = [r for p in PARTS for r in self.g.conn.execute(sql + " AND a.kind='name' AND e.type='substance' ORDER BY d.rowid", (v + p,))]
                if exact:
                    via_exact = "the entry of a part"
                    break
        for eid, kind, alias, title, layer in exact:
            c = add(eid, 0 if kind == "name" and via_exact == "exact" else 1, via_exact)
            if alias.strip() == mention:  # spelt as written, case included: 'cheddar cheese' vs 'Cheddar cheese'
                c["verbatim"] = True
            # the canonical entity first: a curated name or alias (0) before a book's name for a curated entity (1)
            # before a book's own entry known by that name (2); the alias that matched is said in the rationale
            rank = 0 if kind not in BOOK_NAME_KINDS else 2 if layer == "book" else 1
            if rank < c.get("book_rank", 3):
                c["book_rank"] = rank
                c["matched"] = {"alias": alias, "kind": kind, "document": title, "via": via_exact}
        if m_toks:
            for eid in self.tables.base.get(" ".join(m_toks), ()):
                add(eid, 2, "normalised")["label"] = " ".join(m_toks) in self.tables.label_keys(eid)
            for eid in self.tables.bag.get(tuple(sorted(m_set)), ()):
                add(eid, 2, "tokens")
            for eid in self.tables.stripped.get(" ".join(m_toks), ()):
                add(eid, 3, "qualifier dropped")
        if lexical and self.indexes is not None:
            for rank, (eid, s) in _tied_ranks(self.indexes.lexical_search("entities", mention, self.cfg.k_lexical)):
                c = add(eid, 5, "bm25")
                c["lexical"] = round(s, 4)
                c["rrf"] += 1.0 / (self.cfg.rrf_k + rank + 1)
            for rank, (eid, s) in _tied_ranks(self.indexes.dense_search("entities", mention, self.cfg.k_dense)):
                c = add(eid, 5, "dense")
                c["dense"] = round(s, 4)
                c["rrf"] += 1.0 / (self.cfg.rrf_k + rank + 1)
        if lexical and self.indexes is not None:
            self._fill_cosines(mention, pool)
            if context and context.strip():
                self._context_cosines(mention, context.strip(), pool)
        if self.cfg.types:
            ents = self.g.get_entities(pool)
            pool = {k: v for k, v in pool.items() if ents.get(k, {}).get("type") in self.cfg.types}
        # Token coverage for candidates that are not exact: every mention token in one of its names?
        for c in pool.values():
            names = self.tables.names_of(c["id"])
            best_extra = None
            for n in names:
                n_toks = set(self.tables.base_tokens(n, keep_parens=True))
                if m_set and m_set <= n_toks:
                    extra = len(n_toks - m_set)
                    best_extra = extra if best_extra is None else min(best_extra, extra)
            c["extra_tokens"] = best_extra
            if c["tier"] == 5 and best_extra is not None:
                c["tier"] = 4
            c["obsolete"] = self.tables.is_obsolete(c["id"]) and self.cfg.penalise_obsolete
            label = self.tables.label_of(c["id"])
            c["state_form"] = c["tier"] in (1, 2, 3) and self._state_form(m_toks, label)
            c["unspecified"] = c["tier"] <= 3 and self._unspecified(label)
            c["grouping"] = self._grouping(label)
        return self._order(list(pool.values()))

    def _fill_cosines(self, mention: str, pool: dict[str, dict[str, Any]], key: str = "dense", every: bool = False) -> None:
        """The cosine of every candidate that the dense top-k missed, read from its stored vector.

        Candidates are ordered by cosine inside a tier; one found only by the alias tables or BM25
        would otherwise count as cosine 0 merely because it fell outside ``k_dense``. With ``every``
        each candidate gets the cosine to ``mention`` (e.g. mention + context) under ``key``.
        """
        missing = [eid for eid, c in pool.items() if every or c.get(key) is None]
        if not missing or not self.indexes.can_embed(mention):
            return
        idx = self.indexes.dense("entities")
        if idx is None:
            return
        if self._dense_rows is None or self._dense_rows[0] is not idx:  # the index object is reloaded when the graph changes
            self._dense_rows = (idx, {eid: i for i, eid in enumerate(idx.ids)})
        rows = self._dense_rows[1]
        have = [(eid, rows[eid]) for eid in missing if eid in rows]
        if not have:
            return
        try:
            vecs = np.stack([idx.index.reconstruct(r) for _, r in have])
        except RuntimeError:  # an approximate index without a direct map cannot give vectors back
            return
        q = self.indexes.embed_queries([mention])[0]
        for (eid, _), s in zip(have, vecs @ q):
            pool[eid][key] = round(float(s), 4)

    def _context_cosines(self, mention: str, context: str, pool: dict[str, dict[str, Any]]) -> None:
        """For candidates sharing a name: their cosine to "mention — context" (``context``) and the best
        mention cosine of their name group (``group_dense``), which places the group as a whole."""
        groups: dict[str, list[dict[str, Any]]] = {}
        for c in pool.values():
            groups.setdefault(norm_key(self.tables.label_of(c["id"])), []).append(c)
        dups = {c["id"]: c for key, cs in groups.items() if key and len(cs) > 1 for c in cs}
        if not dups:
            return
        self._fill_cosines(f"{mention} — {context}", dups, key="context", every=True)
        for key, cs in groups.items():
            if key and len(cs) > 1:
                best = max((c["dense"] for c in cs if c["dense"] is not None), default=None)
                for c in cs:
                    c["group_dense"] = best

    def _state_form(self, m_toks: list[str], label: str) -> bool:
        """Is ``label`` the mention plus only default-state qualifiers ('onion (whole, raw)', 'pineapple (raw)')?"""
        quals = [m.group(0)[1:-1] for m in _PAREN.finditer(label)]
        if not quals or not m_toks or self.tables.base_tokens(label) != m_toks:
            return False
        words = {w for q in quals for w in re.split(r"[\s,，、;]+", norm_key(q)) if w}
        return bool(words) and words <= {norm_key(w) for w in self.cfg.state_qualifiers}

    def _unspecified(self, label: str) -> bool:
        """Does ``label`` say that nothing more is specified ('nut (unspecified variety)', 'dough not further specified')?"""
        key = f" {' '.join(tokenize(norm_key(label)))} "
        return any(f" {' '.join(tokenize(norm_key(q)))} " in key for q in self.cfg.unspecified_qualifiers if q.strip())

    def _grouping(self, label: str) -> bool:
        key = f" {norm_key(label)} "
        return any((f" {norm_key(w)} " in key) if w.isascii() else (norm_key(w) in key) for w in self.cfg.grouping_words if w.strip())

    def _order(self, cands: list[dict[str, Any]]) -> list[dict[str, Any]]:
        def key(c: dict[str, Any]) -> tuple:
            # tier; fewer extra words; closer to the mention by dense cosine (2 decimals: exact ties stay
            # ties); a name spelt exactly as the mention (case included); the better-established concept
            # (more names); fused rank.
            return (c["obsolete"], c["tier"], c.get("book_rank", 0), c["extra_tokens"] or 0 if c["tier"] == 4 else 0,
                    -round(c.get("group_dense", c["dense"]), 2) if c.get("group_dense", c["dense"]) is not None else 0.0,
                    -(c.get("context") or 0.0), not c.get("verbatim"),
                    -self.tables.n_names(c["id"]), -c["rrf"], c["id"])

        return sorted(cands, key=key)

    def _variants(self, mention: str) -> list[tuple[str, str]]:
        """Rule retry inputs: sub-phrases of the mention found in the alias table."""
        out: list[tuple[str, str]] = []
        seen = {norm_key(mention)}
        toks = tokenize(mention)
        n = len(toks)
        joiner = "" if any(ord(ch) > 0x2E80 for ch in mention) else " "
        for size in range(n - 1, 0, -1):
            for i in range(n - size, -1, -1):  # right-most first: the head of an English noun phrase
                sub = joiner.join(toks[i : i + size])
                k = norm_key(sub)
                if k in seen or len(k) < 2:
                    continue
                seen.add(k)
                # a name as written, or after the plural fold ('sliced almonds' → 'almonds' → 'almond')
                if (self.g.conn.execute("SELECT 1 FROM aliases WHERE norm=? LIMIT 1", (k,)).fetchone()
                        or " ".join(self.tables.base_tokens(sub, keep_parens=True)) in self.tables.base):
                    out.append((sub, "sub-phrase"))
        return out[:8]

    # ------------------------------------------------------------------ helpers
    def ancestors(self, eid: str, max_depth: int = 30) -> set[str]:
        if eid in self._ancestors:
            return self._ancestors[eid]
        seen: set[str] = set()
        frontier = [eid]
        for _ in range(max_depth):
            nxt = []
            for x in frontier:
                for (p,) in self.g.conn.execute("SELECT tail_id FROM triples WHERE head_id=? AND relation='is_a'", (x,)):
                    if p not in seen and p != eid:
                        seen.add(p)
                        nxt.append(p)
            if not nxt:
                break
            frontier = nxt
        self._ancestors[eid] = seen
        return seen

    def confidence(self, c: dict[str, Any], n_rivals: int) -> float:
        if c["tier"] in TIER_CONF:
            base = TIER_CONF[c["tier"]]
            if c["tier"] == 4 and c["extra_tokens"]:
                base -= 0.04 * min(c["extra_tokens"], 5)
            if c["dense"] is not None:
                base = max(base, min(0.9, c["dense"]))
            conf = base - 0.05 * min(n_rivals, 4)
        else:
            conf = max(c["dense"] or 0.0, 0.0) if (c["dense"] or 0) >= self.cfg.min_dense else 0.5 * (c["dense"] or 0.0)
        if c.get("obsolete"):
            conf -= 0.1
        return max(0.0, min(1.0, conf))

    def _report(self, c: dict[str, Any]) -> dict[str, Any]:
        name = (self.tables.names_of(c["id"]) or [None])[0]
        out = {"id": c["id"], "label": name, "tier": TIER_NAMES[c["tier"]], "via": c["via"], "lexical": c["lexical"],
               "dense": c["dense"], "rrf": round(c["rrf"], 5)}
        if c.get("matched"):
            out["matched"] = c["matched"]  # the alias the mention matched: {alias, kind, document, via}
        if "context" in c:
            out["context"] = c["context"]  # cosine to "mention — context"
        return out


# ---------------------------------------------------------------------- selectors


def select_rules(linker: EntityLinker, mention: str, cands: list[dict[str, Any]], context: str | None = None) -> dict[str, Any] | None:
    """Exact-match preference, then the most specific concept by ``is_a``, then the fused rank."""
    if not cands:
        return None
    live = [c for c in cands if not c["obsolete"]] or cands  # deprecated terms only when nothing else fits
    # 'onion (whole, raw)' with the synonym 'onion' is FoodOn's term for the food itself: as good as a label.
    tier_of = {c["id"]: 0 if c["tier"] == 1 and c.get("state_form") else c["tier"] for c in live}
    top_tier = min(tier_of.values())
    group = [c for c in live if tier_of[c["id"]] == top_tier]
    reason = TIER_NAMES[top_tier] if top_tier <= 4 else "best fused lexical/dense rank"
    if any(c.get("state_form") for c in group):
        group = [c for c in group if c.get("state_form")]
        reason = f"{TIER_NAMES[group[0]['tier']]} naming the food as bought or eaten ({linker.tables.label_of(group[0]['id'])!r})"
    elif top_tier == 2 and any(c.get("label") for c in group):  # a label beats a synonym here too
        group = [c for c in group if c.get("label")]
    if len(group) > 1 and any(c.get("unspecified") for c in group) and not all(c.get("unspecified") for c in group):
        group = [c for c in group if c.get("unspecified")]
        reason += f"; the ontology's term for it with nothing more specified ({linker.tables.label_of(group[0]['id'])!r})"
    if len(group) > 1 and any(c.get("grouping") for c in group) and not all(c.get("grouping") for c in group):
        reason += f"; {sum(bool(c.get('grouping')) for c in group)} disjunctive grouping class(es) set aside"
        group = [c for c in group if not c.get("grouping")]
    if top_tier <= 4 and len(group) > 1:
        ids = {c["id"] for c in group}
        # Specificity: drop a candidate when another candidate of the group descends from it.
        covered: set[str] = set()
        for c in group:
            covered |= linker.ancestors(c["id"]) & ids
        specific = [c for c in group if c["id"] not in covered]
        if specific and len(specific) < len(group):
            reason += f"; most specific of {len(group)} along is_a"
            group = specific
    if top_tier <= 1 and len({c.get("book_rank", 0) for c in group}) > 1:  # a curated entity before a book's entry of that name
        low = min(c.get("book_rank", 0) for c in group)
        group = [c for c in group if c.get("book_rank", 0) == low]
        reason += "; the canonical entity before a book's entry of that name"
    best = group[0]
    m = best.get("matched")
    if top_tier <= 1 and m and (m["kind"] != "name" or m["via"] != "exact"):  # which alias matched, and whose it is
        said = f"{m['alias']!r} ({m['kind']}, {m['document']})"
        how = {"exact": f"{TIER_NAMES[top_tier]} {said}", "the entry of a part": f"the entry of a part of it: {said}"}.get(m["via"], f"{m['via']} of {said}")
        reason = reason.replace(TIER_NAMES[top_tier], how, 1)
    rivals = len([c for c in group if c is not best])
    if rivals:
        reason += f"; {rivals} other candidate(s) of the same tier, chosen by cosine, exact spelling, number of names and fused rank"
    if best["dense"] is not None:
        reason += f"; cosine {best['dense']:.2f}"
    return {"id": best["id"], "confidence": linker.confidence(best, rivals), "rationale": reason}


def _card_text(text: Any) -> str:
    """A field of a candidate card as the prompt shows it, quoted between <candidates> lines: one line (a definition
    cannot start a numbered candidate of its own), fence tags defused (an ontology's text is data, not instructions)."""
    from bencao.prompting import quoted_line

    return quoted_line(text, "candidates")

def describe_candidate(linker: EntityLinker, eid: str) -> dict[str, Any]:
    """What an LLM is shown of a concept: label, synonyms, definition, parents (FoodOntoRAG's candidate card)."""
    ent = linker.g.get_entity(eid) or {}
    label = linker.tables.label_of(eid) or ent.get("name") or eid
    syns = [n for n in dict.fromkeys(linker.tables.names_of(eid)) if n != label][:6]
    parents = [r[0] for r in linker.g.conn.execute("SELECT tail_id FROM triples WHERE head_id=? AND relation='is_a' LIMIT 3", (eid,))]
    pnames = linker.g.get_entities(parents)
    return {"id": eid, "label": _card_text(label), "type": _card_text(ent.get("type")), "synonyms": [_card_text(n) for n in syns],
            "definition": _card_text((ent.get("description") or "")[:240]),
            "parents": [_card_text(pnames.get(p, {}).get("name", p)) for p in parents]}


def _lang(*texts: str | None) -> str:
    from bencao.text import lang_of

    return "zh" if any(t and lang_of(t) == "zh" for t in texts) else "en"


def _ask_json(linker: EntityLinker, client: Any, template: str, schema: dict[str, Any], lang: str, decode_schema: dict[str, Any] | None = None,
              **variables: Any) -> tuple[Any, str | None]:
    from bencao.llm.structured import complete_json
    from bencao.prompting import render

    msgs = render(template, lang, prompts_dir=linker.cfg.prompts_dir, **variables)
    res = complete_json(client, msgs, schema, lang=lang, decode_schema=decode_schema)
    return res.value, res.error


_SELECT_SCHEMA = {"type": "object", "required": ["choice"], "properties": {
    "choice": {"type": "integer", "minimum": -1}, "confidence": {"type": "number", "minimum": 0, "maximum": 1},
    "rationale": {"type": "string"}}}


def _select_decoding(n: int) -> dict[str, Any]:
    """The selector's reply as an engine that decodes under a schema is held to: a shown candidate's number (1..n) or -1."""
    return {"type": "object", "required": ["choice", "confidence", "rationale"], "properties": {
        "choice": {"enum": [-1, *range(1, n + 1)]}, "confidence": {"type": "number"}, "rationale": {"type": "string"}}}


def _score_decoding(n_others: int) -> dict[str, Any]:
    """The scorer's reply under a grammar: at most MAX_ALTERNATIVES alternatives, each another shown candidate's number
    (1..n_others) or a name (small models otherwise list the same alternative until their token budget runs out)."""
    alt = ({"anyOf": [{"type": "object", "required": ["choice", "explanation"], "properties": {
               "choice": {"enum": list(range(1, n_others + 1))}, "explanation": {"type": "string"}}},
           {"type": "object", "required": ["name", "explanation"], "properties": {"name": {"type": "string"}, "explanation": {"type": "string"}}}]}
           if n_others else {"type": "object", "required": ["name", "explanation"], "properties": {
               "name": {"type": "string"}, "explanation": {"type": "string"}}})
    return {"type": "object", "required": ["confidence", "rationale"], "properties": {
        "confidence": {"type": "number"}, "rationale": {"type": "string"},
        "alternatives": {"type": "array", "maxItems": MAX_ALTERNATIVES, "items": alt}}}
_SCORE_SCHEMA = {"type": "object", "required": ["confidence"], "properties": {
    "confidence": {"type": "number", "minimum": 0, "maximum": 1}, "rationale": {"type": "string"},
    "alternatives": {"type": "array", "items": {"type": "object", "properties": {
        "choice": {"type": "integer"}, "name": {"type": "string"}, "explanation": {"type": "string"}}}}}}
#: FoodOntoRAG's scorer proposes at most this many alternatives when it rejects a choice.
MAX_ALTERNATIVES = 3
#: Other candidates shown to the scorer, from which it may draw its alternatives.
SCORER_OTHERS = 5
_SYNONYMS_SCHEMA = {"type": "object", "required": ["synonyms"], "properties": {
    "synonyms": {"type": "array", "items": {"type": "string"}}}}


def select_llm(linker: EntityLinker, mention: str, cands: list[dict[str, Any]], context: str | None = None) -> dict[str, Any] | None:
    """Ask the LLM to pick among the top candidates with the rules' rubric; it may answer -1 (none fits)."""
    if not cands:
        return None
    shown = cands[: linker.cfg.max_candidates]
    cards = [describe_candidate(linker, c["id"]) for c in shown]
    obj, err = _ask_json(linker, linker.llms.selector, "link_select", _SELECT_SCHEMA, _lang(mention, context),
                         decode_schema=_select_decoding(len(cards)), mention=mention, context=context or "", candidates=cards)
    if obj is None:
        rules = select_rules(linker, mention, cands, context)
        return rules | {"rationale": f"LLM selector unusable ({err}); rules used: {rules['rationale']}"} if rules else None
    idx = int(obj["choice"]) - 1  # the prompt numbers candidates from 1, as the scorer's prompt does; -1 (or 0): none fits
    why = str(obj.get("rationale") or "").strip()
    if idx < 0 or idx >= len(shown):
        return {"id": shown[0]["id"], "confidence": 0.0, "rationale": f"LLM selector: none fits ({why})", "abstain": True,
                "selector_rationale": why or "none fits"}
    conf = float(obj.get("confidence", linker.confidence(shown[idx], 0)))
    return {"id": shown[idx]["id"], "confidence": max(0.0, min(1.0, conf)), "rationale": f"LLM selector: {why}", "selector_rationale": why}


def score_llm(linker: EntityLinker, mention: str, context: str | None, choice: dict[str, Any],
              cands: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """FoodOntoRAG's scorer: a separate call rating how well the chosen concept fits the mention.

    The scorer is also shown the next candidates (up to ``SCORER_OTHERS``); when its confidence falls
    below ``tau`` it may propose up to ``MAX_ALTERNATIVES`` alternatives with an explanation each — a
    numbered other candidate, or a concept name of its own (kept with ``id: null``). They are returned
    under ``alternatives`` as ``{id, label, explanation}``; a confident score carries none."""
    card = describe_candidate(linker, choice["id"])
    others = [c["id"] for c in (cands or []) if c["id"] != choice["id"]][:SCORER_OTHERS]
    other_cards = [describe_candidate(linker, eid) for eid in others]
    obj, err = _ask_json(linker, linker.llms.scorer, "link_score", _SCORE_SCHEMA, _lang(mention, context),
                         decode_schema=_score_decoding(len(other_cards)), mention=mention, context=context or "", concept=card, others=other_cards, tau=linker.cfg.tau,
                         max_alternatives=MAX_ALTERNATIVES)
    if obj is None:
        return dict(choice, rationale=f"{choice['rationale']}; scorer unusable ({err}), selector confidence kept")
    why = str(obj.get("rationale") or "").strip()
    conf = max(0.0, min(1.0, float(obj["confidence"])))
    alts: list[dict[str, Any]] = []
    if conf < linker.cfg.tau:
        seen = {choice["id"]}
        for a in obj.get("alternatives") or []:
            expl = str(a.get("explanation") or "").strip()
            idx = a.get("choice")
            if isinstance(idx, int) and 1 <= idx <= len(other_cards):
                alt = {"id": other_cards[idx - 1]["id"], "label": other_cards[idx - 1]["label"], "explanation": expl}
            elif str(a.get("name") or "").strip():
                alt = {"id": None, "label": str(a["name"]).strip()[: linker.cfg.max_mention_chars], "explanation": expl}
            else:
                continue
            key = alt["id"] or norm_key(alt["label"])
            if key in seen:
                continue
            seen.add(key)
            alts.append(alt)
            if len(alts) == MAX_ALTERNATIVES:
                break
    out = dict(choice, confidence=conf, scorer_rationale=why, rationale=f"{choice['rationale']}; scorer {conf:.2f}: {why}")
    if alts:
        out["alternatives"] = alts
    return out


def synonyms_llm(linker: EntityLinker, mention: str, context: str | None, reason: str, rejected: str | None) -> list[str]:
    """Up to ``synonyms.max`` alternative names, asked with the reason the first pass failed."""
    obj, _err = _ask_json(linker, linker.llms.synonyms, "link_synonyms", _SYNONYMS_SCHEMA, _lang(mention, context),
                          mention=mention, context=context or "", reason=reason, rejected=rejected or "", max=linker.cfg.synonyms.max)
    out: list[str] = []
    seen = {norm_key(mention)}
    for s in (obj or {}).get("synonyms", []):
        s = str(s).strip()
        if s and norm_key(s) not in seen and len(s) <= linker.cfg.max_mention_chars:
            seen.add(norm_key(s))
            out.append(s)
    return out[: linker.cfg.synonyms.max]


SELECTORS: dict[str, Callable[..., dict[str, Any] | None]] = {
    "rules": select_rules,
    "llm": select_llm,
}
