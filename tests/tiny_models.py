"""Tiny, locally built models and datasets for the training tests (no downloads).

- ``build_tiny_qwen(dir)``: a 2-layer Qwen2 (hidden 64) with a byte-level BPE tokenizer trained
  here on the bundled classics and FoodOn text, the Qwen2.5 chat template that trl ships, EOS
  ``<|im_end|>`` and pad ``<|endoftext|>`` — the same special tokens as Qwen2.5-Instruct.
- ``build_tiny_qwen_gguf(dir)``: the same kind of model, with a tokenizer that splits text as Qwen2's
  does (NFC + Qwen2's regex, then byte-level), written as one GGUF file by ``training/gguf_export.py``.
- ``build_tiny_bert(dir)``: a BERT built from a config (random weights, seeded) with a WordPiece vocabulary
  trained here (Chinese characters split, lower-cased English), saved as a plain encoder (sentence-transformers
  adds mean pooling) or, ``cross_encoder=True``, with a one-logit head (a CrossEncoder).
- ``sft_records(n)``: conversational ``messages`` in Chinese (神农本草经 entries: "大枣的性味是什么？"
  → an answer built from the text) and English (FoodOn definitions).
- ``embed_records()``: ``anchor, positive, negative, group`` pairs from the FoodOn demo subset
  (definition → label; group = first parent; negative = a sibling's label when there is one).
"""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "data" / "sample"
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def qwen_template(training: bool = False) -> str:
    import trl

    name = "qwen2_5_training.jinja" if training else "qwen2_5.jinja"
    return (Path(trl.__file__).parent / "chat_templates" / name).read_text(encoding="utf-8")


def shennong_entries(limit: int = 400) -> list[dict]:
    """Materia-medica entries of 神农本草经 whose text starts with taste and nature (味甘，平。主...)."""
    out = []
    with gzip.open(SAMPLE / "tcm_classics" / "tcm_classics_sections.jsonl.gz", "rt", encoding="utf-8") as fh:
        for line in fh:
            rec = json.loads(line)
            if rec["book"] != "神农本草经" or len(rec["path"]) < 3:
                continue
            text = rec["text"].removeprefix("内容：").replace("\n", "")
            m = re.match(r"(味[^。主]{1,8}?)。?(主[^。]{2,60})。", text)
            if not m:
                continue
            out.append({"name": rec["title"], "nature": m.group(1).rstrip("，,"), "indication": m.group(2), "path": rec["path"]})
            if len(out) >= limit:
                break
    return out


def foodon_terms() -> list[dict]:
    with open(SAMPLE / "foodon" / "foodon_demo_subset.jsonl", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def sft_records(n: int = 48) -> list[dict]:
    """Alternating Chinese and English conversations (system + user + assistant)."""
    zh = shennong_entries()
    en = [t for t in foodon_terms() if t.get("definition")]
    recs = []
    for i in range(n):
        if i % 2 == 0:
            e = zh[(i // 2) % len(zh)]
            msgs = [
                {"role": "system", "content": "你是中医药知识助手。"},
                {"role": "user", "content": f"{e['name']}的性味是什么？"},
                {"role": "assistant", "content": f"据《神农本草经》，{e['name']}{e['nature']}，{e['indication']}。"},
            ]
        else:
            t = en[(i // 2) % len(en)]
            msgs = [
                {"role": "user", "content": f"What is {t['label']}?"},
                {"role": "assistant", "content": f"{t['label'].capitalize()}: {t['definition']}"},
            ]
        recs.append({"messages": msgs, "id": f"rec-{i}"})
    return recs


def write_jsonl(path: Path, records: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as fh:
        for r in records:
            fh.write(json.dumps(r, ensure_ascii=False) + "\n")
    return path


def build_tokenizer(vocab_size: int = 1200, split: str = "gpt-2"):
    """A byte-level BPE trained here. ``split="qwen2"``: NFC, then Qwen2's split regex before the byte-level
    step, as Qwen2.5's own tokenizer.json does; ``"gpt-2"``: plain byte-level (GPT-2's regex)."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    corpus = []
    for r in sft_records(200):
        corpus.extend(m["content"] for m in r["messages"])
    corpus.append(qwen_template())
    tok = Tokenizer(models.BPE())
    if split == "qwen2":
        from transformers.models.qwen2.tokenization_qwen2 import PRETOKENIZE_REGEX

        tok.normalizer = normalizers.NFC()
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(PRETOKENIZE_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ])
    else:
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=SPECIALS, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    )
    tok.train_from_iterator(corpus, trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>", additional_special_tokens=SPECIALS[1:]
    )
    fast.chat_template = qwen_template()
    return fast


def build_tiny_qwen(out_dir: Path, hidden: int = 64, seed: int = 0, split: str = "gpt-2", tied: bool = True) -> Path:
    """Save a randomly initialised 2-layer Qwen2 + tokenizer + generation config to ``out_dir``."""
    import torch
    from transformers import AutoModelForCausalLM, GenerationConfig, Qwen2Config

    tok = build_tokenizer(split=split)
    cfg = Qwen2Config(
        vocab_size=len(tok),
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        tie_word_embeddings=tied,
        bos_token_id=None,
        eos_token_id=tok.convert_tokens_to_ids("<|im_end|>"),
        pad_token_id=tok.pad_token_id,
    )
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(cfg)
    # Like Qwen2.5's own generation_config.json: eos only <|endoftext|> (the base-model default),
    # which SFT must correct to <|im_end|>.
    model.generation_config = GenerationConfig(eos_token_id=tok.pad_token_id, pad_token_id=tok.pad_token_id)
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir)
    tok.save_pretrained(out_dir)
    return out_dir


def build_tiny_qwen_gguf(out_dir: Path, outtype: str = "f16", hidden: int = 64, seed: int = 0) -> Path:
    """Write a tiny Qwen2 (Qwen2's pre-tokenizer, the Qwen2.5 chat template) as ``out_dir/tiny-qwen2-<outtype>.gguf``
    and return the file's path. The transformers folder it came from is ``out_dir/hf`` (for comparisons)."""
    from bencao.training.gguf_export import export_gguf

    hf = build_tiny_qwen(Path(out_dir) / "hf", hidden=hidden, seed=seed, split="qwen2")
    return export_gguf(hf, Path(out_dir) / f"tiny-qwen2-{outtype}.gguf", outtype=outtype, name="tiny-qwen2").path


def build_tiny_bert(out_dir: Path, hidden: int = 32, layers: int = 2, heads: int = 2, intermediate: int = 64,
                    cross_encoder: bool = False, vocab_size: int = 3000, seed: int = 0) -> Path:
    """A seeded BERT of the given shape and a WordPiece tokenizer trained on the bundled texts, saved to ``out_dir``."""
    import torch
    from tokenizers.implementations import BertWordPieceTokenizer
    from transformers import BertConfig, BertForSequenceClassification, BertModel, BertTokenizerFast

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    texts = [m["content"] for r in sft_records(200) for m in r["messages"]]
    texts += [t for r in embed_records() for t in (r["anchor"], r["positive"]) if t]
    wp = BertWordPieceTokenizer(clean_text=True, handle_chinese_chars=True, lowercase=True)
    wp.train_from_iterator(texts, vocab_size=vocab_size, special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"],
                           show_progress=False)
    wp.save_model(str(out_dir))
    tok = BertTokenizerFast(vocab_file=str(out_dir / "vocab.txt"))
    cfg = BertConfig(vocab_size=len(tok), hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                     intermediate_size=intermediate, max_position_embeddings=512, num_labels=1)
    torch.manual_seed(seed)
    (BertForSequenceClassification(cfg) if cross_encoder else BertModel(cfg)).save_pretrained(out_dir)
    tok.save_pretrained(out_dir)
    return out_dir


def embed_records() -> list[dict]:
    """FoodOn definition → label pairs, grouped by first parent; siblings' labels as hard negatives."""
    terms = foodon_terms()
    by_parent: dict[str, list[dict]] = {}
    for t in terms:
        if t.get("definition") and t.get("parents"):
            by_parent.setdefault(t["parents"][0], []).append(t)
    recs = []
    for parent, kids in sorted(by_parent.items()):
        for i, t in enumerate(kids):
            sib = kids[(i + 1) % len(kids)] if len(kids) > 1 else None
            recs.append(
                {"anchor": t["definition"], "positive": t["label"], "negative": sib["label"] if sib else "", "group": parent}
            )
    return recs
