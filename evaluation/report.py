"""``report.md`` (one table per task, a by-source table) and ``metrics.png`` (main metric by
benchmark and source, with bootstrap 95% intervals)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bencao.evaluation.metrics import MAIN_METRIC
from bencao.io import atomic_path, atomic_write_text

PLOT = "metrics.png"
REPORT = "report.md"

#: Column order of each task's table.
COLUMNS = {
    "mcq": ["accuracy", "abstain_rate", "evidence_contains_gold", "evidence_holds_gold_parts"],
    "sd": ["top1", "top3", "top5", "accuracy", "abstain_rate", "evidence_contains_gold", "evidence_holds_gold_parts"],
    "tf": ["accuracy", "abstain_rate", "evidence_contains_gold"],
    "el": ["acc_at_1", "acc_at_1_first_pass", "abstain_rate", "retry_rate", "synonym_rate", "acc_at_1_answered"],
    "rec": ["hits_at_1", "precision", "recall", "f1", "f1_macro", "evidence_contains_gold"],
    "qa": ["bleu", "chrf", "gleu", "evidence_contains_gold"],
}
#: Question-only retrieval columns (the probe; docs/evaluation-metrics.md), one table for every task that has them.
RETRIEVAL_COLUMNS = ["answer_recall@5", "answer_recall@10", "answer_recall@20", "distractor_rate@5", "distractor_rate@10",
                     "distractor_rate@20", "margin@5", "margin@10", "margin@20", "mrr", "passages@10", "passage_chars@10"]
#: Column headings that differ from the metric's key: evidence_contains_gold is coverage (with one query per
#: option every option lands in the evidence), not retrieval quality.
LABELS = {"evidence_contains_gold": "coverage: evidence covers the gold option",
          "evidence_holds_gold_parts": "coverage: evidence covers the gold option's parts"}
#: Retrieval-context columns (DiffRAG's RAGAS table), one table for every task that has them.
CONTEXT_COLUMNS = ["context_precision", "context_recall", "context_entity_recall",
                   "judge_context_precision", "judge_context_recall", "judge_context_entity_recall"]
_TASK_TITLE = {"mcq": "Multiple choice (mcq)", "sd": "Syndrome differentiation (sd)", "tf": "True/false (tf)",
               "el": "Entity linking (el)", "rec": "Recommendation (rec)", "qa": "Free text (qa)"}
_PERCENT_FREE = {"bleu", "chrf", "gleu"}
#: Metrics that are not shares: printed as they are, in this format.
_PLAIN = {"mrr": "{:.3f}", "passages@10": "{:.1f}", "passage_chars@10": "{:.0f}"}


def label(name: str) -> str:
    return LABELS.get(name, name)


def fmt(name: str, value: Any, ci: list[float] | None = None) -> str:
    if value is None:
        return "–"
    if name in _PERCENT_FREE:
        return f"{value:.1f}"
    if name in _PLAIN:
        f = _PLAIN[name]
        return f.format(value) + (f" [{f.format(ci[0])}, {f.format(ci[1])}]" if ci else "")
    s = f"{100 * value:.1f}"
    if ci:
        s += f" [{100 * ci[0]:.1f}, {100 * ci[1]:.1f}]"
    return s


def markdown_tables(metrics: dict[str, Any], with_ci: bool = True) -> str:
    """One markdown table per task: rows are benchmarks, cells are % with 95% intervals."""
    blocks: list[str] = []
    for task in COLUMNS:
        names = [n for n, m in metrics.items() if m["task"] == task]
        if not names:
            continue
        cols = [c for c in COLUMNS[task] if any(c in metrics[n] for n in names)]
        lines = [f"### {_TASK_TITLE[task]}", "", "| benchmark | n | " + " | ".join(map(label, cols)) + " |",
                 "|---|---:|" + "---:|" * len(cols)]
        for n in names:
            m = metrics[n]
            ci = m.get("ci95", {}) if with_ci else {}
            n_txt = str(m["n"]) + (f" (+{m['missing']} missing)" if m.get("missing") else "")
            lines.append(f"| {n} | {n_txt} | " + " | ".join(fmt(c, m.get(c), ci.get(c)) for c in cols) + " |")
        blocks.append("\n".join(lines))
    names = [n for n, m in metrics.items() if any(c in m for c in RETRIEVAL_COLUMNS)]
    if names:
        cols = [c for c in RETRIEVAL_COLUMNS if any(c in metrics[n] for n in names)]
        lines = ["### Retrieval from the question alone (no options, no option queries; % of records, mrr, passages and characters as they are)",
                 "", "| benchmark | task | " + " | ".join(cols) + " |", "|---|---|" + "---:|" * len(cols)]
        for n in names:
            ci = metrics[n].get("ci95", {}) if with_ci else {}
            lines.append(f"| {n} | {metrics[n]['task']} | " + " | ".join(fmt(c, metrics[n].get(c), ci.get(c)) for c in cols) + " |")
        blocks.append("\n".join(lines))
    names = [n for n, m in metrics.items() if any(c in m for c in CONTEXT_COLUMNS)]
    if names:
        cols = [c for c in CONTEXT_COLUMNS if any(c in metrics[n] for n in names)]
        lines = ["### Retrieved context (RAGAS-style; lexical, and judge_* by an LLM)", "", "| benchmark | task | " + " | ".join(cols) + " |",
                 "|---|---|" + "---:|" * len(cols)]
        for n in names:
            ci = metrics[n].get("ci95", {}) if with_ci else {}
            lines.append(f"| {n} | {metrics[n]['task']} | " + " | ".join(fmt(c, metrics[n].get(c), ci.get(c)) for c in cols) + " |")
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def main_metric(m: dict[str, Any]) -> str:
    """The metric a benchmark's result is summarised by: its task's main metric, or for a retrieval-only
    run the question-only ``answer_recall@10`` (coverage only when nothing else was measured)."""
    for key in (MAIN_METRIC[m["task"]], "answer_recall@10", "evidence_contains_gold"):
        if key in m:
            return key
    return MAIN_METRIC[m["task"]]


def summary_table(metrics: dict[str, Any]) -> str:
    """One row per benchmark: its main metric, the question-only answer_recall@10 and margin@10 beside it
    (each with its 95% interval), abstentions."""
    lines = ["| benchmark | task | n | main metric | value [95% CI] | answer_recall@10 [95% CI] | margin@10 [95% CI] | abstain |",
             "|---|---|---:|---|---:|---:|---:|---:|"]
    for name, m in metrics.items():
        main = main_metric(m)
        ci = m.get("ci95", {})
        lines.append(f"| {name} | {m['task']} | {m['n']} | {label(main)} | {fmt(main, m.get(main), ci.get(main))} | "
                     f"{fmt('answer_recall@10', m.get('answer_recall@10'), ci.get('answer_recall@10'))} | "
                     f"{fmt('margin@10', m.get('margin@10'), ci.get('margin@10'))} | {fmt('a', m.get('abstain_rate'))} |")
    return "\n".join(lines)


def source_table(metrics: dict[str, Any]) -> str:
    rows = []
    for name, m in metrics.items():
        main = main_metric(m)
        for src, sm in (m.get("by_source") or {}).items():
            rows.append(f"| {name} | {src} | {sm['n']} | {main} | {fmt(main, sm.get(main))} |")
    if not rows:
        return ""
    return "\n".join(["| benchmark | source | n | metric | value |", "|---|---|---:|---|---:|", *rows])


def write_report(metrics: dict[str, Any], out: str | Path, *, system: str, graph: str | None = None,
                 counts: dict[str, int] | None = None) -> Path:
    """Write ``report.md`` and the plot into ``out``; returns the report path."""
    out = Path(out)
    head = [f"# Evaluation: system `{system}`", ""]
    if graph:
        head.append(f"Graph: `{graph}`.")
    head.append("Values in % (BLEU/chrF: sacrebleu scores; mrr, passages and characters as they are) with bootstrap 95% "
                "intervals in brackets; metric definitions in docs/evaluation-metrics.md. answer_recall@10 and margin@10: "
                "retrieval from the question alone (no options), the gold option's text in the top 10 passages, and that "
                "rate minus the distractors'; coverage (evidence covers the gold option) counts what the system retrieved "
                "with the options, and is not a retrieval-quality figure.")
    skipped = {n: m["skipped_records"] for n, m in metrics.items() if m.get("skipped_records")}
    if skipped:
        head.append("\n**Bad records skipped** (see the command's warnings; `--strict` refuses such files): "
                    + ", ".join(f"{n}: {k}" for n, k in skipped.items()) + ".")
    if counts and counts.get("failed"):
        head.append(f"\n**{counts['failed']} record(s) failed** (e.g. LLM timeouts) and are not scored; run the same command again to retry them.")
    leaked = {name: m["leaked"] for name, m in metrics.items() if m.get("leaked")}
    if leaked:
        head.append("\n**Leaked records**: " + ", ".join(f"{name}: {n} of {metrics[name]['n']}" for name, n in leaked.items())
                    + " had their reasoning distilled into the graph's personalized layer (`leaked: true` in predictions.jsonl); "
                      "their scores are not held-out figures.")
    body = ["## Summary\n\n" + summary_table(metrics), markdown_tables(metrics)]
    src = source_table(metrics)
    if src:
        body.append("## By source\n\n" + src)
    if metrics:
        try:
            plot_metrics(metrics, out / PLOT)
            body.append(f"![main metric by benchmark and source]({PLOT})")
        except ImportError:  # the plot is an extra: an install without bencao[eval] still gets the report
            body.append("(No plot: it needs matplotlib, `pip install 'bencao[eval]'`.)")
    path = out / REPORT
    atomic_write_text(path, "\n".join(head) + "\n\n" + "\n\n".join(body) + "\n")
    return path


def plot_metrics(metrics: dict[str, Any], path: str | Path) -> Path:
    """Horizontal bars: each benchmark's main metric (with its 95% interval), then its sources."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    labels: list[str] = []
    values: list[float] = []
    errs: list[tuple[float, float]] = []
    colors: list[str] = []
    for name, m in metrics.items():
        main = main_metric(m)
        scale = 0.01 if main in _PERCENT_FREE else 1.0
        v = m.get(main)
        if v is None:
            continue
        lo, hi = (m.get("ci95", {}).get(main) or [v, v])
        labels.append(f"{name} · {main}")
        values.append(v * scale)
        errs.append((max(0.0, (v - lo) * scale), max(0.0, (hi - v) * scale)))
        colors.append("tab:blue")
        for src, sm in (m.get("by_source") or {}).items():
            if sm.get(main) is None:
                continue
            labels.append(f"    {src} (n={sm['n']})")
            values.append(sm[main] * scale)
            errs.append((0.0, 0.0))
            colors.append("tab:gray")
    fig, ax = plt.subplots(figsize=(8, 0.35 * max(3, len(labels)) + 1))
    y = list(range(len(labels)))
    ax.barh(y, values, xerr=list(zip(*errs)) if errs else None, color=colors, capsize=3)
    ax.set_yticks(y, labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(0, 1)
    ax.set_xlabel("main metric (chrF/100 for free text); bars: 95% bootstrap interval")
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    path = Path(path)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=110)
    plt.close(fig)
    return path
