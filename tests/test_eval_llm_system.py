"""The `llm` system, closed book: a tiny local transformers model (noise, real plumbing) and a
loopback OpenAI-compatible endpoint with scripted replies (exact scores, failures, resume)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from bencao.cli import main
from bencao.evaluation.bench_format import load_bench
from bencao.evaluation.runner import evaluate, read_predictions
from bencao.llm import LLMError
from bencao.serving.config import load_serve_config
from bencao.llm.local_server import create_app, serve_in_thread
from tests.llm_fixtures import ScriptedClient, save_tiny_model

MCQ = [{"id": f"q{i}", "task": "mcq", "question": f"问题{i}：生姜的性味是", "options": {"A": "辛温", "B": "苦寒", "C": "甘平"},
        "answer": ["ABC"[i % 3]], "lang": "zh"} for i in range(6)]
TF = [{"id": f"t{i}", "task": "tf", "statement": f"生姜性温{i}。", "answer": i % 2 == 0, "lang": "zh"} for i in range(4)]


def write(path: Path, recs: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in recs), encoding="utf-8")
    return path


def test_closed_book_with_a_tiny_local_model_through_the_cli(tmp_path, capsys):
    model = save_tiny_model(tmp_path / "tiny")
    bench = write(tmp_path / "mcq_zh.jsonl", MCQ[:3])
    out = tmp_path / "out"
    args = ["eval", "-b", str(bench), "--system", "llm", "--no-retrieval", "--out", str(out), "--no-progress",
            "--llm", str(model), "--set", "generator.max_tokens=6",
            "--set", "generator.temperature=0", "--set", "generator.device=cpu", "--set", "n_resamples=0"]
    assert main(args) == 0, capsys.readouterr().err
    preds = read_predictions(out)
    assert len(preds) == 3
    for p in preds.values():
        # a local model scores the option letters (answer.mcq_mode auto): every option has a log-probability
        assert p["extra"]["answered_by"] == f"generator:{model}" and p["prediction"]["scored_by"] == "letters"
        scores = p["prediction"]["scores"]
        assert set(scores) == set(MCQ[0]["options"]) and all(v is not None and v <= 0 for v in scores.values())
        assert p["prediction"]["answer"] == [max(scores, key=scores.get)]
        assert p["evidence"] == {} and p["evidence_contains_gold"] is None  # closed book: no evidence
    metrics = json.loads((out / "metrics.json").read_text(encoding="utf-8"))["mcq_zh"]
    assert metrics["n"] == 3 and 0.0 <= metrics["accuracy"] <= 1.0 and "evidence_contains_gold" not in metrics
    assert (out / "llm_cache.sqlite").exists()
    # a rerun of the finished run asks nothing and changes nothing
    before = (out / "predictions.jsonl").read_text(encoding="utf-8")
    assert main(args) == 0
    assert (out / "predictions.jsonl").read_text(encoding="utf-8") == before
    # answer.mcq_mode=generate: a written reply whose answer line is parsed
    gen_out = tmp_path / "gen"
    gen_args = [a if a != str(out) else str(gen_out) for a in args] + ["--set", "answer.mcq_mode=generate"]
    assert main(gen_args) == 0, capsys.readouterr().err
    for p in read_predictions(gen_out).values():
        assert isinstance(p["extra"]["reply"], str) and "scores" not in p["prediction"]
        assert p["prediction"]["abstained"] == (p["prediction"]["answer"] == [])


def test_scripted_endpoint_exact_scores_failures_and_resume(tmp_path):
    down = {"on": True}

    def reply(messages):
        user = messages[-1]["content"]
        n = int(re.search(r"(\d+)", user.split("：", 1)[-1] if "问题" in user else user).group(1))
        if "判断" in user:
            return "答案：正确" if n < 3 else "说不清"  # t3 abstains
        if n == 5 and down["on"]:
            return LLMError("scripted: overloaded", retryable=False, kind="server")
        return "分析……答案：A" if n < 4 else "答案：C"  # right for q0, q3 (A) and q5 (C)

    client = ScriptedClient(reply, model="scripted-teacher")
    benches = [load_bench(write(tmp_path / "mcq_zh.jsonl", MCQ)), load_bench(write(tmp_path / "tf_zh.jsonl", TF))]
    with serve_in_thread(create_app(client)) as base_url:
        cfg = load_serve_config(None, ["answer.closed_book=true", "n_resamples=0", "batch_size=4", "answerer=generator",
                                       "generator.backend=openai", "generator.model=scripted-teacher", f"generator.base_url={base_url}",
                                       "generator.max_retries=0"])
        out = tmp_path / "out"
        first = evaluate(benches, "llm", None, out, cfg, progress=False)
        assert first["mcq_zh"]["missing"] == 1 and first["mcq_zh"]["n"] == 5  # q5 failed: not written
        assert "1 record(s) failed" in (out / "report.md").read_text(encoding="utf-8")
        down["on"] = False
        calls = len(client.calls)
        m = evaluate(benches, "llm", None, out, cfg, progress=False)
        assert len(client.calls) == calls + 1  # only the failed record was asked again
    assert m["mcq_zh"]["n"] == 6 and "missing" not in m["mcq_zh"]
    assert m["mcq_zh"]["accuracy"] == 3 / 6
    assert m["tf_zh"]["accuracy"] == 2 / 4 and m["tf_zh"]["abstain_rate"] == 1 / 4  # t0, t2 true and said so; t3 abstained
    prompt = client.calls[0][-1]["content"]
    assert "A. 辛温" in prompt and "参考资料" not in prompt
