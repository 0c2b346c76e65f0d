"""The Chinese static embedder: tokenizers trained on the corpus, a StaticEmbedding trained from scratch on
template pairs of a real graph, then used by the index for dense Chinese retrieval."""

from __future__ import annotations

import json

import pytest

from bencao.data_gen.pairs import PairsConfig, run_pairs
from tests.data_gen_helpers import build_graph

BOOK = ["味甘，平。主五脏邪气，补中益气。", "味辛，温。主咳逆上气，头眩胸胀。", "主治头痛，补中益气，安五脏。"] * 20


def test_char_and_bpe_tokenizers_trained_on_the_texts():
    from bencao.training.static_embedder import train_tokenizer

    char = train_tokenizer(BOOK, "char", vocab_size=500, min_frequency=1)
    assert char.encode("补中益气", add_special_tokens=False).tokens == ["补", "中", "益", "气"]
    bpe = train_tokenizer(BOOK, "bpe", vocab_size=500, min_frequency=2)
    toks = bpe.encode("补中益气，头眩胸胀", add_special_tokens=False).tokens
    assert "补中益气" in toks or len([t for t in toks if len(t) > 1]) >= 2  # frequent runs become multi-character tokens
    assert "[UNK]" not in toks


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """Template pairs of the test graph (zh), a static model trained on them for 60 steps."""
    from bencao.training.embedder import main, parse_args

    root = tmp_path_factory.mktemp("static")
    graph = build_graph(root / "graph")
    pairs = root / "pairs"
    run_pairs(PairsConfig(graph=str(graph), output=str(pairs), progress=False, templates=["fact", "composite", "attributes", "heading"],
                          positive_chars=200))
    out = root / "model"
    info = main(*parse_args("configs/embed/static-zh.yaml", [
        f"train_file={pairs / 'train.jsonl'}", f"output_dir={out}", "max_steps=60", "seed=1", "per_device_train_batch_size=32",
        "static_vocab_size=4000", "static_dim=64", "disable_tqdm=true", "logging_steps=1000"]))
    return graph, out, info


def test_static_model_learns_the_held_out_pairs(trained):
    _, out, info = trained
    before, after = info["metrics"]["ir_before"], info["metrics"]["ir_after"]
    assert after["mrr@10"] >= before["mrr@10"] + 0.2 and after["recall@10"] > before["recall@10"]
    hp = info["hyperparameters"]
    assert hp["static_tokenizer"] == "bpe" and hp["dim"] == 64 and hp["max_seq_length"] is None
    assert info["languages"] == ["zh"] or "zh" in info["languages"]
    assert (out / "tokenizer.json").exists() and json.loads((out / "bencao_training.json").read_text())["base_model"] == "static"


def test_the_index_embeds_chinese_with_it_and_dense_search_finds_the_entry(trained, tmp_path):
    import shutil

    from bencao.retrieval.graph.store import Graph
    from bencao.retrieval.index import open_indexes, update_indexes
    from bencao.retrieval.index.embedder import EmbedderConfig, get_embedder

    graph, out, _ = trained
    emb = get_embedder(EmbedderConfig(model=str(out), languages=["zh"]))
    v = emb.encode(["半夏主治头眩胸胀", "补中益气"])
    assert v.shape == (2, 64) and abs(float((v[0] ** 2).sum()) - 1) < 1e-4
    g2 = tmp_path / "g"
    shutil.copytree(graph, g2)
    cfg = {"embedder": {"model": str(out), "languages": ["zh"]}, "dense_kinds": ["snippets"], "kinds": ["snippets"], "shared_cache": False}
    with Graph.open(g2) as g:
        s = update_indexes(g, cfg)
        assert s["embedded"] > 300 and s["dense"]["snippets"]["n"] > 300
        hits = open_indexes(g, cfg).dense_search("snippets", "哪味药主治头眩胸胀？", 5)
        texts = [g.get_snippet(sid)["text"] for sid, _ in hits]
    assert any("头眩胸胀" in t for t in texts)


def test_embed_recipes_parse_and_find_the_held_out_split(tmp_path):
    from bencao.errors import ConfigError
    from bencao.retrieval.search.config import load_retrieval_config
    from bencao.training.embedder import parse_args

    (tmp_path / "train.jsonl").write_text('{"anchor": "a", "positive": "b"}\n', encoding="utf-8")
    for recipe, lang in (("configs/embed/static-zh.yaml", ["zh"]), ("configs/embed/minilm-food.yaml", ["en"])):
        with pytest.raises(ConfigError, match="eval_file: auto, but .*eval.jsonl does not exist"):
            parse_args(recipe, [f"train_file={tmp_path / 'train.jsonl'}"])
    (tmp_path / "eval.jsonl").write_text('{"anchor": "a", "positive": "b"}\n', encoding="utf-8")
    for recipe, lang in (("configs/embed/static-zh.yaml", ["zh"]), ("configs/embed/minilm-food.yaml", ["en"])):
        script, training = parse_args(recipe, [f"train_file={tmp_path / 'train.jsonl'}", f"output_dir={tmp_path / 'o'}", "max_steps=5", "seed=3"])
        assert script.eval_file == str(tmp_path / "eval.jsonl") and script.languages == lang and training.max_steps == 5
    with pytest.raises(ConfigError, match="static embedding model trains all its weights"):
        parse_args("configs/embed/static-zh.yaml", [f"train_file={tmp_path / 'train.jsonl'}", "use_lora=true"])
    for cfg, lang in (("configs/retrieval/static-zh.yaml", ["zh"]), ("configs/retrieval/minilm-food.yaml", ["en"])):
        assert load_retrieval_config(cfg).index.embedder.languages == lang


@pytest.mark.slow  # 2-4 min each on the shared 2-core machine; the fixture above covers the same code in-process
@pytest.mark.parametrize("recipe, retrieval, lang", [("static-zh", "static-zh", "zh"), ("minilm-food", "minilm-food", "en")])
def test_the_loop_runs_in_the_documented_commands(recipe, retrieval, lang, tmp_path, capsys, monkeypatch):
    """bencao data pairs → bencao train embedder --config R train_file=… output_dir=… max_steps=N seed=S →
    bencao graph index --config RETRIEVAL.yaml embedder.model=DIR, whose JSON says how many texts it embedded."""
    from bencao.cli import main

    monkeypatch.setenv("BENCAO_CACHE_DIR", str(tmp_path / "usercache"))
    graph = build_graph(tmp_path / "graph")
    pairs, model = tmp_path / "pairs", tmp_path / "model"
    assert main(["data", "pairs", "--graph", str(graph), "--output", str(pairs), "progress=false"]) == 0
    capsys.readouterr()
    assert main(["train", "embedder", "--config", f"configs/embed/{recipe}.yaml", f"train_file={pairs / 'train.jsonl'}",
                 f"output_dir={model}", "max_steps=3", "seed=5"]) == 0
    record = json.loads((model / "bencao_training.json").read_text(encoding="utf-8"))
    assert record["global_step"] == 3 and record["hyperparameters"]["seed"] == 5
    assert max(record["languages"], key=record["languages"].get) == lang
    assert record["datasets"][1]["path"] == str(pairs / "eval.jsonl") and record["metrics"]["ir_after"]["mrr@10"] >= 0
    capsys.readouterr()
    assert main(["graph", "index", "--graph", str(graph), "--config", f"configs/retrieval/{retrieval}.yaml", f"embedder.model={model}"]) == 0
    out = capsys.readouterr().out
    summary = json.loads(out[out.index("{"):])
    assert summary["embedded"] > 100
    manifest = json.loads((graph / "manifest.json").read_text(encoding="utf-8"))
    assert [e["languages"] for e in manifest["embedders"].values()] == [[lang]]
