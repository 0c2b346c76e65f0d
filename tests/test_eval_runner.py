"""Resumable runs, outputs (metrics.json, report.md, PNG, predictions.jsonl) and the `bencao eval` CLI."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from bencao.cli import main
from bencao.errors import BencaoError
from bencao.evaluation.bench_format import load_bench
from bencao.evaluation.runner import evaluate, read_predictions
from bencao.evaluation.systems import RandomSystem, make_system
from bencao.serving.config import load_serve_config


def EvalConfig(**settings):  # noqa: N802 - reads like the config it builds
    """The serving config with eval.* settings (``bencao eval --set seed=1``)."""
    return load_serve_config(None, [f"{k}={v}" for k, v in settings.items()])


def write_bench(path: Path, n: int = 25, task: str = "mcq") -> Path:
    lines = []
    for i in range(n):
        if task == "mcq":
            rec = {"id": f"q{i}", "task": "mcq", "question": f"问题{i}", "options": {"A": "甲", "B": "乙", "C": "丙", "D": "丁"},
                   "answer": ["ABCD"[i % 4]], "source": "S1" if i % 2 else "S2"}
        else:
            rec = {"id": f"r{i}", "task": "rec", "query": "乳腺炎", "candidates": ["红烧肉", "冬瓜排骨汤", "酸辣粉"], "gold": ["冬瓜排骨汤"]}
        lines.append(json.dumps(rec, ensure_ascii=False))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


class Interrupted(RandomSystem):
    """The random baseline, interrupted (Ctrl-C) when it reaches record ``stop_at``."""

    def __init__(self, stop_at: int):
        super().__init__(None, EvalConfig(), None)
        self.seen = 0
        self.stop_at = stop_at

    def predict_batch(self, records):
        outs = []
        for r in records:
            if self.seen == self.stop_at:
                raise KeyboardInterrupt
            self.seen += 1
            outs.append(self.predict_one(r))
        return outs


def test_interrupted_run_resumes_without_duplicates_or_gaps(tmp_path):
    benches = [load_bench(write_bench(tmp_path / "mcq_a.jsonl")), load_bench(write_bench(tmp_path / "rec_b.jsonl", 10, "rec"))]
    out = tmp_path / "out"
    cfg = EvalConfig(batch_size=4, n_resamples=100)
    with pytest.raises(KeyboardInterrupt):
        evaluate(benches, "random", None, out, cfg, progress=False, system=Interrupted(stop_at=13))
    first = read_predictions(out)
    assert len(first) == 12  # three whole batches of 4 were written before the interrupt
    # A kill in the middle of a write leaves a torn last line: it is dropped on resume.
    with open(out / "predictions.jsonl", "a", encoding="utf-8") as fh:
        fh.write('{"key": "mcq_a/q12", "bench": "mc')
    metrics = evaluate(benches, "random", None, out, cfg, progress=False)
    keys = [json.loads(line)["key"] for line in (out / "predictions.jsonl").read_text(encoding="utf-8").splitlines()]
    assert Counter(keys).most_common(1)[0][1] == 1
    assert set(keys) == {f"mcq_a/q{i}" for i in range(25)} | {f"rec_b/r{i}" for i in range(10)}
    after = read_predictions(out)
    assert all(after[k] == v for k, v in first.items())  # nothing already stored was rewritten
    assert metrics["mcq_a"]["n"] == 25 and metrics["rec_b"]["n"] == 10
    # The same seeded baseline uninterrupted gives the same predictions, hence the same metrics.
    clean = evaluate(benches, "random", None, tmp_path / "clean", cfg, progress=False)
    assert clean == metrics


def test_outputs_shape(tmp_path):
    bench = load_bench(write_bench(tmp_path / "mcq_a.jsonl"))
    out = tmp_path / "out"
    metrics = evaluate([bench], "random", None, out, EvalConfig(n_resamples=50), progress=False)
    on_disk = json.loads((out / "metrics.json").read_text(encoding="utf-8"))
    assert on_disk == metrics
    m = on_disk["mcq_a"]
    assert m["task"] == "mcq" and m["n"] == 25 and 0.0 <= m["accuracy"] <= 1.0
    assert set(m["by_source"]) == {"S1", "S2"} and m["ci95"]["accuracy"][0] <= m["accuracy"]
    report = (out / "report.md").read_text(encoding="utf-8")
    assert f"| mcq_a | mcq | 25 | accuracy | {100 * m['accuracy']:.1f} [" in report  # summary row
    assert "| mcq_a | 25 |" in report and "| mcq_a | S1 | 12 | accuracy |" in report and "metrics.png" in report
    assert (out / "metrics.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    line = json.loads((out / "predictions.jsonl").read_text(encoding="utf-8").splitlines()[0])
    assert {"key", "bench", "id", "task", "source", "system", "prediction", "evidence", "evidence_contains_gold"} <= set(line)
    assert line["prediction"]["answer"][0] in "ABCD"


def test_limit_then_full_run_and_changed_settings_are_refused(tmp_path):
    path = write_bench(tmp_path / "mcq_a.jsonl")
    bench = load_bench(path)
    out = tmp_path / "out"
    assert evaluate([bench], "random", None, out, EvalConfig(n_resamples=0), limit=5, progress=False)["mcq_a"]["missing"] == 20
    assert "missing" not in evaluate([bench], "random", None, out, EvalConfig(n_resamples=0), progress=False)["mcq_a"]
    with pytest.raises(BencaoError, match=r"holds predictions of another run \(config.eval.seed was 0, now 1\)"):
        evaluate([bench], "random", None, out, EvalConfig(seed=1), progress=False)
    write_bench(path, 26)
    with pytest.raises(BencaoError, match="benchmark 'mcq_a' changed since its predictions were written"):
        evaluate([load_bench(path)], "random", None, out, EvalConfig(), progress=False)
    assert evaluate([load_bench(path)], "random", None, out, EvalConfig(seed=1), restart=True, progress=False)["mcq_a"]["n"] == 26


def test_systems_refuse_what_they_cannot_do(tmp_path):
    with pytest.raises(BencaoError, match="unknown system 'gpt'; known: "):
        make_system("gpt", None, EvalConfig())
    with pytest.raises(BencaoError, match="system 'random' cannot run task\\(s\\) el"):
        make_system("random", None, EvalConfig(), {"el", "mcq"})
    with pytest.raises(BencaoError, match="system 'llm-free' needs --graph DIR"):
        make_system("llm-free", None, EvalConfig(), {"mcq"})
    with pytest.raises(BencaoError, match="no graph here"):
        make_system("retrieval", tmp_path, EvalConfig(), {"mcq"})


def test_cli_eval_check_run_and_one_line_errors(tmp_path, capsys):
    path = write_bench(tmp_path / "mcq_a.jsonl")
    assert main(["eval", "--check", "--bench", str(path)]) == 0
    assert f"{path}: 25 mcq records, ok (2 source(s))" in capsys.readouterr().out
    out = tmp_path / "out"
    assert main(["eval", "-b", str(path), "--system", "random", "--out", str(out), "--no-progress", "--set", "n_resamples=100"]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith("mcq_a: mcq n=25 accuracy=") and (out / "metrics.json").exists()
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "1", "task": "mcq", "question": "q", "options": {"A": "a", "B": "b"}, "answer": ["C"]}\n', encoding="utf-8")
    assert main(["eval", "-b", str(bad), "--system", "random", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"error: {bad}:line 1: record '1' (mcq): answer 'C' is not one of the options (A, B); no good record left"
    assert main(["eval", "-b", str(bad), "--system", "random", "--out", str(out), "--strict"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"error: {bad}:line 1: record '1' (mcq): answer 'C' is not one of the options (A, B)"
    # one bad line among good ones: skipped, counted, reported; --strict refuses the file
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_text(path.read_text(encoding="utf-8") + bad.read_text(encoding="utf-8").replace('"id": "1"', '"id": "bad1"'), encoding="utf-8")
    out2 = tmp_path / "out2"
    assert main(["eval", "-b", str(mixed), "--system", "random", "--out", str(out2), "--no-progress", "--set", "n_resamples=0"]) == 0
    captured = capsys.readouterr()
    assert f"warning: {mixed}: skipped 1 bad record(s) of 26 (line 26: record 'bad1' (mcq): answer 'C'" in captured.err
    metrics = json.loads((out2 / "metrics.json").read_text(encoding="utf-8"))
    assert metrics["mixed"]["n"] == 25 and metrics["mixed"]["skipped_records"] == 1
    assert "**Bad records skipped**" in (out2 / "report.md").read_text(encoding="utf-8") and "mixed: 1" in (out2 / "report.md").read_text(encoding="utf-8")
    assert main(["eval", "-b", str(mixed), "--system", "random", "--out", str(tmp_path / "out3"), "--strict"]) == 2
    assert "mixed.jsonl:line 26" in capsys.readouterr().err
    assert main(["eval", "-b", str(path), "--system", "random", "--out", str(out), "--set", "sed=1"]) == 2
    assert "unknown key(s) sed" in capsys.readouterr().err


def test_a_graph_written_to_since_does_not_resume_its_predictions(tmp_path):
    """Predictions are tied to the graph's store and write generation, not only its path: after a
    `graph add` (or a rebuild at the same path) the old predictions are refused, not mixed in."""
    from retrieval_graphs import build_tcm_graph

    from bencao.retrieval.ingest.registry import ingest_file

    bench = load_bench(write_bench(tmp_path / "mcq_a.jsonl", 4))
    build_tcm_graph(tmp_path / "g").close()
    out = tmp_path / "out"
    evaluate([bench], "random", tmp_path / "g", out, EvalConfig(n_resamples=0), progress=False)
    evaluate([bench], "random", tmp_path / "g", out, EvalConfig(n_resamples=0), progress=False)  # same graph: resumes
    book = tmp_path / "book.txt"
    book.write_text("<篇名>新书\n<篇名>山药\n内容：味甘，温。主补中益气。\n", encoding="utf-8")
    from bencao.retrieval.graph.store import Graph

    with Graph.open(tmp_path / "g") as g:
        ingest_file(g, "books-txt", book)
    with pytest.raises(BencaoError, match=r"holds predictions of another run \(store.generation was \d+, now \d+\)"):
        evaluate([bench], "random", tmp_path / "g", out, EvalConfig(n_resamples=0), progress=False)


def test_a_graph_re_indexed_since_does_not_resume_its_predictions(tmp_path, monkeypatch):
    """Re-indexing (another embedder, retrained weights, lexical-only instead of hybrid) changes every
    retrieval without writing to the store: the old predictions are refused, naming what changed."""
    from retrieval_graphs import LEXICAL_ONLY, build_tcm_graph
    from test_index_freshness import _minilm_copy, _retrain

    from bencao.retrieval.index import update_indexes

    monkeypatch.setenv("BENCAO_CACHE_DIR", str(tmp_path / "cache"))
    bench = load_bench(write_bench(tmp_path / "mcq_a.jsonl", 4))
    build_tcm_graph(tmp_path / "g").close()
    out = tmp_path / "out"
    run = lambda: evaluate([bench], "random", tmp_path / "g", out, EvalConfig(n_resamples=0), progress=False)  # noqa: E731
    run()
    from bencao.retrieval.graph.store import Graph

    with Graph.open(tmp_path / "g") as g:
        update_indexes(g, LEXICAL_ONLY)  # the same state again: nothing changed, the run resumes
    run()
    model = _minilm_copy(tmp_path / "model")
    hybrid = dict(LEXICAL_ONLY, dense_kinds=["snippets"], embedder={"model": str(model), "languages": ["zh"]})
    with Graph.open(tmp_path / "g") as g:
        update_indexes(g, hybrid)
    with pytest.raises(BencaoError, match=r"holds predictions of another run \(index.dense_kinds was \[\], now \[\"snippets\"\]"):
        run()
    out = tmp_path / "out2"
    run()  # hybrid, in a fresh --out
    _retrain(model, seed=1)  # retrained into the same directory, re-indexed
    with Graph.open(tmp_path / "g") as g:
        update_indexes(g, hybrid)
    with pytest.raises(BencaoError, match=r"holds predictions of another run \(index.embedder.fingerprint was"):
        run()


def test_a_local_llm_retrained_into_the_same_directory_does_not_resume_its_predictions(tmp_path, monkeypatch):
    """A local-hf generator is named by its path in the config; its weights decide the predictions."""
    from test_index_freshness import _minilm_copy, _retrain

    monkeypatch.setenv("BENCAO_CACHE_DIR", str(tmp_path / "cache"))
    model = _minilm_copy(tmp_path / "gen")
    bench = load_bench(write_bench(tmp_path / "mcq_a.jsonl", 4))
    cfg = load_serve_config(None, ["n_resamples=0", "generator.backend=local-hf", f"generator.model={model}"])
    evaluate([bench], "random", None, tmp_path / "out", cfg, progress=False)
    evaluate([bench], "random", None, tmp_path / "out", cfg, progress=False)  # the same weights: resumes
    _retrain(model, seed=3)
    with pytest.raises(BencaoError, match=r"holds predictions of another run \(config.generator.weights was"):
        evaluate([bench], "random", None, tmp_path / "out", cfg, progress=False)
