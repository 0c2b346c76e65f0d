"""Write one extraction run into the graph as ONE derived document (kind ``derived``, format ``extraction``).

Every kept triple gets layer ``book``, origin ``llm:<model>`` and its snippet as M1 provenance;
attributes go onto the entities through the same document, so ``bencao graph remove <id>`` takes
the whole run back out (triples and attributes that no other document supports).

Entities are resolved by name/alias against the graph (any type: the teacher's types rarely match
the graph's), then within the run, else minted with the teacher's type (through ``type_map``).

One output directory owns one document: ``<output>/extract.graph.json`` names it, and when a later
run (more snippets, retried skips) produces a different document, the new one is committed first
and the old one removed after, so a kill between the two leaves nothing lost. The state file names
the document being committed (``pending``) before the commit, so a document committed by a killed
run is removed by the next run even when that run commits a different one.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bencao.data_gen.relation_schema import RelationSet
from bencao.faults import fault
from bencao.io import atomic_write_json, content_hash
from bencao.retrieval.graph.store import DocumentBuilder, Graph
from bencao.text import norm_key

STATE_FILE = "extract.graph.json"


class _Resolver:
    def __init__(self, graph: Graph, b: DocumentBuilder):
        self.graph, self.b = graph, b
        self.local: dict[str, str] = {}

    def __call__(self, name: str, type_: str) -> str:
        key = norm_key(name)
        if key in self.local:
            return self.local[key]
        eid = self.graph.find_entity_id(key)
        ent = self.graph.get_entity(eid) if eid else None
        if ent is not None:
            eid = self.b.entity(ent["name"], ent["type"], id=ent["id"], layer=ent["layer"])
        else:
            eid = self.b.entity(name, type_ or "concept", layer="book")
        self.local[key] = eid
        return eid


def write_extraction(graph: Graph, out: str | Path, records: list[dict[str, Any]], rels: RelationSet, *, model: str,
                     recipe: dict[str, Any] | None = None) -> dict[str, Any]:
    """Commit the run's document (a no-op when the same one is already there); returns what happened."""
    out = Path(out)
    state_path = out / STATE_FILE
    state = json.loads(state_path.read_text(encoding="utf-8")) if state_path.exists() else {}
    previous = state.get("document")
    pending = [d for d in state.get("pending") or [] if d != previous]
    present = graph.get_snippets(r["snippet_id"] for r in records)
    usable = [r for r in records if r["snippet_id"] in present and (r["triples"] or r["attributes"])]
    report: dict[str, Any] = {"document": None, "added": False, "snippets_gone": sum(r["snippet_id"] not in present for r in records),
                              "previous_removed": None}
    if not usable:
        return report
    body = json.dumps([[r["snippet_id"], r["triples"], r["attributes"]] for r in sorted(usable, key=lambda r: r["snippet_id"])],
                      ensure_ascii=False, sort_keys=True)
    origin = f"llm:{model}"
    n_triples = sum(len(r["triples"]) for r in usable)
    b = graph.builder(source=f"llm extraction ({model})", kind="derived", format="extraction", content_key=content_hash(model, rels.key, body),
                      title=f"LLM extraction by {model}: {n_triples} triples from {len(usable)} snippets",
                      meta={"model": model, "relations": rels.names, "relation_selection": rels.selection, "output": str(out),
                            "snippets": len(usable), "recipe": recipe or {}})
    resolve = _Resolver(graph, b)
    described = {r["name"]: r for r in rels.relations}
    for rec in usable:
        for t in rec["triples"]:
            h, x = resolve(t["head"], t["head_type"]), resolve(t["tail"], t["tail_type"])
            if h == x:
                continue
            if t["relation"] not in b.relations:
                d = described.get(t["relation"], {})
                b.relation(t["relation"], d.get("description") or None, d.get("head_type") or None, d.get("tail_type") or None)
            b.triple(h, t["relation"], x, confidence=t["confidence"], layer="book", origin=origin, snippet=rec["snippet_id"], kind="M1")
        for a in rec["attributes"]:
            eid = resolve(a["name"], a["type"])
            ent = b.entities[eid]
            b.entity(ent.name, ent.type, id=eid, attributes=a["attributes"])
    atomic_write_json(state_path, {"document": previous, "pending": sorted({*pending, b.document_id}), "graph": str(graph.dir)})
    added = graph.commit(b)
    fault("extract.committed")
    report.update({"document": b.document_id, "added": added, "triples": len(b.triples), "entities": len(b.entities)})
    if previous and previous != b.document_id and graph.has_document(previous):
        graph.remove_document(previous)
        report["previous_removed"] = previous
    orphans = [d for d in pending if d != b.document_id and graph.has_document(d)]  # committed by a killed run
    for d in orphans:
        graph.remove_document(d)
    if orphans:
        report["interrupted_removed"] = orphans
    atomic_write_json(state_path, {"document": b.document_id, "graph": str(graph.dir)})
    from bencao.retrieval.index import refresh_indexes

    refresh_indexes(graph)  # the new triples are retrievable at once
    if added or report["previous_removed"]:
        graph.write_manifest(op="extract", detail={"document": b.document_id, "model": model, "triples": len(b.triples), "replaced": report["previous_removed"]})
    return report
