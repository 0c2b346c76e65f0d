"""``bencao train sft|embedder|plan`` and ``bencao export``. Heavy imports stay inside the commands."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from bencao import cliopts

train_app = typer.Typer(help="Fine-tune the CoT model (SFT), the embedder and the reranker; plan GPU memory.", no_args_is_help=True)

OVERRIDES = cliopts.overrides_arg("key=value overrides of the recipe, the same as --set, e.g. max_steps=20 learning_rate=1e-4.")
SET = cliopts.overrides("key=value override of the recipe (repeatable), e.g. -s max_steps=20 -s learning_rate=1e-4.")


@train_app.command("sft")
def sft_cmd(
    config: Path = cliopts.config(f"SFT {cliopts.RECIPE}, e.g. sft/qwen2.5-7b-instruct/lora_zero2.", required=True),
    set_: Optional[list[str]] = SET,
    overrides: Optional[list[str]] = OVERRIDES,
    accelerate_config: Optional[str] = typer.Option(
        None, "--accelerate-config", help="Launch with accelerate: a name in configs/accelerate (single_gpu, multi_gpu, zero2, zero3, zero3_offload) or a path."
    ),
    num_processes: Optional[int] = typer.Option(None, "--num-processes", help="Processes in all (GPUs; on CPU, gloo workers)."),
    num_machines: Optional[int] = typer.Option(None, "--num-machines", help="Multi-node: number of machines."),
    machine_rank: Optional[int] = typer.Option(None, "--machine-rank", help="Multi-node: rank of this machine."),
    main_process_ip: Optional[str] = typer.Option(None, "--main-process-ip", help="Multi-node: address of rank 0."),
    main_process_port: Optional[int] = typer.Option(None, "--main-process-port", help="Multi-node: port of rank 0."),
    dry_run: bool = cliopts.dry_run(),
    stop_grace_s: float = typer.Option(25.0, "--stop-grace-s", help="After SIGTERM/SIGINT: seconds the ranks get to save a checkpoint "
                                       "before whatever is left of the run is killed."),
) -> None:
    """Supervised fine-tuning (trl SFTTrainer; LoRA or full). In-process, or through accelerate launch.

    SIGTERM or SIGINT (a scheduler, Ctrl-C) reaches every rank: each finishes its step, a checkpoint is
    saved and the run stops (exit code 128 + signal); the same command resumes it.
    """
    from bencao.training import launch
    from bencao.training.args import recipe_dict
    from bencao.training.sft import validate_recipe

    overrides = cliopts.merged(overrides, set_)
    recipe = recipe_dict(config, overrides)
    validate_recipe(config, overrides)  # once, here: not once per rank after the launch
    name = accelerate_config or launch.default_accelerate_config(recipe, num_processes)
    if name is None:
        if dry_run:
            typer.echo(f"python -m bencao.training.sft --config {config} {' '.join(overrides)}".strip())
            return
        from bencao.training.sft import main, parse_args

        main(*parse_args(config, overrides))
        return
    cmd = launch.accelerate_command(
        "bencao.training.sft", launch.script_argv(config, overrides), name, num_processes=num_processes,
        num_machines=num_machines, machine_rank=machine_rank, main_process_ip=main_process_ip, main_process_port=main_process_port,
    )
    typer.echo(" ".join(cmd))
    if not dry_run:
        rc, stopped_by = launch.run(cmd, grace_s=stop_grace_s)
        if stopped_by is not None:
            from bencao.training.stop import Stopped, last_checkpoint

            out = recipe.get("output_dir")
            raise Stopped(stopped_by, None, last_checkpoint(str(out)) if out else None)
        if rc:
            from bencao.errors import BencaoError

            raise BencaoError(f"training under accelerate launch failed (exit code {rc}); see the log above")


@train_app.command("embedder")
def embedder_cmd(
    config: Path = cliopts.config(f"Embedder {cliopts.RECIPE}, e.g. embed/bge-m3/cmnrl.", required=True),
    set_: Optional[list[str]] = SET,
    overrides: Optional[list[str]] = OVERRIDES,
) -> None:
    """Contrastive fine-tuning of the embedder (MNRL / cached MNRL), IR figures before and after.

    SIGTERM or SIGINT: the step is finished, a checkpoint saved and the run stops (exit code 128 + signal).
    """
    from bencao.training.embedder import main, parse_args

    main(*parse_args(config, cliopts.merged(overrides, set_)))


@train_app.command("reranker")
def reranker_cmd(
    config: Path = cliopts.config(f"Reranker {cliopts.RECIPE}, e.g. rerank/bge-reranker-v2-m3.", required=True),
    set_: Optional[list[str]] = SET,
    overrides: Optional[list[str]] = OVERRIDES,
) -> None:
    """Fine-tune the retrieval reranker (a cross-encoder) on the graph's pairs; held-out MRR@10 / nDCG@10 before and after.

    Serve the result with --set retrieval.rerank.model=OUTPUT_DIR (docs/retrieval.md#reranking).
    SIGTERM or SIGINT: the step is finished, a checkpoint saved and the run stops (exit code 128 + signal).
    """
    from bencao.training.reranker import main, parse_args

    main(*parse_args(config, cliopts.merged(overrides, set_)))


@train_app.command("plan")
def plan_cmd(
    config: Path = cliopts.config(f"SFT {cliopts.RECIPE}, e.g. sft/qwen2.5-7b-instruct/lora_zero2.", required=True),
    set_: Optional[list[str]] = SET,
    overrides: Optional[list[str]] = OVERRIDES,
    num_gpus: int = typer.Option(8, "--num-gpus", help="GPUs per node."),
    num_nodes: int = typer.Option(1, "--num-nodes", help="Nodes."),
    model_config: Optional[Path] = typer.Option(None, "--model-config", help="config.json of the model (default: the model on disk, else the architecture a shipped recipe carries, else the hub)."),
) -> None:
    """Per-GPU memory estimate of the recipe's ZeRO stage (DeepSpeed's estimators + LoRA accounting)."""
    from bencao.training.plan import plan, render

    typer.echo(render(plan(config, cliopts.merged(overrides, set_), num_gpus=num_gpus, num_nodes=num_nodes, model_config=model_config)))


def export_cmd(
    action: Optional[list[str]] = typer.Argument(None, metavar="[from-gguf FILE]", show_default=False,
                                                 help="The action from-gguf FILE: turn a GGUF file (any architecture transformers reads: "
                                                      "qwen2, llama, gemma3, ...) into a transformers folder at --out, with its "
                                                      "provenance, instead of exporting a training run."),
    model: Optional[Path] = typer.Option(None, "--model", "-m", help="Training output dir (LoRA adapter or full model; LM or "
                                         "sentence-transformer). Required unless from-gguf."),
    out: Optional[Path] = cliopts.out(False, "Output directory: merged safetensors, tokenizer, generation config, README.md "
                                             "(from-gguf: the converted folder). Required."),
    base: Optional[str] = typer.Option(None, "--base", help="Base model to merge into (default: the one recorded at training)."),
    push_to_hub: Optional[str] = typer.Option(None, "--push-to-hub", help="Hub repo id to upload to (token from HF_TOKEN)."),
    private: bool = typer.Option(False, "--private", help="Create the hub repo private."),
    upload_plan: bool = typer.Option(False, "--upload-plan", help="Write OUT.upload-plan.json (files, sizes, SHA-256, commit message) "
                                     "instead of uploading."),
    commit_message: Optional[str] = typer.Option(None, "--commit-message", help="Hub commit message."),
    dtype: str = typer.Option("bfloat16", "--dtype", help="from-gguf: the weights' type, bfloat16 | float16 | float32."),
    gguf: Optional[str] = typer.Option(None, "--gguf", help="Also write the merged causal LM as OUT/<OUT name>-<type>.gguf for "
                                       "llama.cpp and Ollama: f16, q8_0 or f32. It is reloaded with transformers and its logits "
                                       "compared with the merged model's before the export is kept; the figures go to "
                                       "OUT/bencao_training.json and the model card."),
) -> None:
    """Merge a LoRA adapter into its unquantised base on CPU, save safetensors + model card (+ GGUF); optionally upload.

    `bencao export from-gguf FILE --out DIR` instead dequantises a GGUF file into a plain transformers folder.
    """
    if out is None:
        raise typer.BadParameter("--out is required", param_hint="--out")
    if action:
        if action[0] != "from-gguf" or len(action) != 2:
            raise typer.BadParameter(f"unexpected {' '.join(action)!r}: the only action is 'from-gguf FILE'", param_hint="[from-gguf FILE]")
        from bencao.gguf_convert import convert_gguf

        typer.echo(f"converted {Path(action[1]).name} to {convert_gguf(Path(action[1]), out, dtype=dtype)}")
        return
    if model is None:
        raise typer.BadParameter("--model is required (or from-gguf FILE)", param_hint="--model")
    from bencao.training.export import export, push

    exported = export(model, out, base=base, gguf=gguf)
    typer.echo(f"exported {exported.kind} to {out}")
    if exported.gguf:
        c = exported.gguf["check"]
        typer.echo(f"GGUF {out / exported.gguf['file']}: {exported.gguf['bytes']:,} bytes; reload check passed "
                   f"(logits within {c['relative_max_diff']:.3g} std of the merged model's, top-1 agreement {c['top1_agreement']:.3f})")
    if push_to_hub or upload_plan:
        plan_path = push(out, push_to_hub or "<repo>", private=private, dry_run=upload_plan or not push_to_hub, commit_message=commit_message)
        if plan_path:
            typer.echo(f"upload plan written to {plan_path}")


export_app = typer.Typer()
export_app.command("export")(export_cmd)
