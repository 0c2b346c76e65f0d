"""How fast a small real LLM runs on this CPU, per engine, beside what the machine can do (issue 35).

    HF_HUB_OFFLINE=1 python bench/llm_engines.py --model qwen2.5-coder-0.5b-instruct [--threads 1,2] \\
        [--prompt-tokens 1000] [--gen-tokens 64] [--append bench/RESULTS.md]

Engines (each where it is installed): ``transformers`` on the converted folder in bfloat16 and in float32, and
``llama.cpp`` (llama-cpp-python) on the verified GGUF. For each and each thread count:

- **prompt tokens/s**: one forward pass over a ``--prompt-tokens`` Chinese passage (what scoring an option letter
  after an evidence context costs), the median of ``--repeats`` runs;
- **generated tokens/s**: greedy decoding of ``--gen-tokens`` tokens after a short chat prompt;

and beside them, measured in the same run: the machine's bf16 and fp32 matrix-product FLOP/s (a 2048² product, the
best of 5) against the model's FLOPs per prompt token (2 × parameters), and the memory read bandwidth (a sum over 512 MB)
against the bytes of weights read per generated token (the weights' size: bf16 2 bytes a parameter, fp32 4, the
GGUF file's size for llama.cpp) — so each figure reads as a share of what the hardware allows.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))

TEXT = "山药味甘，温，无毒。主伤中，补虚羸，除寒热邪气，补中益气力，长肌肉，强阴。久服耳目聪明，轻身不饥，延年。" * 60
CHAT = [{"role": "user", "content": "山药有什么功效？请简要回答。"}]


def machine(threads: int) -> dict[str, float]:
    import torch

    torch.set_num_threads(threads)
    out = {}
    for name, dt in (("bf16", torch.bfloat16), ("fp32", torch.float32)):
        a = torch.randn(2048, 2048, dtype=dt)
        b = torch.randn(2048, 2048, dtype=dt)
        best = float("inf")
        for _ in range(5):
            t = time.perf_counter()
            torch.matmul(a, b)
            best = min(best, time.perf_counter() - t)
        out[f"{name}_gflops"] = 2 * 2048**3 / best / 1e9
    x = torch.ones(128 * 1024 * 1024, dtype=torch.float32)  # 512 MB, read once per sum (threaded like the engines)
    best = float("inf")
    for _ in range(3):
        t = time.perf_counter()
        x.sum()
        best = min(best, time.perf_counter() - t)
    out["read_gbs"] = x.numel() * 4 / best / 1e9
    del x
    return out


def timed(fn: Callable[[], Any], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def transformers_engine(folder: str, dtype: str, threads: int, n_prompt: int, n_gen: int, repeats: int) -> dict[str, Any]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(threads)
    tok = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=getattr(torch, dtype)).eval()
    params = sum(p.numel() for p in model.parameters())
    ids = tok(TEXT, return_tensors="pt", add_special_tokens=False)["input_ids"][:, :n_prompt]
    with torch.no_grad():
        model(input_ids=ids[:, :32])  # warm-up
        p_s = timed(lambda: model(input_ids=ids, logits_to_keep=1), repeats)
        enc = tok.apply_chat_template(CHAT, add_generation_prompt=True, return_tensors="pt", return_dict=True)
        g_s = timed(lambda: model.generate(**enc, max_new_tokens=n_gen, min_new_tokens=n_gen, do_sample=False), 1)
    return {"prompt_tps": ids.shape[1] / p_s, "gen_tps": n_gen / g_s, "params": params,
            "weight_bytes": params * (2 if dtype in ("bfloat16", "float16") else 4), "prompt_tokens": int(ids.shape[1])}


def llama_engine(gguf: str, threads: int, n_prompt: int, n_gen: int, repeats: int) -> dict[str, Any]:
    from llama_cpp import Llama

    llm = Llama(model_path=gguf, n_ctx=max(2048, n_prompt + 64), n_threads=threads, n_threads_batch=threads, n_batch=512,
                verbose=False)
    toks = llm.tokenize(TEXT.encode("utf-8"), add_bos=False)[:n_prompt]

    def prompt() -> None:
        llm.reset()
        llm.eval(toks)

    prompt()
    p_s = timed(prompt, repeats)
    g_s = timed(lambda: llm.create_chat_completion(messages=CHAT, max_tokens=n_gen, temperature=0.0), 1)
    return {"prompt_tps": len(toks) / p_s, "gen_tps": n_gen / g_s, "params": None, "weight_bytes": os.path.getsize(gguf),
            "prompt_tokens": len(toks)}


def main(argv: list[str] | None = None) -> int:
    from bencao.model_catalog import get

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="qwen2.5-coder-0.5b-instruct")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--prompt-tokens", type=int, default=1000)
    ap.add_argument("--gen-tokens", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--engines", default="transformers-bf16,transformers-fp32,llama.cpp")
    ap.add_argument("--append", default=None)
    args = ap.parse_args(argv)
    m = get(args.model)
    folder, gguf = str(m.hf_dir), str(m.gguf_path)
    t0 = time.perf_counter()
    rows = []
    params = None
    for th in [int(x) for x in args.threads.split(",")]:
        hw = machine(th)
        for eng in args.engines.split(","):
            try:
                if eng.startswith("transformers"):
                    r = transformers_engine(folder, "bfloat16" if eng.endswith("bf16") else "float32", th, args.prompt_tokens,
                                            args.gen_tokens, args.repeats)
                    params = r["params"]
                elif eng == "llama.cpp":
                    r = llama_engine(gguf, th, args.prompt_tokens, args.gen_tokens, args.repeats)
                else:
                    continue
            except ImportError as exc:
                print(f"{eng}: not installed ({exc})", file=sys.stderr)
                continue
            flops_tok = 2 * (r["params"] or params or 0)
            peak = hw["bf16_gflops"] if "bf16" in eng or eng == "llama.cpp" else hw["fp32_gflops"]
            rows.append((th, eng, r, hw, flops_tok * r["prompt_tps"] / 1e9 / peak if flops_tok else None,
                         r["gen_tps"] * r["weight_bytes"] / 1e9 / hw["read_gbs"]))
            print(f"{th} thread(s) {eng}: prompt {r['prompt_tps']:.0f} tok/s, generation {r['gen_tps']:.1f} tok/s", file=sys.stderr)
    lines = ["| threads | engine | prompt tok/s | × model FLOPs ÷ matmul peak | generated tok/s | × weight bytes ÷ read bandwidth |",
             "|---:|---|---:|---:|---:|---:|"]
    for th, eng, r, hw, pf, gb in rows:
        lines.append(f"| {th} | {eng} | {r['prompt_tps']:.0f} | {f'{100 * pf:.0f} %' if pf is not None else '—'} | {r['gen_tps']:.1f} | "
                     f"{100 * gb:.0f} % |")
    hw_lines = []
    for th in sorted({r[0] for r in rows}):
        hw = next(r[3] for r in rows if r[0] == th)
        hw_lines.append(f"{th} thread(s): bf16 matmul {hw['bf16_gflops']:.0f} GFLOP/s, fp32 {hw['fp32_gflops']:.0f} GFLOP/s, "
                        f"read {hw['read_gbs']:.1f} GB/s")
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    text = (f"Model {args.model} ({params / 1e6:.0f} M parameters once dequantised), prompt {args.prompt_tokens} tokens, "
            f"{args.gen_tokens} generated tokens; load average {load:.1f} at the end.\n\n" + "\n".join(lines)
            + "\n\nThe machine in the same run: " + "; ".join(hw_lines) + ".")
    print(text)
    if args.append:
        from retrieval_peers import append_result

        append_result(args.append, f"LLM engines on this CPU: {args.model}", "llm_engines.py", argv,
                      f"{(time.perf_counter() - t0) / 60:.1f} min", text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
