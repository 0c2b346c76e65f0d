"""A static Chinese embedder with pretrained semantics, distilled from a real language model (Model2Vec's recipe).

    bencao train distill-static --config embed/qwen2.5-coder-0.5b/distill-static output_dir=DIR
    bencao train embedder --config embed/qwen2.5-coder-0.5b/static-tuned model_name_or_path=DIR ...   # optional

The static embedder trained from scratch (``embed/static-zh``) never beat plain BM25 on the dev questions: it
had no Chinese semantics but what a few hundred steps of pairs taught it. A real LM's vocabulary carries them.
This script turns the model's tokens into a sentence-transformers ``StaticEmbedding`` with the model's own
tokenizer, as Model2Vec (Tulkens & van Dongen, 2024) distils one:

1. one vector per token of the tokenizer's vocabulary (``source``): ``input`` = the model's input embedding
   row; ``hidden`` = the last hidden state (after the final norm) of the token fed alone, which for one
   position is also its mean-pooled state. bench/RESULTS.md measures which is better;
2. PCA to ``pca_dims`` (principal axes of the token vectors, largest variance first, signs fixed), which also
   centres them: the component every token shares is removed;
3. SIF weighting (Arora et al., 2017): token ``t`` scaled by ``a / (a + p(t))`` with ``a = sif_coefficient``, so
   a text's mean vector is led by its rare tokens. ``p(t)`` comes from ``frequencies``: ``zipf`` estimates it
   from the vocabulary rank (a BPE vocabulary is ordered by merge frequency; Model2Vec's default), a file
   counts it on real text (one text a line, or the ``anchor``/``positive``/``negative``/``text`` fields of a
   JSONL file such as ``bencao data pairs``'s ``train.jsonl``, whose positives are the graph's passages), with
   add-one smoothing;
4. special and added tokens (``<|im_start|>`` ...) get a zero vector.

The result is a normal sentence-transformers folder (``SentenceTransformer(DIR)``, ``bencao graph index
embedder.model=DIR``, and a starting point for ``bencao train embedder``) plus ``bencao_distill.json``: the
base model and its weights' fingerprint, the settings, the explained variance, the frequency source's SHA-256
and the time taken. The ``hidden`` pass (one forward per ``batch_size`` tokens; ~150 k tokens for Qwen2.5)
writes its finished batches under ``DIR/.distill-parts/`` and a killed run resumes from them.
Model2Vec's own ``distill`` is not used: its ``distill`` extra pins ``transformers<5.4`` against the lock's 5.23.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterator, Sequence

from bencao.errors import ConfigError, InputError

log = logging.getLogger(__name__)

SOURCES = ("input", "hidden")
RECORD_FILE = "bencao_distill.json"
PARTS_DIR = ".distill-parts"


@dataclass
class DistillArguments:
    model: str | None = field(default=None, metadata={"help": "The language model to distil: an installed model's name "
                                                              "(bencao models list) or a transformers folder."})
    output_dir: str | None = field(default=None, metadata={"help": "Where the sentence-transformers folder is written."})
    source: str = field(default="input", metadata={"help": "Token vectors: input (the input embedding row) | hidden (the last "
                                                           "hidden state of the token fed alone)."})
    pca_dims: int = field(default=256, metadata={"help": "Dimensions kept by PCA (at most the model's hidden size); 0 = no PCA."})
    sif_coefficient: float = field(default=1e-4, metadata={"help": "SIF's a: token weight a / (a + p(token)); 0 = no weighting."})
    frequencies: str = field(default="zipf", metadata={"help": "p(token): zipf (from the vocabulary rank) | a .txt (one text a line) "
                                                               "or .jsonl file (anchor/positive/negative/text fields) to count on."})
    max_texts: int = field(default=500_000, metadata={"help": "Texts of the frequency file read at most."})
    batch_size: int = field(default=512, metadata={"help": "source=hidden: tokens per forward pass."})
    dtype: str = field(default="bfloat16", metadata={"help": "source=hidden: weights' type for the forward passes (bfloat16 | float32)."})
    device: str = field(default="cpu", metadata={"help": "source=hidden: torch device (cpu, cuda)."})
    threads: int = field(default=0, metadata={"help": "torch threads on a CPU; 0 = torch's default."})


def parse_args(config: str | Path | None, overrides: Sequence[str] = ()) -> tuple[DistillArguments]:
    from bencao.training.args import parse_recipe, recipe_dict

    where = str(config or "config")
    data = recipe_dict(config, overrides)
    data.pop("bf16", None)  # recipe_dict resolves a bf16 flag for trainers; this script has `dtype`
    (args,) = parse_recipe((DistillArguments,), data, where)
    if not args.model:
        raise ConfigError(f"{where}: model is required (an installed model's name or a transformers folder)")
    if not args.output_dir:
        raise ConfigError(f"{where}: output_dir is required")
    if args.source not in SOURCES:
        raise ConfigError(f"{where}: source {args.source!r} is not one of {', '.join(SOURCES)}")
    if args.pca_dims < 0 or args.batch_size < 1 or args.max_texts < 1:
        raise ConfigError(f"{where}: pca_dims must be ≥ 0, batch_size and max_texts ≥ 1")
    if not 0 <= args.sif_coefficient < 1:
        raise ConfigError(f"{where}: sif_coefficient must be in [0, 1), not {args.sif_coefficient}")
    if args.dtype not in ("bfloat16", "float32", "float16"):
        raise ConfigError(f"{where}: dtype {args.dtype!r} is not one of bfloat16, float32, float16")
    if args.frequencies != "zipf" and not Path(args.frequencies).is_file():
        raise ConfigError(f"{where}: frequencies {args.frequencies!r} is neither zipf nor an existing file")
    return (args,)


# -- the three steps, each a plain function over arrays


def pca(vectors: Any, dims: int) -> tuple[Any, list[float]]:
    """``vectors`` (n × d) projected on their ``dims`` principal axes (centred; each axis's sign fixed so that its
    largest-magnitude score is positive, as Model2Vec does) and the share of variance each axis explains."""
    import numpy as np

    x = np.asarray(vectors, dtype=np.float64)
    xc = x - x.mean(axis=0)
    cov = xc.T @ xc / max(1, len(x) - 1)
    vals, vecs = np.linalg.eigh(cov)
    vals, vecs = np.clip(vals[::-1], 0, None), vecs[:, ::-1]
    k = min(dims, x.shape[1]) if dims else x.shape[1]
    scores = xc @ vecs[:, :k]
    signs = np.sign(scores[np.abs(scores).argmax(axis=0), np.arange(k)])
    signs[signs == 0] = 1
    total = float(vals.sum()) or 1.0
    return (scores * signs).astype(np.float32), [float(v / total) for v in vals[:k]]


def sif_weights(probabilities: Any, a: float) -> Any:
    """SIF weights ``a / (a + p)`` (all ones when ``a`` is 0)."""
    import numpy as np

    p = np.asarray(probabilities, dtype=np.float64)
    return np.ones_like(p) if a == 0 else a / (a + p)


def zipf_probabilities(n: int) -> Any:
    """p(rank) ∝ 1 / (rank + 1) over ``n`` tokens in vocabulary order (Model2Vec's estimate)."""
    import numpy as np

    inv = 1.0 / np.arange(2, n + 2)
    return inv / inv.sum()


def iter_texts(path: Path, limit: int) -> Iterator[str]:
    """Texts of a .txt (one a line) or .jsonl file (anchor/positive/negative/text fields); a line that is not JSON
    in a .jsonl file is an error naming the file and the line."""
    n = 0
    with open(path, encoding="utf-8") as fh:
        for i, line in enumerate(fh, 1):
            if n >= limit:
                return
            line = line.strip()
            if not line:
                continue
            if path.suffix == ".jsonl":
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise InputError(path, f"not a JSON object ({exc.msg})", i) from None
                if not isinstance(row, dict):
                    raise InputError(path, "not a JSON object", i)
                for k in ("anchor", "positive", "negative", "text"):
                    if isinstance(row.get(k), str) and row[k]:
                        if n >= limit:  # a row holds up to four texts: the limit counts texts, not rows
                            return
                        n += 1
                        yield row[k]
            else:
                n += 1
                yield line


def counted_probabilities(tokenizer: Any, texts: Iterator[str], n: int, batch: int = 2048) -> tuple[Any, dict[str, int]]:
    """Token probabilities over ``texts`` tokenised as the static model will (no special tokens), add-one
    smoothed over ``n`` ids; with the numbers of texts, tokens and distinct tokens counted."""
    import numpy as np

    counts = np.zeros(n, dtype=np.int64)
    n_texts, chunk = 0, []

    def flush() -> None:
        for enc in tokenizer.encode_batch(chunk, add_special_tokens=False):
            ids = np.asarray(enc.ids, dtype=np.int64)
            np.add.at(counts, ids[ids < n], 1)

    for t in texts:
        chunk.append(t)
        n_texts += 1
        if len(chunk) >= batch:
            flush()
            chunk = []
    if chunk:
        flush()
    total = int(counts.sum())
    return (counts + 1) / (total + n), {"texts_counted": n_texts, "tokens_counted": total, "distinct_tokens": int((counts > 0).sum())}


def special_ids(tokenizer: Any) -> list[int]:
    """Ids of added and special tokens (``<|endoftext|>``, ``<|im_start|>`` ...)."""
    return sorted({int(i) for i in tokenizer.get_added_tokens_decoder()})


def hidden_vectors(model: Any, ids: Sequence[int], batch_size: int, parts: Path | None = None, progress: bool = True) -> Any:
    """The last hidden state of each token fed alone (one position: its mean-pooled state), in ``ids`` order.
    Finished batches are kept under ``parts`` (``<start>.npy``) and read back by a rerun."""
    import numpy as np
    import torch

    out = []
    if parts is not None:
        parts.mkdir(parents=True, exist_ok=True)
    t0, done = time.perf_counter(), 0
    for start in range(0, len(ids), batch_size):
        f = parts / f"{start:08d}-{batch_size}.npy" if parts is not None else None
        if f is not None and f.is_file():
            out.append(np.load(f))
            continue
        x = torch.tensor(list(ids[start : start + batch_size]), dtype=torch.long, device=model.device).view(-1, 1)
        with torch.inference_mode():
            h = model(input_ids=x, attention_mask=torch.ones_like(x)).last_hidden_state[:, 0, :].float().cpu().numpy()
        if f is not None:
            tmp = f.with_suffix(".tmp.npy")
            np.save(tmp, h)
            tmp.replace(f)
        out.append(h)
        done += len(h)
        if progress and (start // batch_size) % 20 == 0:
            rate = done / max(1e-9, time.perf_counter() - t0)
            log.info("hidden states: %d / %d tokens (%.0f tokens/s)", start + len(h), len(ids), rate)
    return np.concatenate(out, axis=0)


def distill(args: DistillArguments, progress: bool = True) -> tuple[Any, dict[str, Any]]:
    """The distilled ``SentenceTransformer`` and its record (see the module docstring)."""
    import numpy as np
    import torch
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import StaticEmbedding
    from tokenizers import Tokenizer

    from bencao.models import model_fingerprint, resolve_model

    t0 = time.perf_counter()
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    path = Path(resolve_model(str(args.model)))
    if not (path / "tokenizer.json").is_file():
        raise ConfigError(f"model {args.model!r}: {path} has no tokenizer.json (a transformers folder with a fast tokenizer is needed)")
    tok = Tokenizer.from_file(str(path / "tokenizer.json"))
    n = tok.get_vocab_size(with_added_tokens=True)
    specials = special_ids(tok)

    if args.source == "input":
        from safetensors import safe_open

        vectors = None
        for f in sorted(path.glob("*.safetensors")):
            with safe_open(str(f), framework="pt") as st:
                key = next((k for k in st.keys() if k.endswith("embed_tokens.weight")), None)
                if key is not None:
                    vectors = st.get_tensor(key).float().numpy()
                    break
        if vectors is None:
            raise ConfigError(f"model {args.model!r}: no embed_tokens.weight in {path}/*.safetensors")
    else:
        from transformers import AutoModel

        model = AutoModel.from_pretrained(str(path), dtype=getattr(torch, args.dtype)).to(args.device).eval()
        vectors = hidden_vectors(model, list(range(n)), args.batch_size, Path(args.output_dir) / PARTS_DIR, progress)
        del model
    vectors = np.asarray(vectors[:n], dtype=np.float32)
    if len(vectors) < n:
        raise ConfigError(f"model {args.model!r}: {len(vectors)} token vectors for a tokenizer of {n} tokens")
    keep = np.ones(n, dtype=bool)
    keep[[i for i in specials if i < n]] = False

    reduced, explained = pca(vectors[keep], args.pca_dims)
    if args.frequencies == "zipf":
        probs, freq = zipf_probabilities(n), {"frequencies": "zipf"}
    else:
        fpath = Path(args.frequencies)
        probs, counted = counted_probabilities(tok, iter_texts(fpath, args.max_texts), n)
        freq = {"frequencies": fpath.name, "frequencies_sha256": hashlib.sha256(fpath.read_bytes()).hexdigest(), **counted}
    weights = sif_weights(probs, args.sif_coefficient)
    emb = np.zeros((n, reduced.shape[1]), dtype=np.float32)
    emb[keep] = reduced * weights[keep, None].astype(np.float32)

    module = StaticEmbedding(tok, embedding_weights=torch.from_numpy(emb))
    st_model = SentenceTransformer(modules=[module], device="cpu")
    record = {
        "kind": "static-distilled",
        "base_model": str(args.model),
        "base_model_fingerprint": model_fingerprint(str(args.model)),
        "settings": {**{k: v for k, v in asdict(args).items() if k not in ("output_dir", "device", "threads")},
                     "frequencies": Path(args.frequencies).name},  # a file's name, not this machine's path
        "vocab_size": n,
        "special_tokens_zeroed": len(specials),
        "dim": int(emb.shape[1]),
        "pca_explained_variance": round(float(sum(explained)), 4),
        **freq,
        "seconds": round(time.perf_counter() - t0, 1),
    }
    return st_model, record


def main(args: DistillArguments) -> dict[str, Any]:
    """Distil, save the folder and ``bencao_distill.json``, drop the resumable parts; returns the record."""
    import shutil

    from bencao.io import atomic_write_json

    out = Path(str(args.output_dir))
    model, record = distill(args)
    model.save(str(out))
    atomic_write_json(out / RECORD_FILE, record)
    shutil.rmtree(out / PARTS_DIR, ignore_errors=True)
    log.info("distilled %s (%s) → %s: %d tokens × %d, PCA keeps %.1f %% of the variance, %.0f s", args.model, args.source,
             out, record["vocab_size"], record["dim"], 100 * record["pca_explained_variance"], record["seconds"])
    return record


if __name__ == "__main__":
    import sys

    from bencao.training.args import run_script

    logging.basicConfig(level=logging.INFO, format="%(message)s")
    raise SystemExit(run_script(None, "python -m bencao.training.static_distill", __doc__.splitlines()[0], parse_args, main))
