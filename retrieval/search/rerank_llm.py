"""A reranker from a causal language model: pointwise yes/no scoring (backend ``llm-yes-no``).

No Chinese cross-encoder can be downloaded on the machines bencao is built on, but the real small instruction
models (``bencao models``) can be: each (question, passage) pair becomes one prompt — the passage quoted, the
question, "does this passage hold what is needed to answer it? answer yes or no" (``bencao/prompts/
rerank_yes_no.{zh,en}.jinja``, in the question's language) — and the pair's score is the model's next-token
log-probability of 是/yes minus that of 否/no, read with the client protocol's choice scoring
(:meth:`bencao.llm.base.LLMClient.score_choices_many`: exact for local transformers and llama.cpp, from the
top log-probabilities for an OpenAI-compatible endpoint that returns them).

The model is reached like every LLM role: ``rerank.model`` names it (an installed model's name, e.g.
``qwen2.5-coder-0.5b-instruct``, or a transformers folder) for local transformers, or ``rerank.llm`` is a full
``bencao.llm`` block (``backend: openai`` with a ``base_url`` for vLLM, ``llama-cpp`` for a GGUF). Scores go
through the response cache, keyed by the prompt and the model's weights' fingerprint (a model retrained into
the same folder is never answered from the old one's entries): ``rerank.llm.cache``, by default
``$BENCAO_CACHE_DIR/rerank/llm_cache.sqlite`` (``none`` switches it off). A rerun of the same questions costs
nothing; a killed run keeps every finished batch.

Each pair is a forward pass over about ``passage_chars`` + the question's tokens: on one CPU core the 0.5B model
reads ~250 tokens/s, so reranking 20 passages of a question takes ~30 s there. bench/RESULTS.md measures it.
"""

from __future__ import annotations

from typing import Any

from bencao.errors import ConfigError

#: The first tokens read as the two answers, per prompt language.
ANSWERS = {"zh": ("是", "否"), "en": ("yes", "no")}
#: Log-probability taken for an answer an endpoint did not return among its top tokens.
UNSEEN_LOGPROB = -30.0


class LLMYesNoReranker:
    """``score(question, passages)``: log P(yes) − log P(no) of the configured LLM for each passage."""

    def __init__(self, cfg: Any):
        from bencao.llm.base import LLMConfig
        from bencao.llm.registry import make_client
        from bencao.models import cache_root

        llm = cfg.llm if cfg.llm is not None else LLMConfig(backend="local-hf", model=str(cfg.model), device=cfg.device or "auto",
                                                             batch_size=cfg.batch_size, temperature=0.0)
        if cfg.llm is not None and cfg.model and llm.model == LLMConfig().model:
            llm.model = str(cfg.model)  # a block that only says how to reach the model named by rerank.model
        try:
            self.client = make_client(llm, default_cache=cache_root() / "rerank" / "llm_cache.sqlite")
        except (OSError, ValueError) as exc:
            raise ConfigError(f"rerank.model {llm.model!r} cannot be loaded: {str(exc).splitlines()[0]}") from None
        if not getattr(self.client, "supports_scoring", False):
            raise ConfigError(f"rerank: the {llm.backend} backend of {llm.model!r} cannot score next-token choices "
                              "(use local-hf, llama-cpp, or an endpoint that returns top_logprobs)")
        self.passage_chars = int(cfg.passage_chars)
        self.prompts_dir = cfg.prompts_dir

    def messages(self, question: str, passage: str) -> list[dict[str, str]]:
        from bencao.prompting import defuse_fence, render
        from bencao.text import lang_of

        lang = lang_of(question)
        text = passage if len(passage) <= self.passage_chars else passage[: self.passage_chars] + "…"
        return render("rerank_yes_no", lang, prompts_dir=self.prompts_dir, question=" ".join(question.split()),
                      passage=defuse_fence(text, "passage"))

    def score(self, query: str, passages: list[str]) -> list[float]:
        from bencao.llm.base import ChoiceScores
        from bencao.text import lang_of

        if not passages:
            return []
        yes, no = ANSWERS["zh" if lang_of(query) == "zh" else "en"]
        batch = [self.messages(query, p) for p in passages]
        results = self.client.score_choices_many(batch, [[yes, no]] * len(batch))
        out = []
        for r in results:
            if not isinstance(r, ChoiceScores):
                raise ConfigError(f"rerank: the LLM could not score a passage: {r}")
            y, n = r.scores.get(yes), r.scores.get(no)
            out.append((UNSEEN_LOGPROB if y is None else y) - (UNSEEN_LOGPROB if n is None else n))
        flush = getattr(self.client, "flush", None)
        if flush is not None:
            flush()
        return out
