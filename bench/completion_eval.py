"""Held-out precision of UKGE completion on the sample graph (what `graph complete` would add, measured).

    .venv/bin/python bench/completion_eval.py [--graph DIR] [--config configs/graph/complete.yaml] [key=value ...]

Builds the bundled sample graph (without indexes) into --graph when it is not there and trains its
UKGE model (configs/graph/confidence.yaml) when it has none. Then, for the completion settings of
--config (with key=value overrides): hides --test-fraction of the triples completion could propose,
retrains UKGE on the rest and counts how many proposals at each threshold are hidden true triples
(precision; a lower bound, since an unstated true triple counts as wrong) and how many hidden
triples come back (recall). Writes bench/results/completion_eval[-<tag>].json and prints Markdown
for bench/RESULTS.md. Run it once with the defaults and once with the closed-world rules switched
off (`closed_world=[] skip_curated_relations=false --tag open`) to see what those rules keep out.
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
    ap.add_argument("--config", default=str(REPO / "configs" / "graph" / "complete.yaml"), help="Completion recipe.")
    ap.add_argument("--confidence", default=str(REPO / "configs" / "graph" / "confidence.yaml"), help="Confidence recipe (model trained when missing).")
    ap.add_argument("--recipe", default=str(REPO / "configs" / "graph" / "sample.yaml"), help="Graph build recipe used when --graph is missing.")
    ap.add_argument("--test-fraction", type=float, default=0.1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tag", default="", help="Suffix of the results file.")
    ap.add_argument("overrides", nargs="*", help="key=value overrides of the completion recipe, e.g. threshold=0.7")
    args = ap.parse_args(argv)

    from bencao.config import load_config
    from bencao.io import atomic_write_json
    from bencao.retrieval.graph.completion import CompleteConfig, evaluate_completion
    from bencao.retrieval.graph.confidence import MODEL_DIR, MODEL_FILE, ConfidenceConfig, calibrate_graph
    from bencao.retrieval.graph.store import Graph

    graph = Path(args.graph)
    if not (graph / "graph.sqlite").exists():
        from bencao.retrieval.build import build_graph, load_build_config

        bcfg, root = load_build_config(args.recipe, ["index=false"])
        print(f"building {graph} from {args.recipe} ...", file=sys.stderr)
        build_graph(bcfg, root, graph)
    cfg = load_config(CompleteConfig, args.config, args.overrides)

    def progress(epoch: int, epochs: int, loss: float) -> None:
        print(f"\repoch {epoch}/{epochs} loss {loss:.4f}", end="", file=sys.stderr, flush=True)

    t0 = time.perf_counter()
    with Graph.open(graph) as g:
        if not (graph / MODEL_DIR / MODEL_FILE).exists():
            print("training the graph's UKGE model ...", file=sys.stderr)
            calibrate_graph(g, load_config(ConfidenceConfig, args.confidence), progress)
        report = evaluate_completion(g, cfg, test_fraction=args.test_fraction, seed=args.seed, progress=progress)
    print(file=sys.stderr)
    report["seconds"] = round(time.perf_counter() - t0, 1)
    report["command"] = "python bench/completion_eval.py " + " ".join(argv if argv is not None else sys.argv[1:])
    out = REPO / "bench" / "results" / f"completion_eval{'-' + args.tag if args.tag else ''}.json"
    atomic_write_json(out, report)
    print(render(report))
    return 0


def render(r: dict) -> str:
    fmt = lambda v: "–" if v is None else f"{v:.3f}"  # noqa: E731
    rows = ["| relation | hidden | proposed ≥ threshold | hidden among them | precision | recall |", "|---|---:|---:|---:|---:|---:|"]
    for rel, m in r["by_relation"].items():
        rows.append(f"| {rel} | {m['hidden']} | {m['proposed']} | {m['correct']} | {fmt(m['precision'])} | {fmt(m['recall'])} |")
    rows.append(f"| all | {r['hidden']} | {r['proposed']} | {r['correct']} | {fmt(r['precision'])} | {fmt(r['recall'])} |")
    rows += ["", "| threshold | proposed | precision | recall |", "|---:|---:|---:|---:|"]
    rows += [f"| {t} | {c['proposed']} | {fmt(c['precision'])} | {fmt(c['recall'])} |" for t, c in r["curve"].items()]
    closed = "; ".join(f"{k}: {v}" for k, v in r["closed"].items()) or "none"
    rows += ["", f"Threshold {r['threshold']}; {r['hidden']} of {r['open_triples']:,} open triples hidden (seed {r['seed']}, "
             f"+{r['hidden_unscorable']} unscorable: an entity in no training triple), trained on {r['train']:,}; "
             f"not completed: {closed}; {r['seconds']} s."]
    return "\n".join(rows)


if __name__ == "__main__":
    sys.exit(main())
