"""Triple confidence for an uncertain knowledge graph: a UKGE model plus heterogeneous evidence.

UKGE (Chen et al., 2019) learns entity and relation embeddings whose DistMult plausibility
``p = Σ h ⊙ r ⊙ t`` is mapped to a confidence by a logistic (``sigmoid(w·p + b)``) or bounded
rectifier (``clamp(w·p + b, 0, 1)``) function. It is trained as a regression: observed triples
towards their stored confidence, sampled corruptions towards 0.

The final confidence of a triple pools, in log-odds, the model's plausibility with evidence the
store already holds in ``triple_sources`` (see :class:`SupportWeights`)::

    logit(final) = w_model·logit(model) + w_prior·logit(prior)
                 + w_support·ln(n_support) + w_curated·[curated] + w_agreement·(n_origins − 1) + bias

The per-source confidences in ``triple_sources`` are never changed; only ``triples.confidence`` is,
and the components and the previous value are written to ``triples.attributes["confidence"]`` so
every number is explainable and :func:`reset_confidences` can undo it.

The trained model lives with the graph: ``<graph>/ukge/model.pt`` (weights + vocabularies) and
``<graph>/ukge/config.json`` (hyper-parameters, loss history, when and on what it was trained).
"""

from __future__ import annotations

import datetime as _dt
import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Literal

import numpy as np

from bencao.config import field
from bencao.errors import BencaoError
from bencao.io import atomic_path, atomic_write_json

MODEL_DIR = "ukge"
MODEL_FILE = "model.pt"
CONFIG_FILE = "config.json"
#: Layers whose triples are evidence of the world (completed triples are the model's own output).
OBSERVED_LAYERS = ("book", "personal", "imported")
#: Entity count from which sparse gradients pay off (measured: 10× faster steps at 20 k entities, slower on tiny graphs).
SPARSE_FROM = 5000


# --------------------------------------------------------------------------- configs


@dataclass
class UKGEConfig:
    dim: int = field(32, help="Embedding dimension of entities and relations.")
    score: str = field("logistic", help="Map from plausibility to confidence: logistic | rectifier (see SCORE_MAPS).")
    epochs: int = field(15, help="Passes over the observed triples (the sample graph's loss flattens after ~15).")
    batch_size: int = field(1024, help="Positive triples per optimisation step.")
    lr: float = field(0.01, help="Adam learning rate.")
    negatives: int = field(1, help="Corrupted triples sampled per positive (head or tail replaced), target confidence 0.")
    negative_weight: float = field(0.1, help="Weight of the negatives' squared error relative to the positives' (low: unseen is not false; 1.0 cost held-out MSE 0.71 vs 0.12 on the sample).")
    corrupt: Literal["mixed", "typed", "uniform"] = field("mixed", help="typed: replace an entity by one of the same type (hard negatives); uniform: by any entity (teaches types); mixed: a coin flip per negative.")
    l2: float = field(1e-3, help="L2 penalty on the embeddings used in a step.")
    seed: int = field(0, help="Seed for initialisation, shuffling and negative sampling.")
    sparse: bool | None = field(None, help="Sparse embedding gradients with SparseAdam (each step touches only the rows it used); empty = on from 5,000 entities.")


@dataclass
class SupportWeights:
    model: float = field(0.5, help="Weight of logit(UKGE score).")
    prior: float = field(0.5, help="Weight of logit(prior): the store's confidence, the max over the triple's sources.")
    support: float = field(0.4, help="Weight of ln(n_support): independent supports = distinct snippets + distinct documents with snippet-less rows.")
    curated: float = field(1.0, help="Added to the log-odds when a source is curated (kind in curated_kinds: ontology, catalogue, rated CSV edge).")
    agreement: float = field(0.4, help="Weight of (n_origins - 1): distinct extractors/runs that produced the triple.")
    bias: float = field(0.0, help="Constant added to the log-odds.")
    curated_kinds: list[str] = field(default_factory=lambda: ["record"], help="triple_sources.kind values that count as curated.")
    eps: float = field(1e-3, help="Confidences are clipped to [eps, 1-eps] before taking logits.")


@dataclass
class ConfidenceConfig:
    model: UKGEConfig = field(default_factory=UKGEConfig, help="UKGE model and training.")
    evidence: SupportWeights = field(default_factory=SupportWeights, help="Weights that combine the model with the store's evidence.")
    layers: list[str] = field(default_factory=lambda: list(OBSERVED_LAYERS), help="Layers whose triples are trained on and re-scored.")
    reuse_model: bool = field(False, help="Use the model saved with the graph instead of training a new one (e.g. after changing evidence weights).")


# --------------------------------------------------------------------------- score maps (registry)


def _logistic(x: "Any") -> "Any":
    import torch

    return torch.sigmoid(x)


def _rectifier(x: "Any") -> "Any":
    import torch

    return torch.clamp(x, 0.0, 1.0)


#: name → map from the affine-transformed plausibility to [0, 1] (UKGE_logi, UKGE_rect).
SCORE_MAPS: dict[str, Callable[[Any], Any]] = {"logistic": _logistic, "rectifier": _rectifier}


def _score_map(name: str) -> Callable[[Any], Any]:
    try:
        return SCORE_MAPS[name]
    except KeyError:
        raise BencaoError(f"model.score={name!r} is not one of {', '.join(SCORE_MAPS)}") from None


# --------------------------------------------------------------------------- data


@dataclass
class TripleData:
    """Observed triples as index arrays, with the vocabularies that map them back to graph ids."""

    entities: list[str]              # entity ids; index = position
    entity_types: list[str]          # type of each entity
    relations: list[str]             # relation names
    triples: np.ndarray              # (N, 3) int64: head, relation, tail indexes
    targets: np.ndarray              # (N,) float64: the store's confidence (max over sources)
    triple_ids: list[str]            # graph triple id of each row

    def __len__(self) -> int:
        return len(self.triple_ids)

    def subset(self, rows: np.ndarray) -> "TripleData":
        return TripleData(self.entities, self.entity_types, self.relations, self.triples[rows], self.targets[rows],
                          [self.triple_ids[i] for i in rows])


def load_triples(g: Any, layers: list[str] | tuple[str, ...] = OBSERVED_LAYERS) -> TripleData:
    """Read the graph's triples of ``layers`` with their prior confidence (max over their sources).

    The prior is recomputed from ``triple_sources`` so a calibrated ``triples.confidence`` is never
    fed back as a target: re-running the calibration gives the same result.
    """
    if not layers:
        raise BencaoError("layers is empty: choose which triple layers to train on (e.g. book, personal, imported)")
    q = ",".join("?" * len(layers))
    rows = g.conn.execute(
        f"SELECT t.id, t.head_id, t.relation, t.tail_id, h.type, x.type, "
        f"COALESCE((SELECT MAX(ts.confidence) FROM triple_sources ts WHERE ts.triple_id = t.id), t.confidence) "
        f"FROM triples t JOIN entities h ON h.id = t.head_id JOIN entities x ON x.id = t.tail_id "
        f"WHERE t.layer IN ({q}) ORDER BY t.rowid", list(layers)).fetchall()
    if not rows:
        raise BencaoError(f"{g.dir}: no triples in layers {', '.join(layers)} to learn confidences from")
    ent_index: dict[str, int] = {}
    ent_types: list[str] = []
    rel_index: dict[str, int] = {}
    arr = np.empty((len(rows), 3), dtype=np.int64)
    targets = np.empty(len(rows), dtype=np.float64)
    for i, (tid, h, r, t, ht, tt, conf) in enumerate(rows):
        for eid, et in ((h, ht), (t, tt)):
            if eid not in ent_index:
                ent_index[eid] = len(ent_index)
                ent_types.append(et)
        arr[i] = (ent_index[h], rel_index.setdefault(r, len(rel_index)), ent_index[t])
        targets[i] = conf
    return TripleData(list(ent_index), ent_types, list(rel_index), arr, targets, [r[0] for r in rows])


# --------------------------------------------------------------------------- model


def _module_class() -> type:
    import torch
    from torch import nn

    class UKGEModule(nn.Module):
        """Entity/relation embeddings; confidence = score_map(w · Σ h⊙r⊙t + b)."""

        def __init__(self, n_entities: int, n_relations: int, dim: int, score: str, generator: torch.Generator | None = None,
                     sparse: bool = False):
            super().__init__()
            self.score_name = score
            self.map = _score_map(score)
            # sparse gradients: a step updates only the rows it used (SparseAdam), not all entities
            self.ent = nn.Embedding(n_entities, dim, sparse=sparse)
            self.rel = nn.Embedding(n_relations, dim, sparse=sparse)
            nn.init.xavier_uniform_(self.ent.weight, generator=generator)
            nn.init.xavier_uniform_(self.rel.weight, generator=generator)
            self.w = nn.Parameter(torch.tensor(1.0))
            self.b = nn.Parameter(torch.tensor(0.0))

        def plausibility(self, h: torch.Tensor, r: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
            return (self.ent(h) * self.rel(r) * self.ent(t)).sum(-1)

        def forward(self, h: torch.Tensor, r: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
            return self.map(self.w * self.plausibility(h, r, t) + self.b)

        def score_tails(self, h: torch.Tensor, r: torch.Tensor, candidates: torch.Tensor) -> torch.Tensor:
            """(len(h), len(candidates)) confidences of (h[i], r[i], candidates[j])."""
            q = self.ent(h) * self.rel(r)
            return self.map(self.w * (q @ self.ent(candidates).T) + self.b)

        def score_heads(self, candidates: torch.Tensor, r: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
            """(len(t), len(candidates)) confidences of (candidates[j], r[i], t[i])."""
            q = self.rel(r) * self.ent(t)
            return self.map(self.w * (q @ self.ent(candidates).T) + self.b)

    return UKGEModule


class UKGE:
    """A trained UKGE model with the vocabularies that tie it to graph ids."""

    def __init__(self, module: Any, entities: list[str], entity_types: list[str], relations: list[str], config: UKGEConfig,
                 history: list[float] | None = None):
        self.module = module
        self.entities = entities
        self.entity_types = entity_types
        self.relations = relations
        self.config = config
        self.history = list(history or [])
        self.entity_index = {e: i for i, e in enumerate(entities)}
        self.relation_index = {r: i for i, r in enumerate(relations)}

    # -- scoring
    def score(self, triples: list[tuple[str, str, str]]) -> np.ndarray:
        """Confidence of (head_id, relation, tail_id) triples; NaN where an entity/relation is unknown to the model."""
        import torch

        out = np.full(len(triples), np.nan, dtype=np.float32)
        rows = [(i, self.entity_index.get(h), self.relation_index.get(r), self.entity_index.get(t)) for i, (h, r, t) in enumerate(triples)]
        rows = [x for x in rows if None not in x]
        if rows:
            idx = torch.tensor([x[1:] for x in rows], dtype=torch.long)
            with torch.no_grad():
                vals = self.module(idx[:, 0], idx[:, 1], idx[:, 2]).numpy()
            out[[x[0] for x in rows]] = vals
        return out

    def score_index(self, triples: np.ndarray, batch: int = 65536) -> np.ndarray:
        import torch

        self.module.eval()
        parts = []
        with torch.no_grad():
            for i in range(0, len(triples), batch):
                x = torch.as_tensor(triples[i:i + batch], dtype=torch.long)
                parts.append(self.module(x[:, 0], x[:, 1], x[:, 2]).numpy())
        return np.concatenate(parts) if parts else np.empty(0, dtype=np.float32)

    # -- persistence
    def save(self, graph_dir: str | Path, extra: dict[str, Any] | None = None) -> Path:
        """Write ``<graph>/ukge/model.pt`` and ``config.json`` atomically; returns the model path."""
        import torch

        d = Path(graph_dir) / MODEL_DIR
        d.mkdir(parents=True, exist_ok=True)
        payload = {"state_dict": self.module.state_dict(), "entities": self.entities, "entity_types": self.entity_types,
                   "relations": self.relations, "config": asdict(self.config)}
        with atomic_path(d / MODEL_FILE) as tmp:
            torch.save(payload, tmp)
        meta = {"model": asdict(self.config), "entities": len(self.entities), "relations": len(self.relations),
                "loss_history": [round(x, 6) for x in self.history], "saved_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                **(extra or {})}
        atomic_write_json(d / CONFIG_FILE, meta)
        return d / MODEL_FILE

    @classmethod
    def load(cls, graph_dir: str | Path) -> "UKGE":
        import torch

        from bencao.config import from_dict

        path = Path(graph_dir) / MODEL_DIR / MODEL_FILE
        if not path.exists():
            raise BencaoError(f"{path}: no UKGE model saved with this graph; train one with `bencao graph confidence --graph {graph_dir}`")
        payload = torch.load(path, map_location="cpu", weights_only=True)
        cfg = from_dict(UKGEConfig, payload["config"], where=str(path))
        module = _module_class()(len(payload["entities"]), len(payload["relations"]), cfg.dim, cfg.score)
        module.load_state_dict(payload["state_dict"])
        module.eval()
        hist = []
        meta_path = path.with_name(CONFIG_FILE)
        if meta_path.exists():
            hist = json.loads(meta_path.read_text(encoding="utf-8")).get("loss_history", [])
        return cls(module, list(payload["entities"]), list(payload["entity_types"]), list(payload["relations"]), cfg, hist)

    @staticmethod
    def model_hash(graph_dir: str | Path) -> str:
        from bencao.io import file_hash

        return file_hash(Path(graph_dir) / MODEL_DIR / MODEL_FILE)


ProgressFn = Callable[[int, int, float], None]


def train_ukge(data: TripleData, cfg: UKGEConfig, progress: ProgressFn | None = None, known: np.ndarray | None = None) -> UKGE:
    """Train UKGE on ``data``; ``progress(epoch, epochs, mean_loss)`` after each epoch.

    Corruptions that are themselves observed triples (of ``data`` or of ``known``, an (M, 3) index
    array of further true triples) are dropped, never pushed towards 0.
    """
    import torch

    if cfg.epochs < 1 or cfg.batch_size < 1 or cfg.dim < 1 or cfg.negatives < 0:
        raise BencaoError("model.epochs, model.batch_size and model.dim must be ≥ 1 and model.negatives ≥ 0")
    gen = torch.Generator().manual_seed(cfg.seed)
    n_ent, n_rel = len(data.entities), len(data.relations)
    sparse = cfg.sparse if cfg.sparse is not None else n_ent >= SPARSE_FROM
    module = _module_class()(n_ent, n_rel, cfg.dim, cfg.score, generator=gen, sparse=sparse)
    emb_opt = (torch.optim.SparseAdam if sparse else torch.optim.Adam)([module.ent.weight, module.rel.weight], lr=cfg.lr)
    dense_opt = torch.optim.Adam([module.w, module.b], lr=cfg.lr)

    pos = torch.as_tensor(data.triples, dtype=torch.long)
    tgt = torch.as_tensor(data.targets, dtype=torch.float32)
    true_keys = _keys(pos, n_rel, n_ent)
    if known is not None and len(known):
        true_keys = torch.cat([true_keys, _keys(torch.as_tensor(known, dtype=torch.long), n_rel, n_ent)])
    true_keys = torch.unique(true_keys)
    sampler = _NegativeSampler(data.entity_types, cfg.corrupt, gen)

    history: list[float] = []
    n = len(pos)
    for epoch in range(cfg.epochs):
        module.train()
        perm = torch.randperm(n, generator=gen)
        total, steps = 0.0, 0
        for i in range(0, n, cfg.batch_size):
            b = perm[i:i + cfg.batch_size]
            h, r, t = pos[b, 0], pos[b, 1], pos[b, 2]
            loss = ((module(h, r, t) - tgt[b]) ** 2).mean()
            used = [h, t]
            if cfg.negatives:
                nh, nr, nt = sampler.corrupt(h.repeat(cfg.negatives), r.repeat(cfg.negatives), t.repeat(cfg.negatives))
                keep = ~_contains(true_keys, _keys(torch.stack([nh, nr, nt], 1), n_rel, n_ent))
                if keep.any():
                    loss = loss + cfg.negative_weight * (module(nh[keep], nr[keep], nt[keep]) ** 2).mean()
                used += [nh[keep], nt[keep]]
            if cfg.l2:
                e = module.ent(torch.cat(used))
                loss = loss + cfg.l2 * ((e ** 2).sum(-1).mean() + (module.rel(r) ** 2).sum(-1).mean())
            emb_opt.zero_grad()
            dense_opt.zero_grad()
            loss.backward()
            emb_opt.step()
            dense_opt.step()
            total += loss.item()
            steps += 1
        history.append(total / max(steps, 1))
        if progress:
            progress(epoch + 1, cfg.epochs, history[-1])
    module.eval()
    return UKGE(module, data.entities, data.entity_types, data.relations, cfg, history)


def _keys(x: Any, n_rel: int, n_ent: int) -> Any:
    return (x[:, 0] * n_rel + x[:, 1]) * n_ent + x[:, 2]


def _contains(sorted_keys: Any, query: Any) -> Any:
    """Membership of ``query`` in the sorted unique ``sorted_keys`` (binary search)."""
    import torch

    pos = torch.searchsorted(sorted_keys, query).clamp_max(len(sorted_keys) - 1)
    return sorted_keys[pos] == query


class _NegativeSampler:
    """Replace the head or the tail (coin flip) by a random entity: of the same type, any, or either."""

    def __init__(self, entity_types: list[str], mode: str, gen: Any):
        import torch

        self.gen = gen
        self.n = len(entity_types)
        self.mode = mode
        names = sorted(set(entity_types))
        tix = torch.tensor([names.index(t) for t in entity_types]) if names else torch.zeros(0, dtype=torch.long)
        order = torch.argsort(tix, stable=True)
        self.sorted_entities = order
        counts = torch.bincount(tix, minlength=len(names))
        self.type_of = tix
        self.type_size = counts
        self.type_start = torch.cumsum(counts, 0) - counts

    def _sample_like(self, ents: Any) -> Any:
        import torch

        u = torch.rand(len(ents), generator=self.gen)
        uniform = (u * self.n).long().clamp_max(self.n - 1)
        if self.mode == "uniform":
            return uniform
        ty = self.type_of[ents]
        off = (u * self.type_size[ty]).long().clamp_max(self.type_size[ty] - 1)
        typed = self.sorted_entities[self.type_start[ty] + off]
        if self.mode == "typed":
            return typed
        return torch.where(torch.rand(len(ents), generator=self.gen) < 0.5, typed, uniform)

    def corrupt(self, h: Any, r: Any, t: Any) -> tuple[Any, Any, Any]:
        import torch

        head = torch.rand(len(h), generator=self.gen) < 0.5
        nh = torch.where(head, self._sample_like(h), h)
        nt = torch.where(head, t, self._sample_like(t))
        return nh, r, nt


# --------------------------------------------------------------------------- evidence


@dataclass
class TripleSupport:
    prior: float          # max source confidence
    n_support: int        # distinct snippets + distinct documents with snippet-less rows
    n_documents: int
    curated: bool
    n_origins: int


def gather_evidence(g: Any, triple_ids: list[str], curated_kinds: list[str]) -> dict[str, TripleSupport]:
    """Summarise each triple's ``triple_sources`` rows (read only)."""
    out: dict[str, TripleSupport] = {}
    kinds = set(curated_kinds)
    rows = g.conn.execute(
        "SELECT triple_id, MAX(confidence), COUNT(DISTINCT snippet_id), "
        "COUNT(DISTINCT CASE WHEN snippet_id IS NULL THEN document_id END), COUNT(DISTINCT document_id), "
        "GROUP_CONCAT(DISTINCT kind), COUNT(DISTINCT origin) FROM triple_sources GROUP BY triple_id")
    wanted = set(triple_ids)
    for tid, prior, n_snip, n_rec_docs, n_docs, kind_list, n_orig in rows:
        if tid in wanted:
            ks = set((kind_list or "").split(","))
            out[tid] = TripleSupport(float(prior), int(n_snip) + int(n_rec_docs), int(n_docs), bool(ks & kinds), int(n_orig))
    return out


def _logit(p: float, eps: float) -> float:
    p = min(max(p, eps), 1.0 - eps)
    return math.log(p / (1.0 - p))


def combine(model_score: float, ev: TripleSupport, cfg: SupportWeights) -> dict[str, float]:
    """Pool the model's score and the stored evidence in log-odds; returns the final value and each term."""
    terms = {
        "model": cfg.model * _logit(model_score, cfg.eps),
        "prior": cfg.prior * _logit(ev.prior, cfg.eps),
        "support": cfg.support * math.log(max(ev.n_support, 1)),
        "curated": cfg.curated if ev.curated else 0.0,
        "agreement": cfg.agreement * max(ev.n_origins - 1, 0),
        "bias": cfg.bias,
    }
    z = sum(terms.values())
    final = 1.0 / (1.0 + math.exp(-z)) if z > -700 else 0.0
    return {"final": final, "logit": z, **{f"w_{k}": v for k, v in terms.items()}}


# --------------------------------------------------------------------------- the whole step


def calibrate_graph(g: Any, cfg: ConfidenceConfig, progress: ProgressFn | None = None) -> dict[str, Any]:
    """Train (or load) UKGE on the graph, combine it with the evidence and update ``triples.confidence``.

    One transaction: an interrupted run leaves the graph as it was. Returns a summary.
    """
    data = load_triples(g, cfg.layers)
    if cfg.reuse_model:
        model = UKGE.load(g.dir)
    else:
        model = train_ukge(data, cfg.model, progress)
        model.save(g.dir, extra={"layers": cfg.layers, "triples": len(data), "graph": str(g.dir)})
    triples = [(data.entities[h], data.relations[r], data.entities[t]) for h, r, t in data.triples]
    scores = model.score(triples)
    evidence = gather_evidence(g, data.triple_ids, cfg.evidence.curated_kinds)
    model_hash = UKGE.model_hash(g.dir)
    current = {r[0]: (r[1], r[2]) for r in g.conn.execute(
        "SELECT id, confidence, attributes FROM triples WHERE id IN (SELECT value FROM json_each(?))", (json.dumps(data.triple_ids),))}
    updates = []
    before, after, unscored = [], [], 0
    for tid, s, target in zip(data.triple_ids, scores, data.targets):
        conf, attrs_json = current[tid]
        ev = evidence.get(tid) or TripleSupport(float(target), 1, 1, False, 1)
        if np.isnan(s):  # a reused model that has not seen this triple's entities: evidence only
            unscored += 1
            s_val = None
            parts = combine(0.5, ev, SupportWeights(**{**asdict(cfg.evidence), "model": 0.0}))
        else:
            s_val = float(s)
            parts = combine(s_val, ev, cfg.evidence)
        attrs = json.loads(attrs_json or "{}")
        prev_block = attrs.get("confidence") if isinstance(attrs.get("confidence"), dict) else {}
        original = prev_block.get("original", float(target))
        attrs["confidence"] = {
            "original": original, "previous": conf, "final": round(parts["final"], 6), "model": None if s_val is None else round(s_val, 6),
            "prior": ev.prior, "n_support": ev.n_support, "n_documents": ev.n_documents, "curated": ev.curated, "n_origins": ev.n_origins,
            "terms": {k[2:]: round(v, 4) for k, v in parts.items() if k.startswith("w_")}, "method": f"ukge-{model.config.score}",
            "model_hash": model_hash,
        }
        before.append(conf)
        after.append(parts["final"])
        updates.append((min(max(parts["final"], 0.0), 1.0), json.dumps(attrs, ensure_ascii=False, sort_keys=True), tid))
    with g.write() as c:
        c.executemany("UPDATE triples SET confidence=?, attributes=? WHERE id=?", updates)
    summary = {"triples": len(updates), "entities": len(data.entities), "relations": len(data.relations), "unscored": unscored,
               "mean_before": float(np.mean(before)), "mean_after": float(np.mean(after)),
               "loss_first": model.history[0] if model.history else None, "loss_last": model.history[-1] if model.history else None,
               "model": str(Path(g.dir) / MODEL_DIR / MODEL_FILE), "model_hash": model_hash}
    g.write_manifest("confidence", {k: summary[k] for k in ("triples", "mean_before", "mean_after", "model_hash")})
    return summary


def reset_confidences(g: Any) -> int:
    """Undo :func:`calibrate_graph`: each triple gets its stored ``original`` value back. Returns the count."""
    rows = g.conn.execute("SELECT id, attributes FROM triples WHERE json_type(attributes, '$.confidence') = 'object'").fetchall()
    updates = []
    for tid, attrs_json in rows:
        attrs = json.loads(attrs_json)
        block = attrs.pop("confidence")
        if "original" not in block:
            continue
        updates.append((float(block["original"]), json.dumps(attrs, ensure_ascii=False, sort_keys=True), tid))
    with g.write() as c:
        c.executemany("UPDATE triples SET confidence=?, attributes=? WHERE id=? AND layer != 'completed'", updates)
    g.write_manifest("confidence-reset", {"triples": len(updates)})
    return len(updates)

