"""`bencao ask`, `bencao serve` (HTTP API + web page) and `bencao infer` (offline batch answers).

All three run the one answering pipeline from the same serving config (``--config``), so what
``ask`` prints, what ``serve`` answers and what ``infer`` writes come from the same stages.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from bencao import cliopts

app = typer.Typer()

GRAPH = cliopts.graph()
CONFIG = cliopts.config(f"Serving {cliopts.RECIPE}: retrieval, LLM stages, answerer; default: all defaults (no LLM, LLM-free answers).")
SET = cliopts.overrides("key=value override of the recipe (repeatable), e.g. -s linking.tau=0.6 -s generator.base_url=http://127.0.0.1:8000/v1.")
LLM = typer.Option(None, "--llm", help="Generator LLM: an endpoint URL (MODEL@URL to name the model) or a local model path.")
COT = typer.Option(None, "--cot", help="CoT model that decomposes the question into query triples: MODEL@URL, URL or a local path.")


def llm_spec_overrides(prefix: str, spec: str | None) -> list[str]:
    """``--llm``/``--cot`` shortcuts as overrides of an LLM block: ``[MODEL@]http(s)://...`` → openai, else a local path → local-hf."""
    if not spec:
        return []
    model, _, url = spec.rpartition("@") if "@" in spec and "://" in spec.split("@")[-1] else ("", "", spec)
    if url.startswith(("http://", "https://")):
        return [f"{prefix}.backend=openai", f"{prefix}.base_url={url}"] + ([f"{prefix}.model={model}"] if model else [])
    return [f"{prefix}.backend=local-hf", f"{prefix}.model={spec}"]


def load_config(config: Optional[Path], overrides: Optional[list[str]], llm: str | None = None, cot: str | None = None,  # noqa: ANN201
                graph: Optional[Path] = None):
    """The serving recipe: ``--config``; without it the one the graph's build recorded (the graph recipe's
    ``serving``: ``graph/classics`` records ``serving/classics``), said on stderr; else all defaults."""
    from bencao.serving.config import load_serve_config, recorded_serving_recipe

    if config is None and graph is not None:
        recorded = recorded_serving_recipe(graph)
        if recorded is not None:
            typer.echo(f"serving recipe: {recorded} (recorded by the graph's build; --config chooses another)", err=True)
            config = recorded
    return load_serve_config(config, [*(overrides or []), *llm_spec_overrides("generator", llm), *llm_spec_overrides("cot.llm", cot)])


def open_pipeline(graph: Path, cfg, **kw):  # noqa: ANN001, ANN201
    from bencao.errors import BencaoError
    from bencao.retrieval.graph.store import DB_NAME
    from bencao.serving.pipeline import AnswerPipeline

    if not (graph / DB_NAME).exists():
        raise BencaoError(f"{graph}: no graph here (expected {DB_NAME}); build one with `bencao graph build`")
    return AnswerPipeline(graph, cfg, **kw)


@app.command("ask")
def ask(
    question: str = typer.Argument(..., help="The question (Chinese or English)."),
    graph: Path = GRAPH,
    config: Optional[Path] = CONFIG,
    set_: Optional[list[str]] = SET,
    as_json: bool = typer.Option(False, "--json", help='Print {"question", "answer", ..., "evidence"} as JSON.'),
    option: Optional[list[str]] = typer.Option(None, "--option", help="Multiple-choice option 'A=text' (repeatable): the answer picks."),
    candidate: Optional[list[str]] = typer.Option(None, "--candidate", help="Recommendation candidate (repeatable): ranked (task rec)."),
    task: Optional[str] = typer.Option(None, "--task", help="qa | mcq | sd | tf | rec (default: mcq with --option, rec with "
                                                            "--candidate, else qa)."),
    llm: Optional[str] = LLM,
    cot: Optional[str] = COT,
) -> None:
    """Answer one question through the answering pipeline, with paths, triples and cited snippets (graph opened read-only)."""
    from bencao.errors import BencaoError
    from bencao.retrieval.evidence import path_heading
    from bencao.serving.tasks import Query

    if not question.strip():
        raise BencaoError("question is empty")
    opts: dict[str, str] = {}
    for o in option or []:
        if "=" not in o:
            raise BencaoError(f"--option {o!r}: expected LETTER=text")
        k, v = o.split("=", 1)
        opts[k.strip()] = v.strip()
    kind = task or ("mcq" if opts else "rec" if candidate else "qa")
    query = Query(question, task=kind, options=opts or None, candidates=list(candidate) if candidate else None)
    pipeline = open_pipeline(graph, load_config(config, set_, llm, cot, graph))
    a = pipeline.run([query])[0]
    if a.error:
        raise BencaoError(f"the generator failed: {a.error}")
    if as_json:
        typer.echo(json.dumps(a.to_dict(), ensure_ascii=False, indent=2))
        return
    from rich.console import Console
    from rich.markup import escape as esc  # the graph's and the sources' text is never rich markup ([FoodOn], [question])

    con = Console(highlight=False, soft_wrap=True)
    ev = a.evidence
    con.print(f"[bold]Q:[/bold] {esc(question)}")
    con.print(f"[bold]A:[/bold] {esc(a.answer or '')}")
    scores = (a.prediction or {}).get("scores")
    if isinstance(scores, dict):
        con.print("   scores: " + esc(", ".join(f"{k}={v:.3f}" for k, v in scores.items())))
    if ev is None:
        return
    lang = query.language
    if ev.entities:
        con.print("\n[bold]Entities[/bold]")
        for e in ev.entities[:8]:
            con.print(esc(f"  {e.name} ({e.id}, {e.type}) conf={e.confidence:.2f} [{'/'.join(e.roles)}] — {e.rationale}"))
    if ev.paths:
        con.print("\n[bold]Paths[/bold] (PathScore = ∏confidence × mean PageRank)")
        for p in ev.paths[:5]:
            con.print(esc(f"  {p.score:.5f}  {pipeline.graph_answerer.path_text(p, lang)}  (∏c={p.confidence_product:.2f}, PR={p.pagerank:.4f}"
                          f"{', planned' if p.planned_by == 'llm' else ''})"))
    if ev.triples:
        con.print("\n[bold]Triples[/bold]")
        for t in ev.triples[:8]:
            con.print(esc(f"  {pipeline.graph_answerer.fact(t, lang)}  (confidence {t.confidence:.2f}, {'/'.join(t.via)})"))
    if a.context is not None and a.citations:  # a generator's answer cites the numbered list it read
        con.print("\n[bold]Cited[/bold]")
        for c in a.citations:
            text = c["text"] if len(c["text"]) <= 160 else c["text"][:160] + "…"
            con.print(esc(f"  [{c['n']}] {c.get('heading') or ''}{' (generated)' if c.get('generated') else ''}\n      {text}"))
    elif ev.snippets:
        con.print("\n[bold]Snippets[/bold]")
        for r, s in zip(ev.references(), ev.snippets[:6]):
            text = s.text if len(s.text) <= 160 else s.text[:160] + "…"
            con.print(esc(f"  [{r['n']}] {path_heading(s.path)}{' (generated)' if s.generated else ''}\n      {text}"))
    if ev.is_empty():
        con.print("(no evidence found in the graph)")


@app.command("serve")
def serve(
    graph: Path = GRAPH,
    config: Optional[Path] = CONFIG,
    host: Optional[str] = typer.Option(None, help="Interface to listen on (default api.host, 127.0.0.1)."),
    port: Optional[int] = typer.Option(None, min=1, max=65535, help="TCP port, 1-65535 (default api.port, 8000)."),
    api_key: Optional[str] = typer.Option(None, "--api-key", help="Bearer key required on /v1/*. A key given here is visible to every user of the machine in `ps` "
                                                                    "and stays in the shell history: prefer the environment variable ($BENCAO_API_KEY, see "
                                                                    "api.api_key_env), which this option overrides."),
    set_: Optional[list[str]] = SET,
    llm: Optional[str] = LLM,
    cot: Optional[str] = COT,
) -> None:
    """Serve the OpenAI-compatible API (/v1/chat/completions, /v1/retrieve, /v1/models, /healthz) and the web page at /."""
    import uvicorn

    from bencao.serving.api import create_app, resolve_api_key
    from bencao.serving.guard import uvicorn_config

    cfg = load_config(config, set_, llm, cot, graph)
    pipeline = open_pipeline(graph, cfg)
    h, p = host or cfg.api.host, port if port is not None else cfg.api.port
    key = resolve_api_key(cfg.api, api_key)
    if key is None and h not in ("127.0.0.1", "localhost", "::1"):
        typer.echo(f"warning: serving on {h} without an API key; set ${cfg.api.api_key_env} or --api-key", err=True)
    app_ = create_app(pipeline, cfg.api, key, reload=lambda: open_pipeline(graph, cfg))  # reloads when the graph changes
    typer.echo(f"bencao serving {graph} on http://{h}:{p}/ (answers by {pipeline.info()['answerer']})", err=True)
    uvicorn.Server(uvicorn_config(app_, cfg.api, h, p)).run()  # header/keep-alive timeouts, per-client cap: serving/guard.py


@app.command("infer")
def infer(
    questions: Optional[Path] = typer.Argument(None, help="Questions JSONL (or --input): {\"id\",\"question\"} lines or benchmark records."),
    input_: Optional[Path] = cliopts.input_(help="Input file: questions JSONL (instead of the argument)."),
    output: Path = cliopts.out(True, "Output file: answers JSONL; appended to and resumed (ids already there are skipped)."),
    graph: Path = GRAPH,
    config: Optional[Path] = CONFIG,
    batch_size: Optional[int] = typer.Option(None, "--batch-size", help="Questions per batch (default infer.batch_size)."),
    set_: Optional[list[str]] = SET,
    llm: Optional[str] = LLM,
    cot: Optional[str] = COT,
) -> None:
    """Answer a file of questions with evidence, predictions and timings; safe to interrupt and run again.

    The last line is the run's throughput: questions/s, and the prompt and generated tokens/s of every LLM stage.
    """
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    from bencao.errors import BencaoError
    from bencao.serving.infer import read_questions, run_inference, summary_line

    src = input_ or questions
    if src is None:
        raise BencaoError("give the questions file (argument or --input FILE)")
    cfg = load_config(config, set_, llm, cot, graph)
    if batch_size is not None:
        cfg.infer.batch_size = batch_size
    read_questions(src)  # validate before loading models
    pipeline = open_pipeline(graph, cfg)
    with Progress(TextColumn("[bold]infer[/]"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), TimeRemainingColumn(),
                  console=Console(stderr=True), transient=True) as prog:
        task = prog.add_task("", total=None)

        def on_progress(done: int, total: int) -> None:
            prog.update(task, completed=done, total=total)

        res = run_inference(pipeline, src, output, cfg.infer, progress=on_progress)
    typer.echo(f"answered {res['answered']} of {res['total']} questions ({res['skipped']} already in {output}) -> {output}")
    if res["failed"]:  # an LLM endpoint down is not a finished run
        raise BencaoError(f"{res['failed']} of {res['total']} questions got no answer: {res['error']}; nothing was written for them "
                          f"and the same command asks them again")
    typer.echo(f"throughput: {summary_line(res)}")
