"""Build and run the ``accelerate launch`` line for a training script.

``bencao train sft --config R --accelerate-config zero2 --num-processes 8`` becomes::

    python -m accelerate.commands.launch --config_file <repo>/configs/accelerate/zero2.yaml \\
        --deepspeed_config_file <repo>/configs/deepspeed/ds_z2.json --num_processes 8 \\
        -m bencao.training.sft --config R

Multi-node flags (``--num-machines``, ``--machine-rank``, ``--main-process-ip``,
``--main-process-port``) pass through unchanged. Shipped configs are found by name
(``zero2`` → ``configs/accelerate/zero2.yaml``); relative DeepSpeed paths inside them are resolved
against the repository so the line works from any working directory.

The launcher forwards SIGTERM/SIGINT to accelerate (which passes them on to every rank: each saves a
checkpoint and stops, see ``stop.py``) and kills what is left of the run after a grace period.

On a machine without CUDA, accelerate turns ``MULTI_GPU`` into ``MULTI_CPU`` over gloo with the
requested process count, and DeepSpeed runs its CPU path. (``--cpu``/``distributed_type:
MULTI_CPU`` would silently start ONE process, so they are never generated here.)
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Sequence

from bencao.config import read_yaml
from bencao.errors import ConfigError
from bencao.training.args import resolve_shipped


def default_accelerate_config(recipe: dict, num_processes: int | None) -> str | None:
    """The launcher a recipe needs when none is named: its DeepSpeed stage, or DDP for N > 1."""
    ds = recipe.get("deepspeed")
    if isinstance(ds, str) and ds:
        stage = json.loads(resolve_shipped(ds, "configs/deepspeed", (".json",)).read_text())["zero_optimization"]["stage"]
        return "zero3" if stage == 3 else "zero2"
    if num_processes and num_processes > 1:
        return "multi_gpu"
    return None


def accelerate_command(
    module: str,
    script_args: Sequence[str],
    accelerate_config: str,
    num_processes: int | None = None,
    num_machines: int | None = None,
    machine_rank: int | None = None,
    main_process_ip: str | None = None,
    main_process_port: int | None = None,
    extra: Sequence[str] = (),
) -> list[str]:
    cfg_path = resolve_shipped(accelerate_config, "configs/accelerate", (".yaml", ".yml"))
    cfg = read_yaml(cfg_path)
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(cfg_path)]
    ds_file = (cfg.get("deepspeed_config") or {}).get("deepspeed_config_file")
    if ds_file:
        cmd += ["--deepspeed_config_file", str(resolve_shipped(ds_file, "configs/deepspeed", (".json",)))]
    if num_processes is not None:
        if cfg.get("distributed_type") == "NO" and num_processes > 1:
            raise ConfigError(f"{cfg_path}: distributed_type NO runs one process; use multi_gpu, zero2 or zero3 for {num_processes}")
        cmd += ["--num_processes", str(num_processes)]
    for flag, value in (
        ("--num_machines", num_machines),
        ("--machine_rank", machine_rank),
        ("--main_process_ip", main_process_ip),
        ("--main_process_port", main_process_port),
    ):
        if value is not None:
            cmd += [flag, str(value)]
    cmd += list(extra)
    cmd += ["-m", module, *script_args]
    return cmd


def run(cmd: Sequence[str], grace_s: float | None = None) -> tuple[int, int | None]:
    """Run the launch line; SIGTERM/SIGINT reach every rank and nothing outlives ``grace_s`` (see ``stop.py``).

    Returns (exit code, the signal that stopped the run or None).
    """
    from bencao.training.stop import DEFAULT_GRACE_S, run_forwarding

    env = dict(os.environ)
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    env.setdefault("OMP_NUM_THREADS", "1")
    return run_forwarding(cmd, env=env, grace_s=DEFAULT_GRACE_S if grace_s is None else grace_s)


def script_argv(config: str | Path | None, overrides: Sequence[str]) -> list[str]:
    """The training script's arguments under accelerate: the recipe as an absolute path to an existing file
    (a shipped recipe's name, ``sft/qwen2.5-7b-instruct/lora_zero2``, becomes the packaged file's path)."""
    from bencao.training.args import resolve_shipped

    out = ["--config", str(resolve_shipped(config, "configs/sft", (".yaml", ".yml")))] if config else []
    return out + list(overrides)
