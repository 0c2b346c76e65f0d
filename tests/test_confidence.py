"""UKGE triple confidence: score function, training, persistence, evidence pooling, calibration."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch
from ukge_helpers import FAST, DOUBTFUL, WARM, build_herb_graph, triple_key

from bencao.cli import main
from bencao.errors import BencaoError
from bencao.retrieval.graph.confidence import (
    UKGE, ConfidenceConfig, SupportWeights, TripleSupport, UKGEConfig, _module_class, calibrate_graph, combine, gather_evidence,
    load_triples, reset_confidences, train_ukge,
)



@pytest.fixture()
def herb_graph(tmp_path):
    g = build_herb_graph(tmp_path / "g")
    yield g
    g.close()


def _handmade(score: str) -> UKGE:
    module = _module_class()(3, 1, 2, score)
    with torch.no_grad():
        module.ent.weight.copy_(torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]))
        module.rel.weight.copy_(torch.tensor([[2.0, 1.0]]))
        module.w.fill_(0.5)
        module.b.fill_(-0.25)
    return UKGE(module, ["a", "b", "c"], ["t", "t", "t"], ["r"], UKGEConfig(dim=2, score=score))


def test_score_function_values():
    # plausibility Σ h⊙r⊙t: (a,r,c) = 1·2·1 + 0 = 2; (b,r,c) = 0 + 1·1·1 = 1; (a,r,b) = 0
    logi = _handmade("logistic").score([("a", "r", "c"), ("b", "r", "c"), ("a", "r", "b")])
    sig = lambda x: 1 / (1 + math.exp(-x))  # noqa: E731
    assert np.allclose(logi, [sig(0.5 * 2 - 0.25), sig(0.5 * 1 - 0.25), sig(-0.25)], atol=1e-6)
    rect = _handmade("rectifier").score([("a", "r", "c"), ("b", "r", "c"), ("a", "r", "b"), ("a", "r", "zzz")])
    assert np.allclose(rect[:3], [0.75, 0.25, 0.0], atol=1e-6)
    assert np.isnan(rect[3])  # unknown entity: no score, not a made-up one


def test_training_lowers_loss_and_learns_the_pattern(herb_graph):
    data = load_triples(herb_graph)
    model = train_ukge(data, FAST)
    assert model.history[-1] < 0.5 * model.history[0]
    g = herb_graph
    good = triple_key(g, "人参", "has_nature", "温")
    doubtful = triple_key(g, *DOUBTFUL)
    unseen_false = triple_key(g, "黄连", "has_nature", "温")
    s = model.score([good, doubtful, unseen_false])
    assert s[0] > 0.8
    assert s[1] < s[0] - 0.3  # trained towards its low stored confidence
    assert s[2] < 0.3


def test_same_seed_same_model_and_save_reload_identical(herb_graph, tmp_path):
    data = load_triples(herb_graph)
    cfg = UKGEConfig(dim=8, epochs=5, batch_size=16, seed=3)
    m1, m2 = train_ukge(data, cfg), train_ukge(data, cfg)
    triples = [(data.entities[h], data.relations[r], data.entities[t]) for h, r, t in data.triples]
    assert np.array_equal(m1.score(triples), m2.score(triples))
    m1.save(tmp_path)
    again = UKGE.load(tmp_path)
    assert np.array_equal(m1.score(triples), again.score(triples))
    assert again.entities == m1.entities and again.config == cfg and again.history == pytest.approx(m1.history, abs=1e-6)


def test_evidence_pooling_in_log_odds():
    cfg = SupportWeights()
    lone = TripleSupport(prior=0.7, n_support=1, n_documents=1, curated=False, n_origins=1)
    parts = combine(0.7, lone, cfg)
    assert parts["final"] == pytest.approx(0.7, abs=1e-9)  # model and prior agree, no extra evidence
    more = combine(0.7, TripleSupport(0.7, 3, 2, False, 2), cfg)
    assert more["logit"] == pytest.approx(math.log(0.7 / 0.3) + 0.4 * math.log(3) + 0.4)
    curated = combine(0.7, TripleSupport(0.7, 1, 1, True, 1), cfg)
    assert more["final"] > parts["final"] and curated["final"] > parts["final"]
    assert combine(0.05, lone, cfg)["final"] < 0.4  # the model can pull a single extraction down


def test_gather_evidence_counts_sources(herb_graph):
    g = herb_graph
    ids = [r["id"] for r in g.iter_triples()]
    ev = gather_evidence(g, ids, ["record"])
    shared = g.get_triple(next(t for t in ids if g.get_triple(t)["head"] == WARM[0] and g.get_triple(t)["tail"] == "温"))
    e = ev[shared["id"]]
    assert (e.n_support, e.n_documents, e.curated, e.n_origins, e.prior) == (2, 2, True, 2, 1.0)
    lone = ev[g.get_triple(next(t for t in ids if g.get_triple(t)["tail"] == "气虚"))["id"]]
    assert (lone.n_support, lone.curated, lone.n_origins) == (1, False, 1)


def test_calibrate_keeps_sources_and_is_reversible(herb_graph):
    g = herb_graph
    sources_before = g.conn.execute("SELECT * FROM triple_sources ORDER BY rowid").fetchall()
    conf_before = {r["id"]: r["confidence"] for r in g.iter_triples()}
    summary = calibrate_graph(g, ConfidenceConfig(model=FAST))
    assert summary["triples"] == len(conf_before) and (g.dir / "ukge" / "model.pt").exists()
    assert g.conn.execute("SELECT * FROM triple_sources ORDER BY rowid").fetchall() == sources_before
    doubtful = g.get_triple(g.conn.execute("SELECT id FROM triples WHERE layer='personal'").fetchone()[0])
    block = doubtful["attributes"]["confidence"]
    assert block["original"] == pytest.approx(0.3) and doubtful["confidence"] == pytest.approx(block["final"], abs=1e-6)
    assert set(block["terms"]) == {"model", "prior", "support", "curated", "agreement", "bias"}
    curated = [t for t in g.iter_triples() if t["attributes"]["confidence"]["curated"]]
    plain = [t for t in g.iter_triples(relation="has_nature") if not t["attributes"]["confidence"]["curated"] and t["layer"] == "book"]
    assert min(t["confidence"] for t in curated) > max(t["confidence"] for t in plain)
    assert doubtful["confidence"] < min(t["confidence"] for t in plain)
    # running again starts from the same stored evidence: same result, original kept
    calibrate_graph(g, ConfidenceConfig(model=FAST))
    again = g.get_triple(doubtful["id"])
    assert again["confidence"] == pytest.approx(doubtful["confidence"], abs=1e-6)
    assert again["attributes"]["confidence"]["original"] == pytest.approx(0.3)
    assert reset_confidences(g) == len(conf_before)
    assert {r["id"]: r["confidence"] for r in g.iter_triples()} == conf_before
    assert all("confidence" not in r["attributes"] for r in g.iter_triples())


def test_reuse_model_and_errors(herb_graph, tmp_path):
    g = herb_graph
    with pytest.raises(BencaoError, match="no UKGE model saved"):
        calibrate_graph(g, ConfidenceConfig(reuse_model=True))
    with pytest.raises(BencaoError, match="layers is empty"):
        calibrate_graph(g, ConfidenceConfig(layers=[]))
    with pytest.raises(BencaoError, match="not one of"):
        calibrate_graph(g, ConfidenceConfig(model=UKGEConfig(score="tanh")))
    calibrate_graph(g, ConfidenceConfig(model=FAST))
    mtime = (g.dir / "ukge" / "model.pt").stat().st_mtime_ns
    s = calibrate_graph(g, ConfidenceConfig(model=FAST, evidence=SupportWeights(curated=3.0), reuse_model=True))
    assert (g.dir / "ukge" / "model.pt").stat().st_mtime_ns == mtime and s["loss_first"] is not None


def test_cli_confidence_and_reset(herb_graph, repo, capsys):
    d = str(herb_graph.dir)
    rc = main(["graph", "confidence", "--graph", d, "--config", str(repo / "configs/graph/confidence.yaml"),
               "model.epochs=20", "model.dim=8"])
    out = capsys.readouterr().out
    assert rc == 0 and "calibrated 48 triples" in out
    assert main(["graph", "confidence", "--graph", d, "--reset"]) == 0
    assert "restored the original confidence of 48 triples" in capsys.readouterr().out
    assert main(["graph", "confidence", "--graph", d, "model.bogus=1"]) == 2
    assert "unknown key(s) bogus" in capsys.readouterr().err


def test_filtered_ranks_count_ties_half_and_skip_other_answers():
    from bencao.retrieval.graph.confidence_eval import _ranks

    scores = np.array([[0.9, 0.8, 0.8, 0.1, 0.95]])
    # true answer 1; entity 4 is another true answer (filtered out); entity 2 ties → rank 1 + 1 + 0.5
    assert _ranks(scores, np.array([1]), [[1, 4]]).tolist() == [2.5]
    assert _ranks(scores, np.array([1]), [[1]]).tolist() == [3.5]


def test_holdout_evaluation_reports_unkr_metrics(herb_graph):
    from bencao.retrieval.graph.confidence_eval import holdout_evaluation

    # uniform negatives too: unconstrained ranking must also learn which types a relation takes
    r = holdout_evaluation(herb_graph, dataclasses.replace(FAST, corrupt="mixed"), test_fraction=0.25, split_seed=0)
    assert r["train"] + r["test"] + r["test_dropped_unseen"] == r["triples"] == 48
    assert r["test"] > 0 and 0.0 <= r["confidence"]["mse"] <= 1.0
    both = r["link_prediction"]["both"]
    assert 0.0 < both["mrr"] <= 1.0 and both["hits@1"] <= both["hits@3"] <= both["hits@10"] <= 1.0
    # the two groups are learnable: the model ranks held-out natures/flavours/symptoms well above chance (22 entities)
    assert both["mrr"] > 0.3
    typed = r["link_prediction"]["both_type_constrained"]
    assert typed["mrr"] >= both["mrr"]
    with pytest.raises(BencaoError, match="strictly between"):
        holdout_evaluation(herb_graph, FAST, test_fraction=1.0)
