"""`bencao graph cases ...` and `bencao graph link-layers`: the clinical-case layer of TCM MLKG-RAG.

Plain typer commands; ``retrieval/cli.py`` mounts them on its ``graph`` sub-app.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from bencao import cliopts

cases_app = typer.Typer(help="The clinical-case layer (MLKG-RAG): patient index, disease-tree classification, therapy retrieval.",
                        no_args_is_help=True)

GRAPH = cliopts.graph(help="Graph directory.")
CONFIG = cliopts.config(f"Cases {cliopts.RECIPE}, e.g. cases/cases (keys of CasesConfig); built-in defaults when omitted. Its `retrieval` "
                        "key names the retrieval recipe whose `index` block gives the embedder (default: the one the graph's index was built with).")
SET = cliopts.overrides("key=value override of the recipe (repeatable), e.g. -s similarity=lexical -s beam=2 -s retrieval=retrieval/multilingual.")
#: Deprecated spelling of ``--set retrieval=...``; hidden.
RCONFIG = typer.Option(None, "--retrieval-config", hidden=True, help="Deprecated: use --set retrieval=RECIPE.")
AGE = typer.Option(None, "--age-group", help="Age group: elderly/老年, middle_aged/中年, young_adult/青年, adolescent/青少年, child/儿童, infant/婴幼儿.")
SEX = typer.Option(None, "--sex", help="male/男/M or female/女/F.")
HISTORY = typer.Option(None, "--history", help="A past-history term the case must record (repeatable), e.g. 高血压.")


def _cfg(config: Optional[Path], sets: Optional[list[str]], retrieval_config: Optional[Path] = None):
    from bencao.config import load_config
    from bencao.retrieval.search.cases import CasesConfig

    cfg = load_config(CasesConfig, config, list(sets or []))
    if retrieval_config is not None:  # the deprecated --retrieval-config
        cfg.retrieval = str(retrieval_config)
    return cfg


def _indexes(g, retrieval: Optional[str]):
    """The graph's indexes (None when it has none): the embedder the similarity may use."""
    from bencao.retrieval.index import open_indexes

    if not ((g.dir / "index").exists() or (g.dir / "lexical").exists()):
        return None
    return open_indexes(g, retrieval or None)


@cases_app.command("list")
def list_cases(
    graph: Path = GRAPH,
    age_group: Optional[str] = AGE,
    sex: Optional[str] = SEX,
    history: Optional[list[str]] = HISTORY,
    as_json: bool = typer.Option(False, "--json", help="Print the matching cases as JSON."),
) -> None:
    """The patient index: cases filtered by age group, sex and past history."""
    from bencao.retrieval.graph.store import Graph
    from bencao.retrieval.search.cases import PatientIndex

    with Graph.open(graph, read_only=True) as g:
        index = PatientIndex.of(g)
        ids = index.filter(age_group, sex, history or None)
        rows = [index.cases[i] for i in ids]
    if as_json:
        typer.echo(json.dumps(rows, ensure_ascii=False, indent=2))
        return
    typer.echo(f"{len(rows)} of {len(index.cases)} cases")
    for r in rows[:200]:
        hist = "、".join(r.get("history") or []) or "–"
        typer.echo(f"  {r['name']}  [{r['id']}]  {r.get('sex') or '–'} · {r.get('age_group') or '–'}"
                   f"{' · ' + str(r['age']) if r.get('age') is not None else ''} · history: {hist}")


@cases_app.command("classify")
def classify(
    graph: Path = GRAPH,
    config: Optional[Path] = CONFIG,
    set_: Optional[list[str]] = SET,
    retrieval_config: Optional[Path] = RCONFIG,
    dry_run: bool = cliopts.dry_run(),
    as_json: bool = typer.Option(False, "--json", help="Print the JSON report."),
) -> None:
    """File every case under one leaf of the disease tree (replaces the previous classification)."""
    from rich.progress import Progress

    from bencao.retrieval.graph.store import Graph
    from bencao.retrieval.search.cases import classify_cases

    cfg = _cfg(config, set_, retrieval_config)
    llm = None
    if cfg.llm_classifier:
        if cfg.llm is None:
            from bencao.errors import ConfigError

            raise ConfigError("llm_classifier=true needs an llm block (e.g. --set llm.model=... --set llm.base_url=...)")
        from bencao.llm import make_client

        client = make_client(cfg.llm, default_cache=graph / "cache" / "llm_cache.sqlite")
        llm = lambda prompt: client.complete([{"role": "user", "content": prompt}], **cfg.llm.params()).text  # noqa: E731
    from bencao.retrieval.graph.versions import writer_lock

    with writer_lock(graph), Graph.open(graph) as g:  # one writer at a time
        ix = _indexes(g, cfg.retrieval)
        with Progress(transient=True) as prog:
            task = prog.add_task("classifying cases", total=None)
            report = classify_cases(g, ix, cfg, llm=llm, dry_run=dry_run, progress=lambda i, n: prog.update(task, completed=i, total=n))
        if report.get("document"):
            from bencao.retrieval.index import refresh_indexes

            refresh_indexes(g)
    if as_json:
        typer.echo(json.dumps(report, ensure_ascii=False, indent=2))
        return
    head = "would file" if dry_run else "filed"
    typer.echo(f"{head} {report['classified']} of {report['cases']} cases under {report['tree']} (similarity: {report['similarity']}; "
               + ", ".join(f"{k}: {v}" for k, v in report["by_method"].items()) + ")")
    for leaf, n in sorted(report["by_leaf"].items(), key=lambda x: -x[1]):
        typer.echo(f"  {leaf}: {n}")
    if report["unclassified"]:
        typer.echo(f"  not classified (no disease information matches a class): {len(report['unclassified'])}")
    if report.get("document"):
        typer.echo(f"document {report['document']} (remove with `bencao graph remove {report['document']} --graph {graph}`)")


@cases_app.command("terms")
def terms(
    graph: Path = GRAPH,
    config: Optional[Path] = CONFIG,
    set_: Optional[list[str]] = SET,
    as_json: bool = typer.Option(False, "--json", help="Print the JSON report."),
) -> None:
    """LLM case terms: the recipe's `llm` reads each case record; the symptoms, diseases, syndromes, formulas and herbs it names become case-layer entities.

    Ingestion already split every record into case terms by the rule lexicon; this adds what the LLM
    finds (only terms written in the record), as one derived document replaced by the next run.
    Then link them: `bencao graph link-layers --source terminology --target case`.
    """
    from rich.progress import Progress

    from bencao.errors import ConfigError
    from bencao.retrieval.graph.store import Graph
    from bencao.retrieval.graph.versions import writer_lock
    from bencao.retrieval.search.case_terms import extract_case_terms

    cfg = _cfg(config, set_)
    if cfg.llm is None:
        raise ConfigError("graph cases terms needs an llm block (e.g. --set llm.model=... --set llm.base_url=...); "
                          "without one the rule lexicon's case terms, made when the cases were added, are all there is")
    from bencao.llm import make_client

    client = make_client(cfg.llm, default_cache=graph / "cache" / "llm_cache.sqlite")
    llm = lambda prompt: client.complete([{"role": "user", "content": prompt}], **cfg.llm.params()).text  # noqa: E731
    with writer_lock(graph), Graph.open(graph) as g:
        with Progress(transient=True) as prog:
            task = prog.add_task("reading case records", total=None)
            report = extract_case_terms(g, llm, progress=lambda i, n: prog.update(task, completed=i, total=n))
        if report.get("document"):
            from bencao.retrieval.index import refresh_indexes

            refresh_indexes(g)
    if as_json:
        typer.echo(json.dumps(report, ensure_ascii=False, indent=2))
        return
    typer.echo(f"{report['terms']} case terms from {report['read']} of {report['cases']} records ({report['new_triples']} not found by the rules)"
               + (f"; document {report['document']}" if report["document"] else ""))
    if report["unreadable"]:
        typer.echo(f"  {len(report['unreadable'])} record(s) left to their rule terms (unreadable reply): {', '.join(report['unreadable'][:10])}")


@cases_app.command("therapy")
def therapy(
    question: str = typer.Argument(..., help="The consultation: patient and complaint, e.g. '女，68岁，有高血压史。口干多饮，小便频数。'"),
    graph: Path = GRAPH,
    config: Optional[Path] = CONFIG,
    set_: Optional[list[str]] = SET,
    retrieval_config: Optional[Path] = RCONFIG,
    age_group: Optional[str] = AGE,
    sex: Optional[str] = SEX,
    history: Optional[list[str]] = HISTORY,
    as_json: bool = typer.Option(False, "--json", help="Print the JSON result."),
) -> None:
    """Therapy retrieval: descend the disease tree by Σ similarity, return the leaf's cases for this patient."""
    from bencao.retrieval.graph.store import Graph
    from bencao.retrieval.search.case_entities import PatientInfo
    from bencao.retrieval.search.layers import case_therapy

    cfg = _cfg(config, set_, retrieval_config)
    with Graph.open(graph, read_only=True) as g:
        ix = _indexes(g, cfg.retrieval)
        res = case_therapy(g, ix, question, cfg, patient=PatientInfo(age_group, sex, None, list(history or [])))
    if as_json:
        typer.echo(json.dumps(res.to_dict(), ensure_ascii=False, indent=2))
        return
    typer.echo(f"patient: {res.patient or '–'}; disease information: {'、'.join(res.disease) or '–'} (similarity: {res.similarity})")
    for level, classes in enumerate(res.path, start=1):
        typer.echo(f"  level {level}: " + ", ".join(f"{c['name']} ({c['score']:.3f})" for c in classes))
    for c in res.cases:
        typer.echo(f"\n[{c['name']}] score {c['score']:.3f}; patient matches: {', '.join(c['patient_match']) or 'nothing asked/none'}")
        if c.get("snippet"):
            typer.echo("  " + c["snippet"]["text"].replace("\n", "\n  "))
        for e in c["explanations"][:5]:
            typer.echo(f"  · {e['name']}: {(e.get('description') or '')[:120]} (cos {e['score']:.2f})")
    for note in res.notes:
        typer.echo(f"note: {note}")


#: The Chinese embedder the project trains (configs/embed/static-zh.yaml): link-layers' default for Chinese layers.
STATIC_ZH = "retrieval/static-zh"


def _link_embedder(g, retrieval_config: Optional[Path], sets: Optional[list[str]], layers: tuple[str, str]):
    """(embedder handle or None, note): the given recipe's embedder; else the graph's index embedder
    when it reads the layers' language; else, for Chinese layers, the trained static-zh model."""
    from bencao.retrieval.index import open_indexes
    from bencao.retrieval.index.build import _adopt_recorded_embedder, recorded_index_config
    from bencao.retrieval.index.embedder import embedder_id
    from bencao.retrieval.search.config import load_retrieval_config
    from bencao.retrieval.search.layers import LinkEmbedder
    from bencao.text import has_cjk

    recorded = recorded_index_config(g) if (g.dir / "index").exists() else None
    if retrieval_config or sets:
        cfg = load_retrieval_config(retrieval_config, list(sets or [])).index
        _adopt_recorded_embedder(cfg, recorded)  # a recipe naming no model means the index's (else MiniLM)
        if recorded is not None and embedder_id(recorded.embedder) == embedder_id(cfg.embedder):
            return open_indexes(g, cfg), None
        return LinkEmbedder(g, cfg), None
    q = ",".join("?" * len(layers))
    chinese = any(has_cjk(r[0]) for r in g.conn.execute(f"SELECT name FROM entities WHERE layer IN ({q}) AND type != 'case'", layers))
    lang = "zh" if chinese else "en"
    if recorded is not None and recorded.embedder.embeds(lang):
        return open_indexes(g), None
    if chinese:
        cfg = load_retrieval_config(STATIC_ZH, []).index
        if Path(cfg.embedder.model).exists():
            return LinkEmbedder(g, cfg), None
        return None, (f"no embedder here reads Chinese, so only exact name links were made; train the static-zh embedder "
                      f"(`bencao data pairs --graph {g.dir} --output PAIRS` then `bencao train embedder --config embed/static-zh "
                      f"train_file=PAIRS/train.jsonl output_dir={cfg.embedder.model}`) and run again, or give --config")
    return None, "no index and no --config: only exact name links were made (give --config RECIPE for embedding links)"


def link_layers_command(
    graph: Path = GRAPH,
    source: str = typer.Option(..., "--source", help="Layer whose entities are linked (e.g. terminology)."),
    target: str = typer.Option(..., "--target", help="Layer linked to (e.g. case: its case terms; case records are never linked)."),
    embedding: bool = typer.Option(False, "--embedding", help="Also link each source entity no name matched to its nearest target of the "
                                                              "same kind, by the embedder (opt-in: these links were judged 13 of 37 "
                                                              "correct on the sample's book → case layers with static-zh, docs/cases.md; "
                                                              "name links 46 of 46)."),
    delta: Optional[float] = typer.Option(None, "--delta", help="With --embedding: link when the cosine distance to the nearest target "
                                                                "entity is below this (default 0.35)."),
    retrieval_config: Optional[Path] = cliopts.config(f"With --embedding: retrieval {cliopts.RECIPE}, whose `index` block names the embedder (default: the "
                                                      "graph's index embedder when it reads the layers' language, else for Chinese "
                                                      "layers retrieval/static-zh, the embedder `make train-demo` trains)."),
    set_: Optional[list[str]] = cliopts.overrides("key=value override of the retrieval recipe (repeatable), e.g. -s index.embedder.model=runs/embed/static-zh."),
) -> None:
    """MLKG-RAG's cross-layer links: each source entity → the target entities of the same name (with --embedding, else its nearest target entity when closer than δ).

    Case records are linked through their case terms (symptoms, diseases, formulas, herbs). Names and
    aliases are matched (traditional = simplified). With --embedding, the rest are embedded (through an
    embedding cache) with the recipe's embedder, by default the graph's index embedder when it reads
    the layers' language, else for Chinese layers the trained static-zh model (configs/retrieval/static-zh.yaml);
    with none, only the name links are made. Replaces the previous links of the pair.
    """
    if not embedding and (delta is not None or retrieval_config is not None or set_):
        from bencao.errors import BencaoError

        raise BencaoError("--delta, --config and --set choose the embedding links: add --embedding")
    delta = 0.35 if delta is None else delta
    from bencao.retrieval.graph.store import Graph
    from bencao.retrieval.graph.versions import writer_lock
    from bencao.retrieval.search.layers import link_layers

    with writer_lock(graph), Graph.open(graph) as g:  # one writer at a time
        ix, note = _link_embedder(g, retrieval_config, set_, (source, target)) if embedding else \
            (None, "name links only; --embedding adds the nearest target of the same kind by embedding (judged less precise: docs/cases.md)")
        from rich.console import Console

        con = Console(stderr=True)
        with con.status(f"linking {source} → {target} ..."):
            report = link_layers(g, ix, source_layer=source, target_layer=target, delta=delta)
    how = (f" (δ={delta}): {report['exact']} by name, {report['dense']} by embedding with {report['embedder'] or 'no embedder'}" if embedding
           else f": {report['exact']} by name")
    typer.echo(f"{report['links']} links {source} → {target}{how}; {report['source']} source and {report['target']} target entities"
               + (f"; document {report['document']}" if report["document"] else ""))
    reads_zh = bool({"zh", "*"} & set(report["languages"]))
    for side, layer in (("source", source), ("target", target)):
        if report[f"{side}_unreadable"]:
            typer.echo(f"  skipped {report[f'{side}_unreadable']} {layer} entities the embedder cannot read (its languages: "
                       f"{', '.join(report['languages'])})" + ("" if reads_zh else f"; for Chinese use --config {STATIC_ZH} (trained on "
                                                                             "CPU: docs/cases.md) or configs/retrieval/multilingual.yaml (bge-m3)"))
    if note:
        typer.echo(f"note: {note}")
