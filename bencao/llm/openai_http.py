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

from bencao.llm.base import BaseClient, ChoiceScores, Completion, LLMConfig, LLMError, Message


def resolve_base_url(cfg_url: str | None) -> str | None:
    return cfg_url or os.environ.get("BENCAO_LLM_BASE_URL") or os.environ.get("OPENAI_BASE_URL") or None


class OpenAIClient(BaseClient):
    #: choices are scored from the reply's ``top_logprobs`` (vLLM, SGLang, llama.cpp's server, OpenAI, bencao llm serve)
    supports_scoring = True

    def __init__(self, model: str, *, base_url: str | None = None, api_key: str | None = None, timeout_s: float = 120.0,
                 max_retries: int = 3, json_schema: bool = False, **kw: Any):
        super().__init__(max_retries=max_retries, **kw)
        self.supports_json_schema = bool(json_schema)
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
                   max_retries=cfg.max_retries, max_concurrency=cfg.max_concurrency, default_params=cfg.params(),
                   json_schema=cfg.json_schema)

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
        body = {"model": self.model, "messages": messages,
                **{k: params[k] for k in ("temperature", "top_p", "max_tokens", "seed", "stop", "repetition_penalty") if k in params}}
        if params.get("json_schema") and self.supports_json_schema:
            body["response_format"] = {"type": "json_schema", "json_schema": {"name": "reply", "schema": params["json_schema"]}}
        resp = await self._post(body)
        choices = resp.get("choices") if isinstance(resp, dict) else None
        if not choices or not isinstance(choices[0], dict):
            raise LLMError(f"{self._where()}: reply has no choices", retryable=True, kind="server")
        choice = choices[0]
        usage = resp.get("usage") or {}
        return Completion(text=(choice.get("message") or {}).get("content") or "", model=resp.get("model") or self.model,
                          prompt_tokens=int(usage.get("prompt_tokens") or 0), completion_tokens=int(usage.get("completion_tokens") or 0),
                          finish_reason=choice.get("finish_reason"))

    async def _ascore_once(self, messages: list[Message], choices: list[str], prefix: str, top_k: int) -> ChoiceScores:
        """One-token reply with ``top_logprobs``; a choice is scored by the top tokens that spell it (None if absent).
        A ``prefix`` is sent as the start of the assistant's reply (``continue_final_message``, as vLLM takes it)."""
        import math

        msgs = list(messages)
        body: dict[str, Any] = {"model": self.model, "max_tokens": 1, "temperature": 0.0, "logprobs": True,
                                "top_logprobs": max(1, min(int(top_k), 20))}
        if prefix:
            msgs.append({"role": "assistant", "content": prefix})
            body.update(add_generation_prompt=False, continue_final_message=True)
        body["messages"] = msgs
        resp = await self._post(body)
        try:
            first = resp["choices"][0]["logprobs"]["content"][0]
            top = [(str(t["token"]), float(t["logprob"])) for t in first.get("top_logprobs") or []]
        except (KeyError, IndexError, TypeError, ValueError):
            raise LLMError(f"{self._where()}: the reply has no logprobs (the endpoint does not return top_logprobs)",
                           kind="unsupported") from None
        scores: dict[str, float | None] = {}
        for c in choices:
            ps = [lp for tok, lp in top if tok.strip() == c.strip()]
            scores[c] = math.log(sum(math.exp(lp) for lp in ps)) if ps else None
        usage = resp.get("usage") or {}
        return ChoiceScores(scores=scores, top=top, model=resp.get("model") or self.model,
                            prompt_tokens=int(usage.get("prompt_tokens") or 0))

    async def _post(self, body: dict[str, Any]) -> dict[str, Any]:
        oa = self._openai
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
        if not isinstance(resp, dict):
            raise LLMError(f"{self._where()}: reply is not a JSON object", retryable=True, kind="server")
        return resp

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
        if isinstance(err, dict) and isinstance(err.get("detail"), str):  # FastAPI's HTTPException body
            return err["detail"][:300]
        if isinstance(err, str):
            return err[:300]
    return str(exc)[:300]
