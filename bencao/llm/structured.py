"""Structured replies: find the JSON in a reply, validate it against a JSON Schema, repair once.

``complete_json`` never raises for a bad reply: it returns a :class:`StructuredResult` whose
``error`` says what went wrong (not JSON, schema violation, endpoint failure) after the single
repair attempt, so the caller records the item as skipped and the run goes on. ``acomplete_json`` and
``acomplete_json_many`` are the same for coroutines on the LLM event loop (the data-generation runner).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from bencao.llm.base import Completion, LLMClient, LLMError, Message

_THINK_RE = re.compile(r"<think>.*?</think>", re.DOTALL)
_FENCE_RE = re.compile(r"```(?:json|JSON)?\s*\n?(.*?)```", re.DOTALL)

REPAIR_PROMPT = {
    "zh": "你的上一条回复无法使用：{error}。请只输出一个符合要求格式的 JSON，不要任何其他文字。",
    "en": "Your previous reply could not be used: {error}. Reply again with only one JSON value in the required format, nothing else.",
}


class StructuredError(ValueError):
    """A reply that is not the JSON we asked for; the message says why, in one line."""


def parse_json(text: str) -> Any:
    """The first JSON object/array in ``text``: reasoning (<think>) and code fences are skipped."""
    body = _THINK_RE.sub("", text).strip()
    if "<think>" in body:  # an unterminated think block: take what follows the last marker
        body = body.rsplit("</think>", 1)[-1]
    candidates = [m.group(1).strip() for m in _FENCE_RE.finditer(body)] + [body]
    dec = json.JSONDecoder()
    for cand in candidates:
        try:
            return json.loads(cand)
        except json.JSONDecodeError:
            pass
        for i, ch in enumerate(cand):
            if ch in "{[":
                try:
                    obj, _ = dec.raw_decode(cand, i)
                    return obj
                except json.JSONDecodeError:
                    continue
    snippet = body[:60].replace("\n", " ")
    raise StructuredError(f"reply is not JSON (starts {snippet!r})" if body else "reply is empty")


def validate(obj: Any, schema: dict[str, Any] | None) -> None:
    """Raise :class:`StructuredError` naming the first schema violation and where it is."""
    if not schema:
        return
    import jsonschema

    validator = jsonschema.Draft202012Validator(schema)
    err = jsonschema.exceptions.best_match(validator.iter_errors(obj))
    if err is not None:
        where = "/".join(str(p) for p in err.absolute_path) or "(top level)"
        raise StructuredError(f"schema violation at {where}: {err.message[:200]}")


def parse_and_validate(text: str, schema: dict[str, Any] | None) -> Any:
    obj = parse_json(text)
    validate(obj, schema)
    return obj


@dataclass
class StructuredResult:
    value: Any = None
    error: str | None = None
    kind: str | None = None  # not_json | schema | llm_error | None
    completions: list[Completion] = field(default_factory=list)
    repaired: bool = False

    @property
    def ok(self) -> bool:
        return self.error is None


def _kind(err: StructuredError) -> str:
    return "schema" if str(err).startswith("schema violation") else "not_json"


def complete_json(client: LLMClient, messages: list[Message], schema: dict[str, Any] | None = None, *, lang: str = "en",
                  repair: bool = True, decode_schema: dict[str, Any] | None = None, **params: Any) -> StructuredResult:
    """Ask, parse, validate; on a bad reply ask once more with the error; never raises.

    A client that decodes under a JSON Schema (``supports_json_schema``: llama.cpp, an endpoint with
    ``llm.json_schema: true``) is sent ``decode_schema`` when given, else ``schema``. ``decode_schema`` is the
    stricter form a grammar can enforce — the graph's relation names as an enum, at most as many items as the
    stage keeps — while the reply is still validated against ``schema``, so an engine without grammars gets
    the same per-item checks (an unknown relation dropped and counted, not the whole reply refused)."""
    return complete_json_many(client, [messages], schema, lang=lang, repair=repair, decode_schema=decode_schema, **params)[0]


def complete_json_many(client: LLMClient, batch: list[list[Message]], schema: dict[str, Any] | None = None, *, lang: str = "en",
                       repair: bool = True, decode_schema: dict[str, Any] | None = None, **params: Any) -> list[StructuredResult]:
    """``complete_json`` for many requests: one concurrent round, then one concurrent repair round."""
    from bencao.llm import aio

    return aio.run(acomplete_json_many(client, batch, schema, lang=lang, repair=repair, decode_schema=decode_schema, **params))


async def acomplete_json(client: LLMClient, messages: list[Message], schema: dict[str, Any] | None = None, *, lang: str = "en",
                         repair: bool = True, decode_schema: dict[str, Any] | None = None, **params: Any) -> StructuredResult:
    """:func:`complete_json` for coroutines on the LLM loop."""
    return (await acomplete_json_many(client, [messages], schema, lang=lang, repair=repair, decode_schema=decode_schema, **params))[0]


async def acomplete_json_many(client: LLMClient, batch: list[list[Message]], schema: dict[str, Any] | None = None, *,
                              lang: str = "en", repair: bool = True, decode_schema: dict[str, Any] | None = None,
                              **params: Any) -> list[StructuredResult]:
    """:func:`complete_json_many` for coroutines on the LLM loop."""
    results = [StructuredResult() for _ in batch]
    decode = decode_schema or schema
    if decode and getattr(client, "supports_json_schema", False) and "json_schema" not in params:
        params = {**params, "json_schema": decode}  # decoded under the schema where the engine can (llama.cpp grammars, vLLM)
    replies = await client.acomplete_many(batch, **params)
    to_repair: list[int] = []
    for i, r in enumerate(replies):
        res = results[i]
        if isinstance(r, LLMError):
            res.error, res.kind = str(r), "llm_error"
            continue
        res.completions.append(r)
        try:
            res.value = parse_and_validate(r.text, schema)
        except StructuredError as exc:
            res.error, res.kind = str(exc), _kind(exc)
            to_repair.append(i)
    if repair and to_repair:
        prompt = REPAIR_PROMPT.get(lang, REPAIR_PROMPT["en"])
        follow = [[*batch[i], {"role": "assistant", "content": results[i].completions[-1].text},
                   {"role": "user", "content": prompt.format(error=results[i].error)}] for i in to_repair]
        for i, r in zip(to_repair, await client.acomplete_many(follow, **params)):
            res = results[i]
            res.repaired = True
            if isinstance(r, LLMError):
                res.error, res.kind = f"{res.error}; repair failed: {r}", "llm_error"
                continue
            res.completions.append(r)
            try:
                res.value = parse_and_validate(r.text, schema)
                res.error = res.kind = None
            except StructuredError as exc:
                res.error, res.kind = f"{exc} (after one repair)", _kind(exc)
    return results
