"""The ``Retriever``: question (+ query triples, mentions, planned paths, options) → ``Evidence``, in named stages.

    r = Retriever.from_config("graphs/sample")                 # configs/retrieval/default.yaml values
    ev = r.retrieve("山药有什么功效？")
    ev = r.retrieve("Is almond a nut?", query_triples=[("almond", "is_a", "nut")])

The answering pipeline (``bencao.serving.pipeline``) is its caller: it runs the LLM stages that
understand the question (typed mentions, CoT query triples, planned relation paths) and hands
their output in as arguments. With none of them the retriever works from the question alone.

Stages (each optional by config): mentions (dictionary matching, plus the ones given) → entity
linking (+ dense entities, + a book's entry known by the same name) → cross-layer links → micro (query
triples → triples → snippets, chosen layers first; the asked entities' own entries by heading) → macro (snippets, sections) → reasoning paths with PageRank (mined and/or planned
relation sequences, hubs never in the middle) → entities the paths reach, with their attributes →
therapy retrieval through the section tree → assembly under the token budget.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from bencao.deadline import check_deadline
from bencao.errors import BencaoError
from bencao.retrieval.evidence import Evidence, LinkedEntity, PathHit, SnippetHit, TripleHit, attribute_sources
from bencao.retrieval.graph.store import Graph
from bencao.retrieval.index.build import Indexes
from bencao.retrieval.linking import EntityLinker, LinkerLLMs, LinkResult
from bencao.retrieval.search.config import RetrievalConfig, load_retrieval_config
from bencao.retrieval.search.entries import entry_snippets
from bencao.retrieval.search.keywords import link_keyword
from bencao.retrieval.search.layers import case_therapy, cross_layer, therapy_retrieve
from bencao.retrieval.search.macro import first_stage, macro_retrieve, option_retrieve
from bencao.retrieval.search.mentions import extract_mentions
from bencao.retrieval.search.micro import micro_retrieve
from bencao.retrieval.search.paths import top_paths
from bencao.retrieval.search.rerank import rerank_snippets
from bencao.text import norm_key

MAX_QUESTION_CHARS = 4000
#: Per-index raw scores a snippet carries beside its strategies' fused scores (different scales: never summed).
RAW_SCORES = frozenset({"bm25", "dense", "rerank"})


@dataclass
class Mention:
    """A span of the question that names something, with what the question-understanding stage says of it."""

    text: str
    type: str | None = None  # e.g. symptom, food, herb, disease (free text from the LLM)
    role: str = "question"  # question | patient | disease
    verbatim: bool = True  # written so in the question; False: the LLM's name for what the question says (脾虚证 for 脾胃虚弱)


class Retriever:
    def __init__(self, graph: Graph, config: RetrievalConfig | None = None, *, indexes: Indexes | None = None,
                 llms: LinkerLLMs | None = None):
        self.g = graph
        self.cfg = config or RetrievalConfig()
        if indexes is None and ((graph.dir / "lexical").exists() or (graph.dir / "index").exists() or graph.read_manifest().get("indexes")):
            indexes = Indexes(graph, self.cfg.index)
        self.ix = indexes
        self.linker = EntityLinker(graph, self.cfg.linking, indexes=indexes, llms=llms)

    @classmethod
    def from_config(cls, graph: "str | Path | Graph", config_path: str | Path | None = None,
                    overrides: list[str] | tuple[str, ...] = ()) -> "Retriever":
        g = graph if isinstance(graph, Graph) else Graph.open(graph)
        return cls(g, load_retrieval_config(config_path, overrides))

    # ------------------------------------------------------------------ stages
    def mentions(self, text: str) -> list[str]:
        """Dictionary mentions: longest alias-table matches (no LLM)."""
        q = self.cfg.question
        return extract_mentions(self.g, text, self.linker.tables.base, max_ngram=q.max_ngram, min_cjk_chars=q.min_cjk_chars,
                                stopwords=frozenset(q.stopwords), limit=q.max_mentions)

    def link(self, mention: str, context: str | None = None) -> LinkResult:
        return self.linker.link(mention, context)

    def link_entities(self, question: str, options: list[str], mentions: list[Mention] | None = None,
                      dictionary: bool = True, keywords: list[str] | None = None) -> list[LinkedEntity]:
        """Linked entities of the question: the understanding stage's mentions (verbatim or not), the
        dictionary's, the understanding stage's keywords (Yaoshi-RAG: top candidates → selector), the
        options', dense matches of the question, then cross-layer links."""
        ents: dict[str, LinkedEntity] = {}

        def add(link: LinkResult, role: str, via: str, mtype: str | None = None, verbatim: bool = True) -> None:
            if link.abstained or link.chosen_id is None:
                return
            cur = ents.get(link.chosen_id)
            if cur is not None:
                if role not in cur.roles:
                    cur.roles.append(role)
                if via not in cur.via:
                    cur.via.append(via)
                return
            detail = {k: v for k, v in (("selector_rationale", link.selector_rationale), ("scorer_rationale", link.scorer_rationale),
                                        ("synonyms", link.synonyms or None), ("first_pass", link.first_pass), ("retried", link.retried),
                                        ("alternatives", link.alternatives or None),
                                        ("mention_type", mtype)) if v}
            if not verbatim:
                detail["verbatim"] = False  # the understanding stage's name for it, not the question's words
            chosen = next((c for c in link.candidates if c["id"] == link.chosen_id and c.get("matched")), None)
            if chosen is not None:
                detail["matched"] = chosen["matched"]  # the alias the mention matched: {alias, kind, document, via}
            ents[link.chosen_id] = LinkedEntity(id=link.chosen_id, mention=link.mention, confidence=link.confidence,
                                                rationale=link.rationale, score=link.confidence, via=[via], roles=[role],
                                                link=detail or None)

        def same_name(link: LinkResult, role: str) -> None:
            """A book's own entry known by the name the mention matched (神农本草经's 署豫, 旧作薯蓣, beside the
            catalogue's 山药 that 食疗本草 calls 薯蓣) joins as the same thing: its facts are the same substance's."""
            if link.abstained or link.chosen_id is None:
                return
            others = [c for c in link.candidates if c.get("matched") and c["id"] != link.chosen_id and c["id"] not in ents
                      and c["tier"] in ("exact label", "exact synonym")]
            info = self.g.get_entities(c["id"] for c in others)
            chosen_type = (self.g.get_entity(link.chosen_id) or {}).get("type")
            for c in others[:3]:
                row = info.get(c["id"]) or {}
                if row.get("layer") != "book" or row.get("type") != chosen_type:
                    continue
                m = c["matched"]
                ents[c["id"]] = LinkedEntity(id=c["id"], mention=link.mention, confidence=round(link.confidence * 0.9, 4),
                                             rationale=f"same name: a book's entry known as {m['alias']!r} ({m['kind']}, {m['document']})",
                                             score=round(link.confidence * 0.9, 4), via=["same-name"], roles=[role])

        seen: set[str] = set()
        for m in mentions or []:
            if m.text.strip() and len(m.text) <= self.cfg.linking.max_mention_chars:
                seen.add(norm_key(m.text))
                add(self.linker.link(m.text, question), m.role, "understanding", m.type, m.verbatim)
        if dictionary:
            for m in self.mentions(question):
                if norm_key(m) not in seen:
                    seen.add(norm_key(m))
                    link = self.linker.link(m, question)
                    add(link, "question", "linking")
                    same_name(link, "question")
        q = self.cfg.question
        stop = {norm_key(w) for w in q.stopwords}
        n_kw = 0
        for kw in keywords or []:
            key = norm_key(kw)
            if not key or key in seen or key in stop or len(kw) > self.cfg.linking.max_mention_chars or n_kw >= q.max_keywords:
                continue
            check_deadline("linking the keywords")
            seen.add(key)
            n_kw += 1
            add(link_keyword(self.linker, kw, question, q.keyword_candidates), "question", "keyword")
        for i, opt in enumerate(options):
            check_deadline("linking the options")
            if not opt.strip():
                continue
            ms = self.mentions(opt) or ([opt.strip()] if len(opt) <= self.cfg.linking.max_mention_chars else [])
            for m in ms[:3]:
                add(self.linker.link(m, question), f"option:{i}", "linking")
        if self.ix is not None and q.dense_entities:
            for eid, cos in self.ix.dense_search("entities", question, q.dense_entities):
                if cos >= q.min_dense and eid not in ents:
                    ents[eid] = LinkedEntity(id=eid, confidence=round(cos, 4), rationale=f"dense match to the question (cosine {cos:.2f})",
                                             score=round(cos, 4), via=["dense"], roles=["question"])
        if self.cfg.layers.enabled:
            for x in cross_layer(self.g, list(ents)):
                src = ents[x["from"]]
                ents[x["id"]] = LinkedEntity(id=x["id"], mention=src.mention, confidence=round(src.confidence * x["score"], 4),
                                             rationale=f"{x['kind']} link from {x['from']} (score {x['score']:.2f})",
                                             score=round(src.score * x["score"], 4), via=["layer-link"], roles=list(src.roles))
        self._describe(list(ents.values()))
        return list(ents.values())

    def _describe(self, ents: list[LinkedEntity]) -> None:
        info = self.g.get_entities(e.id for e in ents)
        given = self.g.entity_sources_of(e.id for e in ents)
        for e in ents:
            row = info.get(e.id) or {}
            e.name, e.type, e.layer = row.get("name"), row.get("type"), row.get("layer")
            e.description, e.attributes = row.get("description"), row.get("attributes") or {}
            e.attribution = attribute_sources(given.get(e.id, []))  # who says which nature, flavour, ...

    def _paths(self, ev: Evidence, linked: list[str], triples: dict[str, TripleHit],
               planned: list[tuple[str, ...]] | None, planned_only: bool) -> None:
        p = self.cfg.paths
        paths = top_paths(self.g, linked[:8], max_hops=p.max_hops, n_patterns=p.n_patterns, max_paths=p.max_paths,
                          neighbour_limit=p.neighbour_limit, damping=p.damping, top_k=p.top_k, planned=planned,
                          planned_only=planned_only, hub_degree=p.hub_degree, hub_penalty=p.hub_penalty,
                          hub_endpoints=p.hub_endpoints)
        names = self.g.get_entities({e for x in paths for e in x.entities})
        path_triples = self.g.get_triples({t for x in paths for t in x.triple_ids})
        for x in paths:
            nm = [names.get(e, {}).get("name", e) for e in x.entities]
            text = nm[0] + "".join(f" —{s}→ {n}" for s, n in zip(x.steps, nm[1:]))
            ev.paths.append(PathHit(entities=x.entities, names=nm, relations=x.steps, triple_ids=x.triple_ids, confidences=x.confidences,
                                    confidence_product=round(x.confidence_product, 6), pagerank=round(x.pagerank, 6),
                                    score=round(x.score, 8), connects=x.connects, text=text,
                                    planned_by="llm" if x.extra.get("planned") else "mined"))
            for tid in x.triple_ids:
                if tid in triples:
                    if "path" not in triples[tid].via:
                        triples[tid].via.append("path")
                elif tid in path_triples:
                    triples[tid] = TripleHit.from_row(path_triples[tid], score=round(x.score, 8), via=["path"])
        # the foods, dishes and herbs the paths reach join the evidence with their attributes
        have = {e.id for e in ev.entities}
        reached: dict[str, LinkedEntity] = {}
        for x in ev.paths:
            end = x.entities[-1]
            row = names.get(end) or {}
            if end in have or end in reached or row.get("type") not in self.cfg.evidence.attribute_types:
                continue
            if len(reached) >= self.cfg.evidence.max_path_entities:
                break
            reached[end] = LinkedEntity(id=end, confidence=round(x.confidence_product, 4), rationale=f"reached by path {x.text}",
                                        score=round(x.score, 8), via=["path"], roles=["path"])
        self._describe(list(reached.values()))
        ev.entities.extend(reached.values())

    # ------------------------------------------------------------------ main
    def term_weights(self, question: str) -> dict[str, float]:
        """The question's lexical tokens with their idf over the snippets (rarer = more telling)."""
        from bencao.retrieval.index.lexical import analyze_query

        lex = self.ix.lexical("snippets") if self.ix is not None else None
        if lex is None:
            return {}
        return {t: round(v, 3) for t, v in lex.idf(analyze_query(question)).items()}

    def retrieve(self, question: str, query_triples: list[tuple[str, str, str]] | None = None, options: list[str] | None = None, *,
                 mentions: list[Mention] | None = None, dictionary: bool = True, planned_paths: list[tuple[str, ...]] | None = None,
                 planned_only: bool = False, asked_relations: list[str] | None = None, keywords: list[str] | None = None,
                 patient: dict | None = None) -> Evidence:
        """Evidence for ``question``.

        ``query_triples``: the CoT model's (head, relation, tail) triples, which drive micro retrieval;
        ``options``: multiple-choice options / candidates, linked too (roles ``option:<i>``);
        ``mentions``: typed mentions from the question-understanding stage, linked before the
        dictionary's (``dictionary=False`` leaves dictionary matching out); ``planned_paths``:
        relation sequences from the path planner, followed beside the mined ones (or instead,
        ``planned_only``); ``asked_relations``: the relations the question asks for (the answering
        pipeline's intents), whose triples of the linked entities join first (``micro.asked_triples``);
        ``keywords``: the understanding stage's keywords, each linked through its top
        ``question.keyword_candidates`` candidates and the selector; ``patient``: the understanding
        stage's patient block (``{age_group, sex, history}``, e.g. ``{"age_group": "老年", "sex": "女"}``),
        which filters the case layer's therapy retrieval beside what the rules read in the question.
        """
        if not isinstance(question, str) or not question.strip():
            raise BencaoError("question is empty")
        if len(question) > MAX_QUESTION_CHARS:
            raise BencaoError(f"question is {len(question):,} characters, over the {MAX_QUESTION_CHARS:,}-character limit")
        question = question.strip()
        options = [str(o) for o in (options or [])]
        cfg = self.cfg
        ev = Evidence(question=question)
        ev.entities = self.link_entities(question, options, mentions, dictionary, keywords)
        linked = [e.id for e in ev.entities]
        snippets: dict[str, SnippetHit] = {}
        triples: dict[str, TripleHit] = {}

        def merge_snippets(items: list[SnippetHit]) -> None:
            for s in items:
                if s.id in snippets:
                    snippets[s.id].merge(s)
                else:
                    snippets[s.id] = s

        if cfg.micro.enabled:
            m = cfg.micro
            queries = [" ".join(map(str, t)) for t in (query_triples or [])] or [question]
            if m.prefer_layers:  # DiffRAG recalls the personalized layer first, with its own top-k
                tr, sn = micro_retrieve(self.g, self.ix, queries, linked, k_triples=m.k_preferred, anchored_triples=0,
                                        snippets_per_triple=m.snippets_per_triple, layers=list(m.prefer_layers))
                for t in tr:
                    t.via.append("preferred")
                triples.update({t.id: t for t in tr})
                merge_snippets(sn)
            tr, sn = micro_retrieve(self.g, self.ix, queries, linked, k_triples=m.k_triples, anchored_triples=m.anchored_triples,
                                    snippets_per_triple=m.snippets_per_triple, asked_relations=asked_relations or (),
                                    asked_triples=m.asked_triples)
            for t in tr:
                if t.id not in triples:
                    triples[t.id] = t
            merge_snippets(sn)
            if m.entry_snippets > 0:  # the entries the books head with the asked entities' names (their own passages)
                asked = [x for e in ev.entities if "question" in e.roles and "path" not in e.roles for x in (e.name, e.mention) if x]
                merge_snippets(entry_snippets(self.g, asked, per_name=m.entry_snippets, score=1.0 / (60 + 1)))
        # the question's BM25 and dense snippet lists, searched once for macro retrieval and the reranker
        searched = first_stage(self.ix, question, max(cfg.macro.k_each, cfg.rerank.candidates if cfg.rerank.model else 0)) \
            if cfg.macro.enabled or cfg.rerank.model else ([], [])
        if cfg.macro.enabled:
            merge_snippets(macro_retrieve(self.g, self.ix, question, k_snippets=cfg.macro.k_snippets, k_sections=cfg.macro.k_sections,
                                          k_each=cfg.macro.k_each, rrf_k=cfg.macro.rrf_k, searched=searched))
            if options and cfg.macro.option_queries:
                hits, ev.option_support = option_retrieve(self.g, self.ix, question, options, k_per_option=cfg.macro.k_per_option,
                                                          candidates=cfg.macro.option_candidates)
                merge_snippets(hits)
        if cfg.paths.enabled and linked:
            self._paths(ev, [e.id for e in ev.entities if "path" not in e.roles], triples, planned_paths, planned_only)
        case_patient = None
        if cfg.layers.enabled and cfg.layers.therapy:
            merge_snippets(therapy_retrieve(self.g, self.ix, question, beam=cfg.layers.beam, n_snippets=cfg.layers.therapy_snippets))
            # MLKG case layer: disease tree → leaf's cases, filtered by the patient (the understanding stage's block, else the rules')
            cases = case_therapy(self.g, self.ix, question, patient=patient or None)
            merge_snippets(cases.snippets())
            case_patient = cases.patient if cases.cases else None
        for s in snippets.values():  # fused strategy scores; raw BM25 / cosine values are kept for reading, not summed
            s.score = round(sum(v for k, v in s.scores.items() if k not in RAW_SCORES), 6)
        ev.snippets = sorted(snippets.values(), key=lambda s: -s.score)
        if cfg.rerank.model:  # a cross-encoder reads the question with each passage (docs/retrieval.md#reranking)
            ev.snippets = rerank_snippets(self.g, question, ev.snippets, cfg.rerank, searched, rrf_k=cfg.macro.rrf_k)
        ev.triples = sorted(triples.values(), key=lambda t: (-(t.score or 0.0), -t.confidence))
        if ev.triples:  # every document that asserts each fact: facts no passage holds cite it, conflicting ones are attributed
            docs = self.g.documents_of_triples(t.id for t in ev.triples)
            for t in ev.triples:
                t.sources = docs.get(t.id, [])
        ev.stats = {"mentions": [e.mention for e in ev.entities if e.mention], "linked": len(linked),
                    "candidates": {"triples": len(ev.triples), "paths": len(ev.paths), "snippets": len(ev.snippets)}}
        terms = self.term_weights(question)
        if terms:
            ev.stats["terms"] = terms  # the question's words and how rare they are: the context excerpts passages around them
        if case_patient:
            ev.stats["case_patient"] = case_patient  # the patient the case layer filtered by
        if planned_paths:
            ev.stats["planned_paths"] = [list(p) for p in planned_paths]
        ev.trim(cfg.evidence.token_budget, cfg.evidence.max_entities, cfg.evidence.max_triples)
        return ev
