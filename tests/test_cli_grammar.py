"""One CLI grammar, clean usage errors: every command of the tree, found by walking it (a new command is
covered without touching this file), through the real entry point ``bencao.cli.main`` (and once through
the installed ``bencao`` console script).

A usage error (unknown option, missing argument or option value, bad value for a typed option, unknown
command) is one ``error: ...`` line on stderr and exit code 2, never a traceback. And one flag means one
thing: ``--set/-s`` wherever a recipe is read (``--config``), ``--graph/-g`` for every graph, one long
flag per short flag, one help text for ``--dry-run``, ``--out``/``--input`` saying file or directory.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import typing
from pathlib import Path

import pytest
import typer.main

from bencao import cliopts
from bencao.cli import app, main

ROOT = typer.main.get_command(app)
#: click < 8.2 (and the typer releases on it) show a group's help for a bare group with exit code 0, later ones with 2.
CLICK_BEFORE_8_2 = (any(c.__module__.startswith("click.") for c in type(ROOT).__mro__)
                    and not hasattr(__import__("click.exceptions").exceptions, "NoArgsIsHelpError"))


def _walk(cmd, path: tuple[str, ...] = ()):
    yield path, cmd
    for name, sub in sorted((getattr(cmd, "commands", None) or {}).items()):
        yield from _walk(sub, (*path, name))


TREE = list(_walk(ROOT))
GROUPS = [(path, cmd) for path, cmd in TREE if getattr(cmd, "commands", None) is not None]
COMMANDS = [(path, cmd) for path, cmd in TREE if getattr(cmd, "commands", None) is None]


def _ids(items) -> list[str]:
    return [" ".join(path) or "bencao" for path, *_ in items]


def _options(cmd) -> list:
    return [p for p in cmd.params if any(o.startswith("-") for o in p.opts)]


def _takes_value(p) -> bool:
    return not getattr(p, "is_flag", False) and not getattr(p, "count", False)


def _numeric(p) -> bool:
    """An int/float option, on typer's own parameters (0.29+: ``type_descriptor``) and on click's (``type``)."""
    td = getattr(p, "type_descriptor", None)
    if td is not None:
        ann = td.annotation
        args = [a for a in typing.get_args(ann) if a is not type(None)]
        return (args[0] if len(args) == 1 else ann) in (int, float)
    return getattr(getattr(p, "type", None), "name", "").startswith(("integer", "float"))  # also "integer range"


def _one_error_line(capsys, argv: list[str]) -> str:
    rc = main(argv)
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err, err
    assert rc == 2, (argv, rc, out, err)
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), (argv, err)
    return lines[0]


# ----------------------------------------------------------------------------- usage errors


def test_the_tree_is_walked():
    names = {" ".join(path) for path, _ in COMMANDS}
    assert {"graph build", "graph add", "graph cases therapy", "data cot", "train sft", "eval", "infer", "export"} <= names
    assert len(COMMANDS) >= 25


@pytest.mark.parametrize("path,cmd", TREE, ids=_ids(TREE))
def test_unknown_option_is_one_line(capsys, path, cmd):
    line = _one_error_line(capsys, [*path, "--no-such-flag"])
    assert "--no-such-flag" in line and f"bencao {' '.join(path)} --help".replace("  ", " ") in line


MISSING = [(path, cmd) for path, cmd in COMMANDS if any(p.required for p in cmd.params)]


@pytest.mark.parametrize("path,cmd", MISSING, ids=_ids(MISSING))
def test_missing_argument_or_option_is_one_line(capsys, path, cmd):
    line = _one_error_line(capsys, list(path))
    assert "missing" in line.lower()


VALUED = [(path, cmd, opt) for path, cmd in COMMANDS for opt in [next((p for p in _options(cmd) if _takes_value(p)), None)] if opt]


@pytest.mark.parametrize("path,cmd,opt", VALUED, ids=_ids(VALUED))
def test_option_without_its_value_is_one_line(capsys, path, cmd, opt):
    line = _one_error_line(capsys, [*path, opt.opts[0]])
    assert opt.opts[0] in line and "requires an argument" in line


NUMERIC = [(path, cmd, p) for path, cmd in COMMANDS for p in _options(cmd) if _takes_value(p) and _numeric(p)]


def test_typed_options_are_found():
    assert {(" ".join(path), p.opts[0]) for path, _, p in NUMERIC} >= {("eval", "--limit"), ("graph complete", "--seed"), ("infer", "--batch-size")}


@pytest.mark.parametrize("path,cmd,opt", NUMERIC, ids=[f"{' '.join(p)} {o.opts[0]}" for p, _, o in NUMERIC])
def test_bad_value_is_one_line(capsys, path, cmd, opt):
    line = _one_error_line(capsys, [*path, opt.opts[0], "abc"])
    assert opt.opts[0] in line and "invalid value" in line.lower()


@pytest.mark.parametrize("path,cmd", GROUPS, ids=_ids(GROUPS))
def test_unknown_command_is_one_line(capsys, path, cmd):
    line = _one_error_line(capsys, [*path, "no-such-command"])
    assert "no-such-command" in line and "no such command" in line.lower()


@pytest.mark.parametrize("path,cmd", [g for g in GROUPS if g[0]], ids=_ids([g for g in GROUPS if g[0]]))
def test_group_without_a_command_shows_its_help(capsys, path, cmd):
    rc = main(list(path))
    out, err = capsys.readouterr()
    assert rc == (0 if CLICK_BEFORE_8_2 else 2) and "Traceback" not in out + err and "Usage" in out + err


def test_help_exits_0(capsys):
    for path, _ in TREE[:5]:
        assert main([*path, "--help"]) == 0
    assert "Usage" in capsys.readouterr().out


def test_help_shows_brackets_as_written(capsys):
    """Help texts are plain text, not rich markup: ``key=[a,b]`` examples keep their brackets."""
    assert main(["graph", "index", "--help"]) == 0
    assert "embedder.languages=[en,zh]" in " ".join(capsys.readouterr().out.split())


def _console_script() -> str | None:
    here = Path(sys.executable).parent / "bencao"
    return str(here) if here.exists() else shutil.which("bencao")


@pytest.mark.skipif(_console_script() is None, reason="the bencao console script is not installed")
@pytest.mark.parametrize("argv,needle", [
    (["graph", "add", "--bogus"], "--bogus"),
    (["eval", "--bench", "x.jsonl", "--limit", "abc"], "--limit"),
    (["graph", "stats"], "--graph"),
    (["nosuch"], "nosuch"),
])
def test_console_script_prints_one_line(argv, needle):
    r = subprocess.run([_console_script(), *argv], capture_output=True, text=True, timeout=120,
                       env={**__import__("os").environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"})
    assert r.returncode == 2, r
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0], r.stderr
    assert "Traceback" not in r.stderr + r.stdout


# ----------------------------------------------------------------------------- one grammar

ALL_OPTIONS = [(path, cmd, p) for path, cmd in TREE for p in _options(cmd)]


def _named(cmd, flag: str):
    return next((p for p in _options(cmd) if flag in p.opts + p.secondary_opts), None)


@pytest.mark.parametrize("path,cmd", [c for c in COMMANDS if _named(c[1], "--config")], ids=_ids([c for c in COMMANDS if _named(c[1], "--config")]))
def test_every_recipe_command_takes_set_and_names_recipes_alike(path, cmd):
    config, set_ = _named(cmd, "--config"), _named(cmd, "--set")
    assert set(config.opts) == {"--config", "-c"}
    assert set_ is not None and set(set_.opts) == {"--set", "-s"} and set_.multiple, f"bencao {' '.join(path)}: --config without --set"
    assert cliopts.RECIPE in config.help, f"bencao {' '.join(path)} --config help: {config.help!r}"


def test_every_graph_is_graph_g():
    for path, cmd, p in ALL_OPTIONS:
        if p.name == "graph" or "--graph" in p.opts or "-g" in p.opts:
            assert set(p.opts) == {"--graph", "-g"}, (path, p.opts)


def test_no_short_flag_means_two_things():
    long_of: dict[str, set[str]] = {}
    short_of: dict[str, set[str | None]] = {}
    for path, cmd, p in ALL_OPTIONS:
        names = p.opts + p.secondary_opts
        longs = sorted(o for o in names if o.startswith("--"))
        shorts = [o for o in p.opts if not o.startswith("--")]
        for s in shorts:
            long_of.setdefault(s, set()).add(longs[0] if longs else s)
        for lo in longs[:1]:
            short_of.setdefault(lo, set()).add(shorts[0] if shorts else None)
    assert {s: ls for s, ls in long_of.items() if len(ls) > 1} == {}
    # and a long flag has the same short everywhere (or none anywhere)
    assert {lo: ss for lo, ss in short_of.items() if len(ss) > 1} == {}
    assert long_of["-b"] == {"--bench"} and long_of["-o"] == {"--out"} and long_of["-O"] == {"--loader-option"}


def test_dry_run_has_one_meaning():
    dry = [(path, p) for path, cmd, p in ALL_OPTIONS if "--dry-run" in p.opts]
    assert {" ".join(path) for path, _ in dry} >= {"graph integrate", "graph complete", "graph cases classify", "train sft"}
    for path, p in dry:
        assert p.help == cliopts.DRY_RUN_HELP and getattr(p, "is_flag", True), path


def test_out_and_input_say_file_or_directory():
    for path, cmd, p in ALL_OPTIONS:
        if "--out" in p.opts:
            assert set(p.opts + p.secondary_opts) == {"--out", "--output", "-o"}, path
            assert p.help.startswith(("Output file", "Output directory")), (path, p.help)
        if "--input" in p.opts:
            assert set(p.opts) == {"--input", "-i"}, path
            assert p.help.startswith(("Input file", "Input directory")), (path, p.help)


def test_deprecated_spellings_are_hidden():
    for path, cmd, p in ALL_OPTIONS:
        if "--retrieval-config" in p.opts:
            assert p.hidden, path


# ----------------------------------------------------------------------------- --set works where it was added


def test_set_and_positional_overrides_reach_the_recipe(capsys, repo):
    recipe = str(repo / "configs/sft/tiny/lora_cpu.yaml")
    assert main(["train", "sft", "-c", recipe, "--dry-run", "max_steps=3", "-s", "learning_rate=1e-4"]) == 0
    out = capsys.readouterr().out
    assert "max_steps=3" in out and "learning_rate=1e-4" in out
    # train plan reads the model --set names
    assert main(["train", "plan", "-c", recipe, "--set", "model_name_or_path=/no/such/model"]) == 2
    assert "/no/such/model" in capsys.readouterr().err


def test_set_on_graph_build(tmp_path, repo, capsys):
    recipe = tmp_path / "r.yaml"
    recipe.write_text(f"name: tiny\nroot: {repo}\nindex: true\nsources:\n  - format: foodon-jsonl\n    path: "
                      "data/sample/foodon/foodon_demo_subset.jsonl\n", encoding="utf-8")
    assert main(["graph", "build", "-c", str(recipe), "-g", str(tmp_path / "g"), "-s", "index=false"]) == 0
    assert not (tmp_path / "g" / "index").exists() and not (tmp_path / "g" / "lexical").exists()
