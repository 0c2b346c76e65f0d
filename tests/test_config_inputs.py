"""Issue 33 item 7: recipe files that are not files, and YAML that silently drops a value.

``--config`` naming a FIFO hung for ever; a symlink to /dev/zero grew to 3 GB; a key given twice kept the
second value without a word. Each is now a one-line error naming the file (and the lines).
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from bencao.config import YamlRefused, parse_yaml, read_yaml, read_yaml_file
from bencao.errors import ConfigError


def _within(seconds: float, fn):
    """``fn()``'s result or exception, or a failure when it has not returned within ``seconds`` (it may block for ever)."""
    box: dict = {}

    def run() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            box["error"] = exc

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(seconds)
    if t.is_alive():
        pytest.fail(f"still reading after {seconds:g}s")
    if "error" in box:
        raise box["error"]
    return box.get("value")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_fifo_as_the_config_is_refused_at_once(tmp_path):
    fifo = tmp_path / "recipe.yaml"
    os.mkfifo(fifo)
    with pytest.raises(ConfigError, match=r"recipe\.yaml: a FIFO, not a regular file"):
        _within(5, lambda: read_yaml(fifo))


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="no /dev/zero here")
def test_a_symlink_to_a_device_is_refused_without_reading_it(tmp_path):
    link = tmp_path / "serve.yaml"
    link.symlink_to("/dev/zero")
    with pytest.raises(ConfigError, match=r"serve\.yaml: a character device \(through a symlink\), not a regular file"):
        _within(5, lambda: read_yaml(link))


def test_a_folder_as_the_config_is_one_line(tmp_path):
    with pytest.raises(ConfigError, match="a directory, not a regular file"):
        read_yaml(tmp_path)


@pytest.mark.parametrize("text, key, lines", [
    ("model_name: a\nmodel_name: b\n", "model_name", "lines 1 and 2"),
    ("api:\n  port: 8000\n  host: x\n  port: 9000\n", "port", "lines 2 and 4"),
    ("- {a: 1, a: 2}\n", "a", "lines 1 and 1"),
])
def test_a_key_given_twice_is_refused_naming_both_lines(text, key, lines, tmp_path):
    with pytest.raises(YamlRefused, match=f"duplicate key '{key}' \\({lines}\\)"):
        parse_yaml(text)
    p = tmp_path / "r.yaml"
    p.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError, match=r"r\.yaml:\d+: invalid YAML: duplicate key"):
        read_yaml_file(p)


def test_equal_looking_keys_of_different_types_and_merges_are_not_duplicates():
    assert parse_yaml("1: a\n'1': b\n") == {1: "a", "1": "b"}
    assert parse_yaml("base: &b {x: 1}\nitem:\n  <<: *b\n  x: 2\n") == {"base": {"x": 1}, "item": {"x": 2}}


def test_every_shipped_yaml_file_reads():
    repo = Path(__file__).resolve().parents[1]
    files = [p for p in repo.rglob("*.y*ml") if not ({".venv", ".git", "node_modules"} & set(p.parts))]
    assert len(files) > 20
    for p in files:
        read_yaml_file(p)
