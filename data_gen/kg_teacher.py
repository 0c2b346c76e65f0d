"""The LLM-free teacher (MedReason-style): link entities, take shortest graph paths, verbalise them.

For a question with a gold answer: the answer's entities (the gold options, or the free answer) and
the question's entities (question text and, for choice questions, nothing from wrong options) are
linked with the alias table; shortest paths between them (at most ``max_hops`` edges, ``paths_per_pair``
per pair, ``max_paths`` in all, shortest first, then by the product of confidences scaled down by each
middle entity's log-degree; never through a hub — see
:mod:`bencao.data_gen.kg_paths`) are grouped by the answer entity they reach, and become CoT triples
plus a templated reasoning text in the SFT output format.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from bencao.data_gen.kg_paths import PathFinder, Step, path_triples
from bencao.data_gen.linking import AliasLinker
from bencao.data_gen.qa_input import QAItem
from bencao.data_gen.runner import Done, Skip
from bencao.data_gen.sft_format import sft_records
from bencao.retrieval.graph.store import Graph


@dataclass
class PathSettings:
    max_hops: int = 3
    paths_per_pair: int = 2
    max_paths: int = 6
    max_question_entities: int = 8
    hub_degree: int = 100
    hub_relation_fanin: float = 20.0
    hub_relations: list[str] = field(default_factory=list)

    def finder(self, graph: Graph, layers: tuple[str, ...] | None = None) -> PathFinder:
        return PathFinder(graph, layers, hub_degree=self.hub_degree, hub_relation_fanin=self.hub_relation_fanin,
                          hub_relation_names=self.hub_relations)


@dataclass
class LinkedPaths:
    question_entities: list[str]
    answer_entities: list[str]
    groups: dict[str, list[list[Step]]]  # answer entity -> its paths, best first

    @property
    def paths(self) -> list[list[Step]]:
        return [p for ps in self.groups.values() for p in ps]


def link_and_find_paths(item: QAItem, linker: AliasLinker, finder: PathFinder, s: PathSettings) -> LinkedPaths | Skip:
    ans: list[str] = []
    for text in item.answer_text:
        ans += [m.entity_id for m in linker.link(text) if m.entity_id not in ans]
    if not ans:
        return Skip("answer_not_linked", f"no graph entity for the answer {item.answer_display!r}")
    q = [m.entity_id for m in linker.link(item.question, whole=False) if m.entity_id not in ans][: s.max_question_entities]
    if not q:
        return Skip("question_not_linked", "no graph entity in the question")
    groups: dict[str, list[list[Step]]] = {}
    cands = []
    for a in ans:
        for e in q:
            for p in finder.paths(e, a, max_hops=s.max_hops, k=s.paths_per_pair):
                cands.append((a, p))
    if not cands:
        return Skip("no_path", f"no path of ≤{s.max_hops} hops between {len(q)} question and {len(ans)} answer entities")
    cands.sort(key=lambda ap: (len(ap[1]), -finder.path_score(ap[1])))
    for a, p in cands[: s.max_paths]:
        groups.setdefault(a, []).append(p)
    return LinkedPaths(q, ans, groups)


def verbalise(item: QAItem, lp: LinkedPaths, graph: Graph) -> tuple[str, list[dict[str, Any]]]:
    """A templated reasoning text and the CoT triples of the paths."""
    ents = graph.get_entities(lp.question_entities + lp.answer_entities + [x for p in lp.paths for s in p for x in (s.head_id, s.tail_id)])
    name = lambda eid: ents[eid]["name"] if eid in ents else eid  # noqa: E731
    zh = item.lang == "zh"
    lines = [("题干涉及：" + "、".join(name(e) for e in lp.question_entities) + "。") if zh else
             ("The question mentions: " + ", ".join(name(e) for e in lp.question_entities) + ".")]
    lines.append("知识图谱中的相关路径：" if zh else "Relevant paths in the knowledge graph:")
    n = 0
    for a, paths in lp.groups.items():
        for p in paths:
            n += 1
            hops = []
            for s in p:
                if s.forward:
                    hops.append(f"{name(s.head_id)} —{s.relation}→ {name(s.tail_id)}")
                else:
                    hops.append(f"{name(s.tail_id)} ←{s.relation}— {name(s.head_id)}")
            lines.append(f"{n}. " + ("；".join(hops) if zh else "; ".join(hops)))
        lines.append((f"由此可见，{name(a)}与题干所述相关。") if zh else f"So {name(a)} is connected to what the question describes.")
    return "\n".join(lines), path_triples(lp.paths, graph)


class KGPathTeacher:
    name = "kg-paths"

    def __init__(self, graph: Graph, settings: PathSettings | None = None, linker: AliasLinker | None = None,
                 finder: PathFinder | None = None):
        self.graph = graph
        self.s = settings or PathSettings()
        self.linker = linker or AliasLinker(graph)
        self.finder = finder or self.s.finder(graph)

    def __call__(self, item: QAItem) -> Done | Skip:
        if item.problem:
            return Skip("bad_record", item.problem)
        lp = link_and_find_paths(item, self.linker, self.finder, self.s)
        if isinstance(lp, Skip):
            return lp
        reasoning, triples = verbalise(item, lp, self.graph)
        entities = list(dict.fromkeys(lp.question_entities + lp.answer_entities))
        return Done(sft_records(item, reasoning=reasoning, triples=triples, teacher=self.name, entities=entities,
                                triple_ids=[t["id"] for t in triples], split_key=lp.answer_entities[0]))
