"""Second-stage reranking: a cross-encoder reads the question with each candidate passage and orders them.

Every retrieval route measured on the classics corpus (bench/RESULTS.md: graph routes, a learned fusion,
a static embedder trained for the job) ranks passages by the words they share with the question, and
none gets beyond plain BM25: the gold option's text and a distractor's occur in the books about equally
often, and telling the passage that *answers* from one that shares the words takes a reader of both.
That reader is a cross-encoder (bge-reranker-v2-m3 for Chinese, as the TCM RAG papers use, or one
fine-tuned on the graph's pairs), which these machines cannot download; the stage is off until
``rerank.model`` names one.

When on, the stage runs after the graph's channels: the question's ``candidates`` best passages by the
first stage (lexical and dense, fused by RRF) join the passages the channels found, the model scores
every (question, passage) pair, and the evidence keeps the ``keep`` best, best first; passages that
an option query found for a multiple-choice option stay after them (the answerer reads them). Each
kept passage carries its raw score as ``scores["rerank"]`` and ``rerank`` in ``via``.

Backends are a registry (:data:`RERANKERS`); ``cross-encoder`` is sentence-transformers'
``CrossEncoder`` (local path, packaged name or hub id, resolved by :func:`bencao.models.resolve_model`);
``llm-yes-no`` asks a causal LM whether each passage helps answer the question and scores log P(yes) − log P(no)
(:mod:`bencao.retrieval.search.rerank_llm`: the real small Qwen2.5 models, any ``bencao.llm`` backend, cached).
A loaded model is shared per process by its settings.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from bencao.config import field
from bencao.errors import ConfigError
from bencao.llm.base import LLMConfig
from bencao.retrieval.evidence import SnippetHit


@dataclass
class RerankConfig:
    model: str | None = field(None, help="Cross-encoder that reorders the evidence passages (a local path, a packaged name or "
                                         "a hub id, e.g. BAAI/bge-reranker-v2-m3); null = no reranking (docs/retrieval.md).")
    backend: str = field("cross-encoder", help="Reranker backend (registry): cross-encoder (sentence-transformers CrossEncoder) | "
                                               "llm-yes-no (a causal LM's log P(yes) − log P(no) after the passage and the question; "
                                               "model = an installed model's name or a transformers folder).")
    candidates: int = field(50, help="The question's best passages by the first stage (lexical + dense, RRF) scored beside the "
                                     "passages the graph's channels found.")
    keep: int = field(10, help="Passages kept, by the reranker's score (option-query passages stay after them).")
    batch_size: int = field(32, help="Pairs scored per forward pass.")
    max_length: int = field(512, help="Tokens of question + passage the model reads (longer pairs are truncated).")
    device: str | None = field(None, help="torch device (cpu, cuda, cuda:1); null = the library's choice.")
    llm: LLMConfig | None = field(None, help="llm-yes-no: how to reach the LLM (a bencao.llm block: backend openai + base_url, "
                                             "llama-cpp, ...; its model defaults to rerank.model); null = local transformers. Its cache "
                                             "defaults to $BENCAO_CACHE_DIR/rerank/llm_cache.sqlite.")
    passage_chars: int = field(600, help="llm-yes-no: characters of each passage (heading path and text) the LLM reads.")
    prompts_dir: str | None = field(None, help="llm-yes-no: a folder whose rerank_yes_no.{zh,en}.jinja replace the shipped prompt.")

    def __post_init__(self) -> None:
        if self.model is not None and not str(self.model).strip():
            self.model = None
        if self.backend not in RERANKERS:
            raise ConfigError(f"rerank.backend: {self.backend!r} is not one of {', '.join(sorted(RERANKERS))}")
        for name in ("candidates", "keep", "batch_size", "max_length", "passage_chars"):
            if int(getattr(self, name)) < 1:
                raise ConfigError(f"rerank.{name} must be at least 1, not {getattr(self, name)}")


class CrossEncoderReranker:
    """sentence-transformers' ``CrossEncoder``: one relevance score per (query, passage) pair."""

    def __init__(self, cfg: RerankConfig):
        from bencao.models import resolve_model

        path = resolve_model(str(cfg.model))
        local = Path(path).exists()
        try:
            from sentence_transformers import CrossEncoder
            from transformers.utils import logging as hf_logging

            hf_logging.disable_progress_bar()
            self.model = CrossEncoder(path, device=cfg.device, max_length=cfg.max_length,
                                      local_files_only=local or os.environ.get("HF_HUB_OFFLINE") == "1")
        except (OSError, ValueError) as exc:
            raise ConfigError(f"rerank.model {cfg.model!r} cannot be loaded: {str(exc).splitlines()[0]}") from None
        self.batch_size = cfg.batch_size

    def score(self, query: str, passages: list[str]) -> list[float]:
        if not passages:
            return []
        out = self.model.predict([(query, p) for p in passages], batch_size=self.batch_size, show_progress_bar=False,
                                 convert_to_numpy=True)
        return [float(x) for x in out.reshape(len(passages), -1)[:, 0]]


def passage(s: SnippetHit) -> str:
    """What the reranker reads of a snippet: its heading path, a newline, its text (as the lexical index does)."""
    head = " › ".join(s.path or [])
    return f"{head}\n{s.text}" if head else str(s.text)


def _llm_yes_no(cfg: RerankConfig) -> Any:
    from bencao.retrieval.search.rerank_llm import LLMYesNoReranker

    return LLMYesNoReranker(cfg)


#: Reranker backends: name → class taking a :class:`RerankConfig`; each instance has ``score(query, passages)``.
RERANKERS: dict[str, Callable[[RerankConfig], Any]] = {"cross-encoder": CrossEncoderReranker, "llm-yes-no": _llm_yes_no}

_LOADED: dict[tuple[Any, ...], Any] = {}
_LOCK = threading.Lock()


def load_reranker(cfg: RerankConfig) -> Any:
    """The configured reranker, loaded once per process (None when ``cfg.model`` is null)."""
    if not cfg.model:
        return None
    key = (cfg.backend, str(cfg.model), cfg.device, cfg.max_length, cfg.batch_size, cfg.passage_chars, cfg.prompts_dir,
           repr(cfg.llm))
    with _LOCK:
        if key not in _LOADED:
            _LOADED[key] = RERANKERS[cfg.backend](cfg)
        return _LOADED[key]


def rerank_snippets(g: Any, question: str, snippets: list[SnippetHit], cfg: RerankConfig,
                    searched: tuple[list[tuple[str, float]], list[tuple[str, float]]] = ([], []),
                    reranker: Any | None = None, rrf_k: int = 60) -> list[SnippetHit]:
    """``snippets`` (the channels' evidence) plus the first stage's ``cfg.candidates`` best passages (``searched``:
    the question's BM25 and dense lists, :func:`~bencao.retrieval.search.macro.first_stage`), scored by the
    reranker: the ``cfg.keep`` best, best first, then the option-query passages not among them."""
    from bencao.deadline import check_deadline
    from bencao.retrieval.search.fusion import rrf

    reranker = reranker or load_reranker(cfg)
    if reranker is None:
        return snippets
    pool: dict[str, SnippetHit] = {s.id: s for s in snippets}
    first = rrf([lst[: cfg.candidates] for lst in searched], rrf_k)[: cfg.candidates]
    if first:
        rows = g.get_snippets([sid for sid, _ in first if sid not in pool])
        for sid, score in first:
            if sid not in pool and sid in rows:
                pool[sid] = SnippetHit.from_row(rows[sid], "first-stage", round(float(score), 6))
    hits = list(pool.values())
    check_deadline("reranking the passages")
    scores = reranker.score(question, [passage(s) for s in hits])
    for s, v in zip(hits, scores):
        s.scores["rerank"] = round(v, 6)
        s.score = round(v, 6)
        if "rerank" not in s.via:
            s.via.append("rerank")
    ranked = sorted(hits, key=lambda s: -s.scores["rerank"])
    kept = ranked[: cfg.keep]
    ids = {s.id for s in kept}
    options = [s for s in snippets if s.id not in ids and any(v.startswith("option:") for v in s.via)]
    return kept + options
