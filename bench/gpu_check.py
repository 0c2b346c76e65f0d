"""GPU check: bencao's own training paths on one GPU, timed against a bare trl loop, in at most 8 minutes.

    make gpu-check                                   # python3 bench/gpu_check.py --out bench/results/gpu_check.json
    python bench/gpu_check.py --real-model DIR       # + a real causal LM folder (e.g. one `bencao models` converted)
    python bench/gpu_check.py --tiny                 # the same code on a tiny config (what CI runs on CPU)

Cases, each a fresh process on a GPU (so one case's memory cannot leak into the next), in this order:

- ``trl-lora``: a bare trl ``SFTTrainer`` + peft LoRA loop, the baseline;
- ``bencao-lora``: bencao's SFT path (``training/sft.py``: ``parse_args`` → ``main``: data checks, EOS, stop
  handling, adapter check, training record) on the same data and settings;
- ``bencao-lora-zero2``: the same under DeepSpeed ZeRO-2 (``configs/deepspeed/ds_z2.json``), one process;
- with ``--real-model DIR``: ``trl-real`` and ``bencao-real``, LoRA on that model (its own tokenizer);
- ``embedder`` and ``reranker``: ``training/embedder.py`` and ``training/reranker.py`` for a few steps
  (recipes ``embed/minilm-food`` and ``rerank/minilm-food`` on a BERT built from a config).

The causal LM is Qwen2 7B-shaped (``configs/sft/qwen2.5-7b-instruct/architecture/config.json``), random
weights made in bf16 on the GPU from that config (in place of ``from_pretrained``: writing 15 GB to read them
back would cost a minute of the eight), sdpa attention, LoRA r 64 on all linear layers, gradient
checkpointing, sequences packed to 2,048 tokens (trl's best-fit packing, padding-free) from conversations
built from the bundled classics and FoodOn text, tokenised by a byte-level BPE trained here. What is timed:
the interval between the ends of consecutive optimizer steps (data loading included), after warm-up steps,
with the tokens the Trainer counted in it.

Reported per case: tokens/s, the median of the per-step rates (a slow step — the first case's allocator warm-up
cost the bare trl loop two 3.6 s steps among 0.74 s ones on the H100, twice — does not move it; the mean rate is
``tokens_per_s_mean`` in the JSON), with a 95 % bootstrap interval over the timed steps, the ratio of medians to
``trl-lora`` (bootstrap interval), MFU = model FLOPs per second / the detected GPU's dense bf16 peak (:data:`PEAK_BF16`;
model FLOPs count the weight matrix products only: 2 per weight per token forward, as much again backward
for the activations, and for trained weights as much again for their gradients: 4N per token for LoRA on a
frozen base, 6N for a full fine-tune; attention's own products are left out, about 6 % more at 2,048 tokens
on this shape, and checkpointing's recomputation is not model FLOPs), and peak GPU memory
(``torch.cuda.max_memory_allocated``; on CPU the process's peak RSS).

The GPU machines lent here have torch, transformers, peft, accelerate and sentence-transformers but not trl,
datasets or deepspeed: ``make gpu-wheels`` downloads them (and the versions of the lock for the rest of the
training path) into ``.whl/``; there, ``pip install --target /tmp/site .whl/*.whl`` and ``PYTHONPATH=/tmp/site``.
bencao itself need not be installed: this script imports it from the checkout it sits in, and imports only
the training path (no jieba, faiss, graph or serving code). A real 1.5B model cannot travel to such a machine
(64 MiB of carried files, no network): ``--real-model`` is for a machine that has one.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import platform
import random
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))  # tiny_models: the tokenizers, encoders and records the tests build

#: Dense bf16 tensor-core peak FLOP/s by device name (vendor data sheets, without sparsity). First match wins.
PEAK_BF16: tuple[tuple[tuple[str, ...], float], ...] = (
    (("H200",), 989.4e12),
    (("GH200",), 989.4e12),
    (("H100", "PCIE"), 756.0e12),
    (("H100", "NVL"), 835.0e12),
    (("H100",), 989.4e12),  # SXM ("NVIDIA H100 80GB HBM3")
    (("H800",), 989.4e12),
    (("B200",), 2250e12),
    (("A100",), 312.0e12),
    (("A800",), 312.0e12),
    (("L40S",), 362.05e12),
    (("L40",), 181.05e12),
    (("L4",), 121.0e12),
    (("A10G",), 70.0e12),
    (("A10",), 125.0e12),
    (("RTX 6000 ADA",), 364.2e12),
    (("RTX 4090",), 165.2e12),
)

SEVEN_B = REPO / "configs" / "sft" / "qwen2.5-7b-instruct" / "architecture" / "config.json"

#: What each profile runs: the causal LM, its sequences and steps; the encoder shape (bge-m3's body on a GPU).
PROFILES: dict[str, dict[str, Any]] = {
    "gpu": {"lm": "qwen2-7b", "max_length": 2048, "batch": 2, "warmup": 3, "timed": 10, "records": 1000, "lora_r": 64,
            "encoder": {"hidden": 1024, "layers": 24, "heads": 16, "intermediate": 4096}, "enc_batch": 64, "enc_steps": 8,
            "gradient_checkpointing": True},
    "tiny": {"lm": "tiny", "max_length": 256, "batch": 2, "warmup": 2, "timed": 3, "records": 120, "lora_r": 8,
             "encoder": {"hidden": 32, "layers": 2, "heads": 2, "intermediate": 64}, "enc_batch": 8, "enc_steps": 3,
             "gradient_checkpointing": False},
}

CASES = ("trl-lora", "bencao-lora", "bencao-lora-zero2", "trl-real", "bencao-real", "embedder", "reranker")


# ---------------------------------------------------------------------------------------------- environment

def import_bencao() -> None:
    """bencao's training path: the installed package, or (where bencao is not installed) this checkout, mapped
    as pyproject's package-dir maps it (``bencao.training`` → ``training/``)."""
    try:
        import bencao.training.sft  # noqa: F401
    except ModuleNotFoundError as exc:
        if exc.name not in ("bencao", "bencao.training"):
            raise
        sys.path.insert(0, str(REPO))
        import bencao

        bencao.__path__.append(str(REPO))
        import bencao.training.sft  # noqa: F401


def peak_bf16(name: str) -> float | None:
    up = name.upper()
    for keys, flops in PEAK_BF16:
        if all(k in up for k in keys):
            return flops
    return None


def environment() -> dict[str, Any]:
    import importlib.metadata as md

    import torch

    env: dict[str, Any] = {"python": platform.python_version(), "torch": torch.__version__, "cuda": torch.version.cuda,
                           "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else f"cpu ({os.cpu_count()} cores)"}
    env["peak_bf16_flops"] = peak_bf16(env["device"]) if torch.cuda.is_available() else None
    for pkg in ("transformers", "trl", "peft", "accelerate", "datasets", "deepspeed", "sentence-transformers", "tokenizers", "pyarrow"):
        try:
            env[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            env[pkg] = None
    return env


def device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def reset_memory() -> None:
    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def peak_memory_gib() -> tuple[float, str]:
    import torch

    if torch.cuda.is_available():
        return torch.cuda.max_memory_allocated() / 2**30, "GPU max allocated"
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, "process max RSS"


# ---------------------------------------------------------------------------------------------- data and models

def prepare(work: Path, profile: dict[str, Any], cases: list[str]) -> dict[str, str]:
    """The shared inputs the chosen cases need: SFT conversations and the BPE tokenizer folder; embedder pairs and
    the two encoders."""
    from tiny_models import build_tiny_bert, build_tokenizer, embed_records, sft_records, write_jsonl

    work.mkdir(parents=True, exist_ok=True)
    inputs: dict[str, str] = {}
    if any(c.startswith(("trl", "bencao")) for c in cases):
        rng = random.Random(0)
        recs = sft_records(profile["records"])
        for r in recs:  # longer answers, as CoT replies are: a few of the other records' answers appended
            extra = " ".join(rng.choice(recs)["messages"][-1]["content"] for _ in range(rng.randint(0, 3)))
            r["messages"][-1]["content"] = (r["messages"][-1]["content"] + " " + extra).strip()
        inputs["sft"] = str(write_jsonl(work / "sft.jsonl", recs))
        build_tokenizer().save_pretrained(work / "tokenizer")
        inputs["tokenizer"] = str(work / "tokenizer")
    enc = profile["encoder"]
    shape = (enc["hidden"], enc["layers"], enc["heads"], enc["intermediate"])
    if "embedder" in cases or "reranker" in cases:
        inputs["pairs"] = str(write_jsonl(work / "pairs.jsonl", embed_records()))
    if "embedder" in cases:
        inputs["encoder"] = str(build_tiny_bert(work / "encoder", *shape))
    if "reranker" in cases:
        inputs["cross_encoder"] = str(build_tiny_bert(work / "cross-encoder", *shape, cross_encoder=True))
    return inputs


def lm_config(profile: dict[str, Any], tokenizer_dir: str):
    from transformers import AutoTokenizer, Qwen2Config

    if profile["lm"] == "qwen2-7b":
        raw = json.loads(SEVEN_B.read_text(encoding="utf-8"))
        return Qwen2Config(**{k: v for k, v in raw.items() if k not in ("architectures", "torch_dtype", "model_type")})
    tok = AutoTokenizer.from_pretrained(tokenizer_dir)
    return Qwen2Config(vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                       num_key_value_heads=2, max_position_embeddings=1024, tie_word_embeddings=True,
                       eos_token_id=tok.convert_tokens_to_ids("<|im_end|>"), pad_token_id=tok.pad_token_id)


def lm_dtype():
    """bf16 on a GPU; float32 on a CPU (the Trainer refuses bf16 there without use_cpu)."""
    import torch

    return torch.bfloat16 if device() == "cuda" else torch.float32


def model_from_config(cfg):
    """Random weights made on the device, sdpa attention (seeded: every case starts from the same model)."""
    import torch
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    with torch.device(device()):
        return AutoModelForCausalLM.from_config(cfg, dtype=lm_dtype(), attn_implementation="sdpa")


def matmul_params(cfg) -> int:
    """Weights that take part in a matrix product per token (embedding lookup excluded, the LM head included)."""
    h, i, L = cfg.hidden_size, cfg.intermediate_size, cfg.num_hidden_layers
    head_dim = getattr(cfg, "head_dim", None) or h // cfg.num_attention_heads
    q, kv = cfg.num_attention_heads * head_dim, cfg.num_key_value_heads * head_dim
    return L * (h * q + 2 * h * kv + q * h + 3 * h * i) + h * cfg.vocab_size


def train_flops_per_token(cfg, trainable: int, lora: bool) -> float:
    n = matmul_params(cfg)
    return (4.0 * n + 6.0 * trainable) if lora else 6.0 * n


# ---------------------------------------------------------------------------------------------- timing

class StepTimer:
    """A TrainerCallback: the time between the ends of consecutive optimizer steps, and the tokens in between."""

    def __new__(cls, *a, **k):  # a TrainerCallback subclass made on first use: transformers is imported lazily
        from transformers import TrainerCallback

        class _Timer(TrainerCallback):
            def __init__(self) -> None:
                self.times: list[float] = []
                self.tokens: list[int] = []
                self.losses: list[float] = []
                self._t = 0.0
                self._seen = 0

            def _sync(self) -> float:
                import torch

                if torch.cuda.is_available():
                    torch.cuda.synchronize()
                return time.perf_counter()

            def on_train_begin(self, args, state, control, **kw):
                self._t, self._seen = self._sync(), state.num_input_tokens_seen

            def on_step_end(self, args, state, control, **kw):
                t = self._sync()
                self.times.append(t - self._t)
                self.tokens.append(state.num_input_tokens_seen - self._seen)
                self._t, self._seen = t, state.num_input_tokens_seen

            def on_log(self, args, state, control, logs=None, **kw):
                if logs and "loss" in logs:
                    self.losses.append(float(logs["loss"]))

        return _Timer()


def timed_stats(timer, warmup: int) -> dict[str, Any]:
    times, tokens = timer.times[warmup:], timer.tokens[warmup:]
    out: dict[str, Any] = {"steps_timed": len(times), "step_s": times, "step_tokens": tokens}
    if not times or sum(times) <= 0:
        return out
    out.update(rate_stats("tokens_per_s", tokens, times))
    out["tokens_per_step"] = sum(tokens) / len(tokens)
    if timer.losses:
        out["loss_first"], out["loss_last"] = timer.losses[0], timer.losses[-1]
    return out


def per_step(amounts: list[float], times: list[float]) -> list[float]:
    return [a / max(t, 1e-12) for a, t in zip(amounts, times)]


def rate_stats(name: str, amounts: list[float], times: list[float]) -> dict[str, Any]:
    """``name``: the median of the per-step rates (one slow step — allocator growth, the first case's warm-up, seen
    on the H100 as two 3.6 s steps among 0.74 s ones — does not move it), ``name_ci`` its 95 % bootstrap interval,
    ``name_mean`` the mean rate (all amounts over all time)."""
    return {name: statistics.median(per_step(amounts, times)), f"{name}_ci": bootstrap_rate(amounts, times),
            f"{name}_mean": sum(amounts) / max(sum(times), 1e-12)}


def bootstrap_rate(amounts: list[float], times: list[float], n: int = 2000, seed: int = 0) -> tuple[float, float]:
    """95 % interval of the median per-step rate amounts[i] / times[i], resampling steps."""
    rng = random.Random(seed)
    per = per_step(amounts, times)
    k = len(per)
    rates = []
    for _ in range(n):
        rates.append(statistics.median(per[rng.randrange(k)] for _ in range(k)))
    rates.sort()
    return rates[int(0.025 * n)], rates[int(0.975 * n) - 1]


def bootstrap_ratio(a: dict[str, Any], b: dict[str, Any], n: int = 2000, seed: int = 1) -> tuple[float, float] | None:
    """95 % interval of median rate(a) / median rate(b), each resampled over its own steps."""
    if not a.get("step_s") or not b.get("step_s"):
        return None
    rng = random.Random(seed)
    pa, pb = per_step(a["step_tokens"], a["step_s"]), per_step(b["step_tokens"], b["step_s"])
    ratios = []
    for _ in range(n):
        ra = statistics.median(pa[rng.randrange(len(pa))] for _ in pa)
        rb = statistics.median(pb[rng.randrange(len(pb))] for _ in pb)
        ratios.append(ra / rb)
    ratios.sort()
    return ratios[int(0.025 * n)], ratios[int(0.975 * n) - 1]


# ---------------------------------------------------------------------------------------------- cases

def sft_settings(profile: dict[str, Any], out: Path) -> dict[str, Any]:
    """The settings both the bare trl loop and bencao's recipe get (the 7B LoRA recipe's, packed)."""
    gpu = device() == "cuda"
    return {
        "output_dir": str(out), "max_steps": profile["warmup"] + profile["timed"], "per_device_train_batch_size": profile["batch"],
        "gradient_accumulation_steps": 1, "learning_rate": 1e-4, "warmup_steps": 0, "lr_scheduler_type": "constant",
        "max_length": profile["max_length"], "packing": True, "assistant_only_loss": True, "bf16": gpu,
        "gradient_checkpointing": profile["gradient_checkpointing"], "logging_steps": 1, "save_strategy": "no",
        "report_to": "none", "seed": 0, "disable_tqdm": True, "include_num_input_tokens_seen": "all",
        "dataloader_num_workers": 0, "dataloader_pin_memory": gpu,
    }


def lora_settings(profile: dict[str, Any]) -> dict[str, Any]:
    return {"lora_r": profile["lora_r"], "lora_alpha": 2 * profile["lora_r"], "lora_dropout": 0.05, "lora_target_modules": "all-linear"}


def _trainable(model) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def case_trl(profile: dict[str, Any], inputs: dict[str, str], work: Path, real: str | None) -> dict[str, Any]:
    """The baseline: trl's SFTTrainer with a peft LoraConfig, nothing of bencao."""
    from datasets import load_dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import SFTConfig, SFTTrainer

    settings = sft_settings(profile, work / ("trl-real" if real else "trl-lora"))
    lora = lora_settings(profile)
    tok = AutoTokenizer.from_pretrained(real or inputs["tokenizer"])
    if real:
        model = AutoModelForCausalLM.from_pretrained(real, dtype=lm_dtype(), attn_implementation="sdpa")
        cfg = model.config
        if "<|im_end|>" in tok.get_vocab():
            settings["eos_token"] = "<|im_end|>"
    else:
        cfg = lm_config(profile, inputs["tokenizer"])
        model = model_from_config(cfg)
        settings["eos_token"] = "<|im_end|>"
    timer = StepTimer()
    trainer = SFTTrainer(model=model, args=SFTConfig(**settings), train_dataset=load_dataset("json", data_files=inputs["sft"])["train"],
                         processing_class=tok, callbacks=[timer],
                         peft_config=LoraConfig(r=lora["lora_r"], lora_alpha=lora["lora_alpha"], lora_dropout=lora["lora_dropout"],
                                                target_modules="all-linear", task_type="CAUSAL_LM"))
    trainable = _trainable(trainer.model)
    trainer.train()
    return {**timed_stats(timer, profile["warmup"]), "flops_per_token": train_flops_per_token(cfg, trainable, True),
            "trainable_parameters": trainable}


def case_bencao(profile: dict[str, Any], inputs: dict[str, str], work: Path, real: str | None, zero2: bool) -> dict[str, Any]:
    """bencao's SFT path, ``training/sft.py`` ``parse_args`` → ``main``, timed by a callback added where it trains."""
    import bencao.training.sft as sft
    import bencao.training.stop as stop

    name = "bencao-real" if real else "bencao-lora-zero2" if zero2 else "bencao-lora"
    settings = {**sft_settings(profile, work / name), **lora_settings(profile), "use_peft": True,
                "model_name_or_path": real or inputs["tokenizer"], "train_file": inputs["sft"], "dtype": str(lm_dtype()).removeprefix("torch."),
                "attn_implementation": "sdpa", "check_adapter": True}
    if zero2:
        settings["deepspeed"] = "ds_z2"
        _one_process_env()
    timer = StepTimer()
    seen: dict[str, Any] = {}
    original_train, original_load = stop.train_until_stopped, sft.load_model
    cfg = None if real else lm_config(profile, inputs["tokenizer"])

    def timed(trainer, *a, **k):
        trainer.add_callback(timer)
        seen["trainable"] = _trainable(trainer.model)
        seen["config"] = trainer.model.config
        return original_train(trainer, *a, **k)

    stop.train_until_stopped = timed
    if cfg is not None:
        sft.load_model = lambda training_args, model_args: model_from_config(cfg)  # random 7B-shaped weights: nothing to load
    try:
        info = sft.main(*sft.parse_args(None, [f"{k}={v}" for k, v in settings.items()]))
    finally:
        stop.train_until_stopped, sft.load_model = original_train, original_load
    out = {**timed_stats(timer, profile["warmup"]), "trainable_parameters": seen["trainable"],
           "flops_per_token": train_flops_per_token(seen["config"], seen["trainable"], True)}
    t = info.get("training") or {}
    ds = dict(t.get("deepspeed") or {}) or None
    if ds and isinstance(ds.get("config"), str) and Path(ds["config"]).is_relative_to(REPO):
        ds["config"] = str(Path(ds["config"]).relative_to(REPO))  # the figures name the recipe, not this machine's checkout
    out["recorded"] = {"steps_run": t.get("steps_run"), "deepspeed": ds, "precision": t.get("precision"),
                       "adapter_parameters": info.get("metrics", {}).get("adapter_parameters")}
    stage = (t.get("deepspeed") or {}).get("zero_stage")
    if zero2 and stage != 2:
        raise RuntimeError(f"ZeRO-2 was asked for, but the run's record says DeepSpeed {t.get('deepspeed')}")
    return out


def _one_process_env() -> None:
    """DeepSpeed in one process without a launcher (STACK-NOTES: otherwise it looks for mpi4py)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    for k, v in {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "LOCAL_WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1",
                 "MASTER_PORT": str(port)}.items():
        os.environ.setdefault(k, v)


def case_encoder(profile: dict[str, Any], inputs: dict[str, str], work: Path, kind: str) -> dict[str, Any]:
    """``training/embedder.py`` or ``training/reranker.py`` for a few steps, timed like the SFT cases."""
    import bencao.training.stop as stop

    if kind == "embedder":
        from bencao.training.embedder import main, parse_args

        recipe, model = "embed/minilm-food", inputs["encoder"]
        extra = ["max_seq_length=64", "hard_negatives=auto"]
    else:
        from bencao.training.reranker import main, parse_args

        recipe, model = "rerank/minilm-food", inputs["cross_encoder"]
        extra = ["max_length=96"]
    timer = StepTimer()
    original = stop.train_until_stopped

    def timed(trainer, *a, **k):
        trainer.add_callback(timer)
        return original(trainer, *a, **k)

    stop.train_until_stopped = timed
    batch, steps = profile["enc_batch"], profile["enc_steps"]
    try:
        info = main(*parse_args(recipe, [
            f"model_name_or_path={model}", f"train_file={inputs['pairs']}", "eval_file=null", "eval_fraction=0.2",
            f"output_dir={work / kind}", f"max_steps={steps}", f"per_device_train_batch_size={batch}", "logging_steps=1",
            "warmup_steps=0", "disable_tqdm=true", "seed=0", f"bf16={'true' if device() == 'cuda' else 'false'}",
            "dataloader_num_workers=0", *extra]))
    finally:
        stop.train_until_stopped = original
    times = timer.times[1:]  # the first step warms up
    out: dict[str, Any] = {"steps": len(timer.times), "steps_timed": len(times), "step_s": times, "batch": batch}
    if times:
        out.update(rate_stats("rows_per_s", [batch] * len(times), times))
    if timer.losses:
        out["loss_first"], out["loss_last"] = timer.losses[0], timer.losses[-1]
    m = info.get("metrics", {})
    out["heldout"] = m.get("ir_after") or m.get("rerank_after")
    return out


def run_case(name: str, profile: dict[str, Any], inputs: dict[str, str], work: Path, real: str | None) -> dict[str, Any]:
    import_bencao()
    reset_memory()
    t0 = time.perf_counter()
    if name == "trl-lora":
        res = case_trl(profile, inputs, work, None)
    elif name == "trl-real":
        res = case_trl(profile, inputs, work, real)
    elif name == "bencao-lora":
        res = case_bencao(profile, inputs, work, None, zero2=False)
    elif name == "bencao-lora-zero2":
        res = case_bencao(profile, inputs, work, None, zero2=True)
    elif name == "bencao-real":
        res = case_bencao(profile, inputs, work, real, zero2=False)
    elif name in ("embedder", "reranker"):
        res = case_encoder(profile, inputs, work, name)
    else:
        raise SystemExit(f"unknown case {name!r} (known: {', '.join(CASES)})")
    mem, what = peak_memory_gib()
    return {**res, "case": name, "peak_memory_gib": round(mem, 2), "memory": what, "wall_s": round(time.perf_counter() - t0, 1)}


def reset_process_state(environ: dict[str, str]) -> None:
    """After an in-process case: no DeepSpeed config, accelerate state, process group or environment variable
    (``ACCELERATE_USE_DEEPSPEED``, ``RANK``, ...) left for the next one; ``environ`` is the environment before it."""
    import torch

    try:
        from transformers.integrations.deepspeed import unset_hf_deepspeed_config

        unset_hf_deepspeed_config()
    except ImportError:
        pass
    from accelerate.state import AcceleratorState

    AcceleratorState._reset_state(reset_partial_state=True)
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()
    os.environ.clear()
    os.environ.update(environ)
    reset_memory()


def run_isolated(name: str, args: argparse.Namespace, work: Path, timeout: float) -> dict[str, Any]:
    """One case in a fresh process (its GPU memory is freed when it exits)."""
    out = work / f"{name}.json"
    cmd = [sys.executable, str(Path(__file__).resolve()), "--case", name, "--work", str(work), "--case-out", str(out)]
    cmd += ["--tiny"] if args.tiny else []  # (a child decides nothing else: the parent's work folder holds the inputs)
    cmd += ["--real-model", args.real_model] if args.real_model else []
    try:
        proc = subprocess.run(cmd, timeout=max(timeout, 1), capture_output=True, text=True)
    except subprocess.TimeoutExpired:
        return {"case": name, "error": f"stopped after {timeout:.0f} s (time budget)"}
    if proc.returncode != 0 or not out.exists():
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-15:]
        return {"case": name, "error": f"exit code {proc.returncode}", "log_tail": tail}
    return json.loads(out.read_text(encoding="utf-8"))


# ---------------------------------------------------------------------------------------------- report

def summarise(results: list[dict[str, Any]], env: dict[str, Any]) -> list[dict[str, Any]]:
    """Ratios to the bare trl loop and MFU, added to each result."""
    base = {r["case"]: r for r in results}
    peak = env.get("peak_bf16_flops")
    for r in results:
        ref = base.get("trl-real" if r["case"].endswith("-real") else "trl-lora")
        if r.get("tokens_per_s") and ref and ref.get("tokens_per_s") and ref is not r:
            r["vs_trl"] = r["tokens_per_s"] / ref["tokens_per_s"]
            r["vs_trl_ci"] = bootstrap_ratio(r, ref)
        if r.get("tokens_per_s") and r.get("flops_per_token"):
            r["model_tflops"] = r["tokens_per_s"] * r["flops_per_token"] / 1e12
            if peak:
                r["mfu"] = r["tokens_per_s"] * r["flops_per_token"] / peak
    return results


def table(results: list[dict[str, Any]]) -> str:
    lines = ["| case | tokens/s (95 % CI) | vs bare trl (95 % CI) | model TFLOP/s | MFU | peak memory GiB | loss first → last | wall s |",
             "|---|---|---|---|---|---|---|---|"]
    for r in results:
        if r.get("error") or r.get("skipped"):
            lines.append(f"| {r['case']} | {r.get('skipped') or r['error']} | | | | | | |")
            continue
        if "tokens_per_s" in r:
            lo, hi = r["tokens_per_s_ci"]
            rate = f"{r['tokens_per_s']:,.0f} ({lo:,.0f}–{hi:,.0f})"
            vs = (f"{r['vs_trl']:.3f} ({r['vs_trl_ci'][0]:.3f}–{r['vs_trl_ci'][1]:.3f})" if r.get("vs_trl_ci") else
                  "baseline" if r["case"].startswith("trl") else "")
        elif "rows_per_s" in r:
            lo, hi = r["rows_per_s_ci"]
            rate, vs = f"{r['rows_per_s']:,.1f} rows/s ({lo:,.1f}–{hi:,.1f})", ""
        else:
            rate, vs = "not timed", ""
        tf = f"{r['model_tflops']:.1f}" if r.get("model_tflops") is not None else ""
        mfu = f"{100 * r['mfu']:.1f} %" if r.get("mfu") is not None else ""
        loss = f"{r['loss_first']:.3f} → {r['loss_last']:.3f}" if r.get("loss_first") is not None else ""
        lines.append(f"| {r['case']} | {rate} | {vs} | {tf} | {mfu} | {r['peak_memory_gib']:.2f} ({r['memory']}) | {loss} | {r['wall_s']} |")
    return "\n".join(lines)


def report_stored(path: Path) -> int:
    """The table of a stored run, its rates recomputed from the per-step times it recorded."""
    doc = json.loads(path.read_text(encoding="utf-8"))
    for r in doc["results"]:
        r.pop("vs_trl", None), r.pop("vs_trl_ci", None)
        if r.get("step_tokens"):
            r.update(rate_stats("tokens_per_s", r["step_tokens"], r["step_s"]))
        elif r.get("step_s") and r.get("batch"):
            r.update(rate_stats("rows_per_s", [r["batch"]] * len(r["step_s"]), r["step_s"]))
    summarise(doc["results"], doc["environment"])
    print(f"{path.name}: {doc['environment'].get('device')}, total {doc.get('total_s')} s")
    print(table(doc["results"]))
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tiny", action="store_true", help="The tiny profile (2-layer Qwen2, 256-token packs): the CPU check. "
                    "Default: tiny on CPU, the 7B-shaped profile on CUDA.")
    ap.add_argument("--real-model", help="A real causal LM folder (e.g. converted by `bencao models`): LoRA on it too, "
                    "bencao against bare trl. Cannot travel to the lent GPU machines (64 MiB, no network).")
    ap.add_argument("--skip", action="append", default=[], help=f"Leave out a case (repeatable): {', '.join(CASES)}.")
    ap.add_argument("--isolate", action=argparse.BooleanOptionalAction, default=None,
                    help="Run each case in its own process, so that its memory is freed when it ends (default on a GPU); "
                    "--no-isolate: all in this process (default on CPU: faster).")
    ap.add_argument("--budget-s", type=float, default=480.0, help="Start no case after this many seconds (8 minutes).")
    ap.add_argument("--out", help="Write the figures as JSON here.")
    ap.add_argument("--work", help="Working folder (default: a temporary one).")
    ap.add_argument("--report", metavar="JSON", help="Run nothing: print the table of a stored run (--out's JSON) with this "
                    "version's statistics, recomputed from its per-step times.")
    ap.add_argument("--case", help=argparse.SUPPRESS)
    ap.add_argument("--case-out", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.report:
        return report_stored(Path(args.report))
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import_bencao()
    import torch

    args.tiny = args.tiny or not torch.cuda.is_available()
    profile = PROFILES["tiny" if args.tiny else "gpu"]
    if args.case:  # a child process: one case
        work = Path(args.work)
        inputs = json.loads((work / "inputs.json").read_text(encoding="utf-8"))
        res = run_case(args.case, profile, inputs, work, args.real_model)
        Path(args.case_out).write_text(json.dumps(res, ensure_ascii=False), encoding="utf-8")
        return 0
    started = time.perf_counter()
    tmp = None if args.work else tempfile.TemporaryDirectory(prefix="gpu-check-")
    work = Path(args.work or tmp.name)
    env = environment()
    print(f"gpu check: {env['device']}, profile {'tiny' if args.tiny else 'gpu (Qwen2 7B-shaped)'}; " +
          ", ".join(f"{k} {env[k]}" for k in ("torch", "transformers", "trl", "peft", "accelerate", "datasets", "deepspeed",
                                                "sentence-transformers", "tokenizers", "pyarrow")), flush=True)
    cases = [c for c in CASES if c not in args.skip and (args.real_model or not c.endswith("-real"))]
    inputs = prepare(work, profile, cases)
    (work / "inputs.json").write_text(json.dumps(inputs), encoding="utf-8")
    in_process = not (args.isolate if args.isolate is not None else torch.cuda.is_available())
    results = []
    for name in cases:
        left = args.budget_s - (time.perf_counter() - started)
        if left <= 0:
            results.append({"case": name, "skipped": "time budget spent"})
            continue
        if in_process:
            environ = dict(os.environ)
            try:
                res = run_case(name, profile, inputs, work, args.real_model)
            except Exception as exc:  # noqa: BLE001 - one failed case is reported, the others still run
                res = {"case": name, "error": f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"}
            reset_process_state(environ)
        else:
            res = run_isolated(name, args, work, left)
        results.append(res)
        print(f"  {name}: " + (res.get("error") or f"done in {res.get('wall_s')} s"), flush=True)
    summarise(results, env)
    total = time.perf_counter() - started
    print(table(results))
    print(f"total {total:.0f} s (budget {args.budget_s:.0f} s); rates are medians of the per-step rates; MFU counts weight matrix products only (4N per token for LoRA, "
          f"peak {env['peak_bf16_flops'] / 1e12:.1f} TFLOP/s bf16)" if env.get("peak_bf16_flops") else
          f"total {total:.0f} s; no MFU: no known bf16 peak for this device")
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps({"environment": env, "profile": profile, "total_s": round(total, 1), "results": results},
                                             ensure_ascii=False, indent=1), encoding="utf-8")
    if tmp is not None:
        tmp.cleanup()
    failed = [r["case"] for r in results if r.get("error")]
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
