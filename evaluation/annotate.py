"""What the runner adds to a system's output before it is written: system-independent annotations.

- **open-ended recommendation** (a ``rec`` record without ``candidates``): the foods named in the
  free-text answer, linked with the graph's own machinery (alias-table mentions, jieba for Chinese,
  then the entity linker), kept when the entity's type is one of ``open_rec.item_types``; gold
  names written verbatim in the answer count too (an answer may name a food the graph does not
  know). They become the prediction's ``items`` (in order of appearance) and each gold name's
  link its ``gold_linked``: the metrics read only these, whichever system wrote the text.
- **context metrics**: the evidence the system retrieved, read back from the graph by the ids in
  the output (snippets in rank order, then triples), scored by
  :mod:`bencao.evaluation.context_metrics` (lexical always; the LLM judge when enabled). Stored
  per record as ``context`` in ``predictions.jsonl``.

Nothing here knows which system produced the output: it needs the graph directory only.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bencao.errors import BencaoError
from bencao.evaluation.context_metrics import judge_context_scores, lexical_context_scores
from bencao.serving.config import OpenRecConfig  # noqa: F401  (settings live in the eval section)
from bencao.text import norm_key


def is_open_rec(rec: dict[str, Any]) -> bool:
    return rec.get("task") == "rec" and "candidates" not in rec


class Annotator:
    """Per-run helper of the runner: ``annotate(records, outputs) -> [extra row fields]``."""

    def __init__(self, graph_dir: str | Path | None, config: Any, out_dir: Path | None = None):
        self.graph_dir = Path(graph_dir) if graph_dir else None
        self.config = config
        self.out_dir = out_dir
        self._graph: Any = None
        self._linker: Any = None
        self._judge: Any = None

    # -- resources, opened on first use
    @property
    def graph(self) -> Any:
        if self._graph is None:
            if self.graph_dir is None or not (self.graph_dir / "graph.sqlite").exists():
                raise BencaoError("open-ended rec records (no candidates) need --graph DIR: foods in the answer are linked to the graph")
            from bencao.retrieval.graph.store import Graph

            self._graph = Graph.open(self.graph_dir, read_only=True)
        return self._graph

    @property
    def linker(self) -> Any:
        if self._linker is None:
            import dataclasses

            from bencao.retrieval.linking import EntityLinker

            cfg = self.config.retrieval
            # the rule linker, whatever LLM stages the system under test uses: the same foods are found in every system's answer
            rules = dataclasses.replace(cfg.linking, selector="rules", llm=None, scorer=type(cfg.linking.scorer)(),
                                        synonyms=type(cfg.linking.synonyms)())
            self._linker = (EntityLinker(self.graph, rules), cfg)  # alias tables: mentions are alias matches already
        return self._linker

    @property
    def judge(self) -> Any:
        if self._judge is None:
            from bencao.llm import make_client

            jc = self.config.eval.judge
            self._judge = make_client(jc.llm, default_cache=(self.out_dir / "judge_cache.sqlite") if self.out_dir else None)
        return self._judge

    # -- open-ended recommendation
    def rec_items(self, rec: dict[str, Any], pred: dict[str, Any] | None) -> dict[str, Any] | None:
        """The prediction with ``items`` (foods in its text) and ``gold_linked`` added."""
        from bencao.retrieval.search.mentions import extract_mentions

        pred = dict(pred or {})
        text = str(pred.get("text") or "")
        linker, cfg = self.linker
        q = cfg.question
        types = set(self.config.eval.open_rec.item_types)
        found: list[tuple[int, dict[str, Any]]] = []
        seen: set[str] = set()
        key_text = norm_key(text)
        if text.strip() and not pred.get("abstained"):
            for m in extract_mentions(self.graph, text, linker.tables.base, max_ngram=q.max_ngram, min_cjk_chars=q.min_cjk_chars,
                                      stopwords=frozenset(q.stopwords), limit=self.config.eval.open_rec.max_items):
                link = linker.link(m)
                if link.abstained or link.type not in types or link.chosen_id in seen:
                    continue
                seen.add(link.chosen_id)
                found.append((key_text.find(norm_key(m)), {"mention": m, "id": link.chosen_id, "name": link.label, "type": link.type}))
            names = {norm_key(str(it.get(k) or "")) for _, it in found for k in ("name", "mention")}
            for g in rec["gold"]:  # a gold food written out, known to the graph or not
                k = norm_key(g)
                if k and k in key_text and k not in names:
                    found.append((key_text.find(k), {"mention": g, "id": None, "name": g, "type": None}))
        pred["items"] = [it for _, it in sorted(found, key=lambda x: x[0])][: self.config.eval.open_rec.max_items]
        gold_linked: dict[str, str | None] = {}
        for g in rec["gold"]:
            link = linker.link(g)
            gold_linked[g] = None if link.abstained else link.chosen_id
        pred["gold_linked"] = gold_linked
        return pred

    # -- contexts
    def contexts(self, output: Any) -> list[str] | None:
        """The evidence items of one output as texts, in rank order (None: the system did not retrieve)."""
        ids = getattr(output, "evidence_ids", None) or {}
        if not ids and getattr(output, "evidence_text", None) is None:
            return None
        if self.graph_dir is None:
            return None
        from bencao.retrieval.evidence import TripleHit

        g = self.graph
        snips = g.get_snippets(ids.get("snippet_ids", []))
        trips = g.get_triples(ids.get("triple_ids", []))
        out = []
        for sid in ids.get("snippet_ids", []):
            s = snips.get(sid)
            if s:
                out.append(" › ".join(s.get("path") or []) + "\n" + s["text"])
        out += [TripleHit.from_row(trips[t]).text() for t in ids.get("triple_ids", []) if t in trips]
        return out

    # -- all of it, for one batch
    def annotate(self, records: list[dict[str, Any]], outputs: list[Any]) -> list[dict[str, Any]]:
        extras: list[dict[str, Any]] = [{} for _ in records]
        live = [i for i, o in enumerate(outputs) if not isinstance(o, Exception)]
        for i in live:
            if is_open_rec(records[i]):
                outputs[i].prediction = self.rec_items(records[i], outputs[i].prediction)
        ctx = {i: self.contexts(outputs[i]) for i in live if records[i].get("task") != "el"}
        coverage = self.config.eval.judge.lexical_coverage
        for i, c in ctx.items():
            if c is not None:
                scores = lexical_context_scores(records[i], c, coverage)
                if scores is not None:
                    extras[i]["context"] = scores
        if self.config.eval.judge.enabled:
            todo = [i for i, c in ctx.items() if c is not None and "context" in extras[i]]
            if todo:
                judged = judge_context_scores([records[i] for i in todo], [ctx[i] or [] for i in todo], self.judge, self.config.eval.judge)
                for i, j in zip(todo, judged):
                    if j:
                        extras[i]["context"].update(j)
        return extras

    def close(self) -> None:
        if self._graph is not None:
            self._graph.close()
            self._graph = None
