"""A minimal OpenAI-compatible server (``/v1/chat/completions``, ``/v1/models``) over any client.

It exists so the HTTP path can be exercised end to end on one machine: the ``openai`` package
talks to it exactly as to vLLM. Backed by :class:`LocalHFClient` it serves a real local model.
(The serving package offers the product's own API server; this one is the small stand-in.)

    with serve_in_thread(create_app(client), port=0) as base_url:
        OpenAIClient(model, base_url=base_url).complete([...])
"""

# (no `from __future__ import annotations`: FastAPI must see the request models, defined in create_app)

import contextlib
import socket
import threading
import time
import uuid
from typing import Any, Iterator

from bencao.llm.base import LLMClient, LLMError


def create_app(client: LLMClient, model_name: str | None = None) -> Any:
    from fastapi import FastAPI, HTTPException
    from pydantic import BaseModel

    served = model_name or client.model

    class ChatMessage(BaseModel):
        role: str
        content: str

    class ChatRequest(BaseModel):
        model: str
        messages: list[ChatMessage]
        temperature: float | None = None
        top_p: float | None = None
        max_tokens: int | None = None
        seed: int | None = None

    app = FastAPI(title="bencao local LLM")

    @app.get("/v1/models")
    def models() -> dict[str, Any]:
        return {"object": "list", "data": [{"id": served, "object": "model", "owned_by": "bencao"}]}

    @app.post("/v1/chat/completions")
    def chat(req: ChatRequest) -> dict[str, Any]:
        if req.model != served:
            raise HTTPException(status_code=404, detail=f"model {req.model!r} not served here; this server has {served!r}")
        params = {k: v for k, v in {"temperature": req.temperature, "top_p": req.top_p, "max_tokens": req.max_tokens,
                                    "seed": req.seed}.items() if v is not None}
        try:
            c = client.complete([m.model_dump() for m in req.messages], **params)
        except LLMError as exc:
            raise HTTPException(status_code=503 if exc.retryable else 400, detail=str(exc)) from None
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion", "created": int(time.time()), "model": served,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": c.text}, "finish_reason": c.finish_reason or "stop"}],
            "usage": {"prompt_tokens": c.prompt_tokens, "completion_tokens": c.completion_tokens,
                      "total_tokens": c.prompt_tokens + c.completion_tokens},
        }

    return app


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def serve_in_thread(app: Any, host: str = "127.0.0.1", port: int = 0, startup_timeout_s: float = 30.0) -> Iterator[str]:
    """Run ``app`` with uvicorn in a background thread; yields the ``/v1`` base URL; stops on exit."""
    import uvicorn

    port = port or free_port(host)
    server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, name="bencao-llm-server", daemon=True)
    thread.start()
    deadline = time.monotonic() + startup_timeout_s
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            server.should_exit = True
            raise RuntimeError(f"local LLM server did not start on {host}:{port}")
        time.sleep(0.02)
    try:
        yield f"http://{host}:{port}/v1"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
