"""The evidence a generator reads, as one numbered text under a character budget: ``render_context``.

Every fact the answer may use gets a number in one citation list — knowledge-base facts (triples, with
the passage or book that asserts them), reasoning paths, entity attributes and source passages — so an
answer resting on a fact can cite it, and ``[n]`` in a reply maps back to exactly one item. The same text
is what ``/v1/retrieve`` returns as ``context`` (cut to the request's ``budget_chars``) and what the
generator's prompt holds, so what a client measures is what the generator receives.

The layout is for small readers: passages with their heading path first (the question's own BM25 hits first:
a real 1.5B reader given facts first scored below plain BM25's passages), then facts, each one short line in the
question's language ("山药的功效：补中益气〔饮膳正要 › 卷第三 › 菜品 › 山药〕"). The
budget is spent in ``ContextConfig.order``; a passage that does not fit whole is cut at the budget
(never below ``min_item_chars``), so a budget always fills.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bencao.config import field
from bencao.retrieval.evidence import Evidence, SnippetHit, TripleHit, path_heading

KINDS = ("facts", "paths", "entities", "passages")


@dataclass
class ContextConfig:
    """What goes into the generator's evidence text, in which order, under which budget (the item counts and
    the passage length are ``answer.max_triples``, ``max_paths``, ``max_entities``, ``max_snippets`` and
    ``max_snippet_chars``)."""

    budget_chars: int = field(0, help="Characters of evidence text (numbered items) given to the generator; 0 = no character budget "
                                      "(the answer.max_* counts limit it instead).")
    order: list[str] = field(default_factory=lambda: ["passages", "facts", "paths", "entities"],
                             help="The kinds of evidence in the order the budget is spent: facts (triples), passages (snippets), "
                                  "paths (reasoning paths), entities (attributes of linked entities). Passages first: a real small "
                                  "reader given facts first scored below plain BM25's passages (bench/RESULTS.md, eval-llm).")
    min_item_chars: int = field(60, help="A passage is cut to fit the rest of the budget only when at least this much is left.")
    fact_sources: bool = field(True, help="After each fact, where it was read (the heading of its passage, or its books).")
    passage_mode: str = field("whole", help="whole: a passage from its start (cut to answer.max_snippet_chars) | excerpt: the "
                                            "passage's run of sentences that holds the most (and the rarest) words of the question, "
                                            "and for an option's passage the option, up to excerpt_chars — more passages fit a budget.")
    excerpt_chars: int = field(200, help="passage_mode excerpt: the longest excerpt of one passage, in characters.")
    passage_order: str = field("lexical", help="evidence: passages in the retriever's fused order | lexical: the passages the "
                                                "question's own BM25 search found first, by that score (the strongest question-only "
                                                "signal on the classics: bench/RESULTS.md), then the others in fused order.")
    options_first: bool = field(True, help="A question with options: the passages found for the options (one per option, in option "
                                           "order) come before the question's other passages, so the budget covers every option.")

    def validate(self) -> None:
        from bencao.errors import ConfigError

        bad = [k for k in self.order if k not in KINDS]
        if bad:
            raise ConfigError(f"answer.context.order: unknown kind(s) {bad}; known: {', '.join(KINDS)}")
        if self.budget_chars < 0:
            raise ConfigError("answer.context.budget_chars must be 0 (no budget) or positive")
        if self.passage_mode not in PASSAGE_MODES:
            raise ConfigError(f"answer.context.passage_mode: {self.passage_mode!r} is not one of {', '.join(PASSAGE_MODES)}")
        if self.passage_order not in ("evidence", "lexical"):
            raise ConfigError(f"answer.context.passage_order: {self.passage_order!r} is not evidence or lexical")
        if self.excerpt_chars < 20:
            raise ConfigError("answer.context.excerpt_chars must be at least 20")


PASSAGE_MODES = ("whole", "excerpt")
#: An option named in a piece of a passage outweighs any question word (the option's passage is about it).
FOCUS_WEIGHT = 20.0


@dataclass
class Limits:
    """How many items of each kind, and how long a passage (answer.max_* in a serving recipe)."""

    facts: int = 30
    paths: int = 10
    entities: int = 10
    passages: int = 12
    passage_chars: int = 600


@dataclass
class ContextItem:
    n: int
    kind: str  # fact | path | entity | passage
    text: str  # the line as the generator reads it, without its number
    snippet_id: str | None = None  # the passage (a passage item, or the passage a fact was read from)
    triple_id: str | None = None
    path: list[str] | None = None
    heading: str = ""
    generated: bool = False
    source_text: str = ""

    def line(self) -> str:
        return f"[{self.n}] {self.text}"

    def citation(self) -> dict[str, Any]:
        """The public form of a cited item (as ``serving.answer.citation`` gives for passages)."""
        return {"n": self.n, "kind": self.kind, "snippet_id": self.snippet_id, "triple_id": self.triple_id,
                "path": list(self.path or []), "heading": self.heading, "text": self.source_text or self.text,
                "generated": self.generated}


@dataclass
class RenderedContext:
    items: list[ContextItem]
    budget_chars: int
    truncated: int = 0  # items left out for the budget

    @property
    def text(self) -> str:
        return "\n".join(it.line() for it in self.items)

    def __len__(self) -> int:
        return len(self.text)

    def references(self) -> list[dict[str, Any]]:
        """The citation list ``parse_reply`` maps ``[n]`` against."""
        return [it.citation() for it in self.items]

    def to_dict(self) -> dict[str, Any]:
        return {"text": self.text, "chars": len(self.text), "budget_chars": self.budget_chars, "left_out": self.truncated,
                "citations": self.references()}

    @classmethod
    def from_text(cls, text: str, budget_chars: int = 0) -> "RenderedContext":
        """A context read back from its text (``/v1/retrieve``'s ``context``): one ``[n] …`` item a line."""
        import re

        items = []
        for line in (text or "").splitlines():
            m = re.match(r"\[(\d+)\] (.*)$", line)
            if m:
                items.append(ContextItem(int(m.group(1)), "item", m.group(2)))
            elif items:  # a continuation line (no item ever spans lines as rendered, but be lenient)
                items[-1].text += " " + line.strip()
        return cls(items, budget_chars)


def fact_sentence(t: TripleHit, lang: str, templates: dict[str, dict[str, str]] | None = None) -> str:
    """A triple as a short sentence in ``lang`` (the graph answerer's relation templates)."""
    from bencao.serving.graph_answerer import DEFAULT_TEMPLATES

    tmpl = (templates or DEFAULT_TEMPLATES).get(lang, {}).get(t.relation)
    if tmpl:
        return tmpl.format(h=t.head, t=t.tail)
    return f"{t.head} —{t.relation.replace('_', ' ')}→ {t.tail}"


def _clean(text: str) -> str:
    return " ".join(str(text).split())


def _cut(text: str, n: int) -> str:
    return text if len(text) <= n else text[: max(0, n - 1)] + "…"


def _generated_label(lang: str) -> str:
    return "（模型生成的推理，非原文）" if lang == "zh" else " (model-generated reasoning, not a source text)"


def _fact_items(ev: Evidence, cfg: ContextConfig, lim: Limits, lang: str, by_id: dict[str, SnippetHit]) -> list[ContextItem]:
    out: list[ContextItem] = []
    seen: set[str] = set()
    for t in ev.triples:
        if len(out) >= lim.facts:
            break
        sentence = fact_sentence(t, lang)
        if sentence in seen:
            continue
        seen.add(sentence)
        sid = next((s for s in t.snippet_ids if s in by_id), t.snippet_ids[0] if t.snippet_ids else None)
        snip = by_id.get(sid) if sid else None
        where = path_heading(snip.path) if snip is not None else "、".join(t.sources[:2]) if t.sources else ""
        text = sentence + (f"〔{where}〕" if cfg.fact_sources and where else "")
        out.append(ContextItem(0, "fact", text, snippet_id=sid, triple_id=t.id, path=list(snip.path) if snip else None,
                               heading=where, source_text=snip.text if snip is not None else sentence))
    return out


def _path_items(ev: Evidence, lim: Limits, lang: str) -> list[ContextItem]:
    label = "推理路径" if lang == "zh" else "path"
    return [ContextItem(0, "path", f"{label}：{_clean(p.text)}" if lang == "zh" else f"{label}: {_clean(p.text)}")
            for p in ev.paths[: lim.paths] if p.text]


def _entity_items(ev: Evidence, lim: Limits, lang: str) -> list[ContextItem]:
    from bencao.retrieval.evidence import attributed_values

    sep = "；" if lang == "zh" else "; "
    out = []
    for e in [e for e in ev.entities if e.attributes or e.description][: lim.entities]:
        bits = [f"{k}: {v}" for k, v in attributed_values(e).items()]  # sourced values name the documents that give them
        if e.description:
            bits.append(_cut(_clean(e.description), 200))
        out.append(ContextItem(0, "entity", f"{e.name or e.id}" + (f"（{e.type}）" if e.type and lang == "zh" else f" ({e.type})" if e.type else "")
                               + ("：" if lang == "zh" else ": ") + sep.join(bits)))
    return out


def _pieces(text: str, max_chars: int) -> list[str]:
    """Sentences, and a sentence longer than ``max_chars`` split again at its commas (then by length)."""
    import re

    from bencao.text import split_sentences

    out: list[str] = []
    for sent in split_sentences(text):
        if len(sent) <= max_chars:
            out.append(sent)
            continue
        for part in re.split(r"(?<=[，、,:：])", sent):
            while len(part) > max_chars:
                out.append(part[:max_chars])
                part = part[max_chars:]
            if part:
                out.append(part)
    return out


def excerpt(text: str, weights: dict[str, float], max_chars: int, focus: list[str] | tuple[str, ...] = ()) -> str:
    """The run of consecutive sentences of ``text``, at most ``max_chars`` long, whose distinct words weigh most
    (``weights``: word → idf) — a ``focus`` text (an option) named in it outweighs them all; "…" marks a cut."""
    from bencao.retrieval.index.lexical import analyze
    from bencao.text import norm_key

    text = _clean(text)
    if len(text) <= max_chars:
        return text
    pieces = _pieces(text, max_chars)
    toks = [set(analyze(p)) for p in pieces]
    keys = [norm_key(p) for p in pieces]
    fkeys = [k for k in (norm_key(f) for f in focus) if k]
    best, best_span = -1.0, (0, 0)
    for i in range(len(pieces)):
        length, seen, j = 0, set(), i
        hits = 0
        while j < len(pieces) and length + len(pieces[j]) <= max_chars:
            length += len(pieces[j])
            seen |= toks[j]
            hits += sum(1 for f in fkeys if f in keys[j])
            j += 1
        if j == i:
            continue
        score = sum(weights.get(t, 0.0) for t in seen) + FOCUS_WEIGHT * min(hits, 1)
        if score > best:
            best, best_span = score, (i, j)
    i, j = best_span
    body = "".join(pieces[i:j])
    return ("…" if i > 0 else "") + body + ("…" if j < len(pieces) else "")


def _option_index(s: SnippetHit) -> int | None:
    for v in s.via:
        if v.startswith("option:") and v.split(":", 1)[1].isdigit():
            return int(v.split(":", 1)[1])
    return None


def _options_first(snippets: list[SnippetHit]) -> list[SnippetHit]:
    """The options' passages round-robin in option order (best first within an option), then the rest as ranked."""
    by_opt: dict[int, list[SnippetHit]] = {}
    rest = []
    for s in snippets:
        i = _option_index(s)
        (by_opt.setdefault(i, []) if i is not None else rest).append(s)
    out: list[SnippetHit] = []
    depth = max((len(v) for v in by_opt.values()), default=0)
    for d in range(depth):
        out += [by_opt[i][d] for i in sorted(by_opt) if d < len(by_opt[i])]
    return out + rest


def _passage_items(snippets: list[SnippetHit], lim: Limits, lang: str, cfg: ContextConfig | None = None,
                   weights: dict[str, float] | None = None, options: list[str] | None = None) -> list[ContextItem]:
    out = []
    if cfg is not None and cfg.passage_order == "lexical":  # stable: the rest keep the fused order
        snippets = sorted(snippets, key=lambda s: -(s.scores.get("bm25") or 0.0))
    if cfg is not None and cfg.options_first and options:
        snippets = _options_first(snippets)
    for s in snippets[: lim.passages]:
        head = path_heading(s.path)
        if cfg is not None and cfg.passage_mode == "excerpt":
            i = _option_index(s)
            focus = [options[i]] if options and i is not None and i < len(options) else []
            body = excerpt(s.text, weights or {}, min(cfg.excerpt_chars, lim.passage_chars), focus)
        else:
            body = _cut(_clean(s.text), lim.passage_chars)
        gen = _generated_label(lang) if s.generated else ""
        out.append(ContextItem(0, "passage", f"{head}{gen}：{body}" if lang == "zh" else f"{head}{gen}: {body}", snippet_id=s.id,
                               path=list(s.path), heading=head, generated=s.generated, source_text=s.text))
    return out


def render_context(evidence: Evidence | None, cfg: ContextConfig | None = None, lang: str = "zh",
                   budget_chars: int | None = None, limits: Limits | None = None,
                   options: list[str] | None = None) -> RenderedContext:
    """The numbered evidence text of ``evidence`` under ``budget_chars`` (default ``cfg.budget_chars``; 0 = none).

    ``options``: a multiple-choice question's option texts (an option's passage is excerpted around the option)."""
    cfg = cfg or ContextConfig()
    lim = limits or Limits()
    budget = cfg.budget_chars if budget_chars is None else int(budget_chars)
    if evidence is None:
        return RenderedContext([], budget)
    by_id = {s.id: s for s in evidence.snippets}
    weights = evidence.stats.get("terms") if isinstance(evidence.stats.get("terms"), dict) else None
    if weights is None and cfg.passage_mode == "excerpt" and evidence.question:
        from bencao.retrieval.index.lexical import analyze_query

        weights = {t: 1.0 for t in analyze_query(evidence.question)}
    pools: dict[str, list[ContextItem]] = {
        "facts": _fact_items(evidence, cfg, lim, lang, by_id), "paths": _path_items(evidence, lim, lang),
        "entities": _entity_items(evidence, lim, lang),
        "passages": _passage_items(evidence.snippets, lim, lang, cfg, weights, options)}
    items: list[ContextItem] = []
    used = 0
    left_out = 0
    for kind in cfg.order:
        for it in pools.get(kind, []):
            n = len(items) + 1
            line_len = len(f"[{n}] ") + len(it.text) + (1 if items else 0)
            if budget and used + line_len > budget:
                room = budget - used - len(f"[{n}] ") - (1 if items else 0)
                if it.kind == "passage" and room >= cfg.min_item_chars:
                    it.text = _cut(it.text, room)
                    line_len = len(f"[{n}] ") + len(it.text) + (1 if items else 0)
                else:
                    left_out += 1
                    continue
            it.n = n
            items.append(it)
            used += line_len
    return RenderedContext(items, budget, left_out)


def passages_context(snippets: list[SnippetHit], cfg: ContextConfig | None = None, lang: str = "zh",
                     budget_chars: int | None = None, limits: Limits | None = None, question: str = "",
                     weights: dict[str, float] | None = None) -> RenderedContext:
    """Passages alone in the same layout and budget (plain BM25's evidence in a comparison)."""
    cfg = cfg or ContextConfig()
    only = ContextConfig(budget_chars=cfg.budget_chars, order=["passages"], min_item_chars=cfg.min_item_chars,
                         fact_sources=cfg.fact_sources, passage_mode=cfg.passage_mode, excerpt_chars=cfg.excerpt_chars,
                         passage_order="evidence", options_first=cfg.options_first)
    return render_context(Evidence(question=question, snippets=list(snippets), stats={"terms": weights} if weights else {}),
                          only, lang, budget_chars, limits)
