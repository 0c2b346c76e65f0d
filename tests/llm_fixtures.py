"""Test helpers for the LLM layer: a tiny real Qwen2 model and a scripted responder.

The tiny model is built from a config (2 layers, hidden 64) with a byte-level BPE tokenizer trained
in-process and Qwen2.5's own chat template (shipped by trl): the real transformers generation
path, offline, in about a second. Its text is noise.

The scripted responder stands in for a remote teacher where exact replies are needed
(malformed JSON, failures at a known request); it goes through the same BaseClient concurrency
bound. Behind ``bencao.llm.local_server`` its failures become HTTP statuses (429 with Retry-After,
503, 400), which exercises the openai client's own retries.
"""

from __future__ import annotations

import threading
import time
from importlib import resources
from typing import Any, Callable

from bencao.llm.base import BaseClient, Completion, LLMError, Message

_CORPUS = [
    "人参味甘微寒，主补五脏，安精神。", "枸杞子补肾益精，养肝明目。", "山药健脾益胃，补肺止咳。",
    "Ginger warms the stomach and stops vomiting.", "Rice is a cereal grain eaten as a staple food.",
    '{"triples": [{"head": "人参", "relation": "功效", "tail": "补气"}]}', "question answer reasoning triples JSON",
]


def tiny_tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    trainer = trainers.BpeTrainer(vocab_size=600, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(_CORPUS * 20, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    fast.chat_template = (resources.files("trl") / "chat_templates" / "qwen2_5.jinja").read_text(encoding="utf-8")
    return fast


def tiny_model(tokenizer, seed: int = 0):
    import torch
    from transformers import AutoModelForCausalLM, Qwen2Config

    torch.manual_seed(seed)
    cfg = Qwen2Config(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                      vocab_size=len(tokenizer), tie_word_embeddings=True, max_position_embeddings=2048,
                      bos_token_id=tokenizer.convert_tokens_to_ids("<|endoftext|>"),
                      eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    return AutoModelForCausalLM.from_config(cfg).eval()


def save_tiny_model(path, seed: int = 0) -> str:
    tok = tiny_tokenizer()
    model = tiny_model(tok, seed=seed)
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return str(path)


Reply = str | Exception | Callable[[list[Message]], "str | Exception"]


class ScriptedClient(BaseClient):
    """Answers from a script: a list of replies consumed in order, or a function of the messages.

    A reply that is an exception (an :class:`LLMError`) is raised. ``calls`` records every request,
    ``times`` when it arrived (``time.monotonic``).
    """

    def __init__(self, script: list[Reply] | Callable[[list[Message]], "str | Exception"], model: str = "scripted", **kw: Any):
        kw.setdefault("max_concurrency", 4)
        super().__init__(**kw)
        self.model = model
        self.script = script
        self.calls: list[list[Message]] = []
        self.times: list[float] = []
        self._lock = threading.Lock()

    def _call_once(self, messages: list[Message], params: dict[str, Any]) -> Completion:
        with self._lock:
            self.calls.append(messages)
            self.times.append(time.monotonic())
            if callable(self.script):
                reply: Any = self.script
            else:
                if not self.script:
                    raise AssertionError("scripted client ran out of replies")
                reply = self.script.pop(0)
        if callable(reply):
            reply = reply(messages)
        if isinstance(reply, Exception):
            raise reply
        return Completion(text=reply, model=self.model, prompt_tokens=sum(len(m["content"]) for m in messages), completion_tokens=len(reply))


def timeout_error() -> LLMError:
    return LLMError("scripted: timed out", retryable=True, kind="timeout")
