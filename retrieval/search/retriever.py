"""The ``Retriever``: question (+ query triples, + answer options) → ``Evidence``, in named stages.

    r = Retriever.from_config("graphs/sample")                 # configs/retrieval/default.yaml values
    ev = r.retrieve("山药有什么功效？")
    ev = r.retrieve("Is almond a nut?", query_triples=[("almond", "is_a", "nut")])

Stages (each optional by config): mentions → entity linking (+ dense entities) → cross-layer links
→ micro (triples → snippets) → macro (snippets, sections) → reasoning paths with PageRank →
therapy retrieval through the section tree → assembly under the token budget.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from bencao.errors import BencaoError
from bencao.retrieval.evidence import Evidence
from bencao.retrieval.graph.store import Graph
from bencao.retrieval.index.build import Indexes
from bencao.retrieval.linking import EntityLinker
from bencao.retrieval.search.config import RetrievalConfig, load_retrieval_config
from bencao.retrieval.search.layers import case_therapy, cross_layer, therapy_retrieve
from bencao.retrieval.search.macro import macro_retrieve
from bencao.retrieval.search.mentions import extract_mentions
from bencao.retrieval.search.micro import micro_retrieve
from bencao.retrieval.search.paths import top_paths

MAX_QUESTION_CHARS = 4000


class Retriever:
    def __init__(self, graph: Graph, config: RetrievalConfig | None = None, *, llm: Callable[[str], str] | None = None,
                 indexes: Indexes | None = None):
        self.g = graph
        self.cfg = config or RetrievalConfig()
        self.llm = llm
        if indexes is None and ((graph.dir / "lexical").exists() or (graph.dir / "index").exists()):
            indexes = Indexes(graph, self.cfg.index)
        self.ix = indexes
        self.linker = EntityLinker(graph, self.cfg.linking, indexes=indexes, llm=llm)

    @classmethod
    def from_config(cls, graph: "str | Path | Graph", config_path: str | Path | None = None, overrides: list[str] | tuple[str, ...] = (),
                    llm: Callable[[str], str] | None = None) -> "Retriever":
        g = graph if isinstance(graph, Graph) else Graph.open(graph)
        return cls(g, load_retrieval_config(config_path, overrides), llm=llm)

    # ------------------------------------------------------------------ stages
    def mentions(self, text: str) -> list[str]:
        q = self.cfg.question
        return extract_mentions(self.g, text, self.linker.tables.base, max_ngram=q.max_ngram, min_cjk_chars=q.min_cjk_chars,
                                stopwords=frozenset(q.stopwords), limit=q.max_mentions)

    def link_entities(self, question: str, options: list[str]) -> list[dict[str, Any]]:
        ents: dict[str, dict[str, Any]] = {}

        def add(link: Any, role: str) -> None:
            if link.abstained or link.chosen_id is None:
                return
            if link.chosen_id in ents:
                if role not in ents[link.chosen_id]["roles"]:
                    ents[link.chosen_id]["roles"].append(role)
                return
            ents[link.chosen_id] = {"id": link.chosen_id, "mention": link.mention, "confidence": link.confidence,
                                    "rationale": link.rationale, "score": link.confidence, "via": ["linking"], "roles": [role]}

        for m in self.mentions(question):
            add(self.linker.link(m), "question")
        for i, opt in enumerate(options):
            if not opt.strip():
                continue
            ms = self.mentions(opt) or ([opt.strip()] if len(opt) <= self.cfg.linking.max_mention_chars else [])
            for m in ms[:3]:
                add(self.linker.link(m), f"option:{i}")
        q = self.cfg.question
        if self.ix is not None and q.dense_entities:
            for eid, cos in self.ix.dense_search("entities", question, q.dense_entities):
                if cos >= q.min_dense and eid not in ents:
                    ents[eid] = {"id": eid, "mention": None, "confidence": round(cos, 4), "rationale": f"dense match to the question (cosine {cos:.2f})",
                                 "score": round(cos, 4), "via": ["dense"], "roles": ["question"]}
        if self.cfg.layers.enabled:
            for x in cross_layer(self.g, list(ents)):
                src = ents[x["from"]]
                ents[x["id"]] = {"id": x["id"], "mention": src.get("mention"), "confidence": round(src["confidence"] * x["score"], 4),
                                 "rationale": f"{x['kind']} link from {x['from']} (score {x['score']:.2f})",
                                 "score": round(src["score"] * x["score"], 4), "via": ["layer-link"], "roles": list(src["roles"])}
        info = self.g.get_entities(ents)
        for eid, e in ents.items():
            row = info.get(eid) or {}
            e.update({"name": row.get("name"), "type": row.get("type"), "layer": row.get("layer"),
                      "description": row.get("description"), "attributes": row.get("attributes") or {}})
        return list(ents.values())

    # ------------------------------------------------------------------ main
    def retrieve(self, question: str, query_triples: list[tuple[str, str, str]] | None = None,
                 options: list[str] | None = None) -> Evidence:
        if not isinstance(question, str) or not question.strip():
            raise BencaoError("question is empty")
        if len(question) > MAX_QUESTION_CHARS:
            raise BencaoError(f"question is {len(question):,} characters, over the {MAX_QUESTION_CHARS:,}-character limit")
        question = question.strip()
        options = [str(o) for o in (options or [])]
        cfg = self.cfg
        ev = Evidence(question=question)
        ev.entities = self.link_entities(question, options)
        linked = [e["id"] for e in ev.entities]
        snippets: dict[str, dict[str, Any]] = {}
        triples: dict[str, dict[str, Any]] = {}

        def merge_snippets(items: list[dict[str, Any]]) -> None:
            for s in items:
                cur = snippets.get(s["id"])
                if cur is None:
                    snippets[s["id"]] = s
                else:
                    for k, v in s["scores"].items():
                        cur["scores"][k] = max(cur["scores"].get(k, 0.0), v)
                    cur["via"] = list(dict.fromkeys(cur["via"] + s["via"]))

        if cfg.micro.enabled:
            queries = [" ".join(map(str, t)) for t in (query_triples or [])] or [question]
            tr, sn = micro_retrieve(self.g, self.ix, queries, linked, k_triples=cfg.micro.k_triples,
                                    anchored_triples=cfg.micro.anchored_triples, snippets_per_triple=cfg.micro.snippets_per_triple)
            triples.update({t["id"]: t for t in tr})
            merge_snippets(sn)
        if cfg.macro.enabled:
            merge_snippets(macro_retrieve(self.g, self.ix, question, k_snippets=cfg.macro.k_snippets, k_sections=cfg.macro.k_sections,
                                          k_each=cfg.macro.k_each, rrf_k=cfg.macro.rrf_k))
        if cfg.paths.enabled and linked:
            p = cfg.paths
            paths = top_paths(self.g, linked[:8], max_hops=p.max_hops, n_patterns=p.n_patterns, max_paths=p.max_paths,
                              neighbour_limit=p.neighbour_limit, damping=p.damping, top_k=p.top_k)
            names = self.g.get_entities({e for x in paths for e in x.entities})
            path_triples = self.g.get_triples({t for x in paths for t in x.triple_ids})
            for x in paths:
                nm = [names.get(e, {}).get("name", e) for e in x.entities]
                text = nm[0] + "".join(f" —{s}→ {n}" for s, n in zip(x.steps, nm[1:]))
                ev.paths.append({"entities": x.entities, "names": nm, "relations": x.steps, "triple_ids": x.triple_ids,
                                 "confidences": x.confidences, "confidence_product": round(x.confidence_product, 6),
                                 "pagerank": round(x.pagerank, 6), "score": round(x.score, 8), "connects": x.connects, "text": text})
                for tid in x.triple_ids:
                    if tid in triples:
                        if "path" not in triples[tid]["via"]:
                            triples[tid]["via"].append("path")
                    elif tid in path_triples:
                        t = dict(path_triples[tid], score=round(x.score, 8), via=["path"], snippet_ids=[])
                        triples[tid] = t
        if cfg.layers.enabled and cfg.layers.therapy:
            merge_snippets(therapy_retrieve(self.g, self.ix, question, beam=cfg.layers.beam, n_snippets=cfg.layers.therapy_snippets))
            merge_snippets(case_therapy(self.g, self.ix, question).snippets())  # MLKG case layer: disease tree → leaf's cases (patient-filtered)
        for s in snippets.values():
            s["score"] = round(sum(s["scores"].values()), 6)
        ev.snippets = sorted(snippets.values(), key=lambda s: -s["score"])
        ev.triples = sorted(triples.values(), key=lambda t: (-(t.get("score") or 0.0), -t["confidence"]))
        for t in ev.triples:
            if not t.get("attributes"):
                t.pop("attributes", None)
        ev.stats = {"mentions": [e["mention"] for e in ev.entities if e.get("mention")], "linked": len(ev.entities),
                    "candidates": {"triples": len(ev.triples), "paths": len(ev.paths), "snippets": len(ev.snippets)}}
        ev.trim(cfg.evidence.token_budget, cfg.evidence.max_entities, cfg.evidence.max_triples)
        return ev
