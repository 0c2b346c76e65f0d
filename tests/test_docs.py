"""The documentation: the site builds offline in strict mode, the README stays short and points only inside
the repository, and the generated references cover every command and every configuration key."""

from __future__ import annotations

import dataclasses
import html
import importlib
import importlib.util
import inspect
import os
import pkgutil
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
DOCS = REPO / "docs"

pytest.importorskip("mkdocs")
pytest.importorskip("material")


def _hook():
    spec = importlib.util.spec_from_file_location("bencao_docs_reference_hook", DOCS / "hooks" / "reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """`mkdocs build --strict` into a temporary directory (a warning — broken link, missing anchor, page
    missing from the nav — fails the build)."""
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "NO_MKDOCS_2_WARNING": "1"}
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(REPO / "mkdocs.yml"),
                           "--site-dir", str(out)], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"mkdocs build --strict failed:\n{proc.stdout}\n{proc.stderr}"
    assert "WARNING" not in proc.stderr, proc.stderr
    return out


def _page_text(site: Path, page: str) -> str:
    return html.unescape((site / page / "index.html").read_text(encoding="utf-8"))


# ---- the site ---------------------------------------------------------------------------------

def test_site_builds_with_every_page_in_the_nav(site):
    nav_pages = re.findall(r":\s*([\w./-]+\.md)\s*$", (REPO / "mkdocs.yml").read_text(encoding="utf-8"), re.M)
    expected = {"install", "graph", "corpus", "retrieval", "answering", "data-generation", "training", "export",
                "serving", "evaluation", "reliability", "benchmarks", "recipes", "results",
                "reference/cli", "reference/configuration", "reference/recipes"}
    assert expected <= {p[:-3] for p in nav_pages}
    for page in nav_pages:
        target = site / ("index.html" if page == "index.md" else page[:-3] + "/index.html")
        assert target.is_file(), f"{page} was not built"
    written = {p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md")}
    generated = set(_hook().GENERATED)
    assert written | generated == set(nav_pages), "every page is in the nav and every nav entry is a page"


def test_site_fetches_nothing_from_the_network(site):
    config = (REPO / "mkdocs.yml").read_text(encoding="utf-8")
    assert re.search(r"^\s*font:\s*false", config, re.M), "Material must not load Google Fonts"
    for page in site.rglob("*.html"):
        text = page.read_text(encoding="utf-8")
        remote = re.findall(r"<(?:link|script|img)\b[^>]*\b(?:src|href)=\"(?:https?:)?//[^\"]+\"", text)
        assert not remote, f"{page.relative_to(site)} loads {remote[:3]}"


def test_hand_written_pages_point_inside_the_repository():
    for page in DOCS.rglob("*.md"):
        text = page.read_text(encoding="utf-8")
        assert "../shared" not in text and "shared/DESIGN" not in text, page
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target) or target.startswith("#"):
                continue
            resolved = (page.parent / target.split("#")[0]).resolve()
            assert resolved.is_relative_to(DOCS), f"{page.name}: {target} points outside docs/"


def test_results_page_is_bench_results(site):
    text = _page_text(site, "results")
    for heading in re.findall(r"^## (.+)$", (REPO / "bench" / "RESULTS.md").read_text(encoding="utf-8"), re.M)[:5]:
        assert html.unescape(re.sub(r"`", "", heading)) in re.sub(r"<[^>]+>", "", text), heading


def test_recipe_catalogue_lists_every_shipped_recipe(site):
    text = _page_text(site, "reference/recipes")
    base = REPO / "configs"
    names = sorted(p.relative_to(base).with_suffix("").as_posix() for p in base.rglob("*")
                   if p.suffix in (".yaml", ".yml", ".json") and "architecture" not in p.parts
                   and not any(part.startswith((".", "_")) for part in p.relative_to(base).parts))
    assert "graph/sample" in names and "sft/qwen2.5-7b-instruct/lora_zero2" in names
    for name in names:
        assert f"<code>{name}</code>" in text, name


# ---- the CLI reference ------------------------------------------------------------------------

def _commands():
    import typer

    from bencao.cli import app

    def walk(cmd, path):
        subs = getattr(cmd, "commands", None)
        if subs:
            for name, sub in subs.items():
                yield from walk(sub, (*path, name))
        else:
            yield path, cmd

    return list(walk(typer.main.get_command(app), ()))


def test_cli_reference_has_every_command_and_option(site):
    text = _page_text(site, "reference/cli")
    commands = _commands()
    assert {"graph build", "graph add", "train sft", "train embedder", "data cot", "ask", "serve", "eval", "export"} <= {
        " ".join(p) for p, _ in commands}
    for path, cmd in commands:
        anchor = "bencao-" + "-".join(path)
        assert f'id="{anchor}"' in text, f"no section for bencao {' '.join(path)}"
        section = re.split(r'<h[234] id="bencao-', text.split(f'id="{anchor}"', 1)[1], maxsplit=1)[0]
        assert f"Usage: bencao {' '.join(path)}" in section
        for param in cmd.params:
            if param.name == "help" or getattr(param, "hidden", False):
                continue
            flag = max(param.opts, key=len)
            assert flag in section, f"bencao {' '.join(path)}: {flag} missing from its reference entry"
            if getattr(param, "help", None):
                first_words = " ".join(param.help.split()[:4]).replace("`", "")
                assert first_words in re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", section)), (path, flag, first_words)


# ---- the configuration reference ---------------------------------------------------------------

PACKAGES = ("bencao", "bencao.llm", "bencao.retrieval", "bencao.retrieval.graph", "bencao.retrieval.ingest",
            "bencao.retrieval.index", "bencao.retrieval.search", "bencao.data_gen", "bencao.training",
            "bencao.serving", "bencao.evaluation")


def _config_dataclasses() -> set[type]:
    """Every dataclass in bencao whose fields carry help strings: the typed configurations."""
    found: set[type] = set()
    for package in PACKAGES:
        for info in pkgutil.iter_modules(importlib.import_module(package).__path__, package + "."):
            if info.ispkg:
                continue
            module = importlib.import_module(info.name)
            for obj in vars(module).values():
                if (inspect.isclass(obj) and dataclasses.is_dataclass(obj) and obj.__module__ == module.__name__
                        and any("help" in f.metadata for f in dataclasses.fields(obj))):
                    found.add(obj)
    return found


def test_every_config_dataclass_is_documented():
    hook = _hook()
    documented: set[type] = set()
    for _, spec, _ in hook.CONFIG_SECTIONS:
        documented |= hook.nested_classes(hook.load_class(spec))
    classes = _config_dataclasses()
    assert len(classes) > 30
    missing = sorted(f"{c.__module__}.{c.__qualname__}" for c in classes - documented)
    assert not missing, f"configuration classes not in docs/hooks/reference.py CONFIG_SECTIONS (nor nested in one): {missing}"
    for cls in classes:
        for f in dataclasses.fields(cls):
            assert f.metadata.get("help", "").strip(), f"{cls.__qualname__}.{f.name} has no help string"


def test_configuration_reference_has_every_key(site):
    from bencao.config import describe

    text = _page_text(site, "reference/configuration")
    hook = _hook()
    for title, spec, _ in hook.CONFIG_SECTIONS:
        cls = hook.load_class(spec)
        anchor = hook._slug(title)
        assert f'id="{anchor}"' in text, title
        section = re.split(r'<h2 id="', text.split(f'id="{anchor}"', 1)[1], maxsplit=1)[0]
        rows = describe(cls)
        assert rows
        for key, _default, help_text in rows:
            if cls.__name__ == "ServeConfig" and key.startswith("retrieval."):
                continue  # the retrieval recipe's own section lists them
            assert f"<code>{key}</code>" in section, f"{title}: key {key} missing"
            assert " ".join(help_text.split()[:3]).replace("`", "") in re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", section)), (title, key)
    serve_retrieval = {k[len("retrieval."):] for k, _, _ in describe(hook.load_class("bencao.serving.config:ServeConfig"))
                       if k.startswith("retrieval.")}
    assert serve_retrieval == {k for k, _, _ in describe(hook.load_class("bencao.retrieval.search.config:RetrievalConfig"))}


# ---- the README ---------------------------------------------------------------------------------

def _relative_links(markdown: str) -> list[str]:
    links = re.findall(r"\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)", markdown)
    links += re.findall(r"^\[[^\]]+\]:\s*(\S+)", markdown, re.M)
    return [t for t in links if not re.match(r"[a-z][a-z0-9+.-]*:", t) and not t.startswith("#")]


def _broken_links(markdown: str, base: Path) -> list[str]:
    broken = []
    for target in _relative_links(markdown):
        path = (base / target.split("#")[0]).resolve()
        if not path.is_relative_to(base.resolve()) or not path.exists():
            broken.append(target)
    return broken


def test_readme_is_short_and_keeps_the_test_command():
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 200
    assert "make test" in text  # CI runs the README's test command
    assert "../shared" not in text and "shared/DESIGN" not in text


def test_readme_links_resolve_inside_the_repository():
    text = README.read_text(encoding="utf-8")
    links = _relative_links(text)
    assert any(t.startswith("docs/") for t in links) and "bench/RESULTS.md" in links
    assert not _broken_links(text, REPO)
    assert not re.search(r"\]\((\.\./|/)", text), "README links must be relative and stay in the repository"


def test_link_check_catches_a_broken_or_escaping_link(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "ok.md").write_text("# ok\n", encoding="utf-8")
    assert _broken_links("[a](docs/ok.md) [b](docs/ok.md#x) [c](https://example.org)", tmp_path) == []
    assert _broken_links("[a](docs/missing.md)", tmp_path) == ["docs/missing.md"]
    assert _broken_links("[a](../outside.md)", tmp_path) == ["../outside.md"]


def test_readme_links_every_task_page():
    text = README.read_text(encoding="utf-8")
    for page in ("install", "graph", "corpus", "retrieval", "answering", "data-generation", "training", "export",
                 "serving", "evaluation", "reliability", "benchmarks", "recipes"):
        assert f"(docs/{page}.md)" in text, page


def _example_commands(text: str):
    """Every ``bencao ...`` line of the shell code blocks (continuation lines joined)."""
    for block in re.findall(r"```(?:bash|sh|console)?\n(.*?)```", text, re.S):
        for line in re.sub(r"\\\n\s*", " ", block).splitlines():
            m = re.match(r"^\s*(?:\S+/)?bencao\s+(.*)$", line)
            if m:
                yield line.strip(), m.group(1)


def test_command_examples_use_existing_commands_and_options():
    """The examples in the README and the pages name real commands and options (flags renamed in the CLI must be
    renamed in the prose too; the generated reference has the exact spellings)."""
    import shlex

    import typer

    from bencao.cli import app

    root = typer.main.get_command(app)
    checked, problems = 0, []
    for page in [README, *sorted(DOCS.rglob("*.md"))]:
        for line, rest in _example_commands(page.read_text(encoding="utf-8")):
            checked += 1
            tokens = shlex.split(rest, comments=True)
            cmd, path = root, []
            while tokens and getattr(cmd, "commands", None) and tokens[0] in cmd.commands:
                path.append(tokens[0])
                cmd = cmd.commands[tokens.pop(0)]
            known = {"-h", "--help"}
            if getattr(cmd, "commands", None) and not all(t.startswith("-") for t in tokens):
                problems.append(f"{page.name}: {line}: no such command")
                continue
            for param in cmd.params:
                if param.param_type_name == "option":
                    known.update(param.opts)
                    known.update(param.secondary_opts)
            for token in tokens:
                if re.match(r"^--?[A-Za-z]", token) and token.split("=", 1)[0] not in known:
                    problems.append(f"{page.name}: {line}: bencao {' '.join(path)} has no option {token.split('=', 1)[0]}")
    assert checked > 50
    assert not problems, "\n".join(problems)
