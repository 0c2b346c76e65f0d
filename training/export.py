"""Export a trained model: merge LoRA into the unquantised base on CPU, save safetensors, tokenizer,
generation config and a model card; upload to a hub repo (or write the exact upload plan).

Works for the outputs of ``bencao train``: the causal LM (``sft``), the cross-encoder (``reranker``) and the sentence-transformer
embedder (``embedder``), with or without a LoRA adapter. The base model is the one recorded at
training time (``bencao_training.json``) unless ``--base`` names another copy of it.

A causal LM can also be written as one GGUF file beside the safetensors (``gguf="f16"`` or ``"q8_0"``;
``training/gguf_export.py``): it is reloaded with transformers and compared with the merged model on fixed
prompts before the export is kept, and the figures go into the export record (``bencao_training.json``,
key ``gguf``) and the model card. The base folder's ``provenance.json`` (written by ``bencao models``) is
cited by the card and copied into the record (``base_provenance``). What is published (card, record)
holds no local absolute path.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bencao.errors import BencaoError, ConfigError
from bencao.io import atomic_write_json
from bencao.models import file_sha256
from bencao.training.model_card import render_card
from bencao.training.provenance import public, public_name, read_provenance

SUMMARY_FILE = "bencao_training.json"
PLAN_SUFFIX = ".upload-plan.json"


@dataclass
class Exported:
    kind: str  # "causal-lm", "sentence-transformer" or "cross-encoder"
    out: Path
    merged: bool
    base_model: str | None
    gguf: dict[str, Any] | None = None  # the GGUF file written beside the weights and its reload check


def base_provenance(base_id: str | None, summary: dict[str, Any]) -> dict[str, Any] | None:
    """The base folder's ``provenance.json``, or the copy an earlier export recorded."""
    from bencao.models import resolve_model

    if summary.get("base_provenance"):
        return summary["base_provenance"]
    if not base_id:
        return None
    try:
        path = resolve_model(base_id)
    except BencaoError:  # a base that is not here any more: the card says what the record knows
        return None
    return read_provenance(path) if Path(path).is_dir() else None


def model_facts(folder: Path) -> dict[str, Any]:
    """Architecture, layers, hidden size and vocabulary of a saved causal LM (from its config.json)."""
    cfg = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    return {"architecture": (cfg.get("architectures") or [cfg.get("model_type")])[0], "layers": cfg.get("num_hidden_layers"),
            "hidden_size": cfg.get("hidden_size"), "vocabulary": cfg.get("vocab_size")}


def _summary(model_dir: Path) -> dict[str, Any]:
    p = model_dir / SUMMARY_FILE
    return json.loads(p.read_text(encoding="utf-8")) if p.exists() else {}


def _adapter_base(model_dir: Path, base: str | None, summary: dict[str, Any]) -> str:
    cfg = json.loads((model_dir / "adapter_config.json").read_text(encoding="utf-8"))
    chosen = base or summary.get("base_model") or cfg.get("base_model_name_or_path")
    if not chosen:
        raise ConfigError(f"{model_dir}: the adapter does not record its base model; pass --base")
    return str(chosen)


def _refuse_quantised(base: str) -> None:
    """Merging into 4/8-bit weights corrupts the result (LLaMA-Factory #2771): the base must be unquantised."""
    from transformers import AutoConfig

    cfg = AutoConfig.from_pretrained(base)
    if getattr(cfg, "quantization_config", None):
        raise BencaoError(f"{base}: the base model is quantised; merge into the unquantised (bf16/fp16/fp32) base instead")


def merge_causal_lm(model_dir: Path, base: str | None, summary: dict[str, Any]):
    """(merged model, base id): the adapter merged into a full-precision CPU copy of the base."""
    import torch
    from transformers import AutoModelForCausalLM

    if not (model_dir / "adapter_config.json").exists():
        return AutoModelForCausalLM.from_pretrained(model_dir, dtype="auto"), summary.get("base_model"), False
    from peft import PeftModel

    from bencao.training.sft import check_adapter_nonempty

    from bencao.models import resolve_model

    check_adapter_nonempty(model_dir)
    base_id = _adapter_base(model_dir, base, summary)
    _refuse_quantised(resolve_model(base_id))
    model = AutoModelForCausalLM.from_pretrained(resolve_model(base_id), dtype="auto", device_map={"": "cpu"})
    if model.dtype not in (torch.float32, torch.bfloat16, torch.float16):
        raise BencaoError(f"{base_id}: unexpected dtype {model.dtype} for a merge")
    merged = PeftModel.from_pretrained(model, str(model_dir)).merge_and_unload()
    return merged, base_id, True


def merge_sentence_transformer(model_dir: Path, base: str | None, summary: dict[str, Any]):
    """(model, base id, merged?): a sentence-transformer's LoRA adapter merged into its base with peft's
    ``merge_and_unload``; the trained model's ``max_seq_length`` is kept."""
    from sentence_transformers import SentenceTransformer

    if not (model_dir / "adapter_config.json").exists():
        return SentenceTransformer(str(model_dir), device="cpu"), summary.get("base_model"), False
    from peft import PeftModel

    from bencao.models import resolve_model
    from bencao.training.sft import check_adapter_nonempty

    check_adapter_nonempty(model_dir)
    base_id = _adapter_base(model_dir, base, summary)
    model = SentenceTransformer(resolve_model(base_id), device="cpu")
    transformer = model[0]
    transformer.auto_model = PeftModel.from_pretrained(transformer.auto_model, str(model_dir)).merge_and_unload()
    trained_cfg = model_dir / "sentence_bert_config.json"
    if trained_cfg.exists():
        max_len = json.loads(trained_cfg.read_text(encoding="utf-8")).get("max_seq_length")
        if max_len:
            model.max_seq_length = int(max_len)
    return model, base_id, True


def read_evaluation(path: str | Path) -> dict[str, Any]:
    """A before/after comparison written by ``bench/eval_llm.py --compare-to`` (``comparison.json``), checked."""
    from bencao.errors import InputError

    path = Path(path)
    if not path.is_file():
        raise InputError(path, "evaluation file not found")
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise InputError(path, f"not JSON: {exc}") from None
    if not isinstance(doc, dict) or doc.get("kind") != "bencao.eval_llm.comparison" or not isinstance(doc.get("accuracy"), list):
        raise InputError(path, "not a comparison written by bench/eval_llm.py --compare-to (kind bencao.eval_llm.comparison)")
    for i, row in enumerate(doc["accuracy"]):
        if not all(k in row for k in ("condition", "file", "n", "before", "after", "delta")):
            raise InputError(path, "an accuracy row needs condition, file, n, before, after, delta", record=f"accuracy[{i}]")
    return doc


def export(model_dir: str | Path, out: str | Path, base: str | None = None, gguf: str | None = None,
           evaluation: str | Path | None = None) -> Exported:
    """Write the merged, self-contained model and its model card to ``out`` (replaced atomically); with
    ``gguf`` (f16, q8_0, f32) a causal LM also as ``out/<out name>-<gguf>.gguf``, reload-checked; with
    ``evaluation`` (``bench/eval_llm.py``'s ``comparison.json``) the held-out figures before and after training
    go into the record (key ``evaluation``) and the card."""
    model_dir, out = Path(model_dir), Path(out)
    if not model_dir.is_dir():
        raise ConfigError(f"{model_dir}: not a directory")
    evaluated = read_evaluation(evaluation) if evaluation is not None else None
    summary = _summary(model_dir)
    kind = ("cross-encoder" if summary.get("kind") == "cross-encoder" else
            "sentence-transformer" if (model_dir / "modules.json").exists() else "causal-lm")
    if gguf is not None:
        from bencao.training.gguf_export import OUTTYPES

        if kind != "causal-lm":
            raise ConfigError(f"{model_dir}: --gguf writes causal language models; this is a {kind}")
        if gguf not in OUTTYPES:
            raise ConfigError(f"--gguf must be one of {', '.join(OUTTYPES)}, got {gguf!r}")
    tmp = out.with_name(f".{out.name}.tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    if kind == "causal-lm":
        from transformers import AutoTokenizer, GenerationConfig

        model, base_id, merged = merge_causal_lm(model_dir, base, summary)
        tok = AutoTokenizer.from_pretrained(model_dir)
        if (model_dir / "generation_config.json").exists():
            model.generation_config = GenerationConfig.from_pretrained(model_dir)
        model.save_pretrained(tmp, safe_serialization=True)
        tok.save_pretrained(tmp)
        model.generation_config.save_pretrained(tmp)
        del model  # the GGUF check below loads the model twice more
    elif kind == "cross-encoder":  # `bencao train reranker` trains all weights: nothing to merge
        from sentence_transformers.cross_encoder import CrossEncoder

        CrossEncoder(str(model_dir)).save_pretrained(str(tmp), safe_serialization=True)
        base_id, merged = summary.get("base_model"), False
    else:
        model, base_id, merged = merge_sentence_transformer(model_dir, base, summary)
        model.save_pretrained(str(tmp), safe_serialization=True)
    if not any(tmp.glob("*.safetensors")):
        raise BencaoError(f"{model_dir}: export wrote no safetensors weights")
    provenance = base_provenance(base_id, summary)
    base_name = public_name(base_id, provenance)
    gguf_record = None
    if gguf is not None:
        from bencao.training.gguf_export import export_checked

        written, check = export_checked(tmp, tmp / f"{out.name}-{gguf}.gguf", outtype=gguf, name=out.name, base_model=base_name,
                                        licence=(provenance or {}).get("licence"))
        gguf_record = {**written.record(), "check": check.record()}
    facts = model_facts(tmp) if kind == "causal-lm" else None
    card = render_card(kind, summary, base_name, merged=merged, model_name=out.name, provenance=provenance, gguf=gguf_record,
                       base_facts=facts, evaluation=evaluated)
    (tmp / "README.md").write_text(card, encoding="utf-8")
    record = {**public(summary), "base_model": base_name, "exported_from": model_dir.name, "merged": merged}
    if provenance:
        record["base_provenance"] = public(provenance)
    if gguf_record:
        record["gguf"] = gguf_record
    if evaluated:
        record["evaluation"] = public(evaluated)
    atomic_write_json(tmp / SUMMARY_FILE, record)
    if out.exists():
        shutil.rmtree(out)
    tmp.rename(out)
    return Exported(kind=kind, out=out, merged=merged, base_model=base_id, gguf=gguf_record)


def upload_plan(folder: Path, repo: str, private: bool, commit_message: str) -> dict[str, Any]:
    files = sorted(p for p in folder.rglob("*") if p.is_file())
    return {
        "repo_id": repo,
        "repo_type": "model",
        "private": private,
        "commit_message": commit_message,
        "files": [
            {"path": p.relative_to(folder).as_posix(), "bytes": p.stat().st_size, "sha256": file_sha256(p)} for p in files
        ],
    }


def push(folder: str | Path, repo: str, private: bool = False, dry_run: bool = False, commit_message: str | None = None) -> Path | None:
    """Upload ``folder`` to ``repo`` with huggingface_hub, or (dry run) write ``<folder>.upload-plan.json``."""
    folder = Path(folder)
    summary = _summary(folder)
    message = commit_message or f"bencao export of {summary.get('kind', 'model')} fine-tuned from {summary.get('base_model', 'a base model')}"
    plan = upload_plan(folder, repo, private, message)
    if dry_run:
        path = folder.with_name(folder.name + PLAN_SUFFIX)
        atomic_write_json(path, plan)
        return path
    token = os.environ.get("HF_TOKEN") or os.environ.get("HUGGING_FACE_HUB_TOKEN")
    if not token:
        raise ConfigError("--push-to-hub needs a token in HF_TOKEN (or use --upload-plan)")
    if os.environ.get("HF_HUB_OFFLINE", "0") not in ("0", "", "false"):
        raise ConfigError("HF_HUB_OFFLINE is set: cannot upload (unset it, or use --upload-plan)")
    from huggingface_hub import HfApi

    api = HfApi(token=token)
    api.create_repo(repo, repo_type="model", private=private, exist_ok=True)
    api.upload_folder(folder_path=str(folder), repo_id=repo, repo_type="model", commit_message=message)
    return None
