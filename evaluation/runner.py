"""Run a system over benchmarks, resumably, then score and report.

Each answered record is appended (flushed, fsynced) to ``<out>/predictions.jsonl`` under the key
``<bench>/<id>``; a restarted run skips the keys already there, so an interrupted run resumes with no
duplicate and no gap. ``<out>/run.json`` pins what the predictions belong to (system, graph,
config, the graph's store id and write generation, its indexes' configuration and embedder fingerprint,
benchmark content hashes, the question-only retrieval probe's settings): resuming with different settings,
or on a graph written to or re-indexed since, is refused instead of mixing two runs. Scores are always
recomputed from the whole predictions file.

With a graph, every record with an answer text also gets ``retrieval``: the question-only retrieval
probe's ranks (:mod:`bencao.evaluation.probe`), system-independent like the context metrics, from
which :mod:`bencao.evaluation.metrics` computes ``answer_recall@k``, ``distractor_rate@k``,
``margin@k``, ``mrr`` and ``passage_chars@10``.
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path
from typing import Any

from bencao.errors import BencaoError
from bencao.evaluation import probe as retrieval_probe
from bencao.evaluation.annotate import Annotator, is_open_rec
from bencao.evaluation.bench_format import Bench
from bencao.evaluation.metrics import aggregate, evidence_recall
from bencao.evaluation.systems import EvalConfig, make_system
from bencao.io import JsonlAppender, atomic_write_json, file_hash

PREDICTIONS = "predictions.jsonl"
METRICS = "metrics.json"
RUN = "run.json"


def _run_identity(system: str, graph_dir: Path | None, config: EvalConfig) -> dict[str, Any]:
    cfg = dataclasses.asdict(config)
    for k in ("api", "infer", "model_name"):  # other front ends' settings: they do not change a prediction
        cfg.pop(k, None)
    cfg["eval"] = {"seed": config.eval.seed}  # n_resamples, batch_size: scoring/throughput knobs keep predictions valid
    _fingerprint_local_models(cfg)
    return {"system": system, "graph": str(Path(graph_dir).resolve()) if graph_dir else None, "config": cfg, "store": _store(graph_dir),
            "index": _index(graph_dir), "probe": retrieval_probe.identity(config, graph_dir)}


def _fingerprint_local_models(value: Any) -> None:
    """Add ``weights`` (the SHA-256 fingerprint of its weight files) to every LLM block that loads a local
    model: a generator or selector retrained into the same directory makes other predictions, so a run
    made with the old weights is not resumed with the new ones. Endpoint models are named by their id. The
    retrieval reranker (``retrieval.rerank``, backends ``cross-encoder`` and ``llm-yes-no``) is fingerprinted the same
    way; so is an installed model named by its catalogue name (``bencao models``)."""
    if isinstance(value, dict):
        loads_local = value.get("backend") in ("local-hf", "vllm", "cross-encoder", "llm-yes-no")
        if loads_local and isinstance(value.get("model"), str) and _local_model(value["model"]):
            from bencao.models import model_fingerprint

            value["weights"] = model_fingerprint(value["model"])
        for sub in value.values():
            _fingerprint_local_models(sub)
    elif isinstance(value, list):
        for sub in value:
            _fingerprint_local_models(sub)


def _local_model(name: str) -> bool:
    """Whether ``name`` is a local path or an installed catalogue model (not a hub id)."""
    if Path(name).exists():
        return True
    from bencao.model_catalog import installed_path

    try:
        local = installed_path(name)
    except Exception:  # noqa: BLE001 - not a catalogue name
        return False
    return local is not None and Path(local).exists()


def _store(graph_dir: Path | None) -> dict[str, Any] | None:
    """The graph's store id and write generation: a rebuilt graph at the same path, or one written to since,
    does not resume the predictions made on the old one."""
    if graph_dir is None or not (Path(graph_dir) / "graph.sqlite").exists():
        return None
    from bencao.retrieval.graph.store import Graph

    with Graph.open(graph_dir, read_only=True) as g:
        return {"id": g.store_id(), "generation": g.generation()}


def _index(graph_dir: Path | None) -> dict[str, Any] | None:
    """What the graph's indexes were built with: their configuration (kinds, dense kinds, embedder) and
    the fingerprint of the embedder's weights. Re-indexing with a retrained model, or lexical-only
    instead of hybrid, does not bump the store's generation, yet changes every retrieval: predictions
    made on the old indexes are refused, not resumed."""
    if graph_dir is None or not (Path(graph_dir) / "manifest.json").exists():
        return None
    m = json.loads((Path(graph_dir) / "manifest.json").read_text(encoding="utf-8"))
    rec = m.get("indexes") or {}
    if not rec:
        return None
    cfg = dict(rec.get("config") or {})
    dense = bool(cfg.get("dense_kinds"))
    emb = (m.get("embedders") or {}).get(rec.get("embedder")) or {}
    cfg["embedder"] = dict(cfg.get("embedder") or {}, fingerprint=emb.get("fingerprint")) if dense else None  # lexical only: no model
    for k in ("embed_batch", "shared_cache"):  # throughput and cache placement: the same vectors either way
        cfg.pop(k, None)
    return cfg


def _flat(value: Any, prefix: str) -> dict[str, Any]:
    if isinstance(value, dict) and value:
        return {k: v for key, sub in value.items() for k, v in _flat(sub, f"{prefix}.{key}" if prefix else str(key)).items()}
    return {prefix: value}


def _differences(key: str, old: Any, new: Any, limit: int = 3) -> str:
    """``config.retrieval.layers.therapy was true, now false`` — the first few keys that differ, not the whole config."""
    a, b = _flat(old, key), _flat(new, key)
    diff = [k for k in sorted(set(a) | set(b)) if a.get(k, "<unset>") != b.get(k, "<unset>")]
    shown = "; ".join(f"{k} was {json.dumps(a.get(k), ensure_ascii=False)[:80]}, now {json.dumps(b.get(k), ensure_ascii=False)[:80]}"
                      for k in diff[:limit])
    return shown + (f"; and {len(diff) - limit} more" if len(diff) > limit else "")


def _check_run(out: Path, identity: dict[str, Any], benches: list[Bench], restart: bool) -> dict[str, Any]:
    run_path = out / RUN
    hashes = {b.name: file_hash(b.path) for b in benches}
    if restart:
        for name in (PREDICTIONS, RUN, METRICS):
            (out / name).unlink(missing_ok=True)
    if run_path.exists():
        old = json.loads(run_path.read_text(encoding="utf-8"))
        for key in ("system", "graph", "config", "store", "index", "probe"):
            if key in ("store", "index") and key not in old:  # a run.json written before they were recorded
                continue
            if old.get(key) != identity[key]:
                raise BencaoError(f"{out}: holds predictions of another run ({_differences(key, old.get(key), identity[key])}); "
                                  "use another --out, or --restart to discard them")
        for name, h in hashes.items():
            if name in old.get("benches", {}) and old["benches"][name] != h:
                raise BencaoError(f"{out}: benchmark {name!r} changed since its predictions were written; "
                                  "use another --out, or --restart to discard them")
        merged = dict(old.get("benches", {}), **hashes)
    else:
        merged = hashes
    run = dict(identity, benches=merged)
    atomic_write_json(run_path, run)
    return run


def leaked_records(benches: list[Bench], graph_dir: Path | None, limit: int | None = None) -> dict[str, list[str]]:
    """``{"<bench>/<id>": how}`` for the records whose question the graph's personalized layer was distilled from
    (``how``: ``id`` and/or ``question``; see :mod:`bencao.data_gen.leakage`)."""
    if graph_dir is None or not (Path(graph_dir) / "graph.sqlite").exists():
        return {}
    from bencao.data_gen.leakage import distilled_questions, record_question

    distilled = distilled_questions(graph_dir)
    if not distilled:
        return {}
    out: dict[str, list[str]] = {}
    for b in benches:
        for r in (b.records[:limit] if limit else b.records):
            how = distilled.match(r["id"], record_question(r), r.get("options"))
            if how:
                out[f"{b.name}/{r['id']}"] = how
    return out


def run_predictions(
    benches: list[Bench],
    system_name: str,
    graph_dir: str | Path | None,
    out: str | Path,
    config: EvalConfig,
    *,
    limit: int | None = None,
    restart: bool = False,
    progress: bool = True,
    system: Any = None,
) -> dict[str, int]:
    """Append predictions for every record not yet predicted. Returns counts (done, new, failed)."""
    from tqdm.auto import tqdm

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    graph_path = Path(graph_dir) if graph_dir else None
    if config.eval.on_leak not in ("flag", "refuse"):
        raise BencaoError(f"eval.on_leak: {config.eval.on_leak!r} is not flag or refuse")
    leaked = leaked_records(benches, graph_path, limit)
    if leaked and config.eval.on_leak == "refuse":
        first = ", ".join(list(leaked)[:3])
        raise BencaoError(f"{graph_path}: {len(leaked)} record(s) to evaluate were distilled into this graph's personalized layer "
                          f"(e.g. {first}); evaluate on a graph without their reasoning (bencao data cot --exclude BENCH), "
                          "or --set eval.on_leak=flag to score them flagged")
    _check_run(out, _run_identity(system_name, graph_path, config), benches, restart)
    tasks = {b.task for b in benches}
    if system is None:
        system = make_system(system_name, graph_path, config, tasks, out)
    counts = {"done": 0, "new": 0, "failed": 0}
    if graph_path is None and any(is_open_rec(r) for b in benches for r in b.records):
        raise BencaoError("open-ended rec records (no candidates) need --graph DIR: the foods in a free answer are linked to the graph")
    annotator = Annotator(graph_path, config, out)
    probe = (retrieval_probe.RetrievalProbe(graph_path, config, out, pipeline=getattr(system, "pipeline", None))
             if graph_path is not None and retrieval_probe.identity(config, graph_path) is not None else None)
    with JsonlAppender(out / PREDICTIONS, id_key="key") as app:
        todo: list[tuple[Bench, dict[str, Any]]] = []
        for b in benches:
            recs = b.records[:limit] if limit else b.records
            for r in recs:
                if f"{b.name}/{r['id']}" in app.done_ids:
                    counts["done"] += 1
                else:
                    todo.append((b, r))
        bar = tqdm(total=len(todo), desc=f"eval {system_name}", unit="rec", disable=not progress)
        step = max(1, config.eval.batch_size)
        try:
            for i in range(0, len(todo), step):
                chunk = todo[i:i + step]
                t0 = time.perf_counter()
                outputs = system.predict_batch([r for _, r in chunk])
                elapsed = (time.perf_counter() - t0) / len(chunk)
                extras = annotator.annotate([r for _, r in chunk], outputs)  # system-independent: linked foods, context metrics
                live = [j for j, o in enumerate(outputs) if not isinstance(o, Exception)]
                if probe is not None and live:  # the question alone through the served retrieval: answer_recall@k, margin@k
                    for j, row in zip(live, probe.run([chunk[j][1] for j in live])):
                        if row is not None:
                            extras[j]["retrieval"] = row
                for (b, r), o, extra in zip(chunk, outputs, extras):
                    if isinstance(o, Exception):  # a failed request (e.g. an LLM timeout): retried on resume
                        counts["failed"] += 1
                        continue
                    ev_hit, ev_parts = (None, None) if o.evidence_text is None else evidence_recall(r, o.evidence_text)
                    if r["task"] == "el":
                        ev_hit = None
                    key = f"{b.name}/{r['id']}"
                    app.write({
                        "key": key, "bench": b.name, "id": r["id"], "task": r["task"],
                        "source": r.get("source"), "system": system_name, "prediction": o.prediction,
                        "evidence": o.evidence_ids, "evidence_contains_gold": ev_hit,
                        **({"evidence_holds_gold_parts": ev_parts} if ev_parts is not None else {}),
                        "elapsed_s": round(elapsed, 4), **extra, **({"extra": o.extra} if o.extra else {}),
                        **({"leaked": True, "leak_match": leaked[key]} if key in leaked else {}),
                    })
                    counts["new"] += 1
                bar.update(len(chunk))
        finally:
            bar.close()
            annotator.close()
            if probe is not None:
                probe.close()
    return counts


def read_predictions(out: str | Path) -> dict[str, dict[str, Any]]:
    path = Path(out) / PREDICTIONS
    preds: dict[str, dict[str, Any]] = {}
    if path.exists():
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                if line.strip():
                    obj = json.loads(line)
                    preds[obj["key"]] = obj
    return preds


def score(benches: list[Bench], out: str | Path, config: EvalConfig) -> dict[str, Any]:
    """Metrics for each benchmark from ``predictions.jsonl`` (records without a prediction are
    counted in ``missing`` and left out)."""
    preds = read_predictions(out)
    metrics: dict[str, Any] = {}
    for b in benches:
        recs, ps, ev, ctx, parts, probes = [], [], [], [], [], []
        n_leaked = 0
        for r in b.records:
            p = preds.get(f"{b.name}/{r['id']}")
            if p is None:
                continue
            n_leaked += bool(p.get("leaked"))
            recs.append(r)
            ps.append(p["prediction"])
            ev.append(p.get("evidence_contains_gold"))
            parts.append(p.get("evidence_holds_gold_parts"))
            ctx.append(p.get("context"))
            probes.append(p.get("retrieval"))
        if not recs:
            continue
        answers = any(p is not None for p in ps)
        m = aggregate(recs, ps, ev, ctx, answers=answers, n_resamples=config.eval.n_resamples, seed=config.eval.seed,
                      evidence_parts=parts, retrieval=probes)
        missing = len(b.records) - len(recs)
        if missing:
            m["missing"] = missing
        if b.skipped:
            m["skipped_records"] = len(b.skipped)
        if config.eval.judge.enabled:
            failed = sum(int((c or {}).get("judge_failed", 0)) for c in ctx)
            if failed:
                m["judge_failed"] = failed
        if n_leaked:
            m["leaked"] = n_leaked  # records whose reasoning is in the graph: their figure is not a held-out figure
        metrics[b.name] = m
    return metrics


def evaluate(
    benches: list[Bench],
    system_name: str,
    graph_dir: str | Path | None,
    out: str | Path,
    config: EvalConfig,
    *,
    limit: int | None = None,
    restart: bool = False,
    progress: bool = True,
    system: Any = None,
) -> dict[str, Any]:
    """Predict (resuming), score, and write metrics.json, report.md and the plot. Returns the metrics."""
    from bencao.evaluation.report import write_report

    counts = run_predictions(benches, system_name, graph_dir, out, config, limit=limit, restart=restart,
                             progress=progress, system=system)
    metrics = score(benches, out, config)
    atomic_write_json(Path(out) / METRICS, metrics)
    write_report(metrics, out, system=system_name, graph=str(graph_dir) if graph_dir else None, counts=counts)
    return metrics
