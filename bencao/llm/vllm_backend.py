"""In-process vLLM for batched local generation (``backend: vllm``), when vLLM is installed.

``pip install "bencao[vllm]"`` on a CUDA machine. The model is loaded once; ``complete_many``
hands the whole batch to ``LLM.chat`` (vLLM batches and schedules it itself) with the model's own
chat template. :mod:`bencao.llm.registry` imports this module only when a config names
``backend: vllm``, so data generation, evaluation and serving recipes can all use it.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from bencao.errors import BencaoError
from bencao.llm.base import BaseClient, Completion, LLMConfig, LLMError, Message


class VLLMClient(BaseClient):
    def __init__(self, llm: Any, *, name: str, **kw: Any):
        kw.setdefault("max_concurrency", 1)
        super().__init__(**kw)
        self.llm = llm
        self.model = name
        self._lock = threading.Lock()

    @classmethod
    def from_config(cls, cfg: LLMConfig) -> "VLLMClient":
        try:
            from vllm import LLM
        except ImportError:
            raise BencaoError("backend 'vllm' needs the vllm package: pip install \"bencao[vllm]\" (CUDA machines)") from None
        kwargs: dict[str, Any] = {"model": cfg.model}
        if cfg.dtype != "auto":
            kwargs["dtype"] = cfg.dtype
        if cfg.seed is not None:
            kwargs["seed"] = cfg.seed
        return cls(LLM(**kwargs), name=cfg.model, max_retries=0, default_params=cfg.params())

    def _sampling(self, params: dict[str, Any]) -> Any:
        from vllm import SamplingParams

        kw = {"temperature": float(params.get("temperature", 0.0) or 0.0), "top_p": float(params.get("top_p", 1.0)),
              "max_tokens": int(params.get("max_tokens", 256))}
        if params.get("seed") is not None:
            kw["seed"] = int(params["seed"])
        if params.get("stop"):
            kw["stop"] = params["stop"]
        return SamplingParams(**kw)

    def _call_once(self, messages: list[Message], params: dict[str, Any]) -> Completion:
        return self._generate([messages], params)[0]

    def complete_many(self, batch: list[list[Message]], **params: Any) -> list[Completion | LLMError]:
        if not batch:
            return []
        try:
            return list(self._generate(batch, self._params(params)))
        except LLMError as exc:
            return [exc] * len(batch)

    def _generate(self, batch: list[list[Message]], params: dict[str, Any]) -> list[Completion]:
        t0 = time.monotonic()
        with self._lock:
            try:
                outs = self.llm.chat(batch, sampling_params=self._sampling(params), use_tqdm=False)
            except (ValueError, RuntimeError) as exc:
                raise LLMError(f"{self.model}: vLLM generation failed: {exc}", kind="rejected") from None
        took = (time.monotonic() - t0) / max(1, len(batch))
        results = []
        for o in outs:
            best = o.outputs[0]
            results.append(Completion(text=best.text, model=self.model, prompt_tokens=len(o.prompt_token_ids or []),
                                      completion_tokens=len(best.token_ids or []), finish_reason=best.finish_reason, latency_s=took))
        return results
