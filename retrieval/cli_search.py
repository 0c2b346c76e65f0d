"""`bencao link` and `bencao ask`: entity linking and question answering over a graph directory."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import typer

search_app = typer.Typer()

GRAPH = typer.Option(..., "--graph", "-g", help="Graph directory (built by `bencao graph build`).")
CONFIG = typer.Option(None, "--config", "-c", help="Retrieval YAML (default: built-in values, see configs/retrieval/default.yaml).")
SET = typer.Option(None, "--set", "-s", help="Config override key=value (repeatable), e.g. linking.tau=0.6.")


def _open(graph: Path, config: Optional[Path], overrides: Optional[list[str]], need_index: bool = False):
    from bencao.errors import BencaoError
    from bencao.retrieval.graph.store import Graph
    from bencao.retrieval.search.config import load_retrieval_config

    if not graph.exists():
        raise BencaoError(f"{graph}: no such graph directory; build one with `bencao graph build`")
    g = Graph.open(graph, read_only=False)
    cfg = load_retrieval_config(config, overrides or [])
    return g, cfg


@search_app.command("link")
def link(
    mention: Optional[str] = typer.Argument(None, help="The mention to link (or use --input)."),
    graph: Path = GRAPH,
    input: Optional[Path] = typer.Option(None, "--input", "-i", help="JSONL with at least `id` and `mention` per line; an optional `context` (the sentence or dish the mention occurs in) helps choose among equally good candidates."),
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="JSONL output (resumable: ids already there are skipped)."),
    config: Optional[Path] = CONFIG,
    set_: Optional[list[str]] = SET,
    no_index: bool = typer.Option(False, "--no-index", help="Alias tables only (no BM25/dense candidates)."),
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
        typer.echo(json.dumps(linker.link(mention).to_dict(), ensure_ascii=False, indent=2))
        return
    if output is None:
        raise BencaoError("--input needs --output FILE")
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
            row.update({"chosen_id": r.chosen_id, "label": r.label, "confidence": r.confidence, "rationale": r.rationale,
                        "candidates": r.candidates, "retried": r.retried, "abstained": r.abstained})
            out.write(row)
            n += 1
            linked += not r.abstained
            abst += r.abstained
            retried += r.retried
    typer.echo(json.dumps({"written": n, "linked": linked, "abstained": abst, "retried": retried, "output": str(output)}), err=True)


@search_app.command("ask")
def ask(
    question: str = typer.Argument(..., help="The question (Chinese or English)."),
    graph: Path = GRAPH,
    config: Optional[Path] = CONFIG,
    set_: Optional[list[str]] = SET,
    as_json: bool = typer.Option(False, "--json", help='Print {"question", "answer", "evidence"} as JSON.'),
    option: Optional[list[str]] = typer.Option(None, "--option", help="Multiple-choice option 'A=text' (repeatable): the answerer picks."),
) -> None:
    """Answer a question from the graph without an LLM, with paths, triples and cited snippets."""
    from bencao.errors import BencaoError
    from bencao.retrieval.evidence import path_heading
    from bencao.retrieval.search.retriever import Retriever
    from bencao.serving.graph_answerer import GraphAnswerer

    if not question.strip():
        raise BencaoError("question is empty")
    g, cfg = _open(graph, config, set_)
    answerer = GraphAnswerer(Retriever(g, cfg))
    if option:
        opts = {}
        for o in option:
            if "=" not in o:
                raise BencaoError(f"--option {o!r}: expected LETTER=text")
            k, v = o.split("=", 1)
            opts[k.strip()] = v.strip()
        res = answerer.answer_mcq(question, opts)
        answer = ",".join(res["answer"]) if res["answer"] else "not in the knowledge base"
        extra = {"ranking": res["ranking"], "scores": res["scores"], "abstained": res["abstained"]}
    else:
        res = answerer.answer(question)
        answer = res["answer"]
        extra = {"abstained": res["abstained"], "support": res.get("support")}
    ev = res["evidence"]
    if as_json:
        typer.echo(json.dumps({"question": question, "answer": answer, **extra, "evidence": ev.to_dict()}, ensure_ascii=False, indent=2))
        return
    from rich.console import Console

    con = Console(highlight=False, soft_wrap=True)
    con.print(f"[bold]Q:[/bold] {question}")
    con.print(f"[bold]A:[/bold] {answer}")
    if "scores" in extra:
        con.print("   scores: " + ", ".join(f"{k}={v:.3f}" for k, v in extra["scores"].items()))
    if ev.entities:
        con.print("\n[bold]Entities[/bold]")
        for e in ev.entities[:8]:
            con.print(f"  {e['name']} ({e['id']}, {e.get('type')}) conf={e['confidence']:.2f} — {e['rationale']}")
    if ev.paths:
        con.print("\n[bold]Paths[/bold] (PathScore = ∏confidence × mean PageRank)")
        for p in ev.paths[:5]:
            con.print(f"  {p['score']:.5f}  {p['text']}  (∏c={p['confidence_product']:.2f}, PR={p['pagerank']:.4f})")
    if ev.triples:
        con.print("\n[bold]Triples[/bold]")
        for t in ev.triples[:8]:
            con.print(f"  {t['head']} —{t['relation']}→ {t['tail']}  (confidence {t['confidence']:.2f}, {'/'.join(t.get('via', []))})")
    if ev.snippets:
        con.print("\n[bold]Snippets[/bold]")
        for r, s in zip(ev.references(), ev.snippets[:6]):
            text = s["text"] if len(s["text"]) <= 160 else s["text"][:160] + "…"
            con.print(f"  [{r['n']}] {path_heading(s['path'])}\n      {text}")
    if ev.is_empty():
        con.print("(no evidence found in the graph)")
