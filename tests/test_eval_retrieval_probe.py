"""The question-only retrieval metrics (answer_recall@k, distractor_rate@k, margin@k, mrr, passage_chars@10):
their arithmetic on hand-made rankings, the adversarial retriever that returns every option, the probe asking
without options, and resumed runs that refuse to mix probe settings."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest

from bencao.errors import BencaoError
from bencao.evaluation.bench_format import load_bench
from bencao.evaluation.metrics import aggregate
from bencao.evaluation.probe import option_texts, passage_ranks, passage_text
from bencao.serving.config import load_serve_config

OPTS = {"A": "味辛，温", "B": "味甘，微寒", "C": "味苦，寒", "D": "味咸，平"}


def mcq(i: int = 0, gold: str = "B", options: dict[str, str] | None = None) -> dict:
    return {"id": f"q{i}", "task": "mcq", "question": "《神农本草经》记载人参的性味是", "options": options or OPTS, "answer": [gold]}


def filler(n: int) -> list[str]:
    return [f"神农本草经 › 上品\n无关之文第{i}段" for i in range(n)]


# ----------------------------------------------------------------------------- arithmetic


def test_gold_at_rank_three_and_distractors_counted():
    p = filler(20)
    p[2] = "人参，味甘，微寒。主补五藏"   # gold (B) at rank 3
    p[6] = "干姜，味辛，温。"            # distractor A at rank 7
    p[14] = "黄连，味苦，寒。"           # distractor C at rank 15; D (味咸，平) nowhere
    row = passage_ranks(mcq(), p)
    assert row["gold_rank"] == 3 and row["distractor_ranks"] == {"A": 7, "C": 15, "D": None}
    assert row["n_passages"] == 20 and row["chars"]["5"] == sum(len(x) for x in p[:5])
    m = aggregate([mcq()], [None], answers=False, retrieval=[row], n_resamples=0)
    assert m["answer_recall@5"] == m["answer_recall@10"] == m["answer_recall@20"] == 1.0
    assert m["mrr"] == pytest.approx(1 / 3)
    assert (m["distractor_rate@5"], m["distractor_rate@10"], m["distractor_rate@20"]) == (0.0, pytest.approx(1 / 3), pytest.approx(2 / 3))
    assert (m["margin@5"], m["margin@10"], m["margin@20"]) == (1.0, pytest.approx(2 / 3), pytest.approx(1 / 3))
    assert m["passage_chars@10"] == sum(len(x) for x in p[:10]) and m["passages@10"] == 10


def test_margin_is_recall_minus_distractor_rate_over_records():
    a = filler(20)
    a[2] = "人参，味甘，微寒"                                 # gold at 3, no distractor
    b = filler(20)
    b[1] = "干姜，味辛，温"                                   # no gold; one of three distractors at 2
    c = filler(3)                                             # nothing, and only 3 passages
    rows = [passage_ranks(mcq(i), x) for i, x in enumerate((a, b, c))]
    m = aggregate([mcq(i) for i in range(3)], [None] * 3, answers=False, retrieval=rows, n_resamples=200)
    assert m["answer_recall@5"] == pytest.approx(1 / 3) and m["distractor_rate@5"] == pytest.approx(1 / 9)
    for k in (5, 10, 20):
        assert m[f"margin@{k}"] == pytest.approx(m[f"answer_recall@{k}"] - m[f"distractor_rate@{k}"])
    assert m["mrr"] == pytest.approx(1 / 9) and m["passages@10"] == pytest.approx(23 / 3)
    lo, hi = m["ci95"]["margin@5"]
    assert lo <= m["margin@5"] <= hi and lo < hi  # a bootstrap interval of the per-record differences
    # a record the probe did not run on (None) counts in no denominator
    m2 = aggregate([mcq(i) for i in range(4)], [None] * 4, answers=False, retrieval=[*rows, None], n_resamples=0)
    assert m2["answer_recall@5"] == m["answer_recall@5"] and m2["margin@5"] == m["margin@5"]


def test_holding_reads_matching_keys_like_the_evidence_metric():
    from bencao.evaluation.metrics import evidence_contains_gold

    rec = mcq(options={**OPTS, "B": "生薑"})
    passage = "生姜，味辛，微温"  # traditional/simplified folded, as evidence_contains_gold reads it
    assert passage_ranks(rec, [passage])["gold_rank"] == 1 and evidence_contains_gold(rec, passage)
    assert passage_text(["神农本草经", "中品"], "生姜") == "神农本草经 › 中品\n生姜"
    rec_task = {"id": "r", "task": "rec", "query": "q", "candidates": ["人参", "甘草", "丹沙"], "gold": ["人参"]}
    assert option_texts(rec_task) == (["人参"], {"甘草": "甘草", "丹沙": "丹沙"})
    assert option_texts({"id": "t", "task": "tf", "statement": "s", "answer": True}) is None
    assert passage_ranks({"id": "e", "task": "el", "mention": "x", "gold_ids": []}, ["x"]) is None
    qa = passage_ranks({"id": "a", "task": "qa", "question": "q", "answer": "补五脏"}, ["人参补五脏"])
    assert qa["gold_rank"] == 1 and qa["distractor_ranks"] == {}
    m = aggregate([{"id": "a", "task": "qa", "question": "q", "answer": "补五脏"}], [None], answers=False, retrieval=[qa], n_resamples=0)
    assert m["answer_recall@5"] == 1.0 and "margin@5" not in m  # no distractors: no distractor rate, no margin


# ----------------------------------------------------------------------------- the adversarial retriever


def test_a_retriever_returning_every_option_scores_recall_one_and_margin_zero():
    rng = random.Random(0)
    herbs = ["人参", "甘草", "黄芪", "当归", "白术", "茯苓", "川芎", "熟地", "白芍", "柴胡", "半夏", "陈皮"]
    recs, rows, spread = [], [], []
    for i in range(30):
        n = rng.choice([4, 5, 10])
        names = rng.sample(herbs, n)
        letters = "ABCDEFGHIJ"[:n]
        rec = {"id": f"q{i}", "task": "sd" if n == 10 else "mcq", "question": "问", "options": dict(zip(letters, names)),
               "answer": [rng.choice(letters)]}
        recs.append(rec)
        rows.append(passage_ranks(rec, ["、".join(names)]))   # one passage that lists every option
        shuffled = [f"{x}，味甘" for x in names]
        rng.shuffle(shuffled)
        spread.append(passage_ranks(rec, shuffled))           # one option a passage, in random order
    m = aggregate(recs, [None] * 30, answers=False, retrieval=rows, n_resamples=100)
    for k in (5, 10, 20):
        assert (m[f"answer_recall@{k}"], m[f"distractor_rate@{k}"], m[f"margin@{k}"]) == (1.0, 1.0, 0.0)
    assert m["ci95"]["margin@10"] == [0.0, 0.0]
    s = aggregate(recs, [None] * 30, answers=False, retrieval=spread, n_resamples=0)
    assert (s["answer_recall@20"], s["margin@20"]) == (1.0, 0.0)  # every option within reach: no margin
    assert s["answer_recall@5"] < 1.0 and abs(s["margin@5"]) < 0.25  # a random order helps the gold no more than a distractor


# ----------------------------------------------------------------------------- the probe in a run


@pytest.fixture(scope="module")
def small_graph(tmp_path_factory, repo) -> Path:
    from bencao.cli import main

    d = tmp_path_factory.mktemp("probe_graph")
    (d / "index.yaml").write_text("index:\n  dense_kinds: []\n", encoding="utf-8")
    (d / "recipe.yaml").write_text(f"""name: probe-small
root: {repo}
index: true
index_config: {d / 'index.yaml'}
sources:
  - {{format: books-txt, path: data/sample/tcm_classics/txt/000-神农本草经.txt, options: {{materia_medica: true}}}}
""", encoding="utf-8")
    assert main(["graph", "build", "--config", str(d / "recipe.yaml"), "--graph", str(d / "g")]) == 0
    return d / "g"


@pytest.fixture()
def bench(tmp_path) -> list:
    recs = [mcq(0), {**mcq(1), "question": "《神农本草经》记载甘草的性味是", "options": {**OPTS, "B": "味甘，平"}},
            {"id": "t1", "task": "tf", "statement": "人参味甘，微寒。", "answer": True}]
    out = []
    for name, rs in (("herb_mcq", recs[:2]), ("herb_tf", recs[2:])):
        p = tmp_path / f"{name}.jsonl"
        p.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rs), encoding="utf-8")
        out.append(load_bench(p))
    return out


def _cfg(*overrides: str):
    return load_serve_config(None, ["n_resamples=0", "retrieval.index.dense_kinds=[]", "answerer=none", *overrides])


def test_probe_asks_the_question_alone_without_option_queries(small_graph, bench, tmp_path, monkeypatch):
    from bencao.evaluation.runner import evaluate, read_predictions
    from bencao.retrieval.search.retriever import Retriever

    calls: list[tuple[str, list[str], bool]] = []
    real = Retriever.retrieve

    def spy(self, question, query_triples=None, options=None, **kw):
        calls.append((question, list(options or []), self.cfg.macro.option_queries))
        return real(self, question, query_triples, options, **kw)

    monkeypatch.setattr(Retriever, "retrieve", spy)
    # the system under test is served with option queries on: it passes the options, the probe must not
    m = evaluate(bench, "retrieval", small_graph, tmp_path / "out", _cfg("retrieval.macro.option_queries=true"), progress=False)
    asked = [c for c in calls if c[0].startswith("《神农本草经》")]  # the two mcq questions (the tf statement aside)
    assert len(asked) == 4 and len(calls) == 5  # each mcq asked twice (system, probe); the tf statement once (no answer text)
    system_calls, probe_calls = [c for c in asked if c[1]], [c for c in asked if not c[1]]
    assert len(system_calls) == 2 and all(oq for _, _, oq in system_calls)  # the system: its options, option queries on
    assert len(probe_calls) == 2 and not any(oq for _, _, oq in probe_calls)  # the probe: no options, option queries off
    preds = read_predictions(tmp_path / "out")
    ren = preds["herb_mcq/q0"]["retrieval"]
    assert ren["gold_rank"] is not None and ren["snippet_ids"]
    # the probe's passages are what POST /v1/retrieve returns for the question alone, in that order
    from bencao.serving.pipeline import AnswerPipeline

    pipe = AnswerPipeline(small_graph, _cfg())
    served = [s["id"] for s in pipe.retrieve_dict(mcq()["question"])["evidence"]["snippets"]]
    assert ren["snippet_ids"] == served[:20]
    assert "herb_tf/t1" in preds and "retrieval" not in preds["herb_tf/t1"]
    assert m["herb_mcq"]["answer_recall@10"] == 1.0


def test_resume_refuses_to_mix_probe_settings(small_graph, bench, tmp_path):
    from bencao.evaluation import probe
    from bencao.evaluation.runner import RUN, evaluate

    out = tmp_path / "out"
    evaluate(bench, "retrieval", small_graph, out, _cfg(), progress=False)
    evaluate(bench, "retrieval", small_graph, out, _cfg(), progress=False)  # the same settings resume
    with pytest.raises(BencaoError, match="probe"):
        evaluate(bench, "retrieval", small_graph, out, _cfg("eval.retrieval_probe=false"), progress=False)
    with pytest.raises(BencaoError, match="option_queries"):  # the served recipe is part of what the probe runs
        evaluate(bench, "retrieval", small_graph, out, _cfg("retrieval.macro.option_queries=false"), progress=False)
    run = json.loads((out / RUN).read_text(encoding="utf-8"))
    run.pop("probe")  # predictions written before the probe existed: their rows have no retrieval ranks
    (out / RUN).write_text(json.dumps(run), encoding="utf-8")
    with pytest.raises(BencaoError, match="probe"):
        evaluate(bench, "retrieval", small_graph, out, _cfg(), progress=False)
    m = evaluate(bench, "retrieval", small_graph, out, _cfg(), progress=False, restart=True)
    assert "answer_recall@10" in m["herb_mcq"] and probe.VERSION >= 1
    off = evaluate(bench, "retrieval", small_graph, tmp_path / "off", _cfg("eval.retrieval_probe=false"), progress=False)
    assert "answer_recall@10" not in off["herb_mcq"] and "evidence_contains_gold" in off["herb_mcq"]
    # a closed-book recipe retrieves nothing: nothing to probe; without a graph neither
    assert probe.identity(_cfg("answer.closed_book=true"), small_graph) is None and probe.identity(_cfg(), None) is None


def bench_module(name: str):  # noqa: ANN201
    """A script of bench/ imported as a module (the scripts import each other by name)."""
    import importlib
    import sys

    bench_dir = Path(__file__).resolve().parents[1] / "bench"
    sys.path.insert(0, str(bench_dir))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(bench_dir))


def test_retrieval_peers_script_scores_every_row_with_the_same_metrics(small_graph, tmp_path, capsys):
    peers = bench_module("retrieval_peers")
    p = tmp_path / "herb_mcq.jsonl"
    p.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in (mcq(0), {**mcq(1), "answer": ["A"]})), encoding="utf-8")
    results = tmp_path / "RESULTS.md"
    assert peers.main(["--graph", str(small_graph), "--bench", str(p), "--set", "retrieval.index.dense_kinds=[]",
                       "--n-resamples", "50", "--append", str(results), "--json", str(tmp_path / "rows.json")]) == 0
    text = capsys.readouterr().out
    for row in ("bm25 (plain)", "bencao", "bencao −micro", "bencao −macro", "bencao −paths", "bencao −layers",
                "bencao with options (coverage)"):
        assert f"| {row} | 2 |" in text
    rows = json.loads((tmp_path / "rows.json").read_text(encoding="utf-8"))["rows"]
    assert rows["bm25 (plain)"][0]["gold_rank"] is not None  # 人参's entry holds 味甘，微寒 from the question alone
    assert "python bench/retrieval_peers.py --graph" in results.read_text(encoding="utf-8")

    # --rows none: only the plain BM25 and bencao rows (the optional channel and coverage rows left out)
    assert peers.main(["--graph", str(small_graph), "--bench", str(p), "--set", "retrieval.index.dense_kinds=[]",
                       "--n-resamples", "20", "--rows", "none"]) == 0
    text = capsys.readouterr().out
    assert "| bm25 (plain) | 2 |" in text and "| bencao | 2 |" in text and "−micro" not in text and "with options" not in text
    with pytest.raises(SystemExit):
        peers.main(["--graph", str(small_graph), "--bench", str(p), "--rows", "channel"])


def test_graph_routes_script_fits_on_one_half_and_scores_the_other(small_graph, tmp_path, capsys):
    """bench/graph_routes.py: every route scored by the probe's metrics on the held-out half, with the ceiling."""
    routes = bench_module("graph_routes")
    p = tmp_path / "herb_mcq.jsonl"
    recs = [mcq(0), {**mcq(1), "answer": ["A"]}, {**mcq(2), "id": "q2"}, {**mcq(3), "id": "q3", "answer": ["A"]}]
    p.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in recs), encoding="utf-8")
    results = tmp_path / "RESULTS.md"
    assert routes.main(["--graph", str(small_graph), "--bench", str(p), "--set", "retrieval.index.dense_kinds=[]",
                        "--ceiling", "--append", str(results)]) == 0
    text = capsys.readouterr().out
    for row in ("bm25 (plain)", "bencao (recipe)", "learned rerank", "PPR (HippoRAG-style)", "PPR ⊕ bm25 (RRF)", "alias expansion"):
        assert f"| {row} | 2 |" in text  # the second half: records 1 and 3
    for name in ("entity votes", "treats coverage", "section aggregation"):
        assert f"| {name} (" in text and f"{name}: " in text.split("Parameters chosen on the first half:")[1]
    assert "gold text in any passage" in text
    assert "python bench/graph_routes.py --graph" in results.read_text(encoding="utf-8")

    # --routes runs the named rows only; --fit-half 1 fits on the second half and scores the first
    assert routes.main(["--graph", str(small_graph), "--bench", str(p), "--routes", "learned rerank", "--fit-half", "1"]) == 0
    text = capsys.readouterr().out
    assert "| learned rerank | 2 |" in text and "| bm25 (plain) | 2 |" in text and "entity votes" not in text
    assert "bencao (recipe)" not in text and "Table: the first half" in text
    with pytest.raises(SystemExit):
        routes.main(["--graph", str(small_graph), "--bench", str(p), "--routes", "learned"])


def test_plain_bm25_index_is_kept_and_loaded_from_a_cache_folder(small_graph, tmp_path, monkeypatch):
    """--bm25-cache: the second run over the same graph loads the index the first built (keyed by store id and generation)."""
    peers = bench_module("retrieval_peers")
    from bencao.retrieval.graph.store import Graph
    from bencao.retrieval.index.lexical import LexicalIndex

    g = Graph.open(small_graph, read_only=True)
    q = mcq(0)["question"]
    first = peers.PlainBM25(g, tmp_path / "bm25")
    assert (tmp_path / "bm25" / f"{g.store_id()}-{g.generation()}" / "ids.json").is_file()

    def no_build(*a, **k):
        raise AssertionError("built again")

    monkeypatch.setattr(LexicalIndex, "build", classmethod(no_build))
    again = peers.PlainBM25(g, tmp_path / "bm25")
    assert again.ranked(q) == first.ranked(q) and again.ranked(q)
    with pytest.raises(AssertionError, match="built again"):
        peers.PlainBM25(g, tmp_path / "other")


def test_learned_rerank_reranks_the_pool_from_the_question(small_graph):
    """The learned route's classifier is fitted on labelled pools, then re-ranks a question's pool."""
    routes = bench_module("graph_routes")
    from bencao.retrieval.graph.store import Graph

    g = Graph.open(small_graph, read_only=True)
    r = routes.Routes(g, bench_module("retrieval_peers").PlainBM25(g))
    q = mcq(0)["question"]
    f = r.features(q)
    assert f.shape[0] == len(r.pool(q)) > 1 and np.isfinite(f).all()
    assert f[0, 0] == 1.0 and (f[:, 0] <= 1.0).all()  # BM25 share: the best passage's is 1
    r.fit([mcq(0)])
    texts, ids = r.learned(q)
    pool = [s for s, _, _ in r.pool(q)]
    assert set(ids) <= set(pool) and len(ids) == min(20, len(pool)) and len(set(ids)) == len(ids)
    assert any("味甘，微寒" in t for t in texts[:3])  # the passage that holds the gold text ranks near the top


def test_option_pmi_script_compares_pmi_with_the_answerers_scores(small_graph, tmp_path, capsys):
    """bench/option_pmi.py reads the option scores an llm-free eval wrote and scores PMI on the same records."""
    from bencao.evaluation.runner import evaluate

    pmi = bench_module("option_pmi")
    p = tmp_path / "herb_mcq.jsonl"
    recs = [mcq(0), {**mcq(1), "answer": ["A"]}, {**mcq(2), "id": "q2"}, {**mcq(3), "id": "q3", "answer": ["A"]}]
    p.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in recs), encoding="utf-8")
    out = tmp_path / "eval"
    evaluate([load_bench(p)], "llm-free", small_graph, out, _cfg("answerer=graph"), progress=False)
    results = tmp_path / "RESULTS.md"
    assert pmi.main(["--graph", str(small_graph), "--predictions", str(out / "predictions.jsonl"), "--bench", str(p),
                     "--append", str(results)]) == 0
    text = capsys.readouterr().out
    assert "| answerer (IR solver + graph + snippet support) |" in text and "| PMI alone (" in text
    assert "First half (fit)" in text and "| second half |" in text
    assert "python bench/option_pmi.py --graph" in results.read_text(encoding="utf-8")
    assert pmi.main(["--graph", str(small_graph), "--predictions", str(out / "predictions.jsonl"), "--bench", str(p), "--fit-half", "1"]) == 0
    assert "Second half (fit)" in (text := capsys.readouterr().out) and "| first half |" in text
    # predictions of other records (or of a system without option scores) are refused by name
    (tmp_path / "other.jsonl").write_text("", encoding="utf-8")
    with pytest.raises(SystemExit, match="no option scores for herb_mcq/q0"):
        pmi.main(["--graph", str(small_graph), "--predictions", str(tmp_path / "other.jsonl"), "--bench", str(p)])


def test_pmi_counts_passages_two_words_share():
    """PPMI over a bm25s index: words that meet in passages score above 0, words that never meet score 0."""
    from bencao.retrieval.index.lexical import LexicalIndex

    pmi = bench_module("option_pmi")
    docs = [["人参", "补气"], ["人参", "补气"], ["黄连", "清热"], ["黄连", "清热"], ["人参", "清热"], ["干姜", "温中"]]
    lex = LexicalIndex.build(iter(docs), [f"d{i}" for i in range(len(docs))])
    c = pmi.Cooccurrence(lex)
    ids = {t: c.vocab[t] for t in ("人参", "补气", "黄连", "清热")}
    m = c.ppmi([ids["人参"], ids["黄连"]], [ids["补气"], ids["清热"]])
    assert m[0, 0] == pytest.approx(np.log(6 * 2 / (3 * 2)))   # 人参 & 补气: 2 shared of N=6
    assert m[1, 0] == 0.0                                     # 黄连 & 补气 never meet
    assert m[1, 1] == pytest.approx(np.log(6 * 2 / (2 * 3)))   # 黄连 & 清热
    assert m[0, 1] == 0.0                                     # 人参 & 清热 meet less often than chance: PMI < 0, clipped
