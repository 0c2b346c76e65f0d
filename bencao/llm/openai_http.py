"""Any OpenAI-compatible chat endpoint (vLLM, SGLang, cloud APIs) through ``openai.AsyncOpenAI``.

One async client on the shared LLM loop carries every request (aiohttp connection pool when the
``openai[aiohttp]`` extra is installed, as bencao's dependencies ask), so ``llm.max_concurrency``
requests in flight cost no thread each. Retries are the openai client's own (``llm.max_retries``):
timeouts, refused connections, 408/409/429 and 5xx, exponential back-off from 0.5 s to 8 s with
jitter, and a server's ``Retry-After`` (up to two minutes) honoured. What is still failing after
them is mapped to :class:`LLMError` (``retryable`` marks a transient kind, for the skip log).
"""

from __future__ import annotations

import os
from typing import Any

from bencao.llm.base import BaseClient, Completion, LLMConfig, LLMError, Message


def resolve_base_url(cfg_url: str | None) -> str | None:
    return cfg_url or os.environ.get("BENCAO_LLM_BASE_URL") or os.environ.get("OPENAI_BASE_URL") or None


class OpenAIClient(BaseClient):
    def __init__(self, model: str, *, base_url: str | None = None, api_key: str | None = None, timeout_s: float = 120.0,
                 max_retries: int = 3, **kw: Any):
        super().__init__(max_retries=max_retries, **kw)
        import openai

        self.model = model
        self.cache_id = model
        self.base_url = resolve_base_url(base_url)
        self.api_key = api_key or "EMPTY"
        self.timeout_s = timeout_s
        self._openai = openai
        self._client: Any = None  # AsyncOpenAI, made on the LLM loop at the first request

    @classmethod
    def from_config(cls, cfg: LLMConfig) -> "OpenAIClient":
        return cls(cfg.model, base_url=cfg.base_url, api_key=os.environ.get(cfg.api_key_env), timeout_s=cfg.timeout_s,
                   max_retries=cfg.max_retries, max_concurrency=cfg.max_concurrency, default_params=cfg.params())

    def _async_client(self) -> Any:
        if self._client is None:
            oa = self._openai
            # A connection per request in flight, all kept alive. aiohttp's pool (openai's aiohttp
            # transport) costs a third of httpx's CPU per request at hundreds in flight.
            limits = type(oa.DEFAULT_CONNECTION_LIMITS)(max_connections=max(self.max_concurrency, 100),
                                                        max_keepalive_connections=max(self.max_concurrency, 100))
            try:
                http = oa.DefaultAioHttpClient(limits=limits)
            except (AttributeError, RuntimeError):  # an openai without the aiohttp extra
                http = oa.DefaultAsyncHttpxClient(limits=limits)
            self._client = oa.AsyncOpenAI(base_url=self.base_url, api_key=self.api_key, timeout=self.timeout_s,
                                          max_retries=self.max_retries, http_client=http)
            from bencao.llm import aio

            aio.close_at_exit(self._client.close)
        return self._client

    async def _acall_once(self, messages: list[Message], params: dict[str, Any]) -> Completion:
        oa = self._openai
        body = {"model": self.model, "messages": messages,
                **{k: params[k] for k in ("temperature", "top_p", "max_tokens", "seed", "stop") if k in params}}
        tries = f"gave up after {self.max_retries + 1} attempts"
        try:
            # The SDK's generic POST (its documented way to any endpoint): the same retries, errors and
            # connection handling as chat.completions.create, without re-validating our own plain
            # dicts through its typed-parameter transforms (half of its CPU per request).
            resp = await self._async_client().post("/chat/completions", body=body, cast_to=dict)
        except oa.APITimeoutError as exc:
            if _refused(exc):  # the aiohttp transport reports a refused connection as a connect timeout
                raise LLMError(f"{self._where()}: connection refused ({tries})", retryable=True, kind="connection") from None
            raise LLMError(f"{self._where()}: timed out ({tries}): {exc}", retryable=True, kind="timeout") from None
        except oa.APIConnectionError as exc:
            raise LLMError(f"{self._where()}: connection failed ({tries}): {exc}", retryable=True, kind="connection") from None
        except oa.RateLimitError as exc:
            raise LLMError(f"{self._where()}: rate limited (429, {tries}): {_msg(exc)}", retryable=True, kind="rate_limit") from None
        except oa.InternalServerError as exc:
            raise LLMError(f"{self._where()}: server error {exc.status_code} ({tries}): {_msg(exc)}", retryable=True, kind="server") from None
        except oa.APIStatusError as exc:
            retry = exc.status_code in (408, 409) or exc.status_code >= 500
            raise LLMError(f"{self._where()}: refused with HTTP {exc.status_code}{f' ({tries})' if retry else ''}: {_msg(exc)}",
                           retryable=retry, kind="server" if retry else "rejected") from None
        except oa.APIError as exc:
            raise LLMError(f"{self._where()}: bad response: {exc}", retryable=True, kind="server") from None
        choices = resp.get("choices") if isinstance(resp, dict) else None
        if not choices or not isinstance(choices[0], dict):
            raise LLMError(f"{self._where()}: reply has no choices", retryable=True, kind="server")
        choice = choices[0]
        usage = resp.get("usage") or {}
        return Completion(text=(choice.get("message") or {}).get("content") or "", model=resp.get("model") or self.model,
                          prompt_tokens=int(usage.get("prompt_tokens") or 0), completion_tokens=int(usage.get("completion_tokens") or 0),
                          finish_reason=choice.get("finish_reason"))

    def _where(self) -> str:
        return f"{self.base_url or 'api.openai.com'} ({self.model})"


def _refused(exc: BaseException) -> bool:
    seen: BaseException | None = exc
    for _ in range(8):
        if seen is None:
            return False
        if isinstance(seen, ConnectionRefusedError):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _msg(exc: Exception) -> str:
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        err = body.get("error", body)
        if isinstance(err, dict) and err.get("message"):
            return str(err["message"])[:300]
        if isinstance(err, str):
            return err[:300]
    return str(exc)[:300]
