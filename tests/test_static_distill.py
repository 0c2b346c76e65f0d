"""A static embedder distilled from a language model's vocabulary (Model2Vec-style), on a tiny Qwen2 built from a
config: token vectors (input embedding or hidden state alone) → PCA → SIF weights → a StaticEmbedding that
sentence-transformers loads, with the model's own tokenizer; the recipe and the CLI; a killed hidden pass resumes."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from tiny_models import build_tiny_qwen

from bencao.errors import ConfigError, InputError
from bencao.training.static_distill import (DistillArguments, counted_probabilities, distill, hidden_vectors, iter_texts, main,
                                            parse_args, pca, sif_weights, zipf_probabilities)


@pytest.fixture(scope="module")
def tiny_lm(tmp_path_factory) -> Path:
    return build_tiny_qwen(tmp_path_factory.mktemp("lm") / "tiny-qwen", hidden=64, seed=3)


def _embedding_rows(path: Path) -> np.ndarray:
    from safetensors.numpy import load_file

    st = load_file(str(path / "model.safetensors"))
    return next(v for k, v in st.items() if k.endswith("embed_tokens.weight")).astype(np.float32)


def test_pca_keeps_the_largest_variance_axes_centred_and_signed():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(500, 6)) * np.array([10, 5, 1, 0.5, 0.1, 0.01]) + 3.0
    y, explained = pca(x, 2)
    assert y.shape == (500, 2) and abs(y.mean(axis=0)).max() < 1e-4
    assert explained[0] > explained[1] > 0 and 0.98 < sum(explained) <= 1.0  # the two big axes carry 125 of 126.26
    assert abs(float(np.corrcoef(y[:, 0], x[:, 0])[0, 1])) > 0.99
    assert all(y[np.abs(y[:, j]).argmax(), j] > 0 for j in range(2))  # each axis's largest score is positive


def test_sif_gives_rare_tokens_more_weight():
    w = sif_weights(zipf_probabilities(1000), 1e-3)
    assert w[0] < w[10] < w[999] <= 1.0
    assert (sif_weights([0.5, 0.1], 0) == 1).all()


def test_input_source_is_pca_of_the_embedding_rows_times_sif(tiny_lm, tmp_path):
    from sentence_transformers import SentenceTransformer
    from tokenizers import Tokenizer

    args = DistillArguments(model=str(tiny_lm), output_dir=str(tmp_path / "s"), source="input", pca_dims=16, sif_coefficient=1e-3)
    record = main(args)
    model = SentenceTransformer(str(tmp_path / "s"), device="cpu")
    tok = Tokenizer.from_file(str(tiny_lm / "tokenizer.json"))
    n = tok.get_vocab_size(with_added_tokens=True)
    w = model[0].embedding.weight.detach().numpy()
    assert w.shape == (n, 16) and record["vocab_size"] == n and record["dim"] == 16
    specials = sorted(tok.get_added_tokens_decoder())
    assert specials and not w[specials].any()  # special tokens carry nothing
    # recomputed by hand: PCA over the regular tokens' embedding rows, each row times a / (a + p_zipf(rank))
    rows = _embedding_rows(tiny_lm)[:n]
    keep = np.setdiff1d(np.arange(n), specials)
    expected, _ = pca(rows[keep], 16)
    weights = sif_weights(zipf_probabilities(n), 1e-3)[keep]
    assert np.allclose(w[keep], expected * weights[:, None], atol=1e-4)
    # a text's vector is the normalised mean of its tokens' vectors, through the model's own tokenizer
    text = "补中益气 the herb"
    ids = tok.encode(text, add_special_tokens=False).ids
    v = model.encode([text], normalize_embeddings=False)[0]
    assert np.allclose(v, w[ids].mean(axis=0), atol=1e-4)
    rec = json.loads((tmp_path / "s" / "bencao_distill.json").read_text())
    assert rec["base_model"] == str(tiny_lm) and len(rec["base_model_fingerprint"]) == 16 and rec["frequencies"] == "zipf"
    assert 0 < rec["pca_explained_variance"] <= 1 and not (tmp_path / "s" / ".distill-parts").exists()


def test_hidden_source_is_each_tokens_last_hidden_state_alone_and_resumes(tiny_lm, tmp_path):
    import torch
    from transformers import AutoModel

    model = AutoModel.from_pretrained(str(tiny_lm), dtype=torch.float32).eval()
    ids = [5, 17, 300, 41, 9]
    parts = tmp_path / "parts"
    h = hidden_vectors(model, ids, batch_size=2, parts=parts, progress=False)
    with torch.inference_mode():
        alone = [model(input_ids=torch.tensor([[i]])).last_hidden_state[0, -1].numpy() for i in ids]
    assert np.allclose(h, np.stack(alone), atol=1e-4)
    assert sorted(p.name for p in parts.iterdir()) == ["00000000-2.npy", "00000002-2.npy", "00000004-2.npy"]
    # a rerun reads the finished batches back instead of recomputing them (a killed run resumes)
    np.save(parts / "00000002-2.npy", np.full((2, h.shape[1]), 7.0, dtype=np.float32))
    again = hidden_vectors(model, ids, batch_size=2, parts=parts, progress=False)
    assert (again[2:4] == 7.0).all() and np.allclose(again[[0, 1, 4]], h[[0, 1, 4]])


def test_hidden_distillation_differs_from_input_and_counts_frequencies_on_a_pairs_file(tiny_lm, tmp_path):
    from tokenizers import Tokenizer

    pairs = tmp_path / "train.jsonl"
    rows = [{"anchor": "主治头痛？", "positive": "补中益气，主治头痛。", "negative": "味甘，平。", "group": "g"}] * 30
    pairs.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    args = DistillArguments(model=str(tiny_lm), output_dir=str(tmp_path / "h"), source="hidden", pca_dims=8, frequencies=str(pairs),
                            batch_size=256, dtype="float32")
    model, record = distill(args, progress=False)
    assert record["texts_counted"] == 90 and record["tokens_counted"] > 90 and record["frequencies"] == "train.jsonl"
    tok = Tokenizer.from_file(str(tiny_lm / "tokenizer.json"))
    w = model[0].embedding.weight.detach().numpy()
    frequent = tok.encode("补中益气，主治头痛。", add_special_tokens=False).ids[0]
    norms = np.linalg.norm(w, axis=1)
    seen_never = [i for i in range(len(w)) if norms[i] > 0 and i not in set(tok.encode("".join(r for r in rows[0].values()),
                                                                                         add_special_tokens=False).ids)]
    # the frequent token is weighted down against the tokens the texts never use (SIF on counted frequencies)
    assert norms[frequent] / np.median(norms[seen_never]) < 0.5
    inp, _ = distill(DistillArguments(model=str(tiny_lm), output_dir=str(tmp_path / "i"), source="input", pca_dims=8), progress=False)
    assert not np.allclose(np.abs(w), np.abs(inp[0].embedding.weight.detach().numpy()), atol=1e-3)


def test_bad_frequency_files_and_recipes_are_one_line_errors(tmp_path):
    bad = tmp_path / "p.jsonl"
    bad.write_text('{"anchor": "a"}\nnot json\n', encoding="utf-8")
    with pytest.raises(InputError, match=r"p\.jsonl:2: not a JSON object"):
        list(iter_texts(bad, 10))
    assert list(iter_texts(bad, 1)) == ["a"]
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text('{"anchor": "a", "positive": "b", "negative": "c"}\n{"anchor": "d", "positive": "e"}\n', encoding="utf-8")
    assert list(iter_texts(pairs, 2)) == ["a", "b"]  # the limit counts texts, not rows (it read 3 for 2 before)
    assert list(iter_texts(pairs, 4)) == ["a", "b", "c", "d"]
    txt = tmp_path / "t.txt"
    txt.write_text("一\n\n二\n", encoding="utf-8")
    assert list(iter_texts(txt, 10)) == ["一", "二"]
    with pytest.raises(ConfigError, match="model is required"):
        parse_args(None, ["output_dir=x"])
    with pytest.raises(ConfigError, match="source 'mean' is not one of input, hidden"):
        parse_args(None, ["model=m", "output_dir=x", "source=mean"])
    with pytest.raises(ConfigError, match="frequencies 'nope.jsonl' is neither zipf nor an existing file"):
        parse_args(None, ["model=m", "output_dir=x", "frequencies=nope.jsonl"])
    with pytest.raises(ConfigError, match="unknown key"):
        parse_args(None, ["model=m", "output_dir=x", "pca=3"])


def test_the_shipped_recipe_and_the_cli(tiny_lm, tmp_path):
    from typer.testing import CliRunner

    from bencao.cli import app

    (args,) = parse_args("embed/qwen2.5-coder-0.5b/distill-static", ["frequencies=zipf"])
    assert args.model == "qwen2.5-coder-0.5b-instruct" and args.source == "input" and args.pca_dims == 256
    out = tmp_path / "cli"
    res = CliRunner().invoke(app, ["train", "distill-static", "--config", "embed/qwen2.5-coder-0.5b/distill-static",
                                   f"model={tiny_lm}", f"output_dir={out}", "frequencies=zipf", "pca_dims=4"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.output.strip().splitlines()[-1])["dim"] == 4 and (out / "modules.json").is_file()


def test_the_held_out_pairs_bench_ranks_each_anchors_positive(tiny_lm, tmp_path, capsys):
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
    import static_distill_ir as ir

    main(DistillArguments(model=str(tiny_lm), output_dir=str(tmp_path / "s"), source="input", pca_dims=8))
    rows = [("山药主治什么？", "山药：味甘，温。主伤中。"), ("干姜的性味？", "干姜：味辛，温。"), ("山药的性味？", "山药：味甘，温。主伤中。")]
    pairs = tmp_path / "eval.jsonl"
    pairs.write_text("".join(json.dumps({"anchor": a, "positive": p}, ensure_ascii=False) + "\n" for a, p in rows), encoding="utf-8")
    anchors, positives, gold = ir.load_pairs(str(pairs), None)
    assert len(positives) == 2 and gold.tolist() == [0, 1, 0]
    assert ir.ranks_from_scores(np.array([[0.1, 0.9], [0.5, 0.5]]), np.array([0, 1])).tolist() == [2, 2]  # ties count against
    assert ir.bm25_ranks(anchors, positives, gold).tolist() == [1, 1, 1]
    assert ir.main(["--pairs", str(pairs), "--bm25", "--model", str(tmp_path / "s"), "--n-resamples", "20"]) == 0
    out = capsys.readouterr().out
    assert "| bm25 (plain) |" in out and "| 1.000 | 100.0 | 100.0 | – | – |" in out and "| s |" in out
    pairs.write_text("not json\n", encoding="utf-8")
    with pytest.raises(SystemExit, match="eval.jsonl:1: not a pairs row"):
        ir.load_pairs(str(pairs), None)
