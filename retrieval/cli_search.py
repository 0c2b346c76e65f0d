"""`bencao link`: entity linking over a graph directory (`bencao ask` is the answering pipeline's, in serving/cli.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from bencao import cliopts

app = typer.Typer()

GRAPH = cliopts.graph()
CONFIG = cliopts.config(f"Serving or retrieval {cliopts.RECIPE}, e.g. retrieval/default: its linking section (selector, LLM blocks, tau); default: built-in values.")
SET = cliopts.overrides("key=value override of the recipe (repeatable), e.g. -s linking.tau=0.6 -s linking.selector=llm "
                        "-s linking.llm.base_url=http://127.0.0.1:8000/v1.")


def _open(graph: Path, config: Optional[Path], overrides: Optional[list[str]]) -> tuple:
    from bencao.errors import BencaoError
    from bencao.retrieval.graph.store import Graph
    from bencao.retrieval.search.config import load_retrieval_config

    if not graph.exists():
        raise BencaoError(f"{graph}: no such graph directory; build one with `bencao graph build`")
    g = Graph.open(graph, read_only=True)
    cfg = load_retrieval_config(config, overrides or [])
    return g, cfg


@app.command("link")
def link(
    mention: Optional[str] = typer.Argument(None, help="The mention to link (or use --input)."),
    graph: Path = GRAPH,
    input: Optional[Path] = cliopts.input_(help="Input file (JSONL) with at least `id` and `mention` per line; an optional `context` (the "
                                                "sentence or dish the mention occurs in) helps choose among equally good candidates."),
    output: Optional[Path] = cliopts.out(help="Output file (JSONL) with --input; appended to and resumed (ids already there are skipped)."),
    config: Optional[Path] = CONFIG,
    set_: Optional[list[str]] = SET,
    no_index: bool = typer.Option(False, "--no-index", help="Alias tables only (no BM25/dense candidates)."),
    context: Optional[str] = typer.Option(None, "--context", help="The sentence the mention came from (shown to the LLM stages)."),
) -> None:
    """Link a mention (or a JSONL file of mentions) to graph entities, with confidence and abstention."""
    from bencao.errors import BencaoError, InputError
    from bencao.io import JsonlAppender, iter_jsonl
    from bencao.retrieval.index.build import Indexes
    from bencao.retrieval.linking import EntityLinker

    if (mention is None) == (input is None):
        raise BencaoError("give either a mention or --input FILE")
    g, cfg = _open(graph, config, set_)
    ix = None if no_index else (Indexes(g, cfg.index) if ((g.dir / "lexical").exists() or (g.dir / "index").exists()) else None)
    linker = EntityLinker(g, cfg.linking, indexes=ix)
    if mention is not None:
        typer.echo(json.dumps(linker.link(mention, context).to_dict(), ensure_ascii=False, indent=2))
        return
    if output is None:
        raise BencaoError("--input needs --out FILE")
    records = []
    for lineno, rec in iter_jsonl(input, required=("id", "mention")):
        if not isinstance(rec["mention"], str):
            raise InputError(input, "'mention' must be a string", record=f"line {lineno}")
        if rec.get("context") is not None and not isinstance(rec["context"], str):
            raise InputError(input, "'context' must be a string", record=f"line {lineno}")
        if len(rec["mention"]) > cfg.linking.max_mention_chars:
            raise InputError(input, f"mention is {len(rec['mention']):,} characters, over the {cfg.linking.max_mention_chars}-character limit",
                             record=f"line {lineno}")
        records.append(rec)
    n = linked = abst = retried = 0
    with JsonlAppender(output, id_key="id") as out:
        for rec in records:
            if str(rec["id"]) in out.done_ids:
                continue
            r = linker.link(rec["mention"], context=rec.get("context"))
            row = dict(rec)
            row.update({k: v for k, v in r.to_dict().items() if k != "mention"})
            out.write(row)
            n += 1
            linked += not r.abstained
            abst += r.abstained
            retried += r.retried
    typer.echo(json.dumps({"written": n, "linked": linked, "abstained": abst, "retried": retried, "output": str(output)}), err=True)
