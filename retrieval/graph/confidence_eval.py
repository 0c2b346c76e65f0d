"""unKR-style evaluation of the UKGE model on a held-out split of a graph's triples.

A seeded ``test_fraction`` of the observed triples is held out; the model is trained on the rest.
Test triples whose head, tail or relation never occur in the training part cannot be scored by any
embedding model and are counted, then left out. Reported:

- confidence prediction: MSE and MAE of the model's score against the stored confidence, next to
  two baselines (the training mean; the per-relation training mean);
- link prediction, filtered: for each test triple the tail (and the head) is ranked against every
  modelled entity, after removing the other true answers (training and test triples); ties count
  half (rank = 1 + #higher + #tied/2). Hits@1/3/10 and MRR, averaged over head and tail queries,
  also type-constrained (candidates of the entity types the relation has at that end in
  training), next to a frequency baseline (rank by how often an entity closes the relation in
  training).
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import asdict
from typing import Any

import numpy as np

from bencao.errors import BencaoError
from bencao.retrieval.graph.confidence import OBSERVED_LAYERS, ProgressFn, TripleData, UKGEConfig, load_triples, train_ukge


def split_holdout(data: TripleData, test_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray, int]:
    """(train rows, usable test rows, test rows dropped for unseen entities/relations)."""
    if not 0.0 < test_fraction < 1.0:
        raise BencaoError(f"test_fraction={test_fraction} must lie strictly between 0 and 1")
    perm = np.random.default_rng(seed).permutation(len(data))
    n_test = max(1, int(round(test_fraction * len(data))))
    test, train = perm[:n_test], perm[n_test:]
    tr = data.triples[train]
    seen_e = np.zeros(len(data.entities), dtype=bool)
    seen_e[tr[:, 0]] = True
    seen_e[tr[:, 2]] = True
    seen_r = np.zeros(len(data.relations), dtype=bool)
    seen_r[tr[:, 1]] = True
    te = data.triples[test]
    ok = seen_e[te[:, 0]] & seen_e[te[:, 2]] & seen_r[te[:, 1]]
    return np.sort(train), np.sort(test[ok]), int((~ok).sum())


def _ranks(scores: np.ndarray, true_idx: np.ndarray, filters: list[list[int]], allowed: np.ndarray | None = None) -> np.ndarray:
    """Filtered realistic ranks of ``true_idx`` in each row of ``scores``; ``allowed`` (rows × entities,
    bool) restricts the candidates (type-constrained ranking)."""
    out = np.empty(len(true_idx), dtype=np.float64)
    for i, (row, t) in enumerate(zip(scores, true_idx)):
        s = row.astype(np.float64, copy=True)
        target = s[t]
        if allowed is not None:
            s[~allowed[i]] = -np.inf
            s[t] = target
        others = [f for f in filters[i] if f != t]
        if others:
            s[others] = -np.inf
        higher = int((s > target).sum())
        tied = int((s == target).sum()) - 1
        out[i] = 1 + higher + tied / 2
    return out


def _metrics(ranks: np.ndarray) -> dict[str, float]:
    return {"mrr": float(np.mean(1.0 / ranks)), "hits@1": float(np.mean(ranks <= 1)), "hits@3": float(np.mean(ranks <= 3)),
            "hits@10": float(np.mean(ranks <= 10)), "mean_rank": float(np.mean(ranks))}


def holdout_evaluation(g: Any, cfg: UKGEConfig, *, layers: list[str] | tuple[str, ...] = OBSERVED_LAYERS, test_fraction: float = 0.1,
                       split_seed: int = 0, batch: int = 256, progress: ProgressFn | None = None) -> dict[str, Any]:
    """Train on (1 - test_fraction) of the graph's triples and measure the rest; returns a report."""
    import torch

    data = load_triples(g, layers)
    train_rows, test_rows, dropped = split_holdout(data, test_fraction, split_seed)
    if len(test_rows) == 0:
        raise BencaoError("no test triple has both entities in the training part; the graph is too sparse to evaluate")
    train = data.subset(train_rows)
    t0 = time.perf_counter()
    model = train_ukge(train, cfg, progress)
    train_s = time.perf_counter() - t0
    test = data.subset(test_rows)

    # -- confidence prediction
    pred = model.score_index(test.triples)
    err = pred - test.targets
    mean_all = float(train.targets.mean())
    rel_mean = defaultdict(lambda: mean_all, {r: float(train.targets[train.triples[:, 1] == r].mean()) for r in np.unique(train.triples[:, 1])})
    base_rel = np.array([rel_mean[r] for r in test.triples[:, 1]])
    confidence = {
        "mse": float(np.mean(err ** 2)), "mae": float(np.mean(np.abs(err))),
        "baseline_mean": {"mse": float(np.mean((mean_all - test.targets) ** 2)), "mae": float(np.mean(np.abs(mean_all - test.targets)))},
        "baseline_relation_mean": {"mse": float(np.mean((base_rel - test.targets) ** 2)), "mae": float(np.mean(np.abs(base_rel - test.targets)))},
    }

    # -- link prediction (filtered), heads and tails against every modelled entity
    tails_of: dict[tuple[int, int], list[int]] = defaultdict(list)
    heads_of: dict[tuple[int, int], list[int]] = defaultdict(list)
    for h, r, t in data.triples:
        tails_of[(h, r)].append(t)
        heads_of[(r, t)].append(h)
    n_ent = len(data.entities)
    # frequency baseline: how often an entity closes (tail) or opens (head) the relation in training
    freq_tail = np.zeros((len(data.relations), n_ent))
    freq_head = np.zeros((len(data.relations), n_ent))
    np.add.at(freq_tail, (train.triples[:, 1], train.triples[:, 2]), 1.0)
    np.add.at(freq_head, (train.triples[:, 1], train.triples[:, 0]), 1.0)
    all_e = torch.arange(n_ent)
    # type constraint: entity types seen at the relation's tail (head) in training
    type_names = sorted(set(data.entity_types))
    ent_type = np.array([type_names.index(x) for x in data.entity_types])
    tail_ok = np.zeros((len(data.relations), len(type_names)), dtype=bool)
    head_ok = np.zeros((len(data.relations), len(type_names)), dtype=bool)
    tail_ok[train.triples[:, 1], ent_type[train.triples[:, 2]]] = True
    head_ok[train.triples[:, 1], ent_type[train.triples[:, 0]]] = True
    ranks_t, ranks_h, base_t, base_h, typed_t, typed_h = [], [], [], [], [], []
    tr = test.triples
    for i in range(0, len(tr), batch):
        b = tr[i:i + batch]
        h, r, t = (torch.as_tensor(b[:, k]) for k in range(3))
        with torch.no_grad():
            st = model.module.score_tails(h, r, all_e).numpy()
            sh = model.module.score_heads(all_e, r, t).numpy()
        ft = [tails_of[(x[0], x[1])] for x in b]
        fh = [heads_of[(x[1], x[2])] for x in b]
        ranks_t.append(_ranks(st, b[:, 2], ft))
        ranks_h.append(_ranks(sh, b[:, 0], fh))
        typed_t.append(_ranks(st, b[:, 2], ft, tail_ok[b[:, 1]][:, ent_type]))
        typed_h.append(_ranks(sh, b[:, 0], fh, head_ok[b[:, 1]][:, ent_type]))
        base_t.append(_ranks(freq_tail[b[:, 1]], b[:, 2], ft))
        base_h.append(_ranks(freq_head[b[:, 1]], b[:, 0], fh))
    rt, rh = np.concatenate(ranks_t), np.concatenate(ranks_h)
    bt_, bh_ = np.concatenate(base_t), np.concatenate(base_h)
    link = {"tail": _metrics(rt), "head": _metrics(rh), "both": _metrics(np.concatenate([rt, rh])),
            "both_type_constrained": _metrics(np.concatenate([*typed_t, *typed_h])),
            "baseline_frequency": _metrics(np.concatenate([bt_, bh_]))}
    by_relation = {}
    for r_idx, name in enumerate(data.relations):
        m = tr[:, 1] == r_idx
        if m.any():
            by_relation[name] = {"test": int(m.sum()), "mse": float(np.mean(err[m] ** 2)),
                                 **{k: v for k, v in _metrics(np.concatenate([rt[m], rh[m]])).items() if k in ("mrr", "hits@1", "hits@10")}}
    return {
        "triples": len(data), "entities": n_ent, "relations": len(data.relations), "train": len(train_rows), "test": len(test_rows),
        "test_dropped_unseen": dropped, "test_fraction": test_fraction, "split_seed": split_seed, "layers": list(layers),
        "model": asdict(cfg), "train_seconds": round(train_s, 1), "loss_first": model.history[0], "loss_last": model.history[-1],
        "confidence": confidence, "link_prediction": link, "by_relation": by_relation,
    }

