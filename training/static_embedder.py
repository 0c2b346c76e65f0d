"""A sentence-transformers ``StaticEmbedding`` model trained from scratch (no pretrained weights needed).

``model_name_or_path: static`` in an embedder recipe builds one: a tokenizer trained with
``tokenizers`` on the recipe's own training texts (anchors, positives, negatives — book text when the
pairs come from a corpus graph), then an ``nn.EmbeddingBag`` of ``static_dim`` per token, randomly
initialised; a text's vector is the mean of its tokens' vectors. Trained with (C)MNRL like any
embedder, it encodes thousands of texts a second on a CPU (bench/static_zh.py measures it against
MiniLM). Tokenizers (``static_tokenizer``):

- ``char``: every CJK character is a token (BERT's normaliser puts spaces around CJK characters),
  other scripts as WordPiece sub-words;
- ``bpe``: byte-pair merges learnt inside runs of text between spaces, punctuation and digits, so
  frequent multi-character words (主治, 头痛, 半夏) become single tokens;
- a path to a ``tokenizer.json``: reuse a tokenizer trained before.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable

from bencao.errors import ConfigError

STATIC = "static"
KINDS = ("char", "bpe")
UNK = "[UNK]"


def train_tokenizer(texts: Iterable[str], kind: str, vocab_size: int, min_frequency: int = 2) -> Any:
    """A ``tokenizers.Tokenizer`` of ``kind`` (char | bpe) trained on ``texts``."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers

    if kind == "char":
        tok = Tokenizer(models.WordPiece(unk_token=UNK))
        tok.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True, strip_accents=False, lowercase=True)
        tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        trainer = trainers.WordPieceTrainer(vocab_size=vocab_size, min_frequency=min_frequency, special_tokens=[UNK], show_progress=False)
    elif kind == "bpe":
        tok = Tokenizer(models.BPE(unk_token=UNK))
        tok.normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Lowercase()])
        tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Punctuation(),
                                                     pre_tokenizers.Digits(individual_digits=True)])
        trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=min_frequency, special_tokens=[UNK], show_progress=False)
    else:
        raise ConfigError(f"static_tokenizer: {kind!r} is not one of {', '.join(KINDS)} or a path to a tokenizer.json")
    tok.train_from_iterator(texts, trainer=trainer)
    return tok


def build_static_model(args: Any, texts: list[str], seed: int = 0) -> Any:
    """``SentenceTransformer(modules=[StaticEmbedding])`` with a tokenizer trained on ``texts`` (or loaded)."""
    import torch
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import StaticEmbedding
    from tokenizers import Tokenizer

    spec = args.static_tokenizer
    if spec in KINDS:
        tok = train_tokenizer(texts, spec, args.static_vocab_size, args.static_min_frequency)
    elif Path(spec).is_file():
        tok = Tokenizer.from_file(str(spec))
    else:
        raise ConfigError(f"static_tokenizer: {spec!r} is not one of {', '.join(KINDS)} or an existing tokenizer.json")
    torch.manual_seed(seed)
    module = StaticEmbedding(tok, embedding_dim=args.static_dim)
    with torch.no_grad():  # small random vectors: the mean of a text's tokens starts near zero, not dominated by one token
        module.embedding.weight.normal_(0.0, 0.1)
    return SentenceTransformer(modules=[module], device="cpu")


def is_static(model: Any) -> bool:
    from sentence_transformers.sentence_transformer.modules import StaticEmbedding

    return isinstance(model[0], StaticEmbedding)
