"""Any OpenAI-compatible chat endpoint (vLLM, SGLang, cloud APIs) through the ``openai`` package.

The package's own retries are switched off (``max_retries=0``) so that :class:`BaseClient` owns
retrying and counts attempts the same way for every backend; its errors are mapped to
:class:`LLMError` with ``retryable`` set for timeouts, refused connections, 429 and 5xx.
"""

from __future__ import annotations

import os
from typing import Any

from bencao.llm.base import BaseClient, Completion, LLMConfig, LLMError, Message


def resolve_base_url(cfg_url: str | None) -> str | None:
    return cfg_url or os.environ.get("BENCAO_LLM_BASE_URL") or os.environ.get("OPENAI_BASE_URL") or None


class OpenAIClient(BaseClient):
    def __init__(self, model: str, *, base_url: str | None = None, api_key: str | None = None, timeout_s: float = 120.0, **kw: Any):
        super().__init__(**kw)
        import openai

        self.model = model
        self.base_url = resolve_base_url(base_url)
        self._openai = openai
        self._client = openai.OpenAI(base_url=self.base_url, api_key=api_key or "EMPTY", timeout=timeout_s, max_retries=0)

    @classmethod
    def from_config(cls, cfg: LLMConfig) -> "OpenAIClient":
        return cls(cfg.model, base_url=cfg.base_url, api_key=os.environ.get(cfg.api_key_env), timeout_s=cfg.timeout_s,
                   max_retries=cfg.max_retries, backoff_s=cfg.backoff_s, backoff_max_s=cfg.backoff_max_s,
                   max_concurrency=cfg.max_concurrency, default_params=cfg.params())

    def _call_once(self, messages: list[Message], params: dict[str, Any]) -> Completion:
        oa = self._openai
        kwargs = {k: params[k] for k in ("temperature", "top_p", "max_tokens", "seed", "stop") if k in params}
        try:
            resp = self._client.chat.completions.create(model=self.model, messages=messages, **kwargs)  # type: ignore[arg-type]
        except oa.APITimeoutError as exc:
            raise LLMError(f"{self._where()}: timed out: {exc}", retryable=True, kind="timeout") from None
        except oa.APIConnectionError as exc:
            raise LLMError(f"{self._where()}: connection failed: {exc}", retryable=True, kind="connection") from None
        except oa.RateLimitError as exc:
            raise LLMError(f"{self._where()}: rate limited (429): {_msg(exc)}", retryable=True, kind="rate_limit") from None
        except oa.InternalServerError as exc:
            raise LLMError(f"{self._where()}: server error {exc.status_code}: {_msg(exc)}", retryable=True, kind="server") from None
        except oa.APIStatusError as exc:
            retry = exc.status_code in (408, 409) or exc.status_code >= 500
            raise LLMError(f"{self._where()}: refused with HTTP {exc.status_code}: {_msg(exc)}", retryable=retry,
                           kind="server" if retry else "rejected") from None
        except oa.APIError as exc:
            raise LLMError(f"{self._where()}: bad response: {exc}", retryable=True, kind="server") from None
        if not resp.choices:
            raise LLMError(f"{self._where()}: reply has no choices", retryable=True, kind="server")
        choice = resp.choices[0]
        usage = resp.usage
        return Completion(text=choice.message.content or "", model=resp.model or self.model,
                          prompt_tokens=getattr(usage, "prompt_tokens", 0) or 0,
                          completion_tokens=getattr(usage, "completion_tokens", 0) or 0,
                          finish_reason=choice.finish_reason)

    def _where(self) -> str:
        return f"{self.base_url or 'api.openai.com'} ({self.model})"


def _msg(exc: Exception) -> str:
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        err = body.get("error", body)
        if isinstance(err, dict) and err.get("message"):
            return str(err["message"])[:300]
        if isinstance(err, str):
            return err[:300]
    return str(exc)[:300]
