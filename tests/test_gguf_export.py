"""GGUF export: a transformers Qwen2 folder → one GGUF file that transformers loads back with the same
tokens, chat template and logits (f32 exact, f16 and q8_0 within their rounding)."""

from __future__ import annotations

import json
import shutil

import pytest

from tiny_models import build_tiny_qwen, build_tiny_qwen_gguf

from bencao.errors import BencaoError, ConfigError


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory):
    """The fixture the GGUF → transformers tests use: a tiny Qwen2 as f16 GGUF, and its source folder."""
    path = build_tiny_qwen_gguf(tmp_path_factory.mktemp("gguf"), outtype="f16")
    return path, path.parent / "hf"


def _fields(path):
    import gguf

    reader = gguf.GGUFReader(str(path))
    return reader, {k: f.contents() for k, f in reader.fields.items()}


def test_fixture_writes_a_qwen2_gguf_with_its_tokenizer_and_chat_template(tiny_gguf):
    import gguf
    from transformers import AutoTokenizer

    path, hf = tiny_gguf
    assert path.exists() and path.name == "tiny-qwen2-f16.gguf"
    reader, kv = _fields(path)
    tok = AutoTokenizer.from_pretrained(hf)
    assert kv["general.architecture"] == "qwen2" and kv["general.name"] == "tiny-qwen2"
    assert kv["general.file_type"] == int(gguf.LlamaFileType.MOSTLY_F16)
    assert kv["qwen2.block_count"] == 2 and kv["qwen2.embedding_length"] == 64 and kv["qwen2.attention.head_count_kv"] == 2
    assert kv["tokenizer.ggml.model"] == "gpt2" and kv["tokenizer.ggml.pre"] == "qwen2"
    assert len(kv["tokenizer.ggml.tokens"]) == len(tok) and len(kv["tokenizer.ggml.merges"]) > 100
    assert kv["tokenizer.ggml.eos_token_id"] == tok.convert_tokens_to_ids("<|im_end|>")
    assert kv["tokenizer.ggml.padding_token_id"] == tok.convert_tokens_to_ids("<|endoftext|>")
    types = kv["tokenizer.ggml.token_type"]
    for special in ("<|endoftext|>", "<|im_start|>", "<|im_end|>"):
        assert types[tok.convert_tokens_to_ids(special)] == int(gguf.TokenType.CONTROL)
    assert kv["tokenizer.chat_template"] == tok.chat_template and "<|im_start|>" in kv["tokenizer.chat_template"]
    by_name = {t.name: t for t in reader.tensors}
    assert "output.weight" not in by_name  # tied: the loader ties token_embd again
    assert by_name["blk.0.attn_q.weight"].tensor_type == gguf.GGMLQuantizationType.F16
    assert by_name["blk.0.attn_q.bias"].tensor_type == gguf.GGMLQuantizationType.F32
    assert by_name["output_norm.weight"].tensor_type == gguf.GGMLQuantizationType.F32


def test_transformers_loads_it_back_with_the_same_tokens_template_and_logits(tiny_gguf):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path, hf = tiny_gguf
    ref_tok, tok = AutoTokenizer.from_pretrained(hf), AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    msgs = [{"role": "user", "content": "大枣的性味是什么？ What about 12 g?"}]
    text = ref_tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    assert tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True) == text
    ids = ref_tok(text)["input_ids"]
    assert tok(text)["input_ids"] == ids and tok.decode(ids) == text
    assert tok.eos_token == "<|im_end|>" and tok.pad_token == "<|endoftext|>"
    ref = AutoModelForCausalLM.from_pretrained(hf).eval()
    got = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32).eval()
    assert got.config.num_hidden_layers == 2 and got.config.tie_word_embeddings
    assert got.config.eos_token_id == tok.convert_tokens_to_ids("<|im_end|>")
    with torch.no_grad():
        a, b = ref(input_ids=torch.tensor([ids])).logits, got(input_ids=torch.tensor([ids])).logits
    assert (a - b).abs().max() < 0.02 * a.std()  # f16 rounding of the weights
    assert (a.argmax(-1) == b.argmax(-1)).all()


@pytest.mark.parametrize("outtype", ["f32", "q8_0"])
def test_f32_is_exact_and_q8_0_within_its_tolerance(tiny_gguf, tmp_path, outtype):
    import gguf

    from bencao.training.gguf_export import check_gguf, export_gguf

    _, hf = tiny_gguf
    written = export_gguf(hf, tmp_path / f"m-{outtype}.gguf", outtype=outtype)
    reader, _ = _fields(written.path)
    q = {t.name: t.tensor_type for t in reader.tensors}["blk.1.ffn_down.weight"]
    assert q == (gguf.GGMLQuantizationType.F32 if outtype == "f32" else gguf.GGMLQuantizationType.Q8_0)
    check = check_gguf(hf, written.path)
    assert check.passed and check.outtype == outtype and check.same_tokens and check.same_chat_template, check.problems
    assert check.exact_diff < 1e-5  # the file holds exactly the folder's weights, rounded as its types say
    if outtype == "f32":
        assert check.max_abs_logit_diff < 1e-5
    else:
        assert 0 < check.relative_max_diff < check.tolerance["relative_max_diff"]


def test_untied_head_padded_vocabulary_rope_theta_and_gpt2_split(tmp_path):
    """An untied lm_head is written as output.weight; embedding rows beyond the tokenizer become [PADn] tokens;
    rope_theta (Qwen2.5: 1e6) reaches the file; a plain byte-level tokenizer is written as pre 'gpt-2'."""
    import gguf

    from bencao.training.gguf_export import check_gguf, export_gguf

    hf = build_tiny_qwen(tmp_path / "hf", split="gpt-2", tied=False)
    cfg = json.loads((hf / "config.json").read_text())
    cfg.setdefault("rope_parameters", {})["rope_theta"] = 1e6
    cfg["rope_theta"] = 1e6
    (hf / "config.json").write_text(json.dumps(cfg))
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(hf)
    n_tok = model.config.vocab_size
    model.resize_token_embeddings(n_tok + 16)  # as Qwen2.5 ships 151,936 rows for 151,665 tokens
    model.save_pretrained(hf)
    written = export_gguf(hf, tmp_path / "untied.gguf", outtype="f16")
    reader, kv = _fields(written.path)
    assert written.pre_tokenizer == "gpt-2" and kv["tokenizer.ggml.pre"] == "gpt-2"
    assert "output.weight" in {t.name for t in reader.tensors}
    assert kv["qwen2.rope.freq_base"] == pytest.approx(1e6)
    assert written.vocab_size == n_tok + 16 and kv["tokenizer.ggml.tokens"][-1] == f"[PAD{n_tok + 15}]"
    assert kv["tokenizer.ggml.token_type"][-1] == int(gguf.TokenType.UNUSED)
    check = check_gguf(hf, written.path)
    assert check.passed, check.problems


def test_a_wrong_file_fails_the_check_and_export_checked_removes_it(tiny_gguf, tmp_path):
    from bencao.training import gguf_export

    _, hf = tiny_gguf
    other = build_tiny_qwen(tmp_path / "other", split="qwen2", seed=1)  # same shapes and tokenizer, other weights
    wrong = gguf_export.export_gguf(other, tmp_path / "wrong.gguf")
    check = gguf_export.check_gguf(hf, wrong.path)
    assert not check.passed and check.same_tokens and any("differs from the folder's weights" in p for p in check.problems)

    real = gguf_export.export_gguf
    gguf_export.export_gguf = lambda model_dir, out_file, **kw: real(other, out_file, **kw)
    try:
        with pytest.raises(BencaoError, match="GGUF reload check failed"):
            gguf_export.export_checked(hf, tmp_path / "checked.gguf")
    finally:
        gguf_export.export_gguf = real
    assert not (tmp_path / "checked.gguf").exists()


def test_a_wrong_hyper_parameter_is_caught_even_where_rounding_would_hide_it(tiny_gguf, tmp_path, monkeypatch):
    """A tiny random model barely depends on rope_theta: the logits move less than f16 may move them. Compared
    with the folder's weights rounded as the file stores them, the slip still shows."""
    from bencao.training import gguf_export

    _, hf = tiny_gguf
    monkeypatch.setattr(gguf_export, "_rope_theta", lambda cfg: 1e6)  # the folder says 10,000
    wrong = gguf_export.export_gguf(hf, tmp_path / "rope.gguf")
    check = gguf_export.check_gguf(hf, wrong.path)
    assert check.relative_max_diff < check.tolerance["relative_max_diff"]  # within what f16 rounding may cost ...
    assert not check.passed and check.exact_diff > 10 * check.tolerance["exact_diff"]  # ... but not what the weights give


def test_one_line_errors_for_what_cannot_be_written(tiny_gguf, tmp_path):
    from bencao.training.gguf_export import export_gguf

    _, hf = tiny_gguf
    with pytest.raises(ConfigError, match="outtype must be one of f32, f16, q8_0"):
        export_gguf(hf, tmp_path / "x.gguf", outtype="q4_k")
    with pytest.raises(ConfigError, match="no config.json"):
        export_gguf(tmp_path, tmp_path / "x.gguf")
    llama = tmp_path / "llama"
    shutil.copytree(hf, llama)
    cfg = json.loads((llama / "config.json").read_text())
    cfg["model_type"], cfg["architectures"] = "llama", ["LlamaForCausalLM"]
    (llama / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ConfigError, match="model_type 'llama' has no GGUF writer here .supported: qwen2"):
        export_gguf(llama, tmp_path / "x.gguf")
    odd = tmp_path / "odd"
    shutil.copytree(hf, odd)
    tj = json.loads((odd / "tokenizer.json").read_text())
    tj["pre_tokenizer"] = {"type": "Whitespace"}
    (odd / "tokenizer.json").write_text(json.dumps(tj))
    with pytest.raises(ConfigError, match=r"tokenizer.json: pre-tokenizer .*Whitespace.* has no llama.cpp name"):
        export_gguf(odd, tmp_path / "x.gguf")
    assert not list(tmp_path.glob("*.gguf*"))  # nothing half-written is left behind


def test_a_model_converted_from_gguf_exports_back_to_the_same_tokens(tmp_path):
    """GGUF → transformers folder (what `bencao models` does with the real models) → GGUF again: the [PADn] filler
    rows the first conversion brought back as tokens are UNUSED again, and the reload check passes."""
    import gguf
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from bencao.training.gguf_export import check_gguf, export_gguf

    hf = build_tiny_qwen(tmp_path / "hf", split="qwen2")
    model = AutoModelForCausalLM.from_pretrained(hf)
    model.resize_token_embeddings(model.config.vocab_size + 8)
    model.save_pretrained(hf)
    first = export_gguf(hf, tmp_path / "first" / "m.gguf", outtype="f32")
    conv = tmp_path / "converted"
    got = AutoModelForCausalLM.from_pretrained(first.path.parent, gguf_file=first.path.name)
    got.hf_quantizer = None  # transformers refuses to save a model it read from a GGUF until told it is plain now
    got.config.quantization_config = None
    got.save_pretrained(conv)
    AutoTokenizer.from_pretrained(first.path.parent, gguf_file=first.path.name).save_pretrained(conv)
    again = export_gguf(conv, tmp_path / "again.gguf", outtype="f16")
    _, kv1 = _fields(first.path)
    _, kv2 = _fields(again.path)
    assert kv2["tokenizer.ggml.tokens"] == kv1["tokenizer.ggml.tokens"]
    assert kv2["tokenizer.ggml.token_type"] == kv1["tokenizer.ggml.token_type"]
    assert kv2["tokenizer.ggml.token_type"][-1] == int(gguf.TokenType.UNUSED)
    assert kv2["tokenizer.ggml.pre"] == "qwen2" and kv2["tokenizer.chat_template"] == kv1["tokenizer.chat_template"]
    check = check_gguf(conv, again.path)
    assert check.passed, check.problems
