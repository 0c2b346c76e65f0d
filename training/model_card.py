"""Model cards for exported models: hub metadata (huggingface_hub ``ModelCardData``) + a body with
base model, data, hyper-parameters, the run itself, evaluation figures, intended use, limitations
and a medical disclaimer (in English and Chinese). Everything comes from ``bencao_training.json``
written at training time from the finished run (``training/record.py``), never typed by hand: the
languages are those of the training rows, the data hashes are SHA-256, the DeepSpeed stage and
precision are those of the engine that trained, the steps and epochs those actually run.
"""

from __future__ import annotations

import json
from typing import Any

DISCLAIMER_EN = (
    "This model is a research tool. It is not a medical device and does not give medical advice, "
    "diagnosis or treatment. Traditional Chinese Medicine texts describe historical practice; some "
    "substances they name (e.g. mineral drugs such as 丹沙/cinnabar) are toxic. Always consult a "
    "qualified physician or pharmacist before acting on anything it says."
)
DISCLAIMER_ZH = "本模型仅供研究使用，不构成任何医疗建议、诊断或治疗方案。古籍所载药物部分有毒，请在执业医师或药师指导下使用。"

INTENDED = {
    "causal-lm": (
        "Chain-of-thought question answering over Traditional Chinese Medicine (TCM), medicine-food "
        "homology, foods and dietary supplements, as the reasoning model of bencao's retrieval "
        "pipeline (its reasoning is turned into triples that retrieve evidence from the knowledge graph)."
    ),
    "sentence-transformer": (
        "Dense retrieval in bencao: linking question terms to graph entities and finding the snippets, "
        "triples and sections that answer a question."
    ),
    "cross-encoder": (
        "Reranking in bencao: reading a question with each candidate passage and ordering the passages by how "
        "well they answer it (`retrieval.rerank.model`)."
    ),
}

LIMITATIONS = [
    "Trained on data distilled from a teacher LLM and on classical texts; it inherits their errors and gaps.",
    "Answers without retrieved evidence may be fluent and wrong; use it with bencao's evidence and citations.",
    "Classical terms (性味, 归经) are historical concepts, not pharmacological measurements.",
    "Evaluation figures below come from the held-out split named here, not from clinical validation.",
]


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, (list, dict)):
        return json.dumps(v, ensure_ascii=False)
    return str(v)


def _table(rows: dict[str, Any], head: tuple[str, str]) -> str:
    lines = [f"| {head[0]} | {head[1]} |", "|---|---|"]
    lines += [f"| {k} | {_fmt(v)} |" for k, v in rows.items() if v is not None]
    return "\n".join(lines)


LANGUAGE_NAMES = {"zh": "Chinese", "en": "English"}


def run_text(summary: dict[str, Any]) -> str:
    """One paragraph on what ran: steps and epochs, processes, DeepSpeed stage, precision."""
    t = summary.get("training")
    if not t:
        return f"Global steps: {summary.get('global_step', 'not recorded')}."
    ds = t.get("deepspeed")
    engine = "no DeepSpeed" if not ds else (f"DeepSpeed ZeRO-{ds['zero_stage']}"
                                           + (f" (optimizer offload: {ds['offload_optimizer']})" if ds.get("offload_optimizer") not in (None, "none") else "")
                                           + (f" (parameter offload: {ds['offload_param']})" if ds.get("offload_param") not in (None, "none") else ""))
    p = t.get("precision") or {}
    mixed = p.get("mixed_precision")
    precision = f"{mixed} mixed precision" if mixed and mixed != "no" else "no mixed precision"
    how = f" ({t['distributed_type']})" if t.get("distributed_type") not in (None, "NO") else ""
    return (f"Ran {t['steps_run']} optimizer steps ({t['epochs_run']:g} epochs) on {t['world_size']} process(es){how}, "
            f"{engine}, {precision}, weights in {p.get('weights_dtype') or 'an unrecorded dtype'}.")


def _dataset_line(d: dict[str, Any]) -> str:
    line = f"- {d.get('split', '?')}: `{d.get('path')}`" + (f", {d['records']} records" if d.get("records") is not None else "")
    if d.get("sha256"):
        line += f", SHA-256 `{d['sha256']}`"
    elif d.get("sha256_files"):
        line += ", SHA-256 of its files: " + ", ".join(f"`{k}` `{v}`" for k, v in d["sha256_files"].items())
    if d.get("over_max_length"):
        line += f"; {d['over_max_length']} rows longer than max_length ({d.get('overlong', 'truncated')}, longest {d.get('longest_tokens')} tokens)"
    return line


def render_card(kind: str, summary: dict[str, Any], base_model: str | None, merged: bool, model_name: str) -> str:
    """The README.md of an exported model (YAML front matter + body)."""
    from huggingface_hub import ModelCard, ModelCardData

    from bencao.training.record import claimed_languages

    is_lm = kind == "causal-lm"
    is_ce = kind == "cross-encoder"
    langs = claimed_languages(summary.get("languages") or {})
    data = ModelCardData(
        language=langs or None,
        license="apache-2.0",
        library_name="transformers" if is_lm else "sentence-transformers",
        pipeline_tag="text-generation" if is_lm else "text-ranking" if is_ce else "sentence-similarity",
        base_model=base_model if base_model and "/" in base_model and not base_model.startswith("/") else None,
        tags=["bencao", "tcm", "medical", "lora" if summary.get("hyperparameters", {}).get("method") == "lora" else "full-finetune"],
    )
    metrics = summary.get("metrics", {})
    if is_lm:
        figures = {k: v for k, v in metrics.items() if isinstance(v, (int, float))}
        fig_text = _table(figures, ("metric", "value")) if figures else "No evaluation figures were recorded."
    else:
        pre = "rerank" if is_ce else "ir"
        before, after = metrics.get(f"{pre}_before", {}), metrics.get(f"{pre}_after", {})
        lines = [f"| metric (held-out {'reranking' if is_ce else 'IR'}) | before | after |", "|---|---|---|"]
        lines += [f"| {k} | {_fmt(before.get(k))} | {_fmt(after.get(k))} |" for k in sorted(set(before) | set(after))]
        extra = {k: v for k, v in metrics.items() if isinstance(v, (int, float))}
        fig_text = "\n".join(lines) + ("\n\n" + _table(extra, ("training", "value")) if extra else "")
    ds_lines = [_dataset_line(d) for d in summary.get("datasets", [])] or ["- not recorded"]
    counts = summary.get("languages") or {}
    if counts:
        ds_lines.append("- languages of the training rows: " + ", ".join(f"{LANGUAGE_NAMES.get(k, k)} {v}" for k, v in counts.items()))
    neg = summary.get("hard_negatives")
    if neg:
        ds_lines.append(f"- hard negatives: {neg['given']} given, {neg['mined']} mined with the base model, "
                        f"{neg['without_hard_negative']} rows without one")
    b = summary.get("batching")
    if b and b.get("sampling") == "group":
        ds_lines.append(f"- same-group batches of {b['batch_size']}: {b['used']} rows used, {b['skipped']} skipped, "
                        f"{b['full_batches']} of {b['batches']} batches full")
    intended = INTENDED[kind] + (f" Trained on {' and '.join(LANGUAGE_NAMES.get(x, x) for x in langs)} data." if langs else "")
    usage = (
        f"```python\nfrom transformers import AutoModelForCausalLM, AutoTokenizer\n"
        f"tok = AutoTokenizer.from_pretrained(\"{model_name}\")\nmodel = AutoModelForCausalLM.from_pretrained(\"{model_name}\")\n"
        "ids = tok.apply_chat_template([{\"role\": \"user\", \"content\": \"大枣的性味是什么？\"}], add_generation_prompt=True, return_tensors=\"pt\", return_dict=True)\n"
        "print(tok.decode(model.generate(**ids, max_new_tokens=256)[0]))  # stops at <|im_end|>\n```"
        if is_lm else
        f"```python\nfrom sentence_transformers import CrossEncoder\nmodel = CrossEncoder(\"{model_name}\")\n"
        "scores = model.predict([(\"大枣的功效是什么？\", \"大枣，味甘，平。主心腹邪气，安中养脾。\"), (\"大枣的功效是什么？\", \"干姜，味辛，温。\")])\n```"
        if is_ce else
        f"```python\nfrom sentence_transformers import SentenceTransformer\nmodel = SentenceTransformer(\"{model_name}\")\n"
        "emb = model.encode([\"大枣\", \"jujube fruit\"])\n```"
    )
    body = f"""
# {model_name}

{"Causal language model" if is_lm else "Cross-encoder reranker" if is_ce else "Sentence embedder"} fine-tuned by [bencao](https://example.invalid/bencao) \
({summary.get("hyperparameters", {}).get("method", "unknown")} fine-tuning{", LoRA merged into the base" if merged else ""}).

## Base model

`{base_model or "not recorded"}`

## Training data

{chr(10).join(ds_lines)}

## Hyper-parameters

{_table(summary.get("hyperparameters", {}), ("parameter", "value"))}

## Training run

{run_text(summary)} EOS token: `{summary.get("eos_token", "n/a")}`.

## Evaluation

{fig_text}

## Intended use

{intended}

{usage}

## Limitations

{chr(10).join("- " + x for x in LIMITATIONS)}

## Medical disclaimer

{DISCLAIMER_EN}

{DISCLAIMER_ZH}
"""
    return str(ModelCard(f"---\n{data.to_yaml()}\n---\n{body}"))
