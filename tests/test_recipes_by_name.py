"""Shipped recipes resolve by name from any folder, can be listed, shown and copied; a copy keeps working."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
import yaml

from bencao.cli import main
from bencao.errors import ConfigError
from bencao.recipes import find, list_recipes, package_root, resolve

ROOT = Path(__file__).resolve().parents[1]


def test_every_file_under_configs_is_listed_and_parses():
    recipes = list_recipes()
    names = {r.name for r in recipes}
    on_disk = {p.relative_to(ROOT / "configs").with_suffix("").as_posix()
               for p in (ROOT / "configs").rglob("*") if p.suffix in (".yaml", ".yml", ".json") and "architecture" not in p.parts}
    assert names == on_disk
    assert {"graph/sample", "graph/classics", "retrieval/default", "retrieval/lexical", "serving/default", "sft/qwen2.5-7b-instruct/lora_zero2",
            "embed/bge-m3/lora", "data_gen/cot_llm", "accelerate/zero2", "deepspeed/ds_z2", "cases/cases"} <= names
    for r in recipes:
        text = r.path.read_text(encoding="utf-8")
        data = json.loads(text) if r.path.suffix == ".json" else yaml.safe_load(text)
        assert isinstance(data, dict), r.name


def test_names_and_old_paths_resolve_from_another_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    want = ROOT / "configs" / "sft" / "qwen2.5-7b-instruct" / "lora_zero2.yaml"
    for ref in ("sft/qwen2.5-7b-instruct/lora_zero2", "sft/qwen2.5-7b-instruct/lora_zero2.yaml",
                "configs/sft/qwen2.5-7b-instruct/lora_zero2.yaml"):
        assert resolve(ref).resolve() == want
    assert resolve("zero2", "accelerate").name == "zero2.yaml"
    (tmp_path / "graph").mkdir()
    (tmp_path / "graph" / "sample.yaml").write_text("sources: []\n")
    assert resolve("graph/sample.yaml") == Path("graph/sample.yaml")  # a file that exists here wins over the shipped one
    assert find("../etc/passwd") is None and find("/etc/passwd") is None


def test_an_unknown_name_is_one_line_naming_close_recipes(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=r"graph/sampel: config file not found .*no shipped recipe"):
        resolve("graph/sampel")
    assert main(["recipes", "show", "serving/classic"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "serving/classics" in err and "retrieval/classics" in err


def test_graph_recipe_by_name_finds_the_bundled_data_from_anywhere(tmp_path, monkeypatch):
    from bencao.retrieval.build import load_build_config, resolve_sources

    monkeypatch.chdir(tmp_path)
    cfg, root = load_build_config("graph/sample")
    sources = resolve_sources(cfg, root)
    assert len(sources) == 12 and all(s.path.is_file() for s in sources)
    assert all(package_root() in s.path.parents for s in sources)
    assert Path(next(s for s in sources if s.format == "kb-csv").options["mapping"]).is_file()


def test_a_copied_recipe_builds_the_same_sources(tmp_path, monkeypatch, capsys):
    from bencao.retrieval.build import load_build_config, resolve_sources

    monkeypatch.chdir(tmp_path)
    assert main(["recipes", "show", "graph/sample", "--out", "mine.yaml"]) == 0
    assert (tmp_path / "mine.yaml").read_text(encoding="utf-8") == (ROOT / "configs" / "graph" / "sample.yaml").read_text(encoding="utf-8")
    assert main(["recipes", "show", "graph/sample", "--out", "mine.yaml"]) == 2  # never overwrites
    assert "already exists" in capsys.readouterr().err
    shipped = [(s.format, s.path) for s in resolve_sources(*load_build_config("graph/sample"))]
    copied = [(s.format, s.path) for s in resolve_sources(*load_build_config("mine.yaml"))]
    assert copied == shipped


def test_serving_recipe_by_name_inlines_its_retrieval_recipe(tmp_path, monkeypatch):
    from bencao.serving.config import load_serve_config

    monkeypatch.chdir(tmp_path)
    cfg = load_serve_config("serving/classics")
    expected = yaml.safe_load((ROOT / "configs" / "retrieval" / "classics.yaml").read_text(encoding="utf-8"))
    assert cfg.retrieval.macro.k_snippets == expected["macro"]["k_snippets"]


def test_recipes_list_and_show_print_what_ships(capsys):
    assert main(["recipes", "list", "accelerate"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in out] == ["accelerate/multi_gpu", "accelerate/single_gpu", "accelerate/zero2", "accelerate/zero3",
                                                 "accelerate/zero3_offload"]
    assert main(["recipes", "show", "deepspeed/ds_z2"]) == 0
    assert json.loads(capsys.readouterr().out)["zero_optimization"]["stage"] == 2
    assert main(["recipes", "list", "nope"]) == 2
    assert "kinds: accelerate, cases" in capsys.readouterr().err


def test_train_plan_takes_a_recipe_name_and_its_shipped_architecture(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert main(["train", "plan", "--config", "sft/qwen2.5-7b-instruct/lora_zero2", "--num-gpus", "8"]) == 0
    out = capsys.readouterr().out
    assert "7.78 B parameters" in out and "<- recipe" in out


def test_progress_prints_plain_lines_off_a_terminal():
    from bencao.progress import StepProgress

    buf = io.StringIO()
    with StepProgress("build", stream=buf, interval=3600) as p:
        for i, name in enumerate(["a.txt", "a.txt", "b.txt"]):
            p(name, i, 3)
        p("done", 3, 3)
    lines = buf.getvalue().splitlines()
    assert [line.split(" (")[0] for line in lines] == ["build a.txt 0/3", "build b.txt 2/3", "build done 3/3"]


def test_train_plan_of_a_shipped_recipe_never_waits_on_the_hub(tmp_path, monkeypatch, capsys):
    """Online mode (no HF_HUB_OFFLINE) on a machine without the model: the shipped architecture is read, the hub
    is never asked (without network it retried for half a minute and then failed)."""
    import transformers

    monkeypatch.chdir(tmp_path)
    for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))  # an empty hub cache
    real = transformers.AutoConfig.from_pretrained
    asked: list[str] = []

    def local_only(name, *a, **kw):
        asked.append(str(name))
        assert Path(str(name)).exists(), f"asked the hub for {name}"
        return real(name, *a, **kw)

    monkeypatch.setattr(transformers.AutoConfig, "from_pretrained", local_only)
    assert main(["train", "plan", "--config", "sft/qwen2.5-7b-instruct/lora_zero2"]) == 0
    assert "7.78 B parameters" in capsys.readouterr().out
    assert asked and asked[0].endswith("architecture")


def test_train_sft_by_name_hands_accelerate_the_shipped_recipe_file(tmp_path, monkeypatch, capsys):
    """`bencao train sft --config sft/qwen2.5-7b-instruct/lora_zero2` from any folder: the workers get the packaged
    recipe's path (the name was made absolute against the working directory, a file that does not exist)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert main(["train", "sft", "--config", "sft/qwen2.5-7b-instruct/lora_zero2", "--dry-run"]) == 0
    cmd = capsys.readouterr().out.split()
    recipe = Path(cmd[cmd.index("--config") + 1])
    assert recipe.is_file() and recipe == resolve("sft/qwen2.5-7b-instruct/lora_zero2")
    for flag in ("--config_file", "--deepspeed_config_file"):
        assert Path(cmd[cmd.index(flag) + 1]).is_file(), flag
