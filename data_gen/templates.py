"""Prompt templates: ``prompts/<step>.<lang>.jinja``, each with a ``system`` and a ``user`` block.

``render(step, lang, **vars)`` gives the chat messages. A user's own directory of templates
(``prompts_dir`` in a recipe) takes precedence over the shipped ones, file by file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bencao.llm.base import Message

PROMPTS_DIR = Path(__file__).with_name("prompts")
STEPS = ("relation_candidates", "relation_merge", "extract_triples", "entity_attributes", "cot_decompose", "cot_reason",
         "cot_extract", "cot_judge", "pair_question")
LANGS = ("zh", "en")


def render(step: str, lang: str, prompts_dir: str | None = None, **variables: Any) -> list[Message]:
    """Chat messages for ``step`` in ``lang`` (zh or en; anything else falls back to en)."""
    from bencao.prompting import render as _render

    return _render(step, lang, (PROMPTS_DIR,), prompts_dir=prompts_dir, **variables)
