"""unKR-style evaluation of bencao's UKGE on the sample graph (held-out 10%).

    .venv/bin/python bench/ukge_eval.py [--graph DIR] [--config configs/graph/confidence.yaml] [key=value ...]

Builds the bundled sample graph (without indexes) into --graph when it is not there, trains UKGE on
90% of its observed triples and reports confidence MSE/MAE and filtered link prediction (Hits@1/3/10,
MRR) on the rest, next to simple baselines. Writes bench/results/ukge_eval.json and prints a
Markdown table for bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--graph", default=str(REPO / "graphs" / "sample"), help="Sample graph directory (built when missing).")
    ap.add_argument("--config", default=str(REPO / "configs" / "graph" / "confidence.yaml"), help="Confidence recipe; its `model` section is evaluated.")
    ap.add_argument("--recipe", default=str(REPO / "configs" / "graph" / "sample.yaml"), help="Graph build recipe used when --graph is missing.")
    ap.add_argument("--test-fraction", type=float, default=0.1)
    ap.add_argument("--split-seed", type=int, default=0)
    ap.add_argument("--out", default=str(REPO / "bench" / "results" / "ukge_eval.json"))
    ap.add_argument("overrides", nargs="*", help="key=value overrides of the confidence recipe, e.g. model.epochs=10")
    args = ap.parse_args(argv)

    from bencao.config import load_config
    from bencao.io import atomic_write_json
    from bencao.retrieval.graph.confidence import ConfidenceConfig
    from bencao.retrieval.graph.confidence_eval import holdout_evaluation
    from bencao.retrieval.graph.store import Graph

    graph = Path(args.graph)
    if not (graph / "graph.sqlite").exists():
        from bencao.retrieval.build import build_graph, load_build_config

        bcfg, root = load_build_config(args.recipe, ["index=false"])
        print(f"building {graph} from {args.recipe} ...", file=sys.stderr)
        build_graph(bcfg, root, graph)
    cfg = load_config(ConfidenceConfig, args.config, args.overrides)

    def progress(epoch: int, epochs: int, loss: float) -> None:
        print(f"\repoch {epoch}/{epochs} loss {loss:.4f}", end="", file=sys.stderr, flush=True)

    t0 = time.perf_counter()
    with Graph.open(graph, read_only=True) as g:
        stats = g.stats()
        report = holdout_evaluation(g, cfg.model, layers=cfg.layers, test_fraction=args.test_fraction, split_seed=args.split_seed,
                                    progress=progress)
    print(file=sys.stderr)
    report["graph_stats"] = {k: stats[k] for k in ("documents", "entities", "triples", "by_relation", "by_layer")}
    report["seconds"] = round(time.perf_counter() - t0, 1)
    atomic_write_json(args.out, report)
    print(render(report))
    return 0


def render(r: dict) -> str:
    c, lp = r["confidence"], r["link_prediction"]
    rows = [
        "| | MSE | MAE |", "|---|---|---|",
        f"| UKGE ({r['model']['score']}, dim {r['model']['dim']}, {r['model']['epochs']} epochs, {r['model']['negatives']} × {r['model']['corrupt']} "
        f"negatives at weight {r['model']['negative_weight']}, l2 {r['model']['l2']}) | {c['mse']:.4f} | {c['mae']:.4f} |",
        f"| baseline: training mean | {c['baseline_mean']['mse']:.4f} | {c['baseline_mean']['mae']:.4f} |",
        f"| baseline: per-relation training mean | {c['baseline_relation_mean']['mse']:.4f} | {c['baseline_relation_mean']['mae']:.4f} |",
        "", "| link prediction (filtered) | MRR | Hits@1 | Hits@3 | Hits@10 |", "|---|---|---|---|---|",
    ]
    for name, key in (("UKGE, tails", "tail"), ("UKGE, heads", "head"), ("UKGE, both", "both"),
                      ("UKGE, both, type-constrained", "both_type_constrained"), ("frequency baseline, both", "baseline_frequency")):
        m = lp[key]
        rows.append(f"| {name} | {m['mrr']:.4f} | {m['hits@1']:.4f} | {m['hits@3']:.4f} | {m['hits@10']:.4f} |")
    rows += ["", "| relation | test triples | MSE | MRR | Hits@10 |", "|---|---|---|---|---|"]
    for rel, m in sorted(r["by_relation"].items(), key=lambda x: -x[1]["test"]):
        rows.append(f"| {rel} | {m['test']} | {m['mse']:.4f} | {m['mrr']:.4f} | {m['hits@10']:.4f} |")
    rows.append("")
    rows.append(f"{r['triples']:,} observed triples, {r['entities']:,} entities; train {r['train']:,}, test {r['test']:,} "
                f"(+{r['test_dropped_unseen']:,} held out but unscorable: an entity occurs in no training triple); "
                f"training {r['train_seconds']} s, loss {r['loss_first']:.4f} → {r['loss_last']:.4f}.")
    return "\n".join(rows)


if __name__ == "__main__":
    sys.exit(main())
