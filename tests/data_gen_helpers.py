"""A small real graph for data-generation tests, and questions about it (zh and en)."""

from __future__ import annotations

import json
from pathlib import Path

from bencao.retrieval.graph.store import Graph
from bencao.retrieval.ingest.registry import ingest_file

SAMPLE = Path(__file__).resolve().parents[1] / "data" / "sample"

QUESTIONS = [
    {"id": "q-zh-1", "task": "mcq", "question": "下列哪味药主治头眩胸胀？", "options": {"A": "半夏", "B": "人参", "C": "黄连", "D": "麝香"},
     "answer": ["A"], "lang": "zh"},
    {"id": "q-zh-2", "task": "mcq", "question": "主治泄利寒热的是哪一种？", "options": {"A": "殷孽", "B": "远志", "C": "泽兰", "D": "木虻"},
     "answer": ["A"], "lang": "zh"},
    {"id": "q-en-1", "task": "mcq", "question": "Maltose is best described as which kind of sugar?",
     "options": {"A": "disaccharide", "B": "bentonite", "C": "water", "D": "bromide"}, "answer": ["A"], "lang": "en"},
    {"id": "q-en-2", "question": "Pectin belongs to which class of carbohydrates?", "answer": "polysaccharide", "lang": "en"},
    {"id": "q-noans", "task": "mcq", "question": "人参的性味是？", "options": {"A": "甘", "B": "苦"}, "answer": [], "lang": "zh"},
    {"id": "q-unlinked", "question": "什么是量子色动力学？", "answer": "一种规范场论", "lang": "zh"},
]


def build_graph(directory: Path) -> Path:
    g = Graph.create(directory)
    ingest_file(g, "catalog-csv", SAMPLE / "mfh_catalog" / "mfh_catalog_106.csv")
    ingest_file(g, "books-txt", SAMPLE / "tcm_classics" / "txt" / "000-神农本草经.txt", {"materia_medica": True})
    ingest_file(g, "foodon-jsonl", SAMPLE / "foodon" / "foodon_demo_subset.jsonl")
    g.close()
    return directory


def write_questions(path: Path, records: list[dict] | None = None) -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in (records or QUESTIONS)), encoding="utf-8")
    return path
