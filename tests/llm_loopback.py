"""A scripted LLM behind the project's own OpenAI-compatible loopback server (``bencao.llm.local_server``).

The endpoint is the one boundary a fake is allowed at: every stage under test talks HTTP to it
through the real ``openai`` backend, exactly as to vLLM. ``route(messages) -> reply`` decides each
reply from the request (tests route by the stage's prompt); every request is recorded.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any, Callable, Iterator

from llm_fixtures import ScriptedClient

from bencao.llm.local_server import create_app, serve_in_thread

Route = Callable[[list[dict[str, str]]], str]


class Endpoint:
    def __init__(self, base_url: str, client: ScriptedClient):
        self.base_url = base_url
        self.client = client
        self._lock = threading.Lock()

    @property
    def calls(self) -> list[list[dict[str, str]]]:
        return list(self.client.calls)

    def calls_of(self, marker: str) -> list[list[dict[str, str]]]:
        """Requests whose system prompt contains ``marker``."""
        return [c for c in self.client.calls if marker in c[0]["content"]]

    def llm(self, **extra: Any) -> dict[str, Any]:
        """An LLM block (as in a recipe) pointing at this endpoint."""
        return {"backend": "openai", "model": "scripted", "base_url": self.base_url, "cache": "none", "max_retries": 0, **extra}

    def overrides(self, prefix: str) -> list[str]:
        """``--set`` arguments that point the LLM block ``prefix`` at this endpoint."""
        return [a for k, v in self.llm().items() for a in ("--set", f"{prefix}.{k}={v}")]


@contextlib.contextmanager
def scripted_endpoint(route: Route) -> Iterator[Endpoint]:
    client = ScriptedClient(route, model="scripted", max_concurrency=8)
    with serve_in_thread(create_app(client)) as base_url:
        yield Endpoint(base_url, client)


def stage_of(messages: list[dict[str, str]]) -> str:
    """Which pipeline stage sent a request, from its system prompt (bencao/prompts/*.jinja)."""
    system = messages[0]["content"] if messages and messages[0]["role"] == "system" else ""
    user = messages[-1]["content"]
    for marker, stage in (("entity choice", "select"), ("实体选择", "select"), ("confidence scorer", "score"), ("置信度评分", "score"),
                          ("synonym generation", "synonyms"), ("同义词生成", "synonyms"), ("区分患者信息", "understand"),
                          ("separate the patient", "understand"), ("规划关系路径", "plan"), ("plan relation paths", "plan"),
                          ("NOT_IN_KB", "generate_qa"), ("食疗与营养推荐", "generate_rec"), ("recommend foods", "generate_rec")):
        if marker in system:
            return stage
    if "（头实体，关系，尾实体）" in user or "(head, relation, tail)" in user:
        return "cot"
    return "generate"
