"""A minimal OpenAI-compatible server (``/v1/chat/completions``, ``/v1/models``) over any client.

It exists so the HTTP path can be exercised end to end on one machine: the ``openai`` package
talks to it exactly as to vLLM. Backed by :class:`LocalHFClient` it serves a real local model.
(The serving package offers the product's own API server; this one is the small stand-in.)

    with serve_in_thread(create_app(client), port=0) as base_url:
        OpenAIClient(model, base_url=base_url).complete([...])

For load tests and the throughput benchmark it can stand in for a busy serving engine:
``latency_s`` holds every request that long (asynchronously: thousands may wait at once), and
:class:`ServerStats` counts the requests in flight server-side (current, peak, total). From a
shell, with a fixed reply::

    python -m bencao.llm.local_server --port 8000 --latency-s 0.5 \\
        --reply '{"triples": [], "entities": [], "relations": []}'
"""

# (no `from __future__ import annotations`: FastAPI must see the request models, defined in create_app)

import argparse
import asyncio
import contextlib
import socket
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Iterator

from bencao.llm.base import BaseClient, Completion, LLMClient, LLMError, Message


@dataclass
class ServerStats:
    """Requests seen by the server: in flight now, the most at once, in all."""

    in_flight: int = 0
    peak: int = 0
    total: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def enter(self) -> None:
        with self._lock:
            self.in_flight += 1
            self.total += 1
            self.peak = max(self.peak, self.in_flight)

    def leave(self) -> None:
        with self._lock:
            self.in_flight -= 1

    def reset(self) -> None:
        with self._lock:
            self.in_flight = self.peak = self.total = 0


class FixedReplyClient(BaseClient):
    """Answers every request with the same text (a load-test stand-in for a remote teacher)."""

    def __init__(self, reply: str, model: str = "fixed", **kw: Any):
        kw.setdefault("max_concurrency", 1 << 20)
        super().__init__(**kw)
        self.model = model
        self.reply = reply

    async def _acall_once(self, messages: list[Message], params: dict[str, Any]) -> Completion:
        return Completion(text=self.reply, model=self.model, prompt_tokens=sum(len(m["content"]) for m in messages),
                          completion_tokens=len(self.reply), finish_reason="stop")


def create_app(client: LLMClient, model_name: str | None = None, *, latency_s: float = 0.0, stats: ServerStats | None = None) -> Any:
    from fastapi import FastAPI, HTTPException
    from pydantic import BaseModel

    from bencao.llm import aio

    served = model_name or client.model
    stats = stats if stats is not None else ServerStats()

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
        stop: list[str] | str | None = None
        repetition_penalty: float | None = None
        logprobs: bool | None = None
        top_logprobs: int | None = None
        response_format: dict[str, Any] | None = None
        add_generation_prompt: bool | None = None  # vLLM's chat extras: a final assistant message continued
        continue_final_message: bool | None = None

    app = FastAPI(title="bencao local LLM")
    app.state.stats = stats

    @app.get("/stats")
    def get_stats() -> dict[str, int]:
        """Requests in flight now, the most at once and in all (since start or the last reset)."""
        return {"in_flight": stats.in_flight, "peak": stats.peak, "total": stats.total}

    @app.post("/stats/reset")
    def reset_stats() -> dict[str, bool]:
        stats.reset()
        return {"reset": True}

    @app.get("/v1/models")
    def models() -> dict[str, Any]:
        return {"object": "list", "data": [{"id": served, "object": "model", "owned_by": "bencao"}]}

    @app.post("/v1/chat/completions")
    async def chat(req: ChatRequest) -> dict[str, Any]:
        stats.enter()
        try:
            if req.model != served:
                raise HTTPException(status_code=404, detail=f"model {req.model!r} not served here; this server has {served!r}")
            if latency_s > 0:
                await asyncio.sleep(latency_s)
            params = {k: v for k, v in {"temperature": req.temperature, "top_p": req.top_p, "max_tokens": req.max_tokens,
                                        "seed": req.seed, "stop": req.stop, "repetition_penalty": req.repetition_penalty}.items()
                      if v is not None}
            messages = [m.model_dump() for m in req.messages]
            prefix = ""
            if req.continue_final_message:
                if not messages or messages[-1]["role"] != "assistant":
                    raise HTTPException(status_code=400, detail="continue_final_message needs a final assistant message")
                prefix = messages.pop()["content"]
            fmt = req.response_format or {}
            if fmt.get("type") == "json_schema":
                schema = (fmt.get("json_schema") or {}).get("schema")
                if isinstance(schema, dict):
                    params["json_schema"] = schema
            try:
                # the client's own requests run on bencao's LLM loop, not on the server's
                if req.logprobs or prefix:
                    if (req.max_tokens or 1) != 1:
                        raise HTTPException(status_code=400, detail="this server returns logprobs (and continues a final "
                                                                    "assistant message) for one-token replies only: max_tokens=1")
                    k = max(1, min(int(req.top_logprobs or 1), 20))
                    sc = await asyncio.wrap_future(aio.submit(client.ascore_choices(messages, [], prefix=prefix, top_k=k)))
                    return _logprob_reply(served, sc, k if req.logprobs else 0)
                c = await asyncio.wrap_future(aio.submit(client.acomplete(messages, **params)))
            except LLMError as exc:
                if exc.kind == "rate_limit":
                    after = {"Retry-After": f"{exc.retry_after_s:g}"} if exc.retry_after_s is not None else None
                    raise HTTPException(status_code=429, detail=str(exc), headers=after) from None
                raise HTTPException(status_code=503 if exc.retryable else 400, detail=str(exc)) from None
        finally:
            stats.leave()
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion", "created": int(time.time()), "model": served,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": c.text}, "finish_reason": c.finish_reason or "stop"}],
            "usage": {"prompt_tokens": c.prompt_tokens, "completion_tokens": c.completion_tokens,
                      "total_tokens": c.prompt_tokens + c.completion_tokens},
        }

    return app


def _logprob_reply(served: str, sc: Any, top_logprobs: int) -> dict[str, Any]:
    """A one-token chat completion from next-token scores, in the OpenAI ``logprobs`` shape."""
    tok, lp = sc.top[0] if sc.top else ("", 0.0)
    choice: dict[str, Any] = {"index": 0, "message": {"role": "assistant", "content": tok}, "finish_reason": "length"}
    if top_logprobs:
        choice["logprobs"] = {"content": [{"token": tok, "logprob": lp,
                                           "top_logprobs": [{"token": t, "logprob": v} for t, v in sc.top[:top_logprobs]]}]}
    return {"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion", "created": int(time.time()), "model": served,
            "choices": [choice], "usage": {"prompt_tokens": sc.prompt_tokens, "completion_tokens": 1, "total_tokens": sc.prompt_tokens + 1}}


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _server(app: Any, host: str, port: int) -> Any:
    import uvicorn

    # backlog: a burst of hundreds of new connections must not be refused by the listen queue
    return uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="off", backlog=4096,
                                         timeout_keep_alive=60))


@contextlib.contextmanager
def serve_in_thread(app: Any, host: str = "127.0.0.1", port: int = 0, startup_timeout_s: float = 30.0) -> Iterator[str]:
    """Run ``app`` with uvicorn in a background thread; yields the ``/v1`` base URL; stops on exit."""
    port = port or free_port(host)
    server = _server(app, host, port)
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


def serve_forever(app: Any, host: str, port: int) -> None:
    """Run ``app`` in the foreground until interrupted."""
    _server(app, host, port).run()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bencao.llm.local_server",
                                 description="OpenAI-compatible loopback server with a fixed reply and an artificial latency.")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument("--model", default="fixed", help="Model name served (requests for another are refused with 404).")
    ap.add_argument("--latency-s", type=float, default=0.0, help="Seconds every request is held before its reply.")
    ap.add_argument("--reply", default='{"triples": [], "entities": [], "relations": []}', help="Text of every reply.")
    args = ap.parse_args(argv)
    app = create_app(FixedReplyClient(args.reply, model=args.model), latency_s=args.latency_s)
    _server(app, args.host, args.port).run()


if __name__ == "__main__":
    main()
