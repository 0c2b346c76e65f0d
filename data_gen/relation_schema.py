"""Yaoshi-RAG relation-schema selection: candidate relations from a sample of snippets → keep/merge → the set.

1. ``relation_candidates``: the teacher proposes the relations each sampled snippet needs;
   proposals are pooled by matching key (``norm_key``) and counted;
2. ``relation_merge``: the teacher keeps, merges (``merged_from``) and drops candidates, at most
   ``max_relations``, seeing the graph's existing relations so it can reuse their names;
3. the result is a :class:`RelationSet` saved as ``<output>/relations.json`` and reused on resume.

When the merge reply is unusable (not JSON, wrong shape, even after the repair) the most frequent
candidates are kept (``selection: candidate_counts``); when no candidate at all is usable the
graph's own most used relations are taken (``selection: graph``, not saved, so the next run asks
again). A teacher that cannot be reached at all stops the run with a one-line error instead of
freezing a fallback set.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bencao.data_gen.templates import render
from bencao.errors import BencaoError
from bencao.io import atomic_write_json, content_hash
from bencao.llm.base import LLMClient
from bencao.llm.structured import complete_json_many
from bencao.text import lang_of, norm_key

_REL_ITEM = {"type": "object", "required": ["name"],
             "properties": {"name": {"type": "string", "minLength": 1, "maxLength": 40}, "description": {"type": "string"},
                            "head_type": {"type": "string"}, "tail_type": {"type": "string"},
                            "merged_from": {"type": "array", "items": {"type": "string"}}}}
RELATIONS_SCHEMA = {"type": "object", "required": ["relations"], "properties": {"relations": {"type": "array", "items": _REL_ITEM}}}

FILE_NAME = "relations.json"
#: Relations that structure the ontology/catalogue rather than state book knowledge: never a fallback.
_NOT_FALLBACK = ("is_a", "listed_in", "variant_of")


@dataclass
class RelationSet:
    relations: list[dict[str, Any]]  # {name, description, head_type, tail_type, merged_from}
    selection: str  # teacher | candidate_counts | graph | fixed
    candidates: list[dict[str, Any]] = field(default_factory=list)
    sample: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def names(self) -> list[str]:
        return [r["name"] for r in self.relations]

    @property
    def key(self) -> str:
        """Hash of the relation names: per-snippet results are tied to the set they were made with."""
        return content_hash(*sorted(self.names), length=10)

    def canonical(self) -> dict[str, str]:
        """Matching key of every accepted spelling (names and the names merged into them) → the name."""
        out: dict[str, str] = {}
        for r in self.relations:
            for alias in [r["name"], *r.get("merged_from", [])]:
                out.setdefault(norm_key(alias), r["name"])
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"selection": self.selection, "key": self.key, "relations": self.relations, "candidates": self.candidates,
                "sample": self.sample, "notes": self.notes}

    def save(self, out: Path) -> None:
        atomic_write_json(Path(out) / FILE_NAME, self.to_dict())

    @classmethod
    def load(cls, out: Path) -> "RelationSet | None":
        path = Path(out) / FILE_NAME
        if not path.exists():
            return None
        try:
            d = json.loads(path.read_text(encoding="utf-8"))
            rels = [_clean_relation(r) for r in d["relations"]]
        except (json.JSONDecodeError, KeyError, TypeError, AttributeError) as exc:
            raise BencaoError(f"{path}: not a relation set ({exc}); delete it to select the relations again") from None
        if not rels:
            raise BencaoError(f"{path}: the relation set is empty; delete it to select the relations again")
        return cls(rels, d.get("selection", "teacher"), d.get("candidates", []), d.get("sample", []), d.get("notes", []))


def _clean_relation(r: dict[str, Any]) -> dict[str, Any]:
    name = " ".join(str(r["name"]).split())
    return {"name": name, "description": str(r.get("description") or "").strip(), "head_type": str(r.get("head_type") or "").strip(),
            "tail_type": str(r.get("tail_type") or "").strip(),
            "merged_from": [m for m in dict.fromkeys(" ".join(str(x).split()) for x in r.get("merged_from") or []) if m and m != name]}


def _dedupe(rels: list[dict[str, Any]], limit: int) -> list[dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for r in rels:
        r = _clean_relation(r)
        if not r["name"]:
            continue
        k = norm_key(r["name"])
        if k in out:
            out[k]["merged_from"] = list(dict.fromkeys(out[k]["merged_from"] + r["merged_from"]))
        else:
            out[k] = r
    return list(out.values())[:limit]


def fixed_relations(names: list[str], graph: Any) -> RelationSet:
    """A relation set given by name; descriptions and types come from the graph's relation table when it has them."""
    known = {r["name"]: r for r in graph.relations()}
    return RelationSet(_dedupe([{**known.get(n, {}), "name": n} for n in names], len(names)), "fixed")


def graph_relations(graph: Any, limit: int) -> list[dict[str, Any]]:
    """The graph's most used relations from its sources (not from teacher output, so a rerun sees the same
    list; ontology structure excluded), with their stored descriptions."""
    rows = graph.conn.execute(
        "SELECT relation, COUNT(*) AS n FROM triples WHERE origin NOT LIKE 'llm:%' AND origin NOT LIKE 'cot:%' AND layer != 'personal' "
        "GROUP BY relation ORDER BY n DESC, relation").fetchall()
    desc = {r["name"]: r for r in graph.relations()}
    names = [r[0] for r in rows if r[0] not in _NOT_FALLBACK][:limit]
    return [_clean_relation({"name": n, **{k: desc.get(n, {}).get(k) for k in ("description", "head_type", "tail_type")}}) for n in names]


def select_relations(snippets: list[dict[str, Any]], graph: Any, candidates_client: LLMClient, merge_client: LLMClient, *,
                     sample_size: int, max_relations: int, max_candidates: int, max_chars: int, seed: int,
                     use_existing: bool = True, prompts_dir: str | None = None) -> tuple[RelationSet, dict[str, int]]:
    """Run the two teacher steps; returns the set and the skip reasons of unusable replies."""
    rng = random.Random(seed)
    sample = sorted(rng.sample(range(len(snippets)), min(sample_size, len(snippets))))
    picked = [snippets[i] for i in sample]
    langs = Counter(lang_of(s["text"]) for s in picked)
    lang = langs.most_common(1)[0][0] if langs else "zh"
    batch = [render("relation_candidates", lang_of(s["text"]), prompts_dir, path=" / ".join(s["path"]), text=s["text"][:max_chars])
             for s in picked]
    skipped: Counter[str] = Counter()
    pooled: dict[str, dict[str, Any]] = {}
    for res in complete_json_many(candidates_client, batch, RELATIONS_SCHEMA, lang=lang):
        if not res.ok:
            skipped[f"relation_candidates_{res.kind}"] += 1
            continue
        for r in res.value["relations"]:
            r = _clean_relation(r)
            k = norm_key(r["name"])
            if not k:
                continue
            if k in pooled:
                pooled[k]["count"] += 1
            else:
                pooled[k] = {**r, "count": 1}
    cands = sorted(pooled.values(), key=lambda r: -r["count"])[:max_candidates]
    sample_ids = [s["id"] for s in picked]
    if not cands and skipped and set(skipped) == {"relation_candidates_llm_error"}:
        raise BencaoError(f"extract: the teacher failed on all {len(picked)} schema-selection requests ({dict(skipped)}); "
                          "check llm.base_url / llm.model and the ledger, then run again")
    if not cands:
        rels = graph_relations(graph, max_relations)
        if not rels:
            raise BencaoError(f"extract: no usable relation candidate from {len(picked)} sampled snippets ({dict(skipped)}) "
                              "and the graph has no relations to fall back on; check the teacher (ledger.json)")
        return RelationSet(rels, "graph", [], sample_ids, [f"no usable candidate ({dict(skipped)}): the graph's relations are used"]), dict(skipped)
    existing = [r["name"] for r in graph_relations(graph, 50)] if use_existing else []
    msgs = render("relation_merge", lang, prompts_dir, candidates=cands, existing=existing, max_relations=max_relations)
    res = complete_json_many(merge_client, [msgs], RELATIONS_SCHEMA, lang=lang)[0]
    notes: list[str] = []
    if res.kind == "llm_error":
        raise BencaoError(f"extract: the relation merge request failed ({res.error}); run again to retry (answers so far are cached)")
    rels = _dedupe(res.value["relations"], max_relations) if res.ok else []
    if rels:
        selection = "teacher"
    else:
        if not res.ok:
            skipped[f"relation_merge_{res.kind}"] += 1
        notes.append(f"merge unusable ({res.error or 'no relation kept'}): the most frequent candidates are kept")
        rels, selection = _dedupe(cands, max_relations), "candidate_counts"
    return RelationSet(rels, selection, cands, sample_ids, notes), dict(skipped)
