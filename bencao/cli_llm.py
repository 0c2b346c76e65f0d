"""``bencao llm serve``: a local model behind an OpenAI-compatible endpoint.

Every LLM role of bencao (teacher, understanding, selector/scorer, planner, CoT model, generator, judge)
then reaches it by URL exactly as it would reach vLLM: ``--llm NAME@http://127.0.0.1:8001/v1``, or a recipe's
``llm: {backend: openai, model: NAME, base_url: ...}``. The server answers ``/v1/chat/completions``
(with ``logprobs``/``top_logprobs`` for one-token replies, so multiple-choice letters are scored over HTTP,
and ``response_format: json_schema`` decoded under the schema by llama.cpp) and ``/v1/models``.
"""

from __future__ import annotations

from typing import Optional

import typer

llm_app = typer.Typer(help="Local LLMs: serve an installed model (or any GGUF / transformers folder) over an OpenAI-compatible API.",
                      no_args_is_help=True)

ENGINES = ("auto", "llama-cpp", "local-hf")


def pick_engine(engine: str, model: str) -> str:
    """``auto``: llama.cpp when llama-cpp-python is installed and the model has a GGUF file, else transformers."""
    if engine != "auto":
        return engine
    import importlib.util

    if importlib.util.find_spec("llama_cpp") is None:
        return "local-hf"
    from bencao.errors import ConfigError
    from bencao.llm.llama_cpp import gguf_path_of

    try:
        gguf_path_of(model)
    except ConfigError:
        return "local-hf"
    return "llama-cpp"


@llm_app.command("serve")
def serve_cmd(
    model: str = typer.Option(..., "--model", "-m", help="An installed model's name (bencao models list), a .gguf file or a "
                              "transformers folder."),
    engine: str = typer.Option("auto", "--engine", help="auto | llama-cpp (the GGUF through llama-cpp-python) | local-hf "
                               "(transformers on the converted folder). auto: llama-cpp when it is installed and there is a GGUF."),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to listen on."),
    port: int = typer.Option(8001, "--port", help="Port to listen on."),
    served_name: Optional[str] = typer.Option(None, "--served-name", help="Model name clients send (default: --model)."),
    n_ctx: int = typer.Option(4096, "--n-ctx", help="llama-cpp: context length in tokens."),
    threads: Optional[int] = typer.Option(None, "--threads", help="llama-cpp: CPU threads (default: every core)."),
    dtype: str = typer.Option("bfloat16", "--dtype", help="local-hf: bfloat16 | float32 | float16 | auto."),
) -> None:
    """Serve a local model at http://HOST:PORT/v1 (chat completions with logprobs, JSON-schema replies, /v1/models)."""
    from bencao.errors import ConfigError
    from bencao.llm.base import LLMConfig
    from bencao.llm.local_server import create_app, serve_forever

    if engine not in ENGINES:
        raise ConfigError(f"--engine {engine!r}: choose one of {', '.join(ENGINES)}")
    if not 0 < port < 65536:
        raise ConfigError(f"--port {port}: must be between 1 and 65535")
    chosen = pick_engine(engine, model)
    from bencao.llm import registry

    cfg = LLMConfig(backend=chosen, model=model, n_ctx=n_ctx, n_threads=threads, dtype=dtype, device="auto", temperature=0.0)
    client = registry.BACKENDS[chosen](cfg)
    name = served_name or model
    typer.echo(f"serving {model} with {chosen} at http://{host}:{port}/v1 as model {name!r}", err=True)
    serve_forever(create_app(client, name), host, port)
