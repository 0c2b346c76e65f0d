"""A GGUF model run by llama.cpp (``llama-cpp-python``) in this process: backend ``llama-cpp``.

The GGUF file is read as it is (quantised weights, no conversion), which on a CPU makes prompts and
generation several times faster than transformers on the dequantised weights (bench/llm_engines.py
records both on the same machine). ``llm.model`` is a catalogue name (``bencao models list``: its verified
GGUF) or a path to a ``.gguf`` file.

- Generation uses the chat template stored in the GGUF. A request with a JSON Schema (``json_schema``
  param, set by :func:`bencao.llm.structured.complete_json`) is decoded under a grammar made from it:
  small models then cannot break the format.
- Choice scoring evaluates the rendered prompt once and reads the next-token log-probabilities;
  the longest prefix shared with the previous request stays in the KV cache (prefix reuse), so
  prompts that differ only at the end (options after one passage, a shared system prompt) are cheap.
- One model, one context: requests take turns under a lock (``max_concurrency`` is 1).

llama-cpp-python builds llama.cpp from source at install (cmake and a C++ compiler); it is an optional
extra, outside the lock (docs/llm.md#engines says how to install it).
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

from bencao.errors import ConfigError
from bencao.llm.base import BaseClient, ChoiceScores, Completion, LLMConfig, LLMError, Message, choice_variants


def gguf_path_of(name: str) -> Path:
    """A catalogue model's verified GGUF, or a ``.gguf`` file path."""
    from bencao.model_catalog import catalog

    models = catalog()
    if name in models:
        m = models[name]
        if not m.gguf_path.is_file():
            raise ConfigError(f"model {name!r} is not installed here (bencao models install {name})")
        return m.gguf_path
    p = Path(name).expanduser()
    if p.is_file() and p.suffix == ".gguf":
        return p
    if p.is_dir():
        hits = sorted(p.glob("*.gguf"))
        if len(hits) == 1:
            return hits[0]
    raise ConfigError(f"llm.model {name!r}: the llama-cpp backend needs a catalogue model name (bencao models list) "
                      "or a .gguf file")


class LlamaCppClient(BaseClient):
    supports_scoring = True
    exact_scoring = True
    supports_json_schema = True

    def __init__(self, llama: Any, *, name: str, gguf: Path | None = None, **kw: Any):
        kw["max_concurrency"] = 1
        super().__init__(**kw)
        self.llama = llama
        self.model = name
        self.gguf = gguf
        self.cache_id = name
        self._lock = threading.Lock()
        self._formatter: Any = None

    @classmethod
    def from_gguf(cls, name: str, *, n_ctx: int = 4096, n_threads: int | None = None, **kw: Any) -> "LlamaCppClient":
        try:
            from llama_cpp import Llama
        except ImportError:
            raise ConfigError("llm.backend llama-cpp needs the llama-cpp-python package (docs/llm.md#engines: "
                              "pip install -r requirements/llamacpp.txt)") from None
        path = gguf_path_of(name)
        threads = n_threads or int(os.environ.get("BENCAO_LLM_THREADS", 0)) or (os.cpu_count() or 1)
        llama = Llama(model_path=str(path), n_ctx=n_ctx, n_threads=threads, n_threads_batch=threads, n_batch=512,
                      logits_all=False, verbose=False)
        client = cls(llama, name=name, gguf=path, **kw)
        client.cache_id = f"{name}#gguf-sha256:{_fingerprint(path)}"
        return client

    @classmethod
    def from_config(cls, cfg: LLMConfig) -> "LlamaCppClient":
        return cls.from_gguf(cfg.model, n_ctx=cfg.n_ctx, n_threads=cfg.n_threads, default_params=cfg.params())

    # -- prompt rendering with the GGUF's own chat template
    def _chat_formatter(self) -> Any:
        if self._formatter is None:
            from llama_cpp.llama_chat_format import Jinja2ChatFormatter

            meta = self.llama.metadata
            template = meta.get("tokenizer.chat_template")
            if not template:
                raise LLMError(f"{self.model}: the GGUF has no chat template", kind="rejected")
            ll = self.llama

            def tok_text(key: str) -> str:
                i = meta.get(key)
                return ll._model.token_get_text(int(i)) if i is not None else ""

            self._formatter = Jinja2ChatFormatter(template=template, eos_token=tok_text("tokenizer.ggml.eos_token_id"),
                                                  bos_token=tok_text("tokenizer.ggml.bos_token_id"), add_generation_prompt=True)
        return self._formatter

    def prompt_text(self, messages: list[Message], prefix: str = "") -> str:
        return self._chat_formatter()(messages=messages).prompt + prefix

    def _eval_reusing_prefix(self, tokens: list[int]) -> None:
        """Evaluate ``tokens``, keeping the KV cache of the longest prefix shared with what was evaluated last."""
        ll = self.llama
        if len(tokens) > ll.n_ctx():
            raise LLMError(f"{self.model}: prompt of {len(tokens)} tokens is longer than the context ({ll.n_ctx()}; llm.n_ctx)",
                           kind="rejected")
        keep = 0
        for a, b in zip(ll.input_ids[: ll.n_tokens], tokens[:-1]):
            if a != b:
                break
            keep += 1
        ll.n_tokens = keep
        ll.eval(tokens[keep:])

    def _last_logits(self) -> Any:
        import numpy as np

        ll = self.llama
        return np.ctypeslib.as_array(ll._ctx.get_logits(), shape=(ll.n_vocab(),)).astype(np.float64)

    def _score_once(self, messages: list[Message], choices: list[str], prefix: str, top_k: int) -> ChoiceScores:
        import numpy as np

        text = self.prompt_text(messages, prefix)
        ll = self.llama
        with self._lock:
            tokens = ll.tokenize(text.encode("utf-8"), add_bos=False, special=True)
            self._eval_reusing_prefix(tokens)
            logits = self._last_logits()
        m = logits.max()
        logp = logits - (m + np.log(np.exp(logits - m).sum()))
        scores: dict[str, float | None] = {}
        for c in choices:
            ids = []
            for v in choice_variants(c):
                t = ll.tokenize(v.encode("utf-8"), add_bos=False, special=False)
                if t and t[0] not in ids:
                    ids.append(t[0])
            scores[c] = float(np.logaddexp.reduce(logp[ids])) if ids else None
        k = max(0, min(int(top_k), len(logp)))
        top_idx = np.argsort(-logp)[:k]
        top = [(ll.detokenize([int(i)]).decode("utf-8", "replace"), float(logp[i])) for i in top_idx]
        return ChoiceScores(scores=scores, top=top, model=self.model, prompt_tokens=len(tokens))

    # -- generation
    def _call_once(self, messages: list[Message], params: dict[str, Any]) -> Completion:
        kw: dict[str, Any] = {"max_tokens": int(params.get("max_tokens", 256)), "temperature": float(params.get("temperature", 0.0) or 0.0),
                              "top_p": float(params.get("top_p", 1.0))}
        if params.get("seed") is not None:
            kw["seed"] = int(params["seed"])
        if params.get("stop"):
            kw["stop"] = params["stop"]
        if params.get("repetition_penalty"):
            kw["repeat_penalty"] = float(params["repetition_penalty"])
        schema = params.get("json_schema")
        if schema:
            kw["response_format"] = {"type": "json_object", "schema": schema}
        with self._lock:
            try:
                resp = self.llama.create_chat_completion(messages=messages, **kw)
            except ValueError as exc:  # context overflow, bad grammar
                raise LLMError(f"{self.model}: {str(exc).splitlines()[0][:300]}", kind="rejected") from None
        choice = resp["choices"][0]
        usage = resp.get("usage") or {}
        return Completion(text=(choice.get("message") or {}).get("content") or "", model=self.model,
                          prompt_tokens=int(usage.get("prompt_tokens") or 0), completion_tokens=int(usage.get("completion_tokens") or 0),
                          finish_reason=choice.get("finish_reason"))


def _fingerprint(path: Path) -> str:
    """The GGUF's SHA-256 (remembered by path, size and mtime: a 1 GB file is read once)."""
    from bencao.models import cache_root, _HashMemo

    memo = _HashMemo(cache_root() / "fingerprints.json")
    digest = memo.sha256(path)
    memo.save()
    return digest[:16]
