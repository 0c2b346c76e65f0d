"""The retrieval run configuration: one YAML (``configs/retrieval/*.yaml``) with one section per stage."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from bencao.config import field
from bencao.retrieval.index.build import IndexConfig
from bencao.retrieval.linking import LinkingConfig
from bencao.retrieval.search.rerank import RerankConfig


@dataclass
class QuestionConfig:
    max_mentions: int = field(8, help="Most entity mentions taken from a question (longest alias matches first).")
    max_ngram: int = field(6, help="Longest English word n-gram / Chinese jieba-token n-gram matched against the alias table.")
    min_cjk_chars: int = field(2, help="Shortest Chinese mention matched in a question (single characters are too ambiguous).")
    dense_entities: int = field(3, help="Extra entities from dense search over the question (readable languages only).")
    min_dense: float = field(0.6, help="Cosine needed for such a dense-only entity.")
    keyword_candidates: int = field(10, help="Yaoshi-RAG's keyword linking: candidate entities per keyword of the question-understanding "
                                             "stage (BM25 + dense fused, alias-table matches first) shown to the linker's selector "
                                             "(the LLM with linking.selector: llm).")
    max_keywords: int = field(8, help="Most keywords of the question-understanding stage linked per question.")
    stopwords: list[str] = field(default_factory=lambda: ["a", "an", "the", "of", "and", "or", "is", "are", "be", "to", "in", "on", "for", "with",
                                                          "what", "which", "who", "how", "does", "do", "can", "it", "as", "by", "at", "not",
                                                          "no", "yes", "true", "false", "food", "type", "use", "used"],
                                 help="Question words never linked on their own.")


@dataclass
class MicroConfig:
    enabled: bool = field(True, help="Micro retrieval: query triples (or the question) → nearest graph triples → their snippets.")
    k_triples: int = field(10, help="Nearest triples per query (dense + lexical fused).")
    anchored_triples: int = field(20, help="Triples incident to the linked entities, by confidence.")
    snippets_per_triple: int = field(2, help="Source snippets kept per retrieved triple (triple_sources).")
    asked_triples: int = field(8, help="Triples of the relations the question asks for (功效 → has_effect, treats; the answerer's "
                                       "intents table), shared among the linked entities (question and options) like "
                                       "anchored_triples, most confident first; they rank above the other triples, which an "
                                       "entity's confident facts of other kinds (a catalogue listing, formulas it is in) "
                                       "would otherwise crowd out of the evidence. 0 = off.")
    prefer_layers: list[str] = field(default_factory=list,
                                     help="Triple layers recalled first, with their own top-k (TCM-DiffRAG recalls the personalized layer, "
                                          "G_style, before the book graph): e.g. [personal]. Empty = one pass over every layer.")
    k_preferred: int = field(5, help="Nearest triples taken from prefer_layers before the pass over every layer.")
    entry_snippets: int = field(2, help="Passages of the entries a book heads with each question entity's name (食疗本草's 栝蒌（瓜蒌）, "
                                        "神农本草经's 栝蒌根: its own and its parts' entries), taken first of each entry; 0 = off.")


@dataclass
class MacroConfig:
    enabled: bool = field(True, help="Macro retrieval: question → nearest snippets and sections, dense + lexical.")
    k_snippets: int = field(8, help="Snippets kept after fusion.")
    k_sections: int = field(3, help="Sections kept after fusion (their first snippets join the evidence).")
    k_each: int = field(20, help="Candidates taken from each of dense and lexical search before fusion.")
    rrf_k: int = field(60, help="Reciprocal-rank-fusion constant.")
    option_queries: bool = field(True, help="For a question with options: one query per option (question + option, MLKG-RAG's "
                                            "stem + options); passages that hold the option join the evidence and give the option "
                                            "its retrieval support.")
    k_per_option: int = field(1, help="Passages kept per option.")
    option_candidates: int = field(20, help="BM25 hits per option query searched for a passage that holds the option.")


@dataclass
class PathsConfig:
    enabled: bool = field(True, help="Reasoning paths from the linked entities (Yaoshi-RAG).")
    max_hops: int = field(2, help="Longest relation path.")
    n_patterns: int = field(30, help="Most frequent relation sequences (mined from the graph) that paths may follow.")
    hub_degree: int = field(100, help="An entity with more triples than this is a hub (a catalogue, a flavour shared by hundreds of "
                                      "herbs, an is_a root): paths never pass through it, and end at it only with hub_endpoints "
                                      "(or when it is another linked entity, or an LLM planner asked for the hop).")
    hub_endpoints: bool = field(False, help="Let a path end at a hub. Off: '山药 —listed_in→ 药食同源目录' or '—has_flavour→ 甘' "
                                            "says nothing specific, yet a hub's PageRank put such paths first (the entity's "
                                            "facts of that kind still reach the evidence as triples).")
    hub_penalty: bool = field(True, help="Scale PathScore by the inverse log-degree of each middle entity, so paths through "
                                         "specific entities rank above paths through common ones.")
    max_paths: int = field(400, help="Paths enumerated before scoring.")
    neighbour_limit: int = field(30, help="One-hop neighbours per path entity added to the PageRank subgraph.")
    damping: float = field(0.85, help="PageRank damping factor.")
    top_k: int = field(10, help="Paths kept, by PathScore = product of confidences × mean PageRank.")


@dataclass
class LayersConfig:
    enabled: bool = field(True, help="Two-layer links (MLKG): follow stored cross-layer links of linked entities "
                                     "(written by `bencao graph link-layers`).")
    therapy: bool = field(True, help="Top-down 'therapy retrieval' through the section tree (book → chapter → section).")
    beam: int = field(2, help="Sections kept at each level of the top-down descent.")
    therapy_snippets: int = field(3, help="Snippets taken from the leaf sections reached.")


@dataclass
class EvidenceConfig:
    token_budget: int = field(2500, help="Evidence is trimmed to this many tokens (bencao.text.count_tokens).")
    max_entities: int = field(12, help="Linked entities kept.")
    max_triples: int = field(30, help="Triples kept.")
    attribute_types: list[str] = field(default_factory=lambda: ["food", "dish", "substance", "herb"],
                                       help="Entities of these types that reasoning paths reach join the evidence with their "
                                            "attributes (nature, flavour, effects, contraindications), so a generator can use them.")
    max_path_entities: int = field(6, help="Most such path-reached entities added.")


@dataclass
class RetrievalConfig:
    index: IndexConfig = field(default_factory=IndexConfig, help="Indexes and the embedder.")
    linking: LinkingConfig = field(default_factory=LinkingConfig, help="Entity linking.")
    question: QuestionConfig = field(default_factory=QuestionConfig, help="Mentions from a question without an LLM.")
    micro: MicroConfig = field(default_factory=MicroConfig, help="Micro (triple) retrieval.")
    macro: MacroConfig = field(default_factory=MacroConfig, help="Macro (snippet/section) retrieval.")
    paths: PathsConfig = field(default_factory=PathsConfig, help="Reasoning paths and PageRank.")
    layers: LayersConfig = field(default_factory=LayersConfig, help="Two-layer links and therapy retrieval.")
    rerank: RerankConfig = field(default_factory=RerankConfig, help="Second-stage reranking of the evidence passages by a "
                                                                    "cross-encoder (off until rerank.model names one).")
    evidence: EvidenceConfig = field(default_factory=EvidenceConfig, help="Assembly under a token budget.")



def load_retrieval_config(path: str | Path | None = None, overrides: list[str] | tuple[str, ...] = ()) -> RetrievalConfig:
    """Read a retrieval YAML (the built-in defaults when ``path`` is None) with ``key=value`` overrides.

    ``path`` may also be a serving recipe: its ``retrieval`` section is used (a mapping, or the path of
    a retrieval YAML), so ``bencao link`` takes the same ``--config`` as ``ask`` and ``serve``; an
    override may name a key with or without the ``retrieval.`` prefix.
    """
    from bencao.config import apply_overrides, from_dict, read_yaml, resolve_config_path

    path = resolve_config_path(path) if path else None
    data = read_yaml(path) if path else {}
    where = str(path) if path else "config"
    if "retrieval" in data or "retrieval_config" in data:  # a serving recipe
        ref = data.get("retrieval", data.get("retrieval_config"))
        if isinstance(ref, str):
            p = Path(ref).expanduser()
            if not p.is_absolute() and not p.exists() and (Path(path).resolve().parent / p).exists():
                p = Path(path).resolve().parent / p
            data, where = read_yaml(p), str(p)
        else:
            data = dict(ref or {})
        overrides = [*(data.pop("retrieval_overrides", None) or []), *overrides]
    stripped = [o[len("retrieval."):] if o.strip().startswith("retrieval.") else o for o in overrides]
    cfg = from_dict(RetrievalConfig, apply_overrides(data, stripped), where=where)
    cfg.index.validate()
    return cfg
