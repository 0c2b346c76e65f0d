"""The case layer at query time (TCM MLKG-RAG): patient index, disease tree, case classification.

- :class:`PatientIndex` filters the graph's ``case`` entities by age group, sex and past history
  (attributes written by the ``cases-*`` loaders; values are matched through the case lexicon, so
  女 = F = female and 老年 = elderly; a history term matches a recorded item containing it).
- :func:`disease_tree` reads a ``disease-tree`` document back as first-level classes with their
  second-level children.
- :class:`Similarity` is the Σ-cosine of the paper: dense cosine with the graph's embedder when it
  reads every text involved (vectors through the index's embedding cache), else a lexical stand-in
  (Dice coefficient of character bigrams, the best over a class's name and keywords). ``auto``
  picks; the mode used is always reported.
- :func:`classify_cases` files every case under one leaf of the tree, as MLKG-RAG does before
  therapy retrieval: a stated diagnosis that names a leaf (or one of its keywords) decides;
  otherwise the case's disease entities descend the tree (level 1, then level 2) by Σ similarity;
  with an LLM configured the LLM picks among the leaves instead (the rule decides when its reply
  names no leaf). The result is ONE derived document (format ``case-classification``) of
  ``classified_as`` triples, replaced by the next classification.
"""

from __future__ import annotations

import json
import re
import threading
from dataclasses import asdict, dataclass, field as dc_field
from typing import Any, Callable, Literal

import numpy as np

from bencao.config import field
from bencao.errors import BencaoError
from bencao.io import content_hash
from bencao.llm.base import LLMConfig
from bencao.retrieval.graph.store import Graph
from bencao.retrieval.search.case_entities import Lexicon, load_lexicon
from bencao.text import norm_key

CLASSIFICATION_FORMAT = "case-classification"


@dataclass
class CasesConfig:
    understander: str = field("rules", help="Question/case understanding stage (registry in case_entities: rules; an LLM stage registers itself).")
    lexicon: str | None = field(None, help="Case lexicon YAML (default: the built-in retrieval/search/case_lexicon.yaml).")
    retrieval: str | None = field(None, help="Retrieval recipe name or YAML path whose `index` block names the embedder (default: the one the graph's index was built with).")
    similarity: Literal["auto", "dense", "lexical"] = field("auto", help="Σ similarity of disease entities to classes: dense cosine (the graph's embedder), lexical (character bigrams), or auto (dense when the embedder reads every text).")
    beam: int = field(1, help="Classes kept at each level of the descent (the paper keeps the best one).")
    k_cases: int = field(3, help="Cases returned from the leaf (best Σ similarity to the question's disease entities first).")
    tree: str | None = field(None, help="Document id or title of the disease tree (default: the most recently added one).")
    patient_fallback: bool = field(True, help="When no case of the leaf matches the patient filter, return the leaf's cases unfiltered (and say so).")
    llm_classifier: bool = field(False, help="classify: ask the LLM (llm block) to choose the leaf of each case; the rule decides when it names none.")
    llm: LLMConfig | None = field(None, help="LLM client block (backend, model, base_url, ...) for llm_classifier and `graph cases terms` (LLM case-term extraction).")


# --------------------------------------------------------------------------- patient index

_INDEX: dict[tuple, "PatientIndex"] = {}
_LOCK = threading.Lock()


class PatientIndex:
    """Cases by patient attributes, read once per graph state."""

    def __init__(self, g: Graph, lexicon: Lexicon | None = None):
        self.lex = lexicon or load_lexicon()
        self.cases: dict[str, dict[str, Any]] = {}
        for eid, name, attrs in g.conn.execute("SELECT id, name, attributes FROM entities WHERE type='case' ORDER BY rowid"):
            a = json.loads(attrs or "{}")
            self.cases[eid] = {"id": eid, "name": name, **{k: a.get(k) for k in ("case_id", "age_group", "sex", "age", "history", "diagnosis")}}

    @classmethod
    def of(cls, g: Graph, lexicon: Lexicon | None = None) -> "PatientIndex":
        key = (*g.state_key(), id(lexicon))
        with _LOCK:
            if key not in _INDEX:
                for k in [k for k in _INDEX if k[0] == key[0]]:
                    del _INDEX[k]
                _INDEX[key] = cls(g, lexicon)
            return _INDEX[key]

    def _wanted(self, age_group: str | None, sex: str | None, history: list[str] | str | None) -> tuple[str | None, str | None, list[str]]:
        group = self.lex.age_group_key(age_group) or (norm_key(age_group) if age_group else None)
        want_sex = self.lex.sex_key(sex) if sex else None
        if sex and want_sex is None:
            raise BencaoError(f"sex {sex!r}: not a sex the case lexicon knows (男/女, M/F, male/female)")
        hist = [norm_key(h) for h in ([history] if isinstance(history, str) else list(history or [])) if norm_key(h)]
        return group, want_sex, hist

    def matches(self, case_id: str, age_group: str | None = None, sex: str | None = None,
                history: list[str] | str | None = None) -> tuple[list[str], int]:
        """(attributes of the case that match, attributes asked): age_group, sex and each history term."""
        group, want_sex, hist = self._wanted(age_group, sex, history)
        c = self.cases.get(case_id) or {}
        got = []
        if group and norm_key(str(c.get("age_group") or "")) == group:
            got.append("age_group")
        if want_sex and c.get("sex") == want_sex:
            got.append("sex")
        got += [f"history:{h}" for h in hist if any(h in norm_key(x) for x in c.get("history") or [])]
        return got, bool(group) + bool(want_sex) + len(hist)

    def filter(self, age_group: str | None = None, sex: str | None = None, history: list[str] | str | None = None,
               among: list[str] | None = None) -> list[str]:
        """Case ids matching every given attribute (all cases, or those ``among``); a history term
        matches a recorded item that contains it (高血压 ⊂ 原发性高血压)."""
        self._wanted(age_group, sex, history)  # refuses an unknown sex word
        out = []
        for cid in (among if among is not None else list(self.cases)):
            got, asked = self.matches(cid, age_group, sex, history)
            if cid in self.cases and len(got) == asked:
                out.append(cid)
        return out


# --------------------------------------------------------------------------- the tree


@dataclass
class TreeClass:
    id: str
    name: str
    keywords: list[str]
    children: list["TreeClass"] = dc_field(default_factory=list)
    code: str | None = None

    def texts(self, deep: bool = False) -> list[str]:
        """Strings that stand for the class: its name and keywords (and, ``deep``, its children's)."""
        out = [self.name, *self.keywords]
        if deep:
            for c in self.children:
                out += c.texts()
        return out

    def embed_text(self, deep: bool = False) -> str:
        return "；".join(dict.fromkeys(self.texts(deep)))


def tree_documents(g: Graph) -> list[dict[str, Any]]:
    ids = [r[0] for r in g.conn.execute("SELECT id FROM documents WHERE format='disease-tree' ORDER BY rowid")]
    return [d for d in (g.get_document(i) for i in ids) if d]


def disease_tree(g: Graph, which: str | None = None) -> tuple[dict[str, Any], list[TreeClass]] | None:
    """(document, first-level classes) of the chosen disease tree; None when the graph has none."""
    docs = tree_documents(g)
    if which:
        docs = [d for d in docs if which in (d["id"], d["title"], d["source"], (d.get("meta") or {}).get("tree"))]
        if not docs:
            raise BencaoError(f"no disease tree {which!r} in {g.dir}; add one with `bencao graph add --format disease-tree FILE`")
    if not docs:
        return None
    doc = docs[-1]
    rows = g.conn.execute("SELECT e.id, e.name, e.attributes FROM entity_sources es JOIN entities e ON e.id = es.entity_id "
                          "WHERE es.document_id=? AND e.type='disease_class' ORDER BY e.rowid", (doc["id"],)).fetchall()
    classes = {eid: (name, json.loads(a or "{}")) for eid, name, a in rows}
    nodes = {eid: TreeClass(eid, name, list(a.get("keywords") or []), code=a.get("code")) for eid, (name, a) in classes.items()}
    parent = {h: t for h, t in g.conn.execute(
        "SELECT t.head_id, t.tail_id FROM triples t JOIN triple_sources ts ON ts.triple_id = t.id WHERE ts.document_id=? AND t.relation='is_a'",
        (doc["id"],))}
    roots = []
    for eid, node in nodes.items():
        if eid in parent and parent[eid] in nodes:
            nodes[parent[eid]].children.append(node)
        elif classes[eid][1].get("level", 1) == 1:
            roots.append(node)
    return doc, roots


# --------------------------------------------------------------------------- similarity


def _grams(text: str) -> set[str]:
    k = norm_key(text).replace(" ", "")
    return {k} if len(k) < 2 else {k[i:i + 2] for i in range(len(k) - 1)}


def dice(a: str, b: str) -> float:
    ga, gb = _grams(a), _grams(b)
    return 2 * len(ga & gb) / (len(ga) + len(gb)) if ga and gb else 0.0


class Similarity:
    """sim(entity text, class/target) for the Σ-cosine descent; ``mode`` says which was used."""

    def __init__(self, ix: Any, mode: str = "auto", texts: list[str] = ()):
        readable = ix is not None and all(ix.can_embed(t) for t in texts)
        if mode == "dense" and not readable:
            why = "no index/embedder" if ix is None else f"the embedder ({ix.cfg.embedder.model}, languages {ix.cfg.embedder.languages}) cannot read every text"
            raise BencaoError(f"similarity=dense: {why}; use similarity=lexical or a multilingual embedder (configs/retrieval/multilingual.yaml)")
        self.ix = ix
        self.mode = "dense" if mode == "dense" or (mode == "auto" and readable) else "lexical"
        self._vecs: dict[str, np.ndarray] = {}

    def _embed(self, texts: list[str]) -> None:
        todo = [t for t in dict.fromkeys(texts) if t not in self._vecs]
        if todo:
            for t, v in zip(todo, embed_cached(self.ix, todo)):
                self._vecs[t] = v / (np.linalg.norm(v) or 1.0)

    def matrix(self, queries: list[str], targets: list[list[str]], target_text: list[str]) -> np.ndarray:
        """(len(queries), len(targets)): dense cosine to ``target_text[j]``, or the best Dice over ``targets[j]``."""
        if not queries or not targets:
            return np.zeros((len(queries), len(targets)))
        if self.mode == "dense":
            self._embed(queries + target_text)
            q = np.stack([self._vecs[t] for t in queries])
            t = np.stack([self._vecs[t] for t in target_text])
            return q @ t.T
        return np.array([[max(dice(qq, s) for s in strs) if strs else 0.0 for strs in targets] for qq in queries])


def embed_cached(ix: Any, texts: list[str]) -> np.ndarray:
    """Vectors of ``texts`` through the index's embedding cache (the graph's ``cache.sqlite`` and the
    per-user shared cache): what `graph index` already embedded is read back, new texts are kept."""
    from bencao.retrieval.index.embedder import EmbeddingCache, embed_with_cache, shared_cache_path, vector_fingerprint

    emb = ix.embedder()
    cache = EmbeddingCache(ix.dense_dir / "cache.sqlite", emb.dim, vector_fingerprint(ix.cfg.embedder),
                           shared=shared_cache_path(ix.embedder_id) if ix.cfg.shared_cache else None)
    try:
        vecs, _ = embed_with_cache(emb, cache, texts)
    finally:
        cache.close()
    return vecs


def descend(sim: Similarity, queries: list[str], roots: list[TreeClass], beam: int = 1) -> list[list[tuple[TreeClass, float]]]:
    """Level by level, the ``beam`` classes with the highest Σ_q sim(q, class): [[(class, score)] per level]."""
    levels: list[list[tuple[TreeClass, float]]] = []
    frontier = roots
    deep = True
    while frontier:
        m = sim.matrix(queries, [c.texts(deep) for c in frontier], [c.embed_text(deep) for c in frontier])
        scores = m.sum(axis=0) if len(queries) else np.zeros(len(frontier))
        order = sorted(range(len(frontier)), key=lambda j: (-scores[j], frontier[j].name))[:max(1, beam)]
        kept = [(frontier[j], round(float(scores[j]), 6)) for j in order if scores[j] > 0]
        if not kept:
            break
        levels.append(kept)
        frontier = [ch for c, _ in kept for ch in c.children]
        deep = False
    return levels


# --------------------------------------------------------------------------- classification


def _case_disease_names(g: Graph, case_ids: list[str]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {c: [] for c in case_ids}
    for i in range(0, len(case_ids), 400):
        chunk = case_ids[i:i + 400]
        q = ",".join("?" * len(chunk))
        for h, name in g.conn.execute(f"SELECT t.head_id, x.name FROM triples t JOIN entities x ON x.id = t.tail_id "
                                      f"WHERE t.relation IN ('presents', 'diagnosed_as') AND t.head_id IN ({q}) ORDER BY t.rowid", chunk):
            if name not in out[h]:
                out[h].append(name)
    empty = [c for c, ns in out.items() if not ns]
    clauses = _complaint_clauses(g, empty)
    for c in empty:  # nothing recognised: the complaint's clauses stand in for disease names
        out[c] = clauses.get(c, [])
    return out


def _complaint_clauses(g: Graph, case_ids: list[str]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for i in range(0, len(case_ids), 400):
        chunk = case_ids[i:i + 400]
        q = ",".join("?" * len(chunk))
        for eid, text in g.conn.execute(f"SELECT id, json_extract(attributes, '$.complaint') FROM entities WHERE id IN ({q})", chunk):
            out[eid] = [c.strip() for c in re.split(r"[、，,；;。.!?！？\n]", text or "") if len(c.strip()) >= 2][:20]
    return out


def _leaf_by_name(roots: list[TreeClass]) -> dict[str, tuple[TreeClass, TreeClass]]:
    out = {}
    for r in roots:
        for leaf in r.children:
            for t in leaf.texts():
                out.setdefault(norm_key(t), (r, leaf))
    return out


def _llm_leaf(llm: Callable[[str], str], name: str, diseases: list[str], roots: list[TreeClass]) -> tuple[TreeClass, TreeClass] | None:
    leaves = [(r, leaf) for r in roots for leaf in r.children]
    listing = "\n".join(f"{i}. {r.name} / {leaf.name}" for i, (r, leaf) in enumerate(leaves))
    prompt = ("把下面的病例归入疾病分类树中的一个二级类别。只输出 JSON：{\"choice\": 序号}。\n"
              f"病例：{name}\n疾病信息：{'、'.join(diseases) or '（无）'}\n类别：\n{listing}")
    from bencao.llm.structured import StructuredError, parse_json

    try:
        obj = parse_json(llm(prompt))
        idx = int(obj.get("choice", -1)) if isinstance(obj, dict) else -1
    except (StructuredError, ValueError, TypeError):
        return None
    return leaves[idx] if 0 <= idx < len(leaves) else None


def classify_cases(g: Graph, ix: Any, cfg: CasesConfig | None = None, *, llm: Callable[[str], str] | None = None,
                   dry_run: bool = False, progress: Callable[[int, int], None] | None = None) -> dict[str, Any]:
    """File each case under one leaf of the disease tree; one derived document (see the module docstring)."""
    cfg = cfg or CasesConfig()
    found = disease_tree(g, cfg.tree)
    if found is None:
        raise BencaoError(f"{g.dir}: no disease tree; add one first: `bencao graph add --graph {g.dir} --format disease-tree TREE.yaml`")
    tree_doc, roots = found
    if not any(r.children for r in roots):
        raise BencaoError(f"disease tree {tree_doc['title']!r} has no second-level classes to file cases under")
    cases = list(PatientIndex.of(g).cases)
    if not cases:
        raise BencaoError(f"{g.dir}: no case entities; add consultation records with `bencao graph add --format cases-jsonl FILE`")
    names = _case_disease_names(g, cases)
    index = PatientIndex.of(g)
    all_texts = [t for ns in names.values() for t in ns] + [c.embed_text(deep) for r in roots for c, deep in [(r, True), *((ch, False) for ch in r.children)]]
    sim = Similarity(ix, cfg.similarity, all_texts)
    by_name = _leaf_by_name(roots)
    results: list[dict[str, Any]] = []
    for i, cid in enumerate(cases):
        if progress:
            progress(i, len(cases))
        diag = norm_key(str(index.cases[cid].get("diagnosis") or ""))
        method, path = None, None
        if diag and diag in by_name:
            r, leaf = by_name[diag]
            path, method = [(r, 1.0), (leaf, 1.0)], "diagnosis"
        elif llm is not None:
            pick = _llm_leaf(llm, index.cases[cid]["name"], names[cid], roots)
            if pick:
                path, method = [(pick[0], 1.0), (pick[1], 1.0)], "llm"
        if path is None:
            levels = descend(sim, names[cid], roots, beam=1)
            if len(levels) < 2:  # the recognised names match no class: the complaint's own clauses too
                levels = descend(sim, names[cid] + _complaint_clauses(g, [cid]).get(cid, []), roots, beam=1)
            if len(levels) == 2:
                path, method = [levels[0][0], levels[1][0]], sim.mode
        if path is None:
            results.append({"case": cid, "leaf": None, "reason": "no disease information matches any class"})
            continue
        results.append({"case": cid, "level1": path[0][0], "leaf": path[1][0], "score1": path[0][1], "score2": path[1][1], "method": method,
                        "n_entities": len(names[cid])})
    filed = [r for r in results if r["leaf"] is not None]
    report = {"tree": tree_doc["title"], "tree_document": tree_doc["id"], "cases": len(cases), "classified": len(filed),
              "unclassified": [r["case"] for r in results if r["leaf"] is None], "similarity": sim.mode,
              "by_method": {m: sum(1 for r in filed if r["method"] == m) for m in sorted({r["method"] for r in filed})},
              "by_leaf": {}, "document": None}
    for r in filed:
        key = f"{r['level1'].name} / {r['leaf'].name}"
        report["by_leaf"][key] = report["by_leaf"].get(key, 0) + 1
    if dry_run or not filed:
        return report
    key = content_hash(tree_doc["id"], json.dumps([(r["case"], r["leaf"].id, r["method"]) for r in filed]))
    b = g.builder(source=f"case classification ({tree_doc['title']})", kind="derived", format=CLASSIFICATION_FORMAT, content_key=key,
                  title=f"{len(filed)} cases filed under {tree_doc['title']}", meta={"tree_document": tree_doc["id"], "similarity": sim.mode,
                                                                                     "config": {k: v for k, v in asdict(cfg).items() if k != "llm"}})
    b.relation("classified_as", "the case is filed under the disease class", "case", "disease_class")
    ents = g.get_entities({r["case"] for r in filed} | {r["leaf"].id for r in filed})
    for r in filed:
        c, leaf = ents[r["case"]], ents[r["leaf"].id]
        top = r["score2"] if r["method"] in ("diagnosis", "llm") else min(1.0, r["score2"] / max(1, r["n_entities"]))
        b.triple(b.entity(c["name"], c["type"], id=c["id"], layer=c["layer"]), "classified_as",
                 b.entity(leaf["name"], leaf["type"], id=leaf["id"], layer=leaf["layer"]), confidence=round(max(0.0, top), 6),
                 layer="book", origin=f"classify:{r['method']}", kind="inferred",
                 attributes={"level1": r["level1"].name, "level2": r["leaf"].name, "score1": r["score1"], "score2": r["score2"], "method": r["method"]})
    old = [r[0] for r in g.conn.execute("SELECT id FROM documents WHERE format=?", (CLASSIFICATION_FORMAT,))]
    for doc_id in old:
        if doc_id != b.document_id:
            g.remove_document(doc_id)
    added = g.commit(b)
    report["document"] = b.document_id
    report["replaced"] = [d for d in old if d != b.document_id]
    report["added"] = added
    g.write_manifest("classify-cases", {"document": b.document_id, "classified": len(filed), "tree": tree_doc["id"]})
    return report


def classified_cases(g: Graph) -> dict[str, list[tuple[str, float]]]:
    """leaf class id → [(case id, confidence)] from the current classification."""
    out: dict[str, list[tuple[str, float]]] = {}
    for h, t, conf in g.conn.execute("SELECT head_id, tail_id, confidence FROM triples WHERE relation='classified_as' ORDER BY rowid"):
        out.setdefault(t, []).append((h, conf))
    return out
