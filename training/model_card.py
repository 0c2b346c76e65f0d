"""Model cards for exported models: hub metadata (huggingface_hub ``ModelCardData``) + a body with
base model, data, hyper-parameters, evaluation figures, intended use, limitations and a medical
disclaimer (in English and Chinese). The figures come from ``bencao_training.json`` written at
training time, never typed by hand.
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
        "triples and sections that answer a question (Chinese and English)."
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


def render_card(kind: str, summary: dict[str, Any], base_model: str | None, merged: bool, model_name: str) -> str:
    """The README.md of an exported model (YAML front matter + body)."""
    from huggingface_hub import ModelCard, ModelCardData

    is_lm = kind == "causal-lm"
    data = ModelCardData(
        language=["zh", "en"],
        license="apache-2.0",
        library_name="transformers" if is_lm else "sentence-transformers",
        pipeline_tag="text-generation" if is_lm else "sentence-similarity",
        base_model=base_model if base_model and "/" in base_model and not base_model.startswith("/") else None,
        tags=["bencao", "tcm", "medical", "lora" if summary.get("hyperparameters", {}).get("method") == "lora" else "full-finetune"],
    )
    metrics = summary.get("metrics", {})
    if is_lm:
        figures = {k: v for k, v in metrics.items() if isinstance(v, (int, float))}
        fig_text = _table(figures, ("metric", "value")) if figures else "No evaluation figures were recorded."
    else:
        before, after = metrics.get("ir_before", {}), metrics.get("ir_after", {})
        lines = ["| metric (held-out IR) | before | after |", "|---|---|---|"]
        lines += [f"| {k} | {_fmt(before.get(k))} | {_fmt(after.get(k))} |" for k in sorted(set(before) | set(after))]
        extra = {k: v for k, v in metrics.items() if isinstance(v, (int, float))}
        fig_text = "\n".join(lines) + ("\n\n" + _table(extra, ("training", "value")) if extra else "")
    datasets = summary.get("datasets", [])
    ds_lines = [
        f"- {d.get('split', '?')}: `{d.get('path')}`" + (f", {d['records']} records" if d.get("records") is not None else "")
        + (f", sha256 `{d['sha256']}`" if d.get("sha256") else "")
        for d in datasets
    ] or ["- not recorded"]
    usage = (
        f"```python\nfrom transformers import AutoModelForCausalLM, AutoTokenizer\n"
        f"tok = AutoTokenizer.from_pretrained(\"{model_name}\")\nmodel = AutoModelForCausalLM.from_pretrained(\"{model_name}\")\n"
        "ids = tok.apply_chat_template([{\"role\": \"user\", \"content\": \"大枣的性味是什么？\"}], add_generation_prompt=True, return_tensors=\"pt\", return_dict=True)\n"
        "print(tok.decode(model.generate(**ids, max_new_tokens=256)[0]))  # stops at <|im_end|>\n```"
        if is_lm else
        f"```python\nfrom sentence_transformers import SentenceTransformer\nmodel = SentenceTransformer(\"{model_name}\")\n"
        "emb = model.encode([\"大枣\", \"jujube fruit\"])\n```"
    )
    body = f"""
# {model_name}

{"Causal language model" if is_lm else "Sentence embedder"} fine-tuned by [bencao](https://example.invalid/bencao) \
({summary.get("hyperparameters", {}).get("method", "unknown")} fine-tuning{", LoRA merged into the base" if merged else ""}).

## Base model

`{base_model or "not recorded"}`

## Training data

{chr(10).join(ds_lines)}

## Hyper-parameters

{_table(summary.get("hyperparameters", {}), ("parameter", "value"))}

Global steps: {summary.get("global_step", "not recorded")}. EOS token: `{summary.get("eos_token", "n/a")}`.

## Evaluation

{fig_text}

## Intended use

{INTENDED[kind]}

{usage}

## Limitations

{chr(10).join("- " + x for x in LIMITATIONS)}

## Medical disclaimer

{DISCLAIMER_EN}

{DISCLAIMER_ZH}
"""
    return str(ModelCard(f"---\n{data.to_yaml()}\n---\n{body}"))
