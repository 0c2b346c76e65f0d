"""Local generation with ``transformers``: the tokenizer's own chat template, batched, left-padded.

``complete_many`` generates ``batch_size`` prompts at a time; ``complete`` is a batch of one.
Generation runs in a worker thread off the LLM event loop and holds a lock, so requests take turns
on the model. A model loaded from a path is named in the response cache by its weights'
fingerprint (:func:`bencao.models.model_fingerprint`), so a model retrained into the same
directory is never answered from the old model's cache.
"""

from __future__ import annotations

import threading
from typing import Any

from bencao.errors import BencaoError
from bencao.llm.base import BaseClient, ChoiceScores, Completion, LLMConfig, LLMError, Message, choice_variants


class LocalHFClient(BaseClient):
    supports_scoring = True
    exact_scoring = True

    def __init__(self, model: Any, tokenizer: Any, *, name: str | None = None, batch_size: int = 8, **kw: Any):
        kw.setdefault("max_concurrency", 1)
        super().__init__(**kw)
        self.hf_model = model
        self.tokenizer = tokenizer
        self.model = name or getattr(getattr(model, "config", None), "_name_or_path", None) or "local"
        self.batch_size = max(1, batch_size)
        self.cache_id = self.model  # the response cache's name for this model; from_pretrained adds the fingerprint
        self.score_method = "choice-logits-fp32"  # the choices' logits recomputed in float32 (_exact_logits)
        self._lock = threading.Lock()
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token

    @classmethod
    def from_pretrained(cls, path: str, *, device: str = "auto", dtype: str = "auto", n_threads: int | None = None,
                        **kw: Any) -> "LocalHFClient":
        import os

        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from bencao.models import model_fingerprint, resolve_model

        threads = n_threads or int(os.environ.get("BENCAO_LLM_THREADS", 0) or 0)
        if threads > 0:  # on a shared CPU fewer threads than cores avoid OpenMP's spinning barriers
            torch.set_num_threads(threads)

        target = resolve_model(path)
        try:
            tok = AutoTokenizer.from_pretrained(target)
            torch_dtype = "auto" if dtype == "auto" else getattr(torch, dtype)
            model = AutoModelForCausalLM.from_pretrained(target, dtype=torch_dtype)
        except OSError as exc:
            raise BencaoError(f"{path}: cannot load a local model: {str(exc).splitlines()[0]}") from None
        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        model.to(device).eval()
        client = cls(model, tok, name=path, **kw)
        # the weights' precision is part of what answers: a float32 run is not a bfloat16 run's cache hit
        client.cache_id = f"{path}#sha256:{model_fingerprint(path)}#{str(model.dtype).removeprefix('torch.')}"
        return client

    @classmethod
    def from_config(cls, cfg: LLMConfig) -> "LocalHFClient":
        return cls.from_pretrained(cfg.model, device=cfg.device, dtype=cfg.dtype, batch_size=cfg.batch_size,
                                   n_threads=cfg.n_threads, default_params=cfg.params())

    def _call_once(self, messages: list[Message], params: dict[str, Any]) -> Completion:
        return self._generate([messages], params)[0]

    # -- next-token scoring (multiple-choice letters)
    def _prompt_text(self, messages: list[Message], prefix: str) -> str:
        try:
            return self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True) + prefix
        except Exception as exc:  # noqa: BLE001 - a template error is a rejected request
            raise LLMError(f"{self.model}: chat template failed: {exc}", kind="rejected") from None

    def _first_ids(self, choice: str) -> list[int]:
        ids = []
        for v in choice_variants(choice):
            enc = self.tokenizer.encode(v, add_special_tokens=False)
            if enc and enc[0] not in ids:
                ids.append(enc[0])
        return ids

    def _score_once(self, messages: list[Message], choices: list[str], prefix: str, top_k: int) -> ChoiceScores:
        return self._score_batch([messages], [choices], prefix, top_k)[0]

    async def ascore_choices_many(self, batch: list[list[Message]], choices: list[list[str]], *, prefix: str = "",
                                  top_k: int = 20) -> list[ChoiceScores | LLMError]:
        from bencao.llm import aio

        return await aio.to_thread(self._score_all, batch, choices, prefix, top_k)

    def _score_all(self, batch: list[list[Message]], choices: list[list[str]], prefix: str, top_k: int) -> list[ChoiceScores | LLMError]:
        out: list[ChoiceScores | LLMError | None] = [None] * len(batch)
        texts: list[str | None] = [None] * len(batch)
        for i, m in enumerate(batch):
            try:
                texts[i] = self._prompt_text(m, prefix)
            except LLMError as exc:
                out[i] = exc
        # prompts of similar length together: less padding in a batch
        order = sorted((i for i in range(len(batch)) if out[i] is None), key=lambda i: len(texts[i] or ""))
        for k in range(0, len(order), self.batch_size):
            idx = order[k : k + self.batch_size]
            try:
                res = self._score_texts([texts[i] or "" for i in idx], [choices[i] for i in idx], top_k)
            except LLMError as exc:
                res = [exc] * len(idx)
            for i, r in zip(idx, res):
                out[i] = r
        return out  # type: ignore[return-value]

    def _score_batch(self, batch: list[list[Message]], choices: list[list[str]], prefix: str, top_k: int) -> list[ChoiceScores]:
        return self._score_texts([self._prompt_text(m, prefix) for m in batch], choices, top_k)

    def _score_texts(self, texts: list[str], choices: list[list[str]], top_k: int) -> list[ChoiceScores]:
        import torch

        tok = self.tokenizer
        head = self.hf_model.get_output_embeddings()
        seen: dict[str, Any] = {}
        hook = head.register_forward_hook(lambda mod, inp, out: seen.__setitem__("h", inp[0][:, -1, :])) if head is not None else None
        with self._lock:
            enc = tok(texts, return_tensors="pt", padding=True, padding_side="left", add_special_tokens=False)
            enc = {k: v.to(self.hf_model.device) for k, v in enc.items()}
            try:
                with torch.no_grad():
                    try:
                        logits = self.hf_model(**enc, logits_to_keep=1).logits[:, -1, :]
                    except TypeError:  # a model class without logits_to_keep
                        logits = self.hf_model(**enc).logits[:, -1, :]
            finally:
                if hook is not None:
                    hook.remove()
        logp = torch.log_softmax(logits.float(), dim=-1)
        norm = torch.logsumexp(logits.float(), dim=-1)
        out = []
        for r, (row, mask, cs) in enumerate(zip(logp, enc["attention_mask"], choices)):
            scores: dict[str, float | None] = {}
            for c in cs:
                ids = self._first_ids(c)
                if not ids:
                    scores[c] = None
                    continue
                exact = self._exact_logits(head, seen.get("h"), r, ids, logits[r, ids].float())
                # the choices' logits in float32 (bf16 logits move in steps of 1/8 near 20: options would tie), over the
                # vocabulary's normaliser (common to every choice of the prompt, so the ranking is exact)
                scores[c] = float(torch.logsumexp(exact, dim=0) - norm[r]) if exact is not None else float(torch.logsumexp(row[ids], dim=0))
            k = min(max(int(top_k), 0), row.shape[0])
            vals, idx = torch.topk(row, k) if k else (row[:0], row[:0].long())
            top = [(tok.decode([int(i)]), float(v)) for v, i in zip(vals, idx)]
            out.append(ChoiceScores(scores=scores, top=top, model=self.model, prompt_tokens=int(mask.sum())))
        return out

    def _exact_logits(self, head: Any, hidden: Any, r: int, ids: list[int], approx: Any) -> Any:
        """The logits of token ``ids`` recomputed in float32 from the LM head's input (row ``r``), or None when the
        model's logits are not the head's plain product (a soft cap, a scale: they would disagree with ``approx``)."""
        import torch

        if hidden is None or getattr(head, "weight", None) is None:
            return None
        with torch.no_grad():
            w = head.weight[ids].float()
            exact = hidden[r].float() @ w.T
            if getattr(head, "bias", None) is not None:
                exact = exact + head.bias[ids].float()
        tol = 0.05 + 0.02 * approx.abs()  # bf16 keeps 8 bits of mantissa: within this the two are the same logits
        return exact if bool(((exact - approx).abs() <= tol).all()) else None

    async def acomplete_many(self, batch: list[list[Message]], **params: Any) -> list[Completion | LLMError]:
        from bencao.llm import aio

        return await aio.to_thread(self._generate_all, batch, self._params(params))

    def _generate_all(self, batch: list[list[Message]], p: dict[str, Any]) -> list[Completion | LLMError]:
        out: list[Completion | LLMError] = []
        for i in range(0, len(batch), self.batch_size):
            chunk = batch[i : i + self.batch_size]
            try:
                out.extend(self._generate(chunk, p))
            except LLMError as exc:
                out.extend([exc] * len(chunk))
        return out

    def _generate(self, batch: list[list[Message]], params: dict[str, Any]) -> list[Completion]:
        import torch

        tok = self.tokenizer
        try:
            texts = [tok.apply_chat_template(m, tokenize=False, add_generation_prompt=True) for m in batch]
        except Exception as exc:  # noqa: BLE001 - a template error is a rejected request
            raise LLMError(f"{self.model}: chat template failed: {exc}", kind="rejected") from None
        temperature = float(params.get("temperature", 0.0) or 0.0)
        gen_kwargs: dict[str, Any] = {"max_new_tokens": int(params.get("max_tokens", 256)), "pad_token_id": tok.pad_token_id,
                                      "eos_token_id": tok.eos_token_id}
        if temperature > 0:
            gen_kwargs.update(do_sample=True, temperature=temperature, top_p=float(params.get("top_p", 1.0)))
        else:
            gen_kwargs.update(do_sample=False)
        if params.get("repetition_penalty") and float(params["repetition_penalty"]) != 1.0:
            gen_kwargs["repetition_penalty"] = float(params["repetition_penalty"])
        with self._lock:
            if params.get("seed") is not None:
                torch.manual_seed(int(params["seed"]))
            enc = tok(texts, return_tensors="pt", padding=True, padding_side="left", add_special_tokens=False)
            enc = {k: v.to(self.hf_model.device) for k, v in enc.items()}
            with torch.no_grad():
                gen = self.hf_model.generate(**enc, **gen_kwargs)
        n_in = enc["input_ids"].shape[1]
        results = []
        for row, mask in zip(gen, enc["attention_mask"]):
            new = row[n_in:]
            n_new = int((new != tok.pad_token_id).sum()) if tok.pad_token_id is not None else len(new)
            stopped = tok.eos_token_id is not None and bool((new == tok.eos_token_id).any())
            results.append(Completion(text=tok.decode(new, skip_special_tokens=True).strip(), model=self.model,
                                      prompt_tokens=int(mask.sum()), completion_tokens=n_new,
                                      finish_reason="stop" if stopped else "length"))
        return results
