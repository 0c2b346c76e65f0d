"""LLM clients: one protocol (:class:`LLMClient`), backends by name, a response cache, structured replies."""

from bencao.llm.base import BaseClient, Completion, LLMClient, LLMConfig, LLMError, Message
from bencao.llm.registry import BACKENDS, make_client, register_backend, with_cache
from bencao.llm.structured import (StructuredResult, acomplete_json, acomplete_json_many, complete_json, complete_json_many, parse_json,
                                   validate)

__all__ = ["BACKENDS", "BaseClient", "Completion", "LLMClient", "LLMConfig", "LLMError", "Message", "StructuredResult",
           "acomplete_json", "acomplete_json_many", "complete_json", "complete_json_many", "make_client", "parse_json", "register_backend", "validate", "with_cache"]
