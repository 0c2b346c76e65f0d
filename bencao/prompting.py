"""Jinja prompt templates: ``<dir>/<name>.<lang>.jinja``, each with a ``system`` and a ``user`` block.

``render(name, lang, dirs, **vars)`` gives the chat messages. The answering pipeline's stages
(question understanding, entity choice, scorer, synonyms, relation-path planner, generator task
templates) keep theirs in ``bencao/prompts/``; data generation keeps its own folder. A user's
directory of templates (``prompts_dir`` in a recipe) takes precedence over the shipped ones,
file by file.

Fences. Text quoted from the knowledge base (the generator's evidence, the judge's contexts, the
linker's candidate cards) sits between a fence's opening and closing lines, ``<evidence-NONCE>`` …
``</evidence-NONCE>``, where NONCE is fresh random hex for every rendered prompt (the ``fence``
variable of every template: ``{{ fence.evidence }}``). A document cannot close a fence whose tag it
cannot know. The quoted text itself goes through :func:`defuse_fence` / :func:`quoted_line`: NFKC,
invisible and bidirectional characters removed, and anything that still looks like a tag of a fence
(``</evidence>``, ``</еvidence>`` with a Cyrillic е, ``<⁄evidence>``, ``〈/EVIDENCE〉``) defused to
``‹/evidence›``, so the model is not shown a look-alike boundary either. The LLM response cache keys
prompts with the nonces blanked (:func:`without_nonces`), so replays and resumed runs still hit.
"""

from __future__ import annotations

import functools
import re
import secrets
import unicodedata
from pathlib import Path
from typing import Any

from bencao.errors import ConfigError
from bencao.io import INVISIBLE

#: The answering pipeline's prompts.
PROMPTS_DIR = Path(__file__).with_name("prompts")
LANGS = ("zh", "en")

#: The fences of the shipped prompts; each template gets ``fence.<name>`` = ``<name>-<nonce>``.
FENCES = ("evidence", "contexts", "candidates")
NONCE_HEX = 16
_NONCE_RE = re.compile(rf"\b({'|'.join(FENCES)})-[0-9a-f]{{{NONCE_HEX}}}\b")

#: Line and paragraph separators and C0/C1 controls other than tab and newline: one space.
_CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029]")
#: What can stand for ``<``, ``/`` and ``>`` in a look-alike tag once NFKC has folded the full-width forms.
_OPEN = "<‹〈⟨❮ᐸ˂«"
_SLASH = "/⁄∕⧸╱\\\\"
_CLOSE = ">›〉⟩❯ᐳ˃»"
#: Letters of other scripts that print like the Latin letters of the fence names (NFKC leaves them alone).
_LOOKALIKE = {"a": "аɑαᎪ", "c": "сϲᏟ", "d": "ԁᎠ", "e": "еєҽεᎬ", "i": "іιıɩӏ1lǀ|", "n": "ոռηπпΝ", "o": "оοσօ0",
              "s": "ѕʂᏚ", "t": "тτᎢ", "v": "νѵᴠᏙ", "x": "хχ", "r": "гᴦ", "p": "рρᏢ", "u": "υսц", "l": "ӏ1|ǀ"}


def new_nonce() -> str:
    """Random hex for one prompt's fence tags."""
    return secrets.token_hex(NONCE_HEX // 2)


def fences(nonce: str | None = None) -> dict[str, str]:
    """``{fence name: tag}`` for one prompt: ``{"evidence": "evidence-3f9a…", ...}``."""
    nonce = nonce or new_nonce()
    return {name: f"{name}-{nonce}" for name in FENCES}


def without_nonces(text: str) -> str:
    """``text`` with every fence tag's nonce blanked (``evidence-NONCE``): what a response cache keys on."""
    return _NONCE_RE.sub(r"\1-NONCE", text)


#: Runs of text NFKC applies to: all but the full-width punctuation of Chinese prose (，：；！？（）～) and the ellipsis, kept as written.
_NFKC_RUNS = re.compile("[^\u2026\uff0c\uff1a\uff1b\uff01\uff1f\uff08\uff09\uff5e]+")


def clean_quoted(text: str) -> str:
    """Quoted text as a model is shown it: NFKC (full-width and mathematical letters and symbols folded; the
    full-width punctuation of Chinese prose kept), invisible and bidirectional characters removed, control
    characters and line/paragraph separators made spaces."""
    text = _NFKC_RUNS.sub(lambda m: unicodedata.normalize("NFKC", m.group(0)), text)
    text = INVISIBLE.sub("", text)
    return _CONTROLS.sub(" ", text)


@functools.lru_cache(maxsize=8)
def _fence_tag_re(names: tuple[str, ...]) -> re.Pattern[str]:
    """A tag of any fence of ``names`` in any case, with look-alike brackets, slashes and letters, spaces between its letters."""
    def letters(tag: str) -> str:
        return r"\s*".join(f"[{re.escape(ch + ch.upper() + _LOOKALIKE.get(ch, '') + _LOOKALIKE.get(ch, '').upper())}]"
                           for ch in tag.lower())

    alternatives = "|".join(letters(n) for n in names)
    return re.compile(rf"[{_OPEN}]\s*[{_SLASH}]?\s*(?:{alternatives})(?![^\W\d_])[^{_OPEN}{_CLOSE}\n]{{0,80}}[{_CLOSE}]?", re.IGNORECASE)


_DEFUSE = str.maketrans({**{c: "‹" for c in _OPEN}, **{c: "›" for c in _CLOSE}})
#: A chat template's special tokens (``<|im_start|>``, ``<|im_end|>``): a tokenizer may read them in text as turns.
_SPECIAL_TOKEN = re.compile(r"<\|[^|<>\s]{1,40}\|>")


def defuse_fence(text: str, fence: str) -> str:
    """``text`` cleaned (:func:`clean_quoted`) for quoting between a prompt's ``fence`` lines, with anything
    that looks like a tag of that fence defused (‹/evidence›), so it can neither close the fence early nor
    open another, not even with look-alike characters (the fence's real tags carry a nonce besides); a chat
    template's special tokens (``<|im_start|>``) are defused the same way."""
    text = _SPECIAL_TOKEN.sub(lambda m: m.group(0).translate(_DEFUSE), clean_quoted(text))
    names = tuple(dict.fromkeys((fence, *FENCES)))  # the other fences' tags too: no look-alike of any boundary
    return _fence_tag_re(names).sub(lambda m: m.group(0).translate(_DEFUSE), text)


def quoted_line(text: Any, fence: str) -> str:
    """:func:`defuse_fence` of ``text`` made one line (whitespace runs, newlines included, collapsed), so it
    cannot start a numbered item or a line of its own either."""
    return defuse_fence(" ".join(clean_quoted(str(text or "")).split()), fence)


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
    variables.setdefault("fence", fences())  # one nonce per rendered prompt
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
