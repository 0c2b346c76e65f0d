"""`bencao train reranker`: a cross-encoder fine-tuned on embedder-format pairs (a tiny BERT built from a config,
FoodOn definition → label pairs), held-out reranking figures before and after, and the result served by the
retrieval's rerank stage."""

from __future__ import annotations

import json
import math

import pytest
from ce_fixtures import tiny_cross_encoder
from tiny_models import embed_records

from bencao.cli import main


def _pairs(path, rows):
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


@pytest.mark.parametrize("loss", ["bce", "mnrl"])
def test_train_reports_rerank_figures_and_the_model_serves(tmp_path, loss):
    from sentence_transformers.cross_encoder import CrossEncoder

    from bencao.retrieval.search.rerank import RerankConfig, load_reranker
    from bencao.training.reranker import main as train, parse_args

    rows = [r for r in embed_records() if r["negative"]][:80]
    base = tiny_cross_encoder(tmp_path / "base")
    out = tmp_path / "ce"
    info = train(*parse_args("rerank/minilm-food", [
        f"model_name_or_path={base}", f"train_file={_pairs(tmp_path / 'p.jsonl', rows)}", f"output_dir={out}", "eval_file=null",
        "eval_fraction=0.25", f"loss={loss}", "max_steps=3", "per_device_train_batch_size=8", "max_length=64", "disable_tqdm=true",
        "logging_steps=1",
    ]))
    for phase in ("rerank_before", "rerank_after"):
        figs = info["metrics"][phase]
        assert {"mrr@10", "ndcg@10"} <= set(figs) and all(math.isfinite(v) and 0 <= v <= 1 for v in figs.values())
    assert info["kind"] == "cross-encoder" and info["global_step"] == 3 and info["hyperparameters"]["loss"] == loss
    assert info["metrics"]["heldout_questions"] > 0 and info["languages"] == {"en": info["datasets"][0]["records"]}
    saved = json.loads((out / "bencao_training.json").read_text(encoding="utf-8"))
    assert saved["metrics"]["rerank_after"] == info["metrics"]["rerank_after"]
    # the trained weights differ from the base's and the rerank stage loads them
    q, p = rows[0]["anchor"], rows[0]["positive"]
    assert CrossEncoder(str(out)).predict([(q, p)])[0] != pytest.approx(CrossEncoder(str(base)).predict([(q, p)])[0], abs=1e-7)
    assert len(load_reranker(RerankConfig(model=str(out))).score(q, [p, rows[0]["negative"]])) == 2


def test_train_reranker_cli_errors_are_one_line(tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"anchor": "a", "positive": "b"}\n{"anchor": "", "positive": "c"}\n', encoding="utf-8")
    base = tiny_cross_encoder(tmp_path / "base")
    good = _pairs(tmp_path / "good.jsonl", [r for r in embed_records() if r["negative"]][:40])
    for args, needle in (
        ([f"train_file={bad}", f"model_name_or_path={base}", "eval_file=null"], "line 2"),
        ([f"train_file={bad}", f"model_name_or_path={base}", "loss=lambda"], "loss 'lambda' is not one of bce, mnrl"),
        ([f"train_file={good}", f"model_name_or_path={tmp_path / 'nope'}", "eval_file=null", "eval_fraction=0.3"], "no such file or directory"),
        ([f"train_file={good}", f"model_name_or_path={base}", "eval_file=auto"], "eval_file: auto, but"),
    ):
        capsys.readouterr()
        code = main(["train", "reranker", "--config", "rerank/minilm-food", f"output_dir={tmp_path / 'o'}", *args])
        err = capsys.readouterr().err
        assert code == 2 and err.count("\n") == 1 and needle in err, (args, err)


def test_export_writes_a_reranker_that_loads_and_scores_the_same(tmp_path):
    """`bencao export` of a trained reranker: a self-contained cross-encoder, the same scores, a reranking card."""
    from sentence_transformers.cross_encoder import CrossEncoder

    from bencao.training.export import export
    from bencao.training.reranker import main as train, parse_args

    rows = [r for r in embed_records() if r["negative"]][:40]
    out = tmp_path / "ce"
    train(*parse_args("rerank/minilm-food", [
        f"model_name_or_path={tiny_cross_encoder(tmp_path / 'base')}", f"train_file={_pairs(tmp_path / 'p.jsonl', rows)}",
        f"output_dir={out}", "eval_file=null", "eval_fraction=0.3", "max_steps=1", "per_device_train_batch_size=4",
        "max_length=64", "disable_tqdm=true"]))
    done = export(out, tmp_path / "exported")
    assert done.kind == "cross-encoder" and not done.merged
    pair = [(rows[0]["anchor"], rows[0]["positive"])]
    assert CrossEncoder(str(done.out)).predict(pair)[0] == pytest.approx(CrossEncoder(str(out)).predict(pair)[0], abs=1e-6)
    card = (done.out / "README.md").read_text(encoding="utf-8")
    assert "pipeline_tag: text-ranking" in card and "Cross-encoder reranker" in card and "held-out reranking" in card
    assert "| mrr@10 |" in card and "from sentence_transformers import CrossEncoder" in card
