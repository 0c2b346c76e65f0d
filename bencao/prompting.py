"""Jinja prompt templates: ``<dir>/<name>.<lang>.jinja``, each with a ``system`` and a ``user`` block.

``render(name, lang, dirs, **vars)`` gives the chat messages. The answering pipeline's stages
(question understanding, entity choice, scorer, synonyms, relation-path planner, generator task
templates) keep theirs in ``bencao/prompts/``; data generation keeps its own folder. A user's
directory of templates (``prompts_dir`` in a recipe) takes precedence over the shipped ones,
file by file.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import Any

from bencao.errors import ConfigError

#: The answering pipeline's prompts.
PROMPTS_DIR = Path(__file__).with_name("prompts")
LANGS = ("zh", "en")


@functools.lru_cache(maxsize=8)
def _fence_tag_re(tag: str) -> re.Pattern[str]:
    return re.compile(rf"<\s*/?\s*{re.escape(tag)}\b[^>]*>?", re.IGNORECASE)


def defuse_fence(text: str, fence: str) -> str:
    """``text`` quoted between a prompt's ``<fence>`` and ``</fence>`` lines, with any tag of that fence it holds
    defused (‹fence›), so it cannot close the fence early or open another."""
    return _fence_tag_re(fence).sub(lambda m: m.group(0).replace("<", "‹").replace(">", "›"), text)


def quoted_line(text: Any, fence: str) -> str:
    """:func:`defuse_fence` of ``text`` made one line (whitespace runs, newlines included, collapsed), so it
    cannot start a numbered item or a line of its own either."""
    return defuse_fence(" ".join(str(text or "").split()), fence)


@functools.lru_cache(maxsize=16)
def _env(dirs: tuple[str, ...]):
    import jinja2

    return jinja2.Environment(loader=jinja2.FileSystemLoader(list(dirs)), undefined=jinja2.StrictUndefined,
                              keep_trailing_newline=False, autoescape=False)


def render(name: str, lang: str, dirs: tuple[str | Path, ...] = (PROMPTS_DIR,), prompts_dir: str | Path | None = None,
           **variables: Any) -> list[dict[str, str]]:
    """Chat messages of template ``name`` in ``lang`` (zh or en; anything else falls back to en).

    ``prompts_dir`` is searched first (a user's overrides), then ``dirs``.
    """
    import jinja2

    lang = lang if lang in LANGS else "en"
    search = tuple(str(d) for d in ((prompts_dir,) if prompts_dir else ()) + tuple(dirs))
    env = _env(search)
    fname = f"{name}.{lang}.jinja"
    try:
        tmpl = env.get_template(fname)
    except jinja2.TemplateNotFound:
        raise ConfigError(f"no prompt template {fname} in {', '.join(search)}") from None
    ctx = tmpl.new_context(dict(variables))
    try:
        system = "".join(tmpl.blocks["system"](ctx)).strip()
        user = "".join(tmpl.blocks["user"](ctx)).strip()
    except jinja2.UndefinedError as exc:
        raise ConfigError(f"prompt {fname}: {exc}") from None
    except KeyError as exc:
        raise ConfigError(f"prompt {fname}: missing block {exc}") from None
    msgs: list[dict[str, str]] = []
    if system:
        msgs.append({"role": "system", "content": system})
    if variables.get("example") and "example_user" in tmpl.blocks and "example_assistant" in tmpl.blocks:
        # one worked example as a prior turn (a template's optional example_user / example_assistant blocks)
        msgs.append({"role": "user", "content": "".join(tmpl.blocks["example_user"](ctx)).strip()})
        msgs.append({"role": "assistant", "content": "".join(tmpl.blocks["example_assistant"](ctx)).strip()})
    msgs.append({"role": "user", "content": user})
    return msgs
