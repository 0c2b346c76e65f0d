"""A GGUF file → a plain transformers folder (``bencao export from-gguf``; the last step of ``bencao models install``).

transformers reads GGUF files of the architectures it knows (qwen2, llama, gemma3, ...) with the ``gguf``
package and dequantises them; the result is saved as an ordinary safetensors folder (bf16 by default) with
the tokenizer, its chat template and the generation config, so every loader in bencao (local generation,
letter scoring, SFT, export) opens it like any hub model. Beside the weights: ``provenance.json`` (where the
bytes came from and their hashes) and a ``README.md`` model card. The folder appears only when complete
(written to ``<out>.tmp``, then renamed), so a killed conversion leaves nothing half-written behind.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

from bencao.errors import BencaoError

DTYPES = ("bfloat16", "float16", "float32")


class ConversionError(BencaoError):
    """A GGUF file transformers cannot turn into a model (unknown architecture, damaged file). One line."""


def _versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for pkg in ("transformers", "gguf", "torch"):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            pass
    return out


def load_gguf(gguf_path: str | Path, dtype: str = "bfloat16") -> tuple[Any, Any]:
    """(model, tokenizer) read from a GGUF file by transformers, dequantised to ``dtype``, ready to save."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    p = Path(gguf_path)
    if not p.is_file():
        raise ConversionError(f"{p}: no such GGUF file")
    if dtype not in DTYPES:
        raise ConversionError(f"dtype {dtype!r}: choose one of {', '.join(DTYPES)}")
    try:
        tok = AutoTokenizer.from_pretrained(str(p.parent), gguf_file=p.name)
        model = AutoModelForCausalLM.from_pretrained(str(p.parent), gguf_file=p.name, dtype=getattr(torch, dtype))
    except (ValueError, KeyError, OSError, RuntimeError, NotImplementedError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConversionError(f"{p}: transformers cannot read this GGUF file: {first[:300]}") from None
    # transformers marks a GGUF-loaded model as quantized and refuses to save it; the weights are plain tensors now
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.eval()
    return model, tok


def _fix_generation_config(model: Any, tok: Any, instruct: bool) -> None:
    """Stop at the chat turn's end as well as the tokenizer's EOS (Qwen2.5: ``<|im_end|>`` and ``<|endoftext|>``)."""
    gc = model.generation_config
    ids: list[int] = []
    for t in (tok.eos_token, "<|im_end|>", "<|endoftext|>", "<end_of_turn>", "<eos>"):
        if not t:
            continue
        i = tok.convert_tokens_to_ids(t)
        if isinstance(i, int) and i >= 0 and i != tok.unk_token_id and i not in ids:
            ids.append(i)
    if ids and instruct:
        gc.eos_token_id = ids if len(ids) > 1 else ids[0]
    if tok.pad_token_id is not None:
        gc.pad_token_id = tok.pad_token_id
    elif ids:
        gc.pad_token_id = ids[-1]


def model_card(provenance: dict[str, Any]) -> str:
    """README.md of a converted folder: what it is, where its bytes came from, how to use it, its limits."""
    name = provenance.get("name") or provenance.get("gguf", {}).get("general.name") or "model"
    g = provenance.get("gguf", {})
    lines = [
        "---",
        f"license: {provenance.get('licence_id', 'other')}",
        *( [f"base_model: {provenance['upstream']}"] if provenance.get("upstream") else []),
        "library_name: transformers",
        "pipeline_tag: text-generation",
        "tags: [bencao, gguf-conversion]",
        "---",
        "",
        f"# {name} (transformers folder converted from GGUF by bencao)",
        "",
        "This folder holds the weights of a GGUF file dequantised by transformers and saved as "
        f"{provenance.get('dtype', 'bfloat16')} safetensors, with the tokenizer, its chat template and the generation config. "
        "The GGUF was quantised upstream, so these weights carry that quantisation's rounding: they are the GGUF's "
        "model, not the original full-precision checkpoint.",
        "",
        "## Provenance",
        "",
        f"- Upstream model: {provenance.get('upstream') or 'not recorded'}",
        f"- Licence: {provenance.get('licence') or 'not recorded (see the GGUF source)'}",
        f"- GGUF file: `{g.get('file')}`, {g.get('bytes', 0):,} bytes, SHA-256 `{g.get('sha256')}`",
        f"- GGUF header: general.name = {g.get('general.name')!r}, architecture = {g.get('architecture')!r}",
    ]
    if provenance.get("quantization_of_source"):
        lines.append(f"- Source quantisation: {provenance['quantization_of_source']}")
    pk = provenance.get("packages") or []
    if pk:
        lines += ["- Installed from these PyPI chunk packages (exact versions, wheel SHA-256 checked):", ""]
        lines += [f"  - `{p['name']}=={p['version']}` sha256 `{p['sha256']}`" for p in pk]
    conv = provenance.get("converted_with", {})
    lines += ["", f"- Converted with: {', '.join(f'{k} {v}' for k, v in conv.items())}", "",
              "## Use", "", "```python", "from transformers import AutoModelForCausalLM, AutoTokenizer",
              "tok = AutoTokenizer.from_pretrained(FOLDER)", "model = AutoModelForCausalLM.from_pretrained(FOLDER)", "```", "",
              "In bencao, name the model in a recipe's `llm` block (`backend: local-hf`, `model: <name or folder>`), or serve it "
              "with `bencao llm serve --model <name>`.", "",
              "## Intended use and limits", "",
              "A small model for measuring bencao's pipeline on a CPU machine, not a production model. It is not a medical "
              "device and gives no medical advice: its answers about Traditional Chinese Medicine, foods or supplements can be "
              "wrong and must not replace a qualified practitioner.", ""]
    return "\n".join(lines)


def convert_gguf(gguf_path: str | Path, out_dir: str | Path, *, provenance: dict[str, Any] | None = None,
                 dtype: str = "bfloat16", instruct: bool = True, overwrite: bool = False) -> Path:
    """Write the transformers folder ``out_dir`` from ``gguf_path`` (atomically); returns ``out_dir``."""
    from bencao.model_install import gguf_header, sha256_of

    src, out = Path(gguf_path), Path(out_dir)
    if not src.is_file():
        raise ConversionError(f"{src}: no such GGUF file")
    if out.exists() and not overwrite:
        if (out / "provenance.json").is_file():
            return out
        raise ConversionError(f"{out}: exists and is not a converted model folder; choose another --out or remove it")
    prov = dict(provenance or {})
    if "gguf" not in prov:
        header = gguf_header(src)
        prov["gguf"] = {"file": src.name, "bytes": src.stat().st_size, "sha256": sha256_of(src),
                        "general.name": header.get("general.name"), "architecture": header.get("general.architecture")}
        prov.setdefault("name", header.get("general.name") or src.stem)
    prov["dtype"] = dtype
    prov["converted_with"] = _versions()
    model, tok = load_gguf(src, dtype)
    _fix_generation_config(model, tok, instruct)
    tmp = out.with_name(out.name + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    try:
        model.save_pretrained(tmp, safe_serialization=True)
        tok.save_pretrained(tmp)
        n_params = sum(p.numel() for p in model.parameters())
        prov["parameters"] = int(n_params)
        prov["architecture"] = type(model).__name__
        (tmp / "README.md").write_text(model_card(prov), encoding="utf-8")
        (tmp / "provenance.json").write_text(json.dumps(prov, ensure_ascii=False, indent=2), encoding="utf-8")
        if out.exists():
            shutil.rmtree(out)
        os.replace(tmp, out)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return out
