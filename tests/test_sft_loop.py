"""The loop of docs/training.md ("The loop on one CPU machine with a real model"), command by command, with a tiny
model in place of Qwen2.5-Coder-0.5B: graph → `data cot --half a` → `data mcq --half a --mix` → `train sft` with the
shipped recipe (its data paths are where the data commands wrote) → `export` (merge) → `infer` on the dev file."""

from __future__ import annotations

import json
import shutil

import pytest

from fixtures_training import tiny_qwen  # noqa: F401

from bencao.data_gen.leakage import half_of
from tests.data_gen_helpers import QUESTIONS, build_graph


@pytest.fixture(scope="module")
def graph_dir(tmp_path_factory):
    return build_graph(tmp_path_factory.mktemp("g") / "graph")


def _lines(path):
    return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]


def test_graph_data_sft_merge_infer_as_the_docs_walk_it(graph_dir, tiny_qwen, tmp_path, monkeypatch, capsys):  # noqa: F811
    from bencao.cli import main

    monkeypatch.chdir(tmp_path)
    # a dev file: two questions the graph's paths answer in half a, two in half b
    assert [half_of(i) for i in ("q0", "q4", "q1", "q2")] == ["a", "a", "b", "b"]
    dev = [dict(QUESTIONS[0], id="q0"), dict(QUESTIONS[1], id="q4"),
           dict(QUESTIONS[0], id="q1", question="头眩胸胀宜用哪味药？"), dict(QUESTIONS[1], id="q2", question="泄利寒热宜用哪一种？")]
    (tmp_path / "dev").mkdir()
    (tmp_path / "dev" / "tcmbench_mcq.jsonl").write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in dev), encoding="utf-8")
    shutil.copytree(graph_dir, tmp_path / "graphs" / "mine")  # `data cot` refreshes the indexes of the graph it is given
    G = "graphs/mine"

    assert main(["data", "cot", "--config", "data_gen/cot_kg_paths", "--graph", G, "--input", "dev/tcmbench_mcq.jsonl", "--half", "a",
                 "--output", "out/sft-data/cot-tcmbench_mcq", "progress=false"]) == 0
    cot = json.loads(capsys.readouterr().out)
    assert cot["done"] == 2 and set(cot["excluded"]["ids"]) == {"q1", "q2"}
    assert main(["data", "mcq", "--config", "data_gen/mcq", "--graph", G, "-i", "dev/tcmbench_mcq.jsonl", "--half", "a",
                 "--mix", "out/sft-data/cot-tcmbench_mcq", "-s", "per_relation=4"]) == 0
    mcq = json.loads(capsys.readouterr().out)
    assert mcq["input"]["kept"] == 2 and mcq["input"]["other_half"] == 2 and mcq["mixed"]["train"] + mcq["mixed"]["eval"] == 4
    rows = _lines(tmp_path / "out" / "sft-data" / "train.jsonl") + _lines(tmp_path / "out" / "sft-data" / "eval.jsonl")
    text = json.dumps(rows, ensure_ascii=False)
    assert "头眩胸胀宜用哪味药" not in text and "泄利寒热宜用哪一种" not in text  # half b never reaches the training data
    assert {r["form"] for r in rows} >= {"mcq", "bench", "reasoning", "triples"}

    # the shipped recipe as it is, but for the model and a few steps
    assert main(["train", "sft", "--config", "sft/qwen2.5-coder-0.5b-instruct/lora_cpu", f"model_name_or_path={tiny_qwen}", "dtype=float32",
                 "max_steps=3", "save_steps=100", "logging_steps=1", "per_device_eval_batch_size=4", "disable_tqdm=true"]) == 0
    record = json.loads((tmp_path / "out" / "sft" / "qwen2.5-coder-0.5b-lora" / "bencao_training.json").read_text(encoding="utf-8"))
    assert record["datasets"][0]["path"] == "out/sft-data/train.jsonl" and record["datasets"][0]["records"] == mcq["train"]
    m = record["metrics"]
    assert m["train_runtime"] > 0 and m["train_cpu_s"] > 0 and record["global_step"] == 3
    capsys.readouterr()

    assert main(["export", "--model", "out/sft/qwen2.5-coder-0.5b-lora", "--out", "out/models/qwen2.5-coder-0.5b-bencao"]) == 0
    merged = tmp_path / "out" / "models" / "qwen2.5-coder-0.5b-bencao"
    assert (merged / "README.md").exists() and any(merged.glob("*.safetensors"))
    assert main(["infer", "dev/tcmbench_mcq.jsonl", "--output", "out/infer/tcmbench_mcq.jsonl", "--graph", G,
                 "--llm", "out/models/qwen2.5-coder-0.5b-bencao", "-s", "generator.max_tokens=4"]) == 0
    answers = {r["id"]: r for r in _lines(tmp_path / "out" / "infer" / "tcmbench_mcq.jsonl")}
    assert set(answers) == {"q0", "q4", "q1", "q2"}
    assert all(set(r["prediction"]["ranking"]) == {"A", "B", "C", "D"} for r in answers.values())
