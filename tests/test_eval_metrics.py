"""Exact metric values on hand-made cases for every task, ties, multi-gold, abstentions, intervals."""

from __future__ import annotations

import numpy as np
import pytest

from bencao.evaluation.metrics import aggregate, evidence_contains_gold, tie_groups, topk_credit

OPTS = {k: f"选项{k}" for k in "ABCDEFGHIJ"}


def choice(i, answer, task="mcq", source="s"):
    return {"id": str(i), "task": task, "question": "q", "options": OPTS, "answer": answer, "source": source}


def test_mcq_accuracy_is_exact_set_match_and_abstention_is_wrong():
    recs = [choice(1, ["A"]), choice(2, ["A", "C"]), choice(3, ["A", "C"]), choice(4, ["B"]), choice(5, ["D"])]
    preds = [
        {"answer": ["A"]},              # right
        {"answer": ["C", "A"]},         # multi-gold, all and only the gold: right
        {"answer": ["A"]},              # partial: wrong
        {"answer": ["B"], "abstained": True},  # abstained: wrong whatever it says
        None,                           # no prediction: wrong
    ]
    m = aggregate(recs, preds, n_resamples=0)
    assert m["task"] == "mcq" and m["n"] == 5
    assert m["accuracy"] == pytest.approx(2 / 5)
    assert m["abstain_rate"] == pytest.approx(2 / 5)
    assert "evidence_contains_gold" not in m and "ci95" not in m


def test_tie_groups_from_scores_ranking_and_unranked():
    items = list("ABCDE")
    assert tie_groups(items, ["B", "A", "C", "D", "E"], {"A": 0.5, "B": 0.9, "C": 0.5, "D": 0.1, "E": 0.1}) == [["B"], ["A", "C"], ["D", "E"]]
    assert tie_groups(items, ["C", "A"]) == [["C"], ["A"], ["B", "D", "E"]]  # unranked tie at the bottom
    assert tie_groups(items, ["C", "A", "B"], [3.0, 3.0, 1.0]) == [["C", "A"], ["B"], ["D", "E"]]  # scores aligned with ranking


def test_topk_credit_with_ties_is_the_chance_of_random_tie_breaking():
    groups = [["B"], ["A", "C", "D"], ["E"]]
    assert topk_credit(groups, {"B"}, 1) == 1.0
    assert topk_credit(groups, {"A"}, 1) == 0.0
    assert topk_credit(groups, {"A"}, 2) == pytest.approx(1 / 3)      # 1 slot among 3 tied
    assert topk_credit(groups, {"A", "C"}, 2) == pytest.approx(2 / 3)  # 1 - C(1,1)/C(3,1)
    assert topk_credit(groups, {"A"}, 3) == pytest.approx(2 / 3)      # 2 slots among 3: 1 - C(2,2)/C(3,2)
    assert topk_credit(groups, {"E"}, 4) == 0.0
    assert topk_credit(groups, {"E"}, 5) == 1.0
    # A constant scorer earns exactly chance: top-1 of 10 with one gold = 0.1.
    assert topk_credit([list("ABCDEFGHIJ")], {"F"}, 1) == pytest.approx(0.1)
    assert topk_credit([list("ABCDEFGHIJ")], {"F"}, 3) == pytest.approx(0.3)


def test_sd_topk_multi_gold_ties_and_abstention():
    recs = [choice(1, ["C"], "sd"), choice(2, ["B", "J"], "sd"), choice(3, ["A"], "sd"), choice(4, ["A"], "sd")]
    preds = [
        {"answer": ["C"], "ranking": list("CABDEFGHIJ")},                                   # top1
        {"answer": ["A"], "ranking": list("AEJ") + list("BCDFGHI")},                        # J at 3: top3, top5
        {"answer": [], "ranking": list("ABCDEFGHIJ"), "scores": {k: 0.0 for k in "ABCDEFGHIJ"}},  # all tied: chance
        {"answer": ["A"], "ranking": list("ABCDEFGHIJ"), "abstained": True},                # abstained: ranking counts, answer not
        {"answer": [], "abstained": True},                                                  # no ranking: 0
    ]
    recs.append(choice(5, ["A"], "sd"))
    m = aggregate(recs, preds, n_resamples=0)
    assert m["top1"] == pytest.approx((1 + 0 + 0.1 + 1 + 0) / 5)
    assert m["top3"] == pytest.approx((1 + 1 + 0.3 + 1 + 0) / 5)
    assert m["top5"] == pytest.approx((1 + 1 + 0.5 + 1 + 0) / 5)
    assert m["accuracy"] == pytest.approx(1 / 5)
    assert m["abstain_rate"] == pytest.approx(2 / 5)


def test_tf_accuracy_and_abstentions():
    recs = [{"id": str(i), "task": "tf", "statement": "生姜性温", "answer": a} for i, a in enumerate([True, False, True, False])]
    preds = [{"answer": True}, {"answer": True}, {"answer": None, "abstained": True}, {"answer": False}]
    m = aggregate(recs, preds, n_resamples=0)
    assert (m["accuracy"], m["abstain_rate"]) == (0.5, 0.25)


def test_el_acc_at_1_abstain_retry_and_answered_accuracy():
    recs = [{"id": str(i), "task": "el", "mention": "apple", "gold_ids": ["FOODON:1", "FOODON:2"]} for i in range(5)]
    preds = [
        {"chosen_id": "FOODON:2", "abstained": False, "retried": False},
        {"chosen_id": "FOODON:9", "abstained": False, "retried": True},
        {"chosen_id": None, "abstained": True, "retried": True},
        {"chosen_id": "FOODON:1", "abstained": True, "retried": False},  # abstained: wrong even with a gold id
        {"chosen_id": "FOODON:1", "abstained": False, "retried": True},
    ]
    m = aggregate(recs, preds, n_resamples=0)
    assert m["acc_at_1"] == pytest.approx(2 / 5)
    assert m["abstain_rate"] == pytest.approx(2 / 5)
    assert m["retry_rate"] == pytest.approx(3 / 5)
    assert m["acc_at_1_answered"] == pytest.approx(2 / 3)
    all_abstain = aggregate(recs[:1], [{"chosen_id": None, "abstained": True}], n_resamples=0)
    assert all_abstain["acc_at_1"] == 0.0 and "acc_at_1_answered" not in all_abstain


def test_rec_hits_precision_recall_f1_micro_and_macro_with_empty_sets():
    cands = ["a", "b", "c", "d"]
    recs = [
        {"id": "1", "task": "rec", "query": "q", "candidates": cands, "gold": ["a", "b"]},
        {"id": "2", "task": "rec", "query": "q", "candidates": cands, "gold": ["c"]},
        {"id": "3", "task": "rec", "query": "q", "candidates": cands, "gold": []},
        {"id": "4", "task": "rec", "query": "q", "candidates": cands, "gold": ["d"]},
    ]
    preds = [
        {"ranking": ["a", "c", "b", "d"], "selected": ["a", "c", "b"]},        # hit; tp 2 / sel 3 / gold 2
        {"ranking": ["a", "b", "c", "d"], "scores": {"a": 1, "b": 1, "c": 1, "d": 0}, "selected": []},  # c tied 1 of 3; nothing selected
        {"ranking": ["a", "b", "c", "d"], "selected": []},                       # empty gold, empty selection: perfect, not in hits
        {"ranking": ["d"], "selected": ["d", "zz"], "abstained": True},         # abstained: nothing selected; ranking still hits
    ]
    m = aggregate(recs, preds, n_resamples=0)
    assert m["hits_at_1"] == pytest.approx((1 + 1 / 3 + 1) / 3)  # over the 3 records with gold
    assert m["precision"] == pytest.approx(2 / 3)                # 2 TP / 3 selected
    assert m["recall"] == pytest.approx(2 / 4)                   # 2 TP / 4 gold
    assert m["f1"] == pytest.approx(2 * (2 / 3) * 0.5 / (2 / 3 + 0.5))
    f1_1 = 2 * (2 / 3) * 1.0 / (2 / 3 + 1.0)
    assert m["f1_macro"] == pytest.approx((f1_1 + 0 + 1 + 0) / 4)
    assert m["precision_macro"] == pytest.approx((2 / 3 + 0 + 1 + 0) / 4)
    nothing = aggregate(recs[1:2], [{"ranking": [], "selected": []}], n_resamples=0)
    assert (nothing["precision"], nothing["recall"], nothing["f1"], nothing["hits_at_1"]) == (0.0, 0.0, 0.0, 0.0)


def test_evidence_contains_gold_proxy():
    rec = choice(1, ["B"])
    rec["options"] = {"A": "墨子", "B": "孔子"}
    assert evidence_contains_gold(rec, "《论语·乡党》记载孔子“割不正，不食”。")
    assert not evidence_contains_gold(rec, "墨子主张节用。")
    assert evidence_contains_gold({**rec, "options": {"A": "x", "B": "生薑"}}, "生姜味辛")  # traditional/simplified fold
    tf = {"id": "t", "task": "tf", "statement": "生姜味辛，性温。", "answer": True}
    assert evidence_contains_gold(tf, "生姜：味辛，微温。")       # 生姜 味 辛 of 生姜 味 辛 性 温
    assert not evidence_contains_gold(tf, "甘草味甘。")
    assert not evidence_contains_gold(rec, "")
    recs = [rec, rec, rec]
    m = aggregate(recs, [{"answer": ["B"]}] * 3, [True, False, None], n_resamples=0)
    assert m["evidence_contains_gold"] == 0.5  # over records with evidence
    only_ev = aggregate(recs, [None] * 3, [True, True, False], answers=False, n_resamples=0)
    assert set(only_ev) == {"task", "n", "evidence_contains_gold"}


def test_bootstrap_intervals_are_seeded_and_bracket_the_value():
    recs = [choice(i, ["A"]) for i in range(40)]
    preds = [{"answer": ["A"] if i % 4 else ["B"]} for i in range(40)]
    m1 = aggregate(recs, preds, n_resamples=500, seed=7)
    m2 = aggregate(recs, preds, n_resamples=500, seed=7)
    assert m1["ci95"] == m2["ci95"]
    # Same as a percentile bootstrap by hand with numpy's seeded generator.
    v = np.array([1.0 if i % 4 else 0.0 for i in range(40)])
    idx = np.random.default_rng(7).integers(0, 40, size=(500, 40))
    ref = np.percentile(v[idx].mean(axis=1), [2.5, 97.5])
    assert m1["ci95"]["accuracy"] == pytest.approx(list(ref))
    lo, hi = m1["ci95"]["accuracy"]
    assert lo < m1["accuracy"] == 0.75 < hi and 0.5 < lo and hi < 0.95
    assert m1["ci95"]["abstain_rate"] == [0.0, 0.0]


def test_breakdown_by_source():
    recs = [choice(1, ["A"], source="X"), choice(2, ["A"], source="X"), choice(3, ["A"], source="Y")]
    m = aggregate(recs, [{"answer": ["A"]}, {"answer": ["B"]}, {"answer": ["A"]}], n_resamples=0)
    assert m["by_source"]["X"]["n"] == 2 and m["by_source"]["X"]["accuracy"] == 0.5
    assert m["by_source"]["Y"]["accuracy"] == 1.0
    assert "by_source" not in aggregate(recs[:2], [{"answer": ["A"]}] * 2, n_resamples=0)


def test_free_text_bleu_and_chrf_with_sacrebleu():
    recs = [{"id": "1", "task": "qa", "question": "生姜的性味？", "answer": "味辛，性微温。", "lang": "zh"},
            {"id": "2", "task": "qa", "question": "甘草？", "answer": "味甘，性平。", "lang": "zh"}]
    perfect = aggregate(recs, [{"text": r["answer"]} for r in recs], n_resamples=0)
    assert perfect["bleu"] == pytest.approx(100.0) and perfect["chrf"] == pytest.approx(100.0)
    empty = aggregate(recs, [{"text": ""}, None], n_resamples=0)
    assert empty["bleu"] == 0.0 and empty["chrf"] == 0.0 and empty["abstain_rate"] == 1.0


def test_evidence_holds_gold_parts_reads_list_options_and_syndromes_leniently():
    """A list option is held item by item, a syndrome without its 证/证型; never below the strict metric."""
    from bencao.evaluation.metrics import aggregate, evidence_contains_gold, evidence_holds_gold_parts, gold_parts

    assert gold_parts("肾俞、太溪") == ["肾俞", "太溪"] and gold_parts("脾胃虚寒证") == ["脾胃虚寒"]
    assert gold_parts("和胃降逆") == ["和胃降逆"] and gold_parts("寒证") == ["寒证"]  # no split inside a term; no 1-character item
    recs = [{"id": "a", "task": "mcq", "options": {"A": "肾俞、太溪", "B": "关元"}, "answer": ["A"]},
            {"id": "b", "task": "mcq", "options": {"A": "脾胃虚寒证", "B": "肝郁气滞证"}, "answer": ["A"]},
            {"id": "c", "task": "mcq", "options": {"A": "肾俞、太溪", "B": "关元"}, "answer": ["A"]}]
    texts = ["针太溪，灸肾俞。", "此乃脾胃虚寒，宜温中。", "针太溪。"]
    strict = [evidence_contains_gold(r, t) for r, t in zip(recs, texts)]
    parts = [evidence_holds_gold_parts(r, t) for r, t in zip(recs, texts)]
    assert strict == [False, False, False] and parts == [True, True, False]
    assert evidence_holds_gold_parts({"id": "t", "task": "tf", "statement": "x", "answer": True}, "x") is None
    m = aggregate(recs, [None] * 3, strict, evidence_parts=parts, answers=False, n_resamples=0)
    assert m["evidence_contains_gold"] == 0.0 and m["evidence_holds_gold_parts"] == pytest.approx(2 / 3)
