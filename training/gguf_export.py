"""Write a transformers causal-LM folder as one GGUF file (llama.cpp, Ollama), and check it reloads.

``export_gguf(model_dir, out_file, outtype="f16")`` writes, with the ``gguf`` package:

- hyper-parameters under llama.cpp's keys (``qwen2.block_count``, ``qwen2.attention.head_count_kv``, ...);
- every weight under its GGUF name (``gguf.get_tensor_name_map``: ``model.layers.0.self_attn.q_proj.weight``
  → ``blk.0.attn_q.weight``); 1-D tensors (norms, biases) stay F32, the rest become ``outtype``
  (``f32``, ``f16`` or ``q8_0``; a matrix whose rows do not split into 32-value blocks falls back to F16,
  as llama.cpp's converter does); a tied output matrix is not written (the loader ties it again);
- the tokenizer: byte-level BPE tokens padded to the embedding's rows with ``[PADn]`` (type UNUSED),
  token types (special added tokens CONTROL, other added tokens USER_DEFINED), merges, the special
  token ids and ``add_bos``/``add_eos`` flags (``gguf.SpecialVocab``), the pre-tokenizer's llama.cpp
  name (read from ``tokenizer.json``: Qwen2's split regex → ``qwen2``, GPT-2's byte-level → ``gpt-2``)
  and the chat template.

Weights are streamed: the header and tensor table are written first, then one tensor at a time, so
memory holds one matrix, not the model. The file is written to ``<out>.tmp`` and renamed.

``check_gguf(model_dir, gguf_file)`` loads the file back with transformers (``gguf_file=``) and compares
it with the folder on fixed prompts: the same token ids, the same chat template, logits equal (to float
precision) to those of the folder's weights rounded as the file stores them, and, against the folder
itself, a rounding cost within the outtype's tolerance (max |Δ| over the logits' standard deviation; the
same top-1 token almost everywhere). The export records the figures.

Architectures are a registry (:data:`ARCHITECTURES`); ``qwen2`` is the one written today. A GGUF carries
no normaliser: Qwen2's NFC step is dropped (as llama.cpp drops it), so text that is not NFC already may
tokenise differently after the round trip.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from bencao.errors import BencaoError, ConfigError

#: What the matrices may be stored as (1-D tensors are always F32).
OUTTYPES = ("f32", "f16", "q8_0")

#: Fixed prompts of the reload check: a chat turn in Chinese, one in English, plain text with digits and punctuation.
CHECK_MESSAGES = (
    [{"role": "system", "content": "你是中医药知识助手。"}, {"role": "user", "content": "大枣的性味是什么？请简要回答。"}],
    [{"role": "user", "content": "What is jujube fruit used for in Traditional Chinese Medicine?"}],
)
CHECK_TEXTS = ("《神农本草经》载：大枣，味甘，平。主心腹邪气，安中养脾。 Dose 3-12 g, 2024.",)

#: Largest max|Δlogit| / std(logits) between the file's model and the folder's weights rounded exactly as the file
#: stores them: only the order of float sums differs, so anything above this is a conversion error.
EXACT = 1e-3
#: What rounding may cost, against the folder itself: largest max|Δlogit| / std(logits), and the least share of
#: positions whose top-1 token must agree (f16 keeps 11 bits of mantissa; q8_0 8 bits per 32-value block).
TOLERANCE = {"f32": (1e-3, 1.0), "f16": (0.1, 0.95), "q8_0": (0.5, 0.9)}


@dataclass
class GGUFFile:
    """What was written: the file, its size and SHA-256, the outtype, the architecture and ``general.name``."""

    path: Path
    outtype: str
    bytes: int
    sha256: str
    architecture: str
    name: str
    tensors: int
    vocab_size: int
    pre_tokenizer: str

    def record(self) -> dict[str, Any]:
        d = asdict(self)
        d["file"] = Path(d.pop("path")).name
        return d


@dataclass
class GGUFCheck:
    """The reload check: transformers on the GGUF file against transformers on the folder."""

    outtype: str
    prompts: int
    tokens: int
    same_tokens: bool
    same_chat_template: bool
    exact_diff: float  # max |Δlogit| / std against the folder's weights rounded as the file stores them
    max_abs_logit_diff: float  # against the folder itself
    logit_std: float
    relative_max_diff: float
    top1_agreement: float
    tolerance: dict[str, float] = field(default_factory=dict)
    passed: bool = False
    problems: list[str] = field(default_factory=list)

    def record(self) -> dict[str, Any]:
        return {k: (round(v, 6) if isinstance(v, float) else v) for k, v in asdict(self).items()}


@dataclass
class Arch:
    """How one transformers ``model_type`` becomes GGUF: llama.cpp's architecture and its hyper-parameters."""

    gguf_arch: Any  # gguf.MODEL_ARCH member
    hparams: Callable[[Any, Any], None]  # (transformers config, GGUFWriter) -> None


def _rope_theta(cfg) -> float:
    params = getattr(cfg, "rope_parameters", None) or {}
    theta = params.get("rope_theta") if isinstance(params, dict) else None
    return float(theta if theta is not None else getattr(cfg, "rope_theta", None) or 10000.0)


def _rope_scaling(cfg, w) -> None:
    import gguf

    params = getattr(cfg, "rope_parameters", None) or getattr(cfg, "rope_scaling", None) or {}
    kind = (params.get("rope_type") or params.get("type") or "default") if isinstance(params, dict) else "default"
    if kind == "default":
        return
    if kind == "linear":
        w.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        w.add_rope_scaling_factor(float(params["factor"]))
    elif kind == "yarn":
        w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
        w.add_rope_scaling_factor(float(params["factor"]))
        w.add_rope_scaling_orig_ctx_len(int(params["original_max_position_embeddings"]))
    else:
        raise ConfigError(f"rope scaling {kind!r} has no GGUF form here (linear and yarn have)")


def _qwen2_hparams(cfg, w) -> None:
    if getattr(cfg, "use_sliding_window", False):
        raise ConfigError("qwen2 with use_sliding_window: true has no GGUF form (llama.cpp runs full attention)")
    w.add_context_length(int(cfg.max_position_embeddings))
    w.add_embedding_length(int(cfg.hidden_size))
    w.add_feed_forward_length(int(cfg.intermediate_size))
    w.add_block_count(int(cfg.num_hidden_layers))
    w.add_head_count(int(cfg.num_attention_heads))
    w.add_head_count_kv(int(cfg.num_key_value_heads or cfg.num_attention_heads))
    w.add_rope_freq_base(_rope_theta(cfg))
    w.add_layer_norm_rms_eps(float(cfg.rms_norm_eps))
    _rope_scaling(cfg, w)


def _architectures() -> dict[str, Arch]:
    import gguf

    return {"qwen2": Arch(gguf.MODEL_ARCH.QWEN2, _qwen2_hparams)}


#: model_type → Arch; filled on first use (importing gguf is deferred to the export itself).
ARCHITECTURES: dict[str, Arch] = {}


def architecture(model_type: str, where: Path) -> Arch:
    if not ARCHITECTURES:
        ARCHITECTURES.update(_architectures())
    if model_type not in ARCHITECTURES:
        raise ConfigError(f"{where}: model_type {model_type!r} has no GGUF writer here (supported: {', '.join(sorted(ARCHITECTURES))})")
    return ARCHITECTURES[model_type]


# ---------------------------------------------------------------------------------------------------- tokenizer

def pre_tokenizer_name(tokenizer_json: Path) -> str:
    """llama.cpp's name for how ``tokenizer.json`` splits text before BPE: ``qwen2`` or ``gpt-2``."""
    from transformers.models.qwen2.tokenization_qwen2 import PRETOKENIZE_REGEX as QWEN2_SPLIT

    spec = json.loads(tokenizer_json.read_text(encoding="utf-8")).get("pre_tokenizer") or {}
    steps = spec.get("pretokenizers", [spec]) if spec.get("type") == "Sequence" else [spec]
    kinds = [s.get("type") for s in steps]
    if kinds == ["ByteLevel"] and steps[0].get("use_regex", True):
        return "gpt-2"
    if kinds == ["Split", "ByteLevel"] and not steps[1].get("use_regex", True):
        regex = (steps[0].get("pattern") or {}).get("Regex")
        if regex == QWEN2_SPLIT and str(steps[0].get("behavior", "")).lower() == "isolated":
            return "qwen2"
    raise ConfigError(f"{tokenizer_json}: pre-tokenizer {json.dumps(spec, ensure_ascii=False)[:200]} has no llama.cpp name here "
                      "(known: Qwen2's split regex, GPT-2's byte-level)")


_PAD = re.compile(r"^\[PAD\d+\]$")


def bpe_vocab(tok, n_vocab: int) -> tuple[list[str], list[int]]:
    """(tokens, token types) for ids 0..n_vocab-1: missing ids become ``[PADn]`` (UNUSED), as do ``[PADn]`` tokens
    already in the vocabulary (a model converted from a GGUF has them)."""
    import gguf

    vocab = tok.get_vocab()
    if len(vocab) > n_vocab:
        raise ConfigError(f"the tokenizer has {len(vocab)} tokens but the embedding only {n_vocab} rows")
    by_id = {i: t for t, i in vocab.items()}
    added = tok.added_tokens_decoder
    tokens, types = [], []
    for i in range(n_vocab):
        if i not in by_id:
            tokens.append(f"[PAD{i}]")
            types.append(int(gguf.TokenType.UNUSED))
            continue
        tokens.append(by_id[i])
        if _PAD.match(by_id[i]) and i not in added:  # a filler row a GGUF → transformers round trip brought back as a token
            types.append(int(gguf.TokenType.UNUSED))
        elif i in added:
            types.append(int(gguf.TokenType.CONTROL if added[i].special else gguf.TokenType.USER_DEFINED))
        else:
            types.append(int(gguf.TokenType.NORMAL))
    return tokens, types


def add_tokenizer(w, model_dir: Path, n_vocab: int) -> tuple[int, str]:
    """Write the tokenizer's metadata; returns (number of tokens written, pre-tokenizer name)."""
    import gguf
    from transformers import AutoTokenizer

    tj = model_dir / "tokenizer.json"
    if not tj.exists():
        raise ConfigError(f"{model_dir}: no tokenizer.json (a byte-level BPE tokenizer is needed for GGUF)")
    model = json.loads(tj.read_text(encoding="utf-8")).get("model", {})
    if model.get("type") != "BPE":
        raise ConfigError(f"{tj}: tokenizer model {model.get('type')!r}; only byte-level BPE is written here")
    pre = pre_tokenizer_name(tj)
    tok = AutoTokenizer.from_pretrained(model_dir)
    tokens, types = bpe_vocab(tok, n_vocab)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(pre)
    w.add_token_list(tokens)
    w.add_token_types(types)
    special = gguf.SpecialVocab(model_dir, load_merges=True, n_vocab=n_vocab)
    if not special.merges:
        raise ConfigError(f"{tj}: no BPE merges")
    # The tokenizer as transformers loads it decides the special ids (SFT may have set eos to <|im_end|>).
    for typ in ("bos", "eos", "unk", "pad"):
        tid = getattr(tok, f"{typ}_token_id", None)
        if isinstance(tid, int):
            special.special_token_ids[typ] = tid
    special.add_special_token.setdefault("bos", bool(getattr(tok, "add_bos_token", False)))
    if tok.chat_template and not special.chat_template:
        special.chat_template = tok.chat_template
    special.add_to_gguf(w, quiet=True)
    return len(tokens), pre


# ---------------------------------------------------------------------------------------------------- tensors

def _safetensors_files(model_dir: Path) -> list[Path]:
    index = model_dir / "model.safetensors.index.json"
    if index.exists():
        names = sorted(set(json.loads(index.read_text(encoding="utf-8"))["weight_map"].values()))
        return [model_dir / n for n in names]
    if (model_dir / "model.safetensors").exists():
        return [model_dir / "model.safetensors"]
    raise ConfigError(f"{model_dir}: no model.safetensors (save the model with safe_serialization=True)")


def _load(f: Path, name: str):
    from safetensors import safe_open

    with safe_open(str(f), framework="pt") as fh:
        return fh.get_tensor(name)


def _shape(f: Path, name: str) -> tuple[int, ...]:
    from safetensors import safe_open

    with safe_open(str(f), framework="pt") as fh:
        return tuple(fh.get_slice(name).get_shape())


def _qtype(shape: tuple[int, ...], gguf_name: str, outtype: str):
    """The GGML type a tensor is stored as: 1-D and norm tensors F32; matrices per outtype (Q8_0 needs rows of 32k values)."""
    import gguf

    T = gguf.GGMLQuantizationType
    if len(shape) <= 1 or gguf_name.endswith("_norm.weight") or not gguf_name.endswith(".weight"):
        return T.F32
    if outtype == "f32":
        return T.F32
    if outtype == "q8_0" and shape[-1] % gguf.GGML_QUANT_SIZES[T.Q8_0][0] == 0:
        return T.Q8_0
    return T.F16


def _plan(files: list[Path], cfg, arch: Arch, outtype: str) -> list[tuple[str, str, Path, tuple[int, ...], Any]]:
    """(hf name, gguf name, file, shape, ggml type) of each tensor to write, in writing order."""
    import gguf

    name_map = gguf.get_tensor_name_map(arch.gguf_arch, int(cfg.num_hidden_layers))
    tied = bool(getattr(cfg, "tie_word_embeddings", False))
    plan, unmapped = [], []
    for f in files:
        from safetensors import safe_open

        with safe_open(str(f), framework="pt") as fh:
            names = list(fh.keys())
        for hf in names:
            if hf.endswith(".rotary_emb.inv_freq") or (tied and hf == "lm_head.weight"):
                continue
            g = name_map.get_name(hf, try_suffixes=(".weight", ".bias"))
            if g is None:
                unmapped.append(hf)
                continue
            shape = _shape(f, hf)
            plan.append((hf, g, f, shape, _qtype(shape, g, outtype)))
    if unmapped:
        raise ConfigError(f"{files[0].parent}: {len(unmapped)} tensors have no GGUF name (e.g. {unmapped[0]})")
    return plan


def _stored(shape: tuple[int, ...], qtype):
    """(numpy dtype, shape) of a tensor's bytes in the file: F32/F16 as themselves, a quantised one as uint8 blocks."""
    import gguf
    import numpy as np

    T = gguf.GGMLQuantizationType
    if qtype == T.F32:
        return np.dtype(np.float32), shape
    if qtype == T.F16:
        return np.dtype(np.float16), shape
    return np.dtype(np.uint8), tuple(gguf.quant_shape_to_byte_shape(shape, qtype))


def _encode(tensor, qtype):
    import gguf
    import numpy as np

    data = tensor.float().numpy() if tensor.dtype.is_floating_point else tensor.numpy()
    return gguf.quants.quantize(np.ascontiguousarray(data, dtype=np.float32), qtype)


def export_gguf(model_dir: str | Path, out_file: str | Path, *, outtype: str = "f16", name: str | None = None,
                base_model: str | None = None, licence: str | None = None) -> GGUFFile:
    """Write the transformers folder ``model_dir`` (weights in safetensors, a byte-level BPE tokenizer) as
    the GGUF file ``out_file``. ``name`` is ``general.name`` (default: the folder's name); ``base_model``
    (a hub id or a name) and ``licence`` go to ``general.base_model.0.*`` and ``general.license``."""
    import gguf
    import numpy as np
    from transformers import AutoConfig

    from bencao.models import file_sha256

    model_dir, out_file = Path(model_dir), Path(out_file)
    if outtype not in OUTTYPES:
        raise ConfigError(f"outtype must be one of {', '.join(OUTTYPES)}, got {outtype!r}")
    if not (model_dir / "config.json").exists():
        raise ConfigError(f"{model_dir}: no config.json (not a transformers model folder)")
    cfg = AutoConfig.from_pretrained(model_dir)
    arch = architecture(cfg.model_type, model_dir)
    files = _safetensors_files(model_dir)
    plan = _plan(files, cfg, arch, outtype)
    embd = next((p for p in plan if p[1] == "token_embd.weight"), None)
    if embd is None:
        raise ConfigError(f"{model_dir}: no token embedding (model.embed_tokens.weight)")
    n_vocab = embd[3][0]

    w = gguf.GGUFWriter(None, gguf.MODEL_ARCH_NAMES[arch.gguf_arch])
    general = name or model_dir.name
    w.add_type(gguf.GGUFType.MODEL)
    w.add_name(general)
    if licence:
        w.add_license(licence)
    if base_model:
        from bencao.training.provenance import is_hub_id

        w.add_base_model_count(1)
        w.add_base_model_name(0, base_model)
        if is_hub_id(base_model):
            w.add_base_model_repo_url(0, f"https://huggingface.co/{base_model}")
    ftype = {"f32": gguf.LlamaFileType.ALL_F32, "f16": gguf.LlamaFileType.MOSTLY_F16, "q8_0": gguf.LlamaFileType.MOSTLY_Q8_0}[outtype]
    w.add_file_type(ftype)
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    arch.hparams(cfg, w)
    _, pre = add_tokenizer(w, model_dir, n_vocab)
    for _, g, _, shape, qtype in plan:
        dtype, byte_shape = _stored(shape, qtype)
        w.add_tensor_info(g, byte_shape, dtype, int(np.prod(byte_shape)) * dtype.itemsize,
                          raw_dtype=qtype if dtype == np.uint8 else None)
    out_file.parent.mkdir(parents=True, exist_ok=True)
    tmp = out_file.with_name(out_file.name + ".tmp")
    try:
        w.write_header_to_file(tmp)
        w.write_kv_data_to_file()
        w.write_ti_data_to_file()
        for hf, _, f, _, qtype in plan:
            w.write_tensor_data(_encode(_load(f, hf), qtype))
        w.close()
        os.replace(tmp, out_file)
    finally:
        if tmp.exists():
            tmp.unlink()
    return GGUFFile(path=out_file, outtype=outtype, bytes=out_file.stat().st_size, sha256=file_sha256(out_file),
                    architecture=gguf.MODEL_ARCH_NAMES[arch.gguf_arch], name=general, tensors=len(plan), vocab_size=n_vocab,
                    pre_tokenizer=pre)


# ---------------------------------------------------------------------------------------------------- check

def gguf_outtype(gguf_file: Path) -> str:
    """The outtype a GGUF file says it holds (``general.file_type``)."""
    import gguf

    reader = gguf.GGUFReader(str(gguf_file))
    ft = int(reader.fields["general.file_type"].parts[-1][0])
    return {int(gguf.LlamaFileType.ALL_F32): "f32", int(gguf.LlamaFileType.MOSTLY_F16): "f16",
            int(gguf.LlamaFileType.MOSTLY_Q8_0): "q8_0"}.get(ft, str(ft))


@contextmanager
def _alone(gguf_file: Path) -> Iterator[Path]:
    """The GGUF file linked (or copied) into an empty temporary folder beside it."""
    with tempfile.TemporaryDirectory(dir=gguf_file.parent, prefix=".gguf-check-") as d:
        target = Path(d) / gguf_file.name
        try:
            os.link(gguf_file, target)
        except OSError:
            shutil.copyfile(gguf_file, target)
        yield target


def _round_like_the_file(model, gguf_file: Path, cfg) -> list[str]:
    """Round each parameter of ``model`` in place as the file stores it (F16, Q8_0, ...); the names not in the file."""
    import gguf
    import numpy as np
    import torch

    types = {t.name: t.tensor_type for t in gguf.GGUFReader(str(gguf_file)).tensors}
    name_map = gguf.get_tensor_name_map(architecture(cfg.model_type, gguf_file).gguf_arch, int(cfg.num_hidden_layers))
    missing = []
    with torch.no_grad():
        for name, p in model.named_parameters():  # a tied lm_head shares the embedding's storage: rounded with it
            g = name_map.get_name(name, try_suffixes=(".weight", ".bias"))
            if g not in types:
                missing.append(name)
                continue
            w = np.ascontiguousarray(p.detach().float().numpy())
            back = gguf.quants.dequantize(gguf.quants.quantize(w, types[g]), types[g]).reshape(w.shape)
            p.copy_(torch.from_numpy(np.ascontiguousarray(back)).to(p.dtype))
    return missing


def check_gguf(model_dir: str | Path, gguf_file: str | Path, outtype: str | None = None) -> GGUFCheck:
    """Load ``gguf_file`` with transformers and compare it with ``model_dir`` on the fixed prompts.

    Two comparisons: against the folder's weights rounded exactly as the file stores them (they must agree
    to float precision: a wrong hyper-parameter, tensor or tokenizer shows here, however small the model),
    and against the folder itself (what the rounding costs: max |Δlogit| and top-1 agreement, bounded
    per outtype by :data:`TOLERANCE`)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model_dir, gguf_file = Path(model_dir), Path(gguf_file)
    outtype = outtype or gguf_outtype(gguf_file)
    problems: list[str] = []
    with _alone(gguf_file) as alone:  # a folder holding only the GGUF: nothing else beside it can be read instead
        ref_tok = AutoTokenizer.from_pretrained(model_dir)
        got_tok = AutoTokenizer.from_pretrained(alone.parent, gguf_file=alone.name)
        texts = [ref_tok.apply_chat_template(m, tokenize=False, add_generation_prompt=True) for m in CHECK_MESSAGES] + list(CHECK_TEXTS)
        ids = [ref_tok(t, add_special_tokens=False)["input_ids"] for t in texts]
        same_tokens = ids == [got_tok(t, add_special_tokens=False)["input_ids"] for t in texts]
        if not same_tokens:
            problems.append("the GGUF tokenizer splits the check prompts differently")
        same_template = (ref_tok.chat_template or "") == (got_tok.chat_template or "")
        if not same_template:
            problems.append("the chat template differs")
        ref = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
        with torch.no_grad():
            orig = [ref(input_ids=torch.tensor([seq])).logits[0] for seq in ids]
            missing = _round_like_the_file(ref, gguf_file, ref.config)
            rounded = [ref(input_ids=torch.tensor([seq])).logits[0] for seq in ids]
        del ref
        if missing:
            problems.append(f"{len(missing)} parameters are not in the file (e.g. {missing[0]})")
        got = AutoModelForCausalLM.from_pretrained(alone.parent, gguf_file=alone.name, dtype=torch.float32).eval()
        with torch.no_grad():
            loaded = [got(input_ids=torch.tensor([seq])).logits[0] for seq in ids]
        del got
    cat = torch.cat([x.flatten() for x in orig])
    std = float(cat.std()) or 1.0
    exact = max(float((a - b).abs().max()) for a, b in zip(loaded, rounded)) / std
    max_diff = max(float((a - b).abs().max()) for a, b in zip(loaded, orig))
    agree = sum(int((a.argmax(-1) == b.argmax(-1)).sum()) for a, b in zip(loaded, orig))
    total = sum(len(seq) for seq in ids)
    rel_tol, agree_tol = TOLERANCE.get(outtype, TOLERANCE["q8_0"])
    if exact > EXACT:
        problems.append(f"the file's model differs from the folder's weights rounded to {outtype} by {exact:.3g} standard deviations "
                        f"of the logits (allowed {EXACT}): a hyper-parameter, tensor or tokenizer is not what the folder has")
    if max_diff / std > rel_tol:
        problems.append(f"rounding to {outtype} moves the logits by up to {max_diff:.4g} ({max_diff / std:.3g} standard deviations; "
                        f"allowed {rel_tol})")
    if agree / max(total, 1) < agree_tol:
        problems.append(f"the top-1 token agrees at {agree}/{total} positions ({outtype} needs {agree_tol:.0%})")
    return GGUFCheck(outtype=outtype, prompts=len(ids), tokens=total, same_tokens=same_tokens, same_chat_template=same_template,
                     exact_diff=exact, max_abs_logit_diff=max_diff, logit_std=std, relative_max_diff=max_diff / std,
                     top1_agreement=agree / max(total, 1),
                     tolerance={"exact_diff": EXACT, "relative_max_diff": rel_tol, "top1_agreement": agree_tol},
                     passed=not problems, problems=problems)


def export_checked(model_dir: str | Path, out_file: str | Path, *, outtype: str = "f16", **meta: Any) -> tuple[GGUFFile, GGUFCheck]:
    """:func:`export_gguf` (``meta``: its name, base_model, licence), then :func:`check_gguf`; a failed check
    removes the file and raises one line."""
    written = export_gguf(model_dir, out_file, outtype=outtype, **meta)
    check = check_gguf(model_dir, written.path, outtype)
    if not check.passed:
        written.path.unlink(missing_ok=True)
        raise BencaoError(f"{written.path}: the GGUF reload check failed: {'; '.join(check.problems)}")
    return written, check
