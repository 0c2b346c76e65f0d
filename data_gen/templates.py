"""Prompt templates: ``prompts/<step>.<lang>.jinja``, each with a ``system`` and a ``user`` block.

``render(step, lang, **vars)`` gives the chat messages. A user's own directory of templates
(``prompts_dir`` in a recipe) takes precedence over the shipped ones, file by file.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from bencao.errors import ConfigError
from bencao.llm.base import Message

PROMPTS_DIR = Path(__file__).with_name("prompts")
STEPS = ("relation_candidates", "relation_merge", "extract_triples", "entity_attributes", "cot_decompose", "cot_reason",
         "cot_extract", "cot_judge", "pair_question")
LANGS = ("zh", "en")


@functools.lru_cache(maxsize=8)
def _env(extra_dir: str | None):
    import jinja2

    dirs = [extra_dir, str(PROMPTS_DIR)] if extra_dir else [str(PROMPTS_DIR)]
    return jinja2.Environment(loader=jinja2.FileSystemLoader(dirs), undefined=jinja2.StrictUndefined, keep_trailing_newline=False,
                              autoescape=False)


def render(step: str, lang: str, prompts_dir: str | None = None, **variables: Any) -> list[Message]:
    """Chat messages for ``step`` in ``lang`` (zh or en; anything else falls back to en)."""
    import jinja2

    lang = lang if lang in LANGS else "en"
    env = _env(prompts_dir)
    try:
        tmpl = env.get_template(f"{step}.{lang}.jinja")
    except jinja2.TemplateNotFound:
        raise ConfigError(f"no prompt template {step}.{lang}.jinja in {prompts_dir or PROMPTS_DIR}") from None
    ctx = tmpl.new_context(dict(variables))
    try:
        system = "".join(tmpl.blocks["system"](ctx)).strip()
        user = "".join(tmpl.blocks["user"](ctx)).strip()
    except jinja2.UndefinedError as exc:
        raise ConfigError(f"prompt {step}.{lang}.jinja: {exc}") from None
    except KeyError as exc:
        raise ConfigError(f"prompt {step}.{lang}.jinja: missing block {exc}") from None
    msgs: list[Message] = []
    if system:
        msgs.append({"role": "system", "content": system})
    msgs.append({"role": "user", "content": user})
    return msgs
