"""Graph routes against plain BM25, question only (issue 24): does any way of using the graph find the gold
option's text more often than BM25 over the same passages?

    HF_HUB_OFFLINE=1 .venv/bin/python bench/graph_routes.py --graph graphs/classics --config serving/classics \\
        --bench DEV/tcmbench_mcq.jsonl --bench DEV/cmmlu_traditional_chinese_medicine.jsonl \\
        --bench DEV/tcm_best4sdt_sd.jsonl [--ceiling] [--append bench/RESULTS.md]

Every row ranks passages for the question alone and is scored by the probe behind ``bencao eval``'s
answer_recall@k / margin@k (``bencao.evaluation.probe.passage_ranks``); the table is
``bench/retrieval_peers.py``'s, with its intervals and paired Δ against the plain BM25 row. The records
of every file are split by position into two halves: a route's one free parameter is chosen on the first
half (the best recall@10 + margin@10 over a small grid, printed) and the table reports the second.

Rows (the pool is plain BM25's 200 best passages for the question; nothing reads the options):

- ``bm25 (plain)``: ``retrieval_peers.PlainBM25``, the top 10 of the pool.
- ``bencao (recipe)``: the served retrieval, question only (``RetrievalProbe``), as in the peers table.
- ``entity votes``: pseudo-relevance feedback over the graph's entities: each alias-table name in the
  pool's passages (not in the question) is voted for by the passages holding it (their BM25 share),
  times its idf over the corpus; passages are re-ranked by BM25 share + λ × the votes of the ten best
  entities they hold.
- ``treats coverage``: for a vignette, the formulas and substances whose ``treats`` triples cover the
  question's symptoms (Σ idf of the symptoms covered); the passages those triples were read from, m of
  them in place of BM25's last m.
- ``section aggregation``: the macro tree: a passage's BM25 share plus μ × its section's summed share
  over the pool.
- ``PPR``: HippoRAG-style personalized PageRank (igraph, damping 0.5) over the entity graph plus
  entity–passage edges (each triple's source passages), seeded by the question's alias-table names
  (weighted 1/log(2 + degree)); the best passage nodes. ``PPR ⊕ bm25``: its list fused with BM25's 50
  best by reciprocal rank fusion.
- ``alias expansion``: the question's tokens plus the names of the entities they name (aliases, 一名,
  traditional forms; at most three entities per token), the same BM25.
- ``learned rerank``: the pool re-ranked by a gradient-boosted classifier (scikit-learn's
  HistGradientBoostingClassifier) over every signal above at once — BM25 share and rank, entity votes,
  section and book aggregation, the question's idf mass the passage covers, its length, whether it is an
  entry (its heading names a graph entity), how many formula / substance / symptom / effect names it holds
  beyond the question's, and the question's type (formula, herb, acupoint, syndrome, treatment asked; SD)
  crossed with those counts. Trained on the first half's pools, a passage labelled positive when it holds
  the gold option's text and at most half of the distractors' (the fitted "fusion weights" of issue 24:
  nothing per record), and applied to the second half's questions, whose options it never reads.
  ``--fit-half 1`` swaps the halves.

``--ceiling`` adds, over all records: BM25's recall at 20 … 200 passages, and the share of records whose
gold (and each distractor's) text occurs in any passage of the graph at all.
"""

from __future__ import annotations

import argparse
import math
import re
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any, Callable

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from retrieval_peers import PlainBM25, append_result, load_records, table  # noqa: E402  (a bench script beside this one)

POOL = 200
#: what the question asks for, read from its last 40 characters (where an exam stem asks its question)
ASKS = {"formula": re.compile(r"方|汤|散|丸"), "herb": re.compile(r"药|何味"), "point": re.compile(r"穴|针|灸"),
        "syndrome": re.compile(r"证|辨证|诊断|病机"), "treatment": re.compile(r"治法|治则|治宜|治疗")}
ENTITY_TYPES = ("formula", "substance", "symptom", "effect")


class Routes:
    def __init__(self, graph: Any, bm25: PlainBM25):
        from bencao.retrieval.index.lexical import analyze_query

        self.g, self.bm25, self.aq = graph, bm25, analyze_query
        c = graph.conn
        self.ent_of: dict[str, set[str]] = defaultdict(set)
        self.names_of: dict[str, set[str]] = defaultdict(set)
        for norm, eid in c.execute("SELECT norm, entity_id FROM aliases WHERE kind != 'xref'"):
            self.ent_of[norm].add(eid)
            self.names_of[eid].add(norm)
        self.types: dict[str, set[str]] = defaultdict(set)
        for norm, typ in c.execute("SELECT a.norm, e.type FROM aliases a JOIN entities e ON e.id = a.entity_id WHERE a.kind != 'xref'"):
            self.types[norm].add(typ)
        self.symptoms: dict[str, set[str]] = defaultdict(set)
        for norm, eid in c.execute("SELECT a.norm, a.entity_id FROM aliases a JOIN entities e ON e.id = a.entity_id "
                                   "WHERE e.type = 'symptom' AND a.kind != 'xref'"):
            self.symptoms[norm].add(eid)
        self.treats: dict[str, list[tuple[str, str]]] = defaultdict(list)
        for tid, h, t in c.execute("SELECT id, head_id, tail_id FROM triples WHERE relation = 'treats'"):
            self.treats[t].append((h, tid))
        self.n_heads = len({h for v in self.treats.values() for h, _ in v}) or 1
        idx = self.bm25.index
        self.df_ptr, self.vocab, self.n_docs = idx.bm25.scores["indptr"], idx.bm25.vocab_dict, len(idx)
        self._toks: dict[str, set[str]] = {}
        self._pools: dict[str, list[tuple[str, float, str]]] = {}
        self._sec: dict[str, str] = {}
        self._doc: dict[str, tuple[str, bool]] = {}
        self.model: Any = None
        self._ppr: Any = None

    # ------------------------------------------------------------------ shared
    def pool(self, q: str) -> list[tuple[str, float, str]]:
        """Plain BM25's POOL best passages: (snippet id, score, passage text)."""
        if q not in self._pools:
            from bencao.evaluation.probe import passage_text

            ranked = self.bm25.ranked(q, POOL)
            rows = self.g.get_snippets([s for s, _ in ranked])
            self._pools[q] = [(s, sc, passage_text(rows[s].get("path"), rows[s]["text"])) for s, sc in ranked if s in rows]
        return self._pools[q]

    def _passages(self, ids: list[str]) -> list[str]:
        from bencao.evaluation.probe import passage_text

        rows = self.g.get_snippets(ids)
        return [passage_text(rows[s].get("path"), rows[s]["text"]) for s in ids if s in rows]

    def _df(self, tok: str) -> int:
        i = self.vocab.get(tok)
        return int(self.df_ptr[i + 1] - self.df_ptr[i]) if i is not None else 1

    def _entity_tokens(self, sid: str, text: str) -> set[str]:
        from bencao.retrieval.index.lexical import analyze

        if sid not in self._toks:
            self._toks[sid] = {t for t in analyze(text) if len(t) >= 2 and t in self.ent_of}
        return self._toks[sid]

    # ------------------------------------------------------------------ routes
    def bm25_top(self, q: str, _p: float = 0.0) -> tuple[list[str], list[str]]:
        p = self.pool(q)[:20]
        return [t for _, _, t in p], [s for s, _, _ in p]

    def _votes(self, q: str) -> tuple[list[set[str]], dict[str, float]]:
        """The pool's passages' entity names (not in the question) and the ten best names' votes (max 1)."""
        from bencao.text import norm_key

        pool = self.pool(q)
        qk, top = norm_key(q), pool[0][1]
        votes: dict[str, float] = defaultdict(float)
        held = [{t for t in self._entity_tokens(s, x) if t not in qk} for s, _, x in pool]
        for (s, sc, _), toks in zip(pool, held):
            for t in toks:
                votes[t] += sc / top
        best = sorted(((t, v * math.log(self.n_docs / self._df(t))) for t, v in votes.items()), key=lambda kv: (-kv[1], kv[0]))[:10]
        mx = best[0][1] if best else 1.0
        return held, {t: v / mx for t, v in best}

    def entity_votes(self, q: str, lam: float) -> tuple[list[str], list[str]]:
        pool = self.pool(q)
        if not pool:
            return [], []
        top = pool[0][1]
        held, bonus = self._votes(q)
        ranked = sorted(zip(pool, held), key=lambda x: -(x[0][1] / top + lam * sum(bonus.get(t, 0.0) for t in x[1])))
        return [t for (_, _, t), _ in ranked[:20]], [s for (s, _, _), _ in ranked[:20]]

    def treats_passages(self, q: str) -> list[str]:
        found = {e for t in set(self.aq(q)) if len(t) >= 2 for e in self.symptoms.get(t, ())}
        score: dict[str, float] = defaultdict(float)
        trip: dict[str, list[str]] = defaultdict(list)
        for s in found:
            heads = self.treats.get(s, [])
            if heads:
                idf = math.log(self.n_heads / len({h for h, _ in heads}))
                for h, tid in heads:
                    score[h] += idf
                    trip[h].append(tid)
        out: list[str] = []
        for h in sorted(score, key=lambda h: -score[h])[:3]:
            tids = trip[h]
            cnt: dict[str, int] = defaultdict(int)
            for (sn,) in self.g.conn.execute(f"SELECT snippet_id FROM triple_sources WHERE triple_id IN ({','.join('?' * len(tids))}) "
                                             "AND snippet_id IS NOT NULL", tids):
                cnt[sn] += 1
            out += sorted(cnt, key=lambda s: -cnt[s])[:2]
        return list(dict.fromkeys(out))

    def treats_mix(self, q: str, m: float) -> tuple[list[str], list[str]]:
        tp = self.treats_passages(q)[: int(m)]
        b = [s for s, _, _ in self.pool(q) if s not in tp]
        ids = (b[: 10 - len(tp)] + tp + b[10 - len(tp):])[:20]
        return self._passages(ids), ids

    def section_agg(self, q: str, mu: float) -> tuple[list[str], list[str]]:
        pool = self.pool(q)
        if not pool:
            return [], []
        miss = [s for s, _, _ in pool if s not in self._sec]
        for sid, row in self.g.get_snippets(miss).items():
            self._sec[sid] = row["section_id"]
        top = pool[0][1]
        agg: dict[str, float] = defaultdict(float)
        for s, sc, _ in pool:
            agg[self._sec.get(s, s)] += sc / top
        mx = max(agg.values())
        ranked = sorted(pool, key=lambda x: -(x[1] / top + mu * agg[self._sec.get(x[0], x[0])] / mx))[:20]
        return [t for _, _, t in ranked], [s for s, _, _ in ranked]

    def _ppr_graph(self) -> Any:
        if self._ppr is None:
            from bencao.igraph_loader import load_igraph

            idx: dict[str, int] = {}

            def node(x: str) -> int:
                return idx.setdefault(x, len(idx))

            edges = [(node(h), node(t)) for h, t in self.g.conn.execute("SELECT head_id, tail_id FROM triples")]
            for h, t, s in self.g.conn.execute("SELECT t.head_id, t.tail_id, s.snippet_id FROM triple_sources s JOIN triples t "
                                               "ON t.id = s.triple_id WHERE s.snippet_id IS NOT NULL"):
                p = node("P:" + s)
                edges += [(node(h), p), (node(t), p)]
            G = load_igraph().Graph(n=len(idx), edges=edges, directed=False)
            G.simplify()
            pn = np.array([i for x, i in idx.items() if x.startswith("P:")])
            self._ppr = (G, idx, pn, {i: x[2:] for x, i in idx.items() if x.startswith("P:")}, np.asarray(G.degree(), float))
        return self._ppr

    def ppr(self, q: str, _p: float = 0.0) -> list[tuple[str, float]]:
        G, idx, pn, pid, deg = self._ppr_graph()
        seeds = {idx[e] for t in set(self.aq(q)) if len(t) >= 2 for e in self.ent_of.get(t, ()) if e in idx}
        if not seeds:
            return []
        reset = np.zeros(G.vcount())
        for s in seeds:
            reset[s] = 1.0 / math.log(2 + deg[s])
        pr = np.asarray(G.personalized_pagerank(damping=0.5, reset=reset.tolist()))[pn]
        top = np.argsort(-pr)[:20]
        return [(pid[int(pn[i])], float(pr[i])) for i in top if pr[i] > 0]

    def ppr_only(self, q: str, _p: float = 0.0) -> tuple[list[str], list[str]]:
        ids = [s for s, _ in self.ppr(q)]
        return self._passages(ids), ids

    def ppr_fused(self, q: str, _p: float = 0.0) -> tuple[list[str], list[str]]:
        from bencao.retrieval.search.fusion import rrf

        ids = [s for s, _ in rrf([[(s, sc) for s, sc, _ in self.pool(q)[:50]], self.ppr(q)])][:20]
        return self._passages(ids), ids

    def alias_expansion(self, q: str, _p: float = 0.0) -> tuple[list[str], list[str]]:
        toks = self.aq(q)
        extra: list[str] = []
        for t in set(toks):
            ents = self.ent_of.get(t, ())
            if len(t) >= 2 and 0 < len(ents) <= 3:
                for e in ents:
                    extra += [n for n in sorted(self.names_of[e]) if n != t and len(n) >= 2][:3]
        toks = toks + [x for n in extra for x in self.aq(n)]
        ids = [s for s, _ in self.bm25.index.search(toks, 20)]
        return self._passages(ids), ids


    # ------------------------------------------------------------------ learned rerank
    def features(self, q: str) -> np.ndarray:
        """One row per pool passage: the signals the learned rerank weighs (the module docstring)."""
        from bencao.retrieval.index.lexical import analyze
        from bencao.text import norm_key as norm

        pool = self.pool(q)
        if not pool:
            return np.zeros((0, 0))
        miss = [s for s, _, _ in pool if s not in self._doc]
        for sid, row in self.g.get_snippets(miss).items():
            path = row.get("path") or []
            self._sec[sid] = row["section_id"]
            self._doc[sid] = (row.get("document_id") or "", bool(path) and norm(path[-1]) in self.types)
        top = pool[0][1]
        held, bonus = self._votes(q)
        sec: dict[str, float] = defaultdict(float)
        doc: dict[str, float] = defaultdict(float)
        for s, sc, _ in pool:
            sec[self._sec.get(s, s)] += sc / top
            doc[self._doc.get(s, (s, False))[0]] += sc / top
        msec, mdoc = max(sec.values()), max(doc.values())
        qw = {t: math.log(1 + self.n_docs / (self._df(t) + 0.5)) for t in set(self.aq(q))}
        qsum = sum(qw.values()) or 1.0
        asks = [1.0 if rx.search(q[-40:]) else 0.0 for rx in ASKS.values()]
        rows = []
        for rank, ((s, sc, text), names) in enumerate(zip(pool, held)):
            toks = set(analyze(text))
            counts = [math.log1p(sum(1 for t in names if typ in self.types[t])) for typ in ENTITY_TYPES]
            entry = float(self._doc.get(s, ("", False))[1])
            rows.append([sc / top, 1 / math.log2(rank + 2), sc, sum(bonus.get(t, 0.0) for t in names), sec[self._sec.get(s, s)] / msec,
                         doc[self._doc.get(s, (s, False))[0]] / mdoc, math.log1p(len(text)),
                         sum(w for t, w in qw.items() if t in toks) / qsum, math.log1p(len(names)), entry, *counts, *asks,
                         asks[0] * counts[0], asks[1] * counts[1], asks[0] * entry, asks[3] * text.count("证"), asks[2] * text.count("穴")])
        return np.asarray(rows, dtype=float)

    def fit(self, records: list[dict[str, Any]]) -> None:
        """The learned rerank's classifier, from these records' pools (labels read their options)."""
        from sklearn.ensemble import HistGradientBoostingClassifier

        from bencao.evaluation.probe import option_texts
        from bencao.text import norm_key as norm

        X, y = [], []
        for r in records:
            f = self.features(r["question"])
            if not len(f):
                continue
            gold, dis = option_texts(r)
            gk = [k for k in (norm(t) for t in gold) if k]
            dk = [k for k in (norm(t) for t in dis.values()) if k]
            for (_, _, text), row in zip(self.pool(r["question"]), f):
                pk = norm(text)
                y.append(int(any(k in pk for k in gk) and sum(k in pk for k in dk) <= len(dk) / 2))
                X.append(row)
        if len(set(y)) < 2:  # no passage of the fitting half holds a gold option (or every one does): nothing to learn
            print("  learned rerank: the fitting half's pools have one label only; the route keeps BM25's order", file=sys.stderr)
            self.model = None
            return
        self.model = HistGradientBoostingClassifier(max_iter=200, learning_rate=0.05, max_leaf_nodes=15, min_samples_leaf=50,
                                                    random_state=0).fit(np.asarray(X), np.asarray(y))

    def learned(self, q: str, _p: float = 0.0) -> tuple[list[str], list[str]]:
        pool = self.pool(q)
        if not pool:
            return [], []
        if self.model is None:
            return [t for _, _, t in pool[:20]], [s for s, _, _ in pool[:20]]
        p = self.model.predict_proba(self.features(q))[:, 1]
        order = np.argsort(-p, kind="stable")[:20]
        return [pool[i][2] for i in order], [pool[i][0] for i in order]


GRIDS: dict[str, tuple[str, list[float]]] = {
    "entity votes": ("entity_votes", [0.25, 0.5, 1.0]),
    "treats coverage": ("treats_mix", [1, 2, 3]),
    "section aggregation": ("section_agg", [0.1, 0.25, 0.5]),
}
FIXED = {"PPR (HippoRAG-style)": "ppr_only", "PPR ⊕ bm25 (RRF)": "ppr_fused", "alias expansion": "alias_expansion"}


def rows_for(records: list[dict[str, Any]], fn: Callable[[str, float], tuple[list[str], list[str]]], p: float) -> dict[str, Any]:
    from bencao.evaluation.probe import passage_ranks

    t = time.perf_counter()
    rows = [passage_ranks(r, *fn(r["question"], p)) for r in records]
    return {"rows": rows, "seconds": (time.perf_counter() - t) / max(1, len(records))}


def score(rows: list[dict[str, Any] | None]) -> float:
    """recall@10 + margin@10 of a half (the fitting criterion)."""
    got = [r for r in rows if r]
    rec = np.mean([r["gold_rank"] is not None and r["gold_rank"] <= 10 for r in got])
    dis = np.mean([np.mean([v is not None and v <= 10 for v in r["distractor_ranks"].values()] or [0.0]) for r in got])
    return float(2 * rec - dis)


def ceiling(routes: Routes, records: list[dict[str, Any]]) -> str:
    from bencao.evaluation.probe import option_texts
    from bencao.text import norm_key

    def at(k: int) -> float:
        hits = 0
        for r in records:
            gold, _ = option_texts(r)
            keys = [norm_key(t) for _, _, t in routes.pool(r["question"])[:k]]
            hits += any(norm_key(g) and any(norm_key(g) in pk for pk in keys) for g in gold)
        return 100 * hits / len(records)

    memo: dict[str, bool] = {}

    def anywhere(text: str) -> bool:
        k = norm_key(text)
        if k not in memo:
            ids = [s for s, _ in routes.bm25.index.search(text, 3000)]
            memo[k] = bool(k) and any(k in norm_key(p) for p in routes._passages(ids))
        return memo[k]

    gold_any = np.mean([any(anywhere(g) for g in option_texts(r)[0]) for r in records])
    dis_any = np.mean([np.mean([anywhere(t) for t in option_texts(r)[1].values()] or [0.0]) for r in records])
    cells = " | ".join(f"{at(k):.1f}" for k in (10, 20, 50, 100, 200))
    return ("| records | bm25 recall@10 | @20 | @50 | @100 | @200 | gold text in any passage | a distractor's text in any passage |\n"
            "|---:|---:|---:|---:|---:|---:|---:|---:|\n"
            f"| {len(records)} | {cells} | {100 * gold_any:.1f} | {100 * dis_any:.1f} |")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--graph", required=True)
    ap.add_argument("--bench", action="append", required=True)
    ap.add_argument("--config", default=None, help="serving recipe of the `bencao (recipe)` row")
    ap.add_argument("--set", dest="overrides", action="append", default=[], help="key=value override of the recipe (repeatable)")
    ap.add_argument("--ceiling", action="store_true", help="also BM25 recall at deeper k and the gold text's presence in the graph")
    ap.add_argument("--routes", default=None,
                    help="comma-separated rows to run besides bm25 (plain), e.g. 'learned rerank,entity votes' (default: all)")
    ap.add_argument("--fit-half", type=int, choices=(0, 1), default=0, help="the half that fits (parameters, the learned rerank)")
    ap.add_argument("--append", default=None)
    args = ap.parse_args(argv)
    want = None if args.routes is None else {w.strip() for w in args.routes.split(",") if w.strip()}
    known = {"bencao (recipe)", "learned rerank", *GRIDS, *FIXED}
    if want is not None and want - known:
        ap.error(f"--routes: unknown {sorted(want - known)}; known: {sorted(known)}")

    from bencao.evaluation.probe import RetrievalProbe
    from bencao.retrieval.graph.store import Graph
    from bencao.serving.config import load_serve_config

    t0 = time.perf_counter()
    records = load_records(args.bench, None)
    halves: dict[int, list[tuple[str, dict[str, Any]]]] = {0: [], 1: []}
    pos: dict[str, int] = defaultdict(int)
    for b, r in records:
        halves[pos[b] % 2].append((b, r))
        pos[b] += 1
    fit, check = [r for _, r in halves[args.fit_half]], [r for _, r in halves[1 - args.fit_half]]
    g = Graph.open(args.graph, read_only=True)
    bm25 = PlainBM25(g)
    print(f"  bm25 over {len(bm25.index):,} passages in {bm25.build_s:.0f} s", file=sys.stderr, flush=True)
    routes = Routes(g, bm25)
    results: dict[str, dict[str, Any]] = {"bm25 (plain)": rows_for(check, routes.bm25_top, 0.0)}
    if want is None or "bencao (recipe)" in want:
        probe = RetrievalProbe(args.graph, load_serve_config(args.config, [*args.overrides, "answerer=none"]))
        t = time.perf_counter()
        results["bencao (recipe)"] = {"rows": probe.run(check), "seconds": (time.perf_counter() - t) / max(1, len(check))}
    chosen: list[str] = []
    if want is None or "learned rerank" in want:
        t = time.perf_counter()
        routes.fit(fit)
        print(f"  learned rerank fitted on {len(fit)} records in {time.perf_counter() - t:.0f} s", file=sys.stderr, flush=True)
        results["learned rerank"] = rows_for(check, routes.learned, 0.0)
    for name, (meth, grid) in GRIDS.items():
        if want is not None and name not in want:
            continue
        fn = getattr(routes, meth)
        best = max(grid, key=lambda p: score(rows_for(fit, fn, p)["rows"]))
        chosen.append(f"{name}: {best}")
        results[f"{name} ({best})"] = rows_for(check, fn, best)
        print(f"  {name}: {best} chosen on the first half", file=sys.stderr, flush=True)
    for name, meth in FIXED.items():
        if want is not None and name not in want:
            continue
        results[name] = rows_for(check, getattr(routes, meth), 0.0)
        print(f"  {name}", file=sys.stderr, flush=True)
    text = table(results, halves[1 - args.fit_half])
    if args.ceiling:
        text += "\n\nWhere the answers are (all records):\n\n" + ceiling(routes, [r for _, r in records])
    wall = time.perf_counter() - t0
    text += (f"\n\nParameters chosen on the {('first', 'second')[args.fit_half]} half: {'; '.join(chosen) or 'none'}. "
             f"Table: the {('second', 'first')[args.fit_half]} half ({len(check)} records).")
    print(text)
    if args.append:
        append_result(args.append, "Graph routes against plain BM25, question only", "graph_routes.py", argv, f"{wall:.0f} s", text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
