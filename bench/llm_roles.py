"""Every LLM role of bencao once on a real model, through the CLI, against one OpenAI-compatible endpoint (issue 35).

    bencao llm serve --model qwen2.5-coder-0.5b-instruct --engine llama-cpp --port 8011 --threads 1 &
    HF_HUB_OFFLINE=1 .venv/bin/python bench/llm_roles.py --base-url http://127.0.0.1:8011/v1 \\
        --model qwen2.5-coder-0.5b-instruct --work out/llm-roles [--roles understand,link,...] [--append bench/RESULTS.md]

Each role runs as a user runs it — a ``bencao`` command (``eval``, ``infer``, ``data extract``, ``data cot``), in this
process through :func:`bencao.cli.main` — with the role's LLM block pointing at ``--base-url`` exactly as it would
point at vLLM (``backend: openai``, ``json_schema: true``: structured requests carry their JSON Schema, which
llama.cpp's server and vLLM decode under). Every request is one at a time (``max_concurrency: 1``) with a long
timeout: a one-core server answers one request at a time, and a client that gave up would leave the server working
on a reply nobody reads.

The roles, what counts as a valid output and what as quality:

- ``understand`` (``understand.llm``; ``bencao eval --system retrieval``): the first N/2 questions of TCMBench and of
  MMLU nutrition. Valid: replies that are schema-valid JSON. Quality: mentions written verbatim in the question.
- ``link`` (FoodOntoRAG: ``linking.selector: llm``, ``linking.scorer.llm``, ``linking.synonyms.llm``; ``bencao eval
  --system retrieval``): CafeteriaFCD dev mentions on the sample graph with MiniLM entity vectors (the graph of the
  82 % figure), the LLM-free linker and the LLM linker in the same run. Valid: schema-valid replies. Quality: Acc@1
  of both, the paired difference with a bootstrap interval.
- ``planner`` (``planner.llm``): the understanding questions. Valid: a schema-valid reply with at least one relation
  sequence. Quality: planned relation steps that exist in the graph's schema.
- ``cot`` (``cot.llm`` with ``cot.form: json``: the triples as JSON under the engine's grammar; the 0.5B wrote no
  parsable reply of 10 in the SFT data's line form): the same questions. Valid: a reply with parsable triples.
  Quality (TCM-DiffRAG's decomposition check): query triples whose head links to a graph entity (the LLM-free linker)
  and whose relation is in the schema (its name, or its label in bencao's relation labels).
- ``generator`` (``bencao infer --config serving/small-llm --llm MODEL@URL``): "X有什么功效？" / "X的性味是什么？" for the
  first catalogue substances. Valid: an answer with at least one citation and no invalid one. Quality: citations that
  name evidence the generator was given and whose text states the clause citing it (``citation_support``, lexical).
- ``judge`` (``eval.judge``, RAGAS-style context judge; ``bencao eval --system llm-free``): the first TCMBench
  records. Valid: judge replies usable as verdicts (schema-valid, one verdict per item). Quality: agreement of the
  judge's context recall with the lexical rule's on the same contexts the judge was shown.
- ``extract`` (``bencao data extract`` into a copy of the sample graph): snippets of 神农本草经 卷一, with the sample
  graph's six book relations as a fixed set (``--extract-relations ''`` lets the teacher select the schema). Valid:
  schema-valid replies. Quality: triples the model wrote whose head and tail occur in the snippet, and a judged
  sample of 30 (``bench/judged/llm_extract.tsv``, verdicts by hand; the sample to judge is written to
  ``WORK/extract/judge_sample.tsv``).
- ``distill`` (``bencao data cot --teacher llm`` into a copy of the sample graph, the leakage guard recording the
  distilled questions in its manifest): TCMBench dev records of one half (SHA-256 of the id even). Valid: records
  written. Quality: reasoning whose conclusion names the gold answer (letter or option text).

Requests are counted by the server (``GET /stats`` of ``bencao llm serve``) and by the role's response cache; the
valid rate and tokens come from the cache (each distinct request with its reply and its schema). Requests per
minute are over the role command's wall time (graph loading included). Default sizes (``--n-ROLE``), those of the
recorded run on one busy CPU core: 10 questions for understanding, planner, CoT model and generator, the first 50
CafeteriaFCD mentions, 5 judged records, 20 snippets, 10 distilled questions. Results: ``WORK/<role>/result.json`` each, the table on stdout and,
with ``--append``, a section of ``bench/RESULTS.md``.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import hashlib
import io
import json
import random
import re
import shlex
import shutil
import sqlite3
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any, Callable

import numpy as np

from bencao.llm.structured import REPAIR_PROMPT

REPO = Path(__file__).resolve().parents[1]
ROLES = ("understand", "link", "planner", "cot", "generator", "judge", "extract", "distill")
CLI_OF = {"understand": "eval", "link": "eval", "planner": "eval", "cot": "eval", "generator": "infer", "judge": "eval",
          "extract": "data extract", "distill": "data cot"}
TITLE = {"understand": "question understanding", "link": "entity selector + scorer + synonym retry", "planner": "relation-path planner",
         "cot": "CoT model (query triples)", "generator": "generator (qa with citations)", "judge": "context judge",
         "extract": "teacher: triple extraction", "distill": "teacher: CoT distillation"}
DEV_FILES = {"tcmbench": "tcmbench_mcq.jsonl", "mmlu": "mmlu_nutrition.jsonl", "el": "cafeteria_fcd_el.jsonl"}
JUDGED = REPO / "bench" / "judged" / "llm_extract.tsv"


# ---------------------------------------------------------------------------- plumbing


def bencao(args: list[str]) -> tuple[int, str, str]:
    """``bencao ARGS`` in this process: (exit code, stdout, stderr)."""
    from bencao.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main(args)
        except Exception as exc:  # noqa: BLE001 - a crash is a role that did not run; the table says why
            err.write(f"{type(exc).__name__}: {exc}\n")
            rc = 1
    return rc, out.getvalue(), err.getvalue()


def shown(args: list[str]) -> str:
    """The command as a user types it, paths under the current folder made relative."""
    cwd = str(Path.cwd()) + "/"
    return "bencao " + shlex.join(a.replace(cwd, "") for a in args)


def server_total(base_url: str) -> int | None:
    """Requests the server has answered (``bencao llm serve``'s ``GET /stats``); None for servers without it."""
    root = base_url.rstrip("/").removesuffix("/v1")
    try:
        with urllib.request.urlopen(f"{root}/stats", timeout=10) as resp:
            return int(json.loads(resp.read())["total"])
    except (OSError, ValueError, KeyError):
        return None


def cache_rows(path: Path) -> list[dict[str, Any]]:
    """Every distinct request of a response cache with its reply: messages, params (its json_schema), text, tokens."""
    if not path.exists():
        return []
    con = sqlite3.connect(path)
    try:
        rows = con.execute("SELECT request, text, prompt_tokens, completion_tokens, finish_reason FROM responses ORDER BY rowid").fetchall()
    finally:
        con.close()
    out = []
    for req, text, pt, ct, fin in rows:
        r = json.loads(req)
        msgs = r.get("messages") or []
        last = msgs[-1].get("content", "") if msgs else ""
        out.append({"messages": msgs, "params": r.get("params") or {}, "text": text, "prompt_tokens": pt, "completion_tokens": ct,
                    "finish_reason": fin, "repair": any(last.startswith(p.split("{", 1)[0]) for p in REPAIR_PROMPT.values())})
    return out


def records_of(path: Path) -> list[dict[str, Any]]:
    """The records a ``bencao data`` step wrote (one line per item, its records inside)."""
    return [rec for line in read_jsonl(path) for rec in line.get("records", [])]


def reply_valid(row: dict[str, Any], schema: dict[str, Any] | None = None) -> bool:
    """The reply parses as JSON and satisfies the schema the request carried (or ``schema``)."""
    from bencao.llm.structured import StructuredError, parse_and_validate

    try:
        parse_and_validate(row["text"], schema if schema is not None else row["params"].get("json_schema"))
        return True
    except StructuredError:
        return False


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


def pct(k: float, n: float) -> str:
    return f"{k:g}/{n:g} ({100 * k / n:.0f} %)" if n else "0/0"


def half_a(rec_id: str) -> bool:
    """The half of a dev file whose records are distilled: SHA-256 of the id even (bench/eval_llm.py's half ``a``)."""
    return int(hashlib.sha256(rec_id.encode("utf-8")).hexdigest(), 16) % 2 == 0


def paired_bootstrap(a: np.ndarray, b: np.ndarray, n: int = 10000, seed: int = 0) -> tuple[float, float, float]:
    """Mean of ``b - a`` over paired items with a 95 % percentile-bootstrap interval."""
    d = np.asarray(b, dtype=float) - np.asarray(a, dtype=float)
    rng = np.random.default_rng(seed)
    means = d[rng.integers(0, len(d), size=(n, len(d)))].mean(axis=1)
    return float(d.mean()), float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))


def bootstrap_ci(x: np.ndarray, n: int = 10000, seed: int = 0) -> tuple[float, float]:
    x = np.asarray(x, dtype=float)
    rng = np.random.default_rng(seed)
    means = x[rng.integers(0, len(x), size=(n, len(x)))].mean(axis=1)
    return float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))


# ---------------------------------------------------------------------------- the run


class Run:
    def __init__(self, args: argparse.Namespace):
        self.base_url = args.base_url.rstrip("/")
        self.model = args.model
        self.work = Path(args.work)
        self.dev = Path(args.dev)
        self.graph = Path(args.graph) if args.graph else self.work / "sample"
        self.el_graph = Path(args.el_graph) if args.el_graph else self.work / "sample-minilm"
        self.sizes = {r: getattr(args, f"n_{r}") for r in ROLES}
        self.timeout_s = args.timeout_s
        self.extract_document = args.extract_document
        self.extract_section = args.extract_section
        self.extract_relations = [r.strip() for r in args.extract_relations.split(",") if r.strip()]
        self.build_commands: list[str] = []

    # -- set-up
    def llm(self, max_tokens: int, **extra: Any) -> dict[str, Any]:
        """The LLM block every role gets: the endpoint, as vLLM would be named, one request at a time."""
        return {"backend": "openai", "model": self.model, "base_url": self.base_url, "json_schema": True, "temperature": 0.0,
                "max_tokens": max_tokens, "max_concurrency": 1, "timeout_s": self.timeout_s, "max_retries": 1, **extra}

    def llm_sets(self, prefix: str, max_tokens: int, **extra: Any) -> list[str]:
        return [a for k, v in self.llm(max_tokens, **extra).items() for a in ("--set", f"{prefix}.{k}={str(v).lower() if isinstance(v, bool) else v}")]

    def recipe(self, name: str, body: dict[str, Any]) -> Path:
        import yaml

        path = self.work / "recipes" / f"{name}.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"# bench/llm_roles.py: the {name} role on {self.model} at {self.base_url}\n"
                        + yaml.safe_dump(body, allow_unicode=True, sort_keys=False), encoding="utf-8")
        return path

    def retrieval_default(self) -> dict[str, Any]:
        from bencao.config import read_yaml, resolve_config_path

        return read_yaml(resolve_config_path("retrieval/default"))

    def ensure_graph(self, path: Path, lexical: bool) -> None:
        if (path / "graph.sqlite").exists():
            return
        args = ["graph", "build", "--config", "graph/sample", "--graph", str(path)] + (["index_config=retrieval/lexical"] if lexical else [])
        self.build_commands.append(shown(args))
        print(f"[llm-roles] building {path} ({'lexical' if lexical else 'MiniLM entity vectors: ~10 min on 2 cores the first time'})",
              file=sys.stderr, flush=True)
        rc, _, err = bencao(args)
        if rc != 0:
            raise SystemExit(f"error: {shown(args)} failed: {err.strip().splitlines()[-1] if err.strip() else rc}")

    def dev_file(self, key: str) -> Path:
        p = self.dev / DEV_FILES[key]
        if not p.exists():
            raise SystemExit(f"error: {p}: no such dev file (--dev DIR)")
        return p

    def questions(self, role: str) -> tuple[list[Path], int]:
        """TCMBench and MMLU nutrition, the first n/2 of each (``--limit``), n the role's size."""
        n = self.sizes[role]
        return [self.dev_file("tcmbench"), self.dev_file("mmlu")], max(1, n // 2)

    # -- one role
    def run_role(self, role: str) -> dict[str, Any]:
        d = self.work / role
        if d.exists():
            shutil.rmtree(d)
        d.mkdir(parents=True)
        fn: Callable[[Path], dict[str, Any]] = getattr(self, f"role_{role}")
        print(f"[llm-roles] {role}: running", file=sys.stderr, flush=True)
        res = fn(d)
        res.update(role=role, cli=CLI_OF[role], title=TITLE[role])
        ok = res.get("ran")
        print(f"[llm-roles] {role}: {'ran' if ok else 'did not run'} in {res.get('wall_s', 0):.0f} s, "
              f"{res.get('requests')} requests", file=sys.stderr, flush=True)
        (d / "result.json").write_text(json.dumps(res, ensure_ascii=False, indent=2), encoding="utf-8")
        return res

    def timed(self, args: list[str]) -> dict[str, Any]:
        """Run one command; its wall time, the server's request count over it, and how it ended."""
        before = server_total(self.base_url)
        t0 = time.perf_counter()
        rc, out, err = bencao(args)
        wall = time.perf_counter() - t0
        after = server_total(self.base_url)
        last_err = next((line for line in reversed(err.strip().splitlines()) if line.strip()), "")
        return {"command": shown(args), "rc": rc, "stdout": out, "error": last_err if rc != 0 else None, "wall_s": wall,
                "server_requests": (after - before) if before is not None and after is not None else None}

    @staticmethod
    def usage(rows: list[dict[str, Any]], wall_s: float, server_requests: int | None) -> dict[str, Any]:
        n = server_requests if server_requests is not None else len(rows)
        return {"requests": n, "cache_requests": len(rows), "repairs": sum(r["repair"] for r in rows),
                "prompt_tokens": sum(r["prompt_tokens"] for r in rows), "completion_tokens": sum(r["completion_tokens"] for r in rows),
                "wall_s": round(wall_s, 1), "rpm": round(n / (wall_s / 60), 2) if wall_s > 0 else None}

    @staticmethod
    def json_valid(rows: list[dict[str, Any]]) -> dict[str, Any]:
        ok = sum(reply_valid(r) for r in rows)
        return {"valid": [ok, len(rows)], "valid_text": f"{pct(ok, len(rows))} replies schema-valid"}

    def eval_role(self, d: Path, recipe: Path, benches: list[Path], limit: int | None, graph: Path, system: str = "retrieval",
                  extra: list[str] | None = None) -> tuple[dict[str, Any], Path]:
        out = d / "eval"
        args = ["eval", *[a for b in benches for a in ("--bench", str(b))], "--graph", str(graph), "--config", str(recipe),
                "--system", system, "--out", str(out), "--restart", "--no-progress", *(["--limit", str(limit)] if limit else []),
                *(extra or [])]
        return self.timed(args), out

    # -- the roles
    def base_recipe(self, *, retrieval: Any = "retrieval/default", evaluation: dict[str, Any] | None = None, **blocks: Any) -> dict[str, Any]:
        """A serving recipe: serving/default's retrieval, the role's blocks, no question-only probe (it would repeat the
        LLM stages' requests) and no bootstrap in eval's own report."""
        return {"model_name": "bencao-llm-roles", "retrieval": retrieval, **blocks,
                "eval": {"retrieval_probe": False, "n_resamples": 0, **(evaluation or {})}}

    def question_role(self, d: Path, name: str, **recipe_keys: Any) -> tuple[dict[str, Any], list[Any], list[dict[str, Any]]]:
        """A role measured by `bencao eval` over its questions on the sample graph: the run's record and usage, the
        cached requests and the predictions."""
        benches, limit = self.questions(name)
        recipe = self.recipe(name, self.base_recipe(**recipe_keys))
        r, out = self.eval_role(d, recipe, benches, limit, self.graph)
        res = {"commands": [r["command"]], "recipe": str(recipe), "ran": r["rc"] == 0, "error": r["error"]}
        rows = cache_rows(out / "llm_cache.sqlite")
        res.update(self.usage(rows, r["wall_s"], r["server_requests"]))
        preds = read_jsonl(out / "predictions.jsonl")
        res["items"] = len(preds)
        return res, rows, preds

    def role_understand(self, d: Path) -> dict[str, Any]:
        res, rows, preds = self.question_role(d, "understand", understand={"llm": self.llm(360)})
        res.update(self.json_valid(rows))
        mentions = [m for p in preds for m in ((p.get("extra") or {}).get("understanding") or {}).get("mentions", [])]
        verbatim = sum(m.get("verbatim", True) for m in mentions)
        usable = sum(1 for p in preds if not ((p.get("extra") or {}).get("understanding") or {}).get("error"))
        res["quality"] = verbatim / len(mentions) if mentions else 0.0
        res["quality_text"] = f"{pct(verbatim, len(mentions))} mentions verbatim in the question"
        res["details"] = {"questions_understood": [usable, len(preds)], "mentions": len(mentions),
                          "questions_with_a_verbatim_mention": sum(1 for p in preds if any(
                              m.get("verbatim", True) for m in ((p.get("extra") or {}).get("understanding") or {}).get("mentions", []))),
                          "keywords": sum(len(((p.get("extra") or {}).get("understanding") or {}).get("keywords", [])) for p in preds),
                          "examples": [{"id": p["id"], **((p.get("extra") or {}).get("understanding") or {})} for p in preds[:3]]}
        return res

    def role_planner(self, d: Path) -> dict[str, Any]:
        from bencao.retrieval.graph.store import Graph

        res, rows, preds = self.question_role(d, "planner", planner={"llm": self.llm(120)})
        with Graph.open(self.graph, read_only=True) as g:
            names = {rel["name"] for rel in g.relations()}
        plans = [(p.get("extra") or {}).get("plan") or {} for p in preds]
        seqs = [[str(s) for s in seq] for pl in plans for seq in (pl.get("paths") or []) + (pl.get("dropped") or [])]
        steps = [s for seq in seqs for s in seq]
        known = sum(s.lstrip("~") in names for s in steps)
        valid = sum(1 for pl in plans if not pl.get("error") and (pl.get("paths") or pl.get("dropped")))
        res["valid"] = [valid, len(plans)]
        res["valid_text"] = f"{pct(valid, len(plans))} questions: a schema-valid reply with ≥1 relation sequence"
        res["quality"] = known / len(steps) if steps else 0.0
        res["quality_text"] = f"{pct(known, len(steps))} planned relation steps in the graph's schema"
        res["details"] = {"schema_valid_replies": self.json_valid(rows)["valid"], "sequences": len(seqs),
                          "sequences_kept": sum(len(pl.get("paths") or []) for pl in plans), "relations": sorted(names),
                          "unknown_steps": sorted({s for s in steps if s.lstrip("~") not in names})[:20],
                          "examples": [{"id": p["id"], **pl} for p, pl in list(zip(preds, plans))[:3]]}
        return res

    def role_cot(self, d: Path) -> dict[str, Any]:
        from bencao.retrieval.graph.store import Graph
        from bencao.retrieval.index import open_indexes
        from bencao.retrieval.linking import EntityLinker
        from bencao.retrieval.search.config import load_retrieval_config
        from bencao.serving.graph_answerer import DEFAULT_LABELS
        from bencao.text import norm_key

        res, rows, preds = self.question_role(d, "cot", cot={"llm": self.llm(160), "form": "json"})
        triples = [(p["id"], t) for p in preds for t in ((p.get("extra") or {}).get("query_triples") or [])]
        valid = sum(1 for p in preds if (p.get("extra") or {}).get("query_triples"))
        res["valid"] = [valid, len(preds)]
        res["valid_text"] = f"{pct(valid, len(preds))} replies with parsable triples"
        cfg = load_retrieval_config(None, [])
        heads = linked = in_schema = both = 0
        with Graph.open(self.graph, read_only=True) as g:
            rels = {norm_key(x["name"]) for x in g.relations()} | {norm_key(x["name"].replace("_", " ")) for x in g.relations()}
            rels |= {norm_key(v) for labels in DEFAULT_LABELS.values() for v in labels.values()}
            linker = EntityLinker(g, cfg.linking, indexes=open_indexes(g, cfg.index))
            checked = []
            for qid, t in triples:
                head = str(t.get("head") or "").strip()
                ok_head = bool(head) and len(head) <= cfg.linking.max_mention_chars and not linker.link(head).abstained
                ok_rel = norm_key(str(t.get("relation") or "")) in rels
                heads += 1
                linked += ok_head
                in_schema += ok_rel
                both += ok_head and ok_rel
                checked.append({"id": qid, **t, "head_links": ok_head, "relation_in_schema": ok_rel})
        res["quality"] = both / heads if heads else 0.0
        res["quality_text"] = f"{pct(both, heads)} query triples: head linked and relation in the schema"
        res["details"] = {"triples": heads, "head_linked": linked, "relation_in_schema": in_schema, "examples": checked[:8]}
        return res

    def role_link(self, d: Path) -> dict[str, Any]:
        self.ensure_graph(self.el_graph, lexical=False)
        bench = self.dev_file("el")
        limit = self.sizes["link"]
        rules = self.retrieval_default()
        llm = json.loads(json.dumps(rules))
        llm.setdefault("linking", {}).update({"selector": "llm", "llm": self.llm(96), "scorer": {"llm": self.llm(160)},
                                             "synonyms": {"llm": self.llm(80), "max": 5}})
        rr = self.recipe("link-rules", self.base_recipe(retrieval=rules))
        rl = self.recipe("link-llm", self.base_recipe(retrieval=llm))
        base, out_rules = self.eval_role(d / "rules", rr, [bench], limit, self.el_graph)
        r, out = self.eval_role(d / "llm", rl, [bench], limit, self.el_graph)
        res = {"commands": [base["command"], r["command"]], "recipe": str(rl), "ran": r["rc"] == 0 and base["rc"] == 0,
               "error": r["error"] or base["error"]}
        rows = cache_rows(out / "llm_cache.sqlite")
        res.update(self.usage(rows, r["wall_s"], r["server_requests"]), **self.json_valid(rows))
        gold = {rec["id"]: (rec["mention"], set(rec["gold_ids"])) for rec in read_jsonl(bench)}
        pa = {p["id"]: p["prediction"] for p in read_jsonl(out_rules / "predictions.jsonl")}
        pb = {p["id"]: p["prediction"] for p in read_jsonl(out / "predictions.jsonl")}
        ids = [i for i in gold if i in pa and i in pb]
        res["items"] = len(ids)
        hit_a = np.array([pa[i].get("chosen_id") in gold[i][1] for i in ids], dtype=float)
        hit_b = np.array([pb[i].get("chosen_id") in gold[i][1] for i in ids], dtype=float)
        half = np.array([int(hashlib.sha1(gold[i][0].encode("utf-8")).hexdigest(), 16) % 2 for i in ids])

        def side(hits: np.ndarray, preds: dict[str, Any]) -> dict[str, Any]:
            lo, hi = bootstrap_ci(hits) if len(hits) else (0.0, 0.0)
            return {"acc@1": float(hits.mean()) if len(hits) else 0.0, "ci95": [lo, hi],
                    "half0": float(hits[half == 0].mean()) if (half == 0).any() else None,
                    "half1": float(hits[half == 1].mean()) if (half == 1).any() else None,
                    "abstention": float(np.mean([bool(preds[i].get("abstained")) for i in ids])) if ids else 0.0,
                    "retried": float(np.mean([bool(preds[i].get("retried")) for i in ids])) if ids else 0.0,
                    "via_synonym": int(sum(bool(preds[i].get("via_synonym")) for i in ids))}

        diff = paired_bootstrap(hit_a, hit_b) if ids else (0.0, 0.0, 0.0)
        stages: dict[str, list[int]] = {}
        for row in rows:
            sys_prompt = row["messages"][0]["content"] if row["messages"] else ""
            stage = next((s for m, s in (("entity choice", "selector"), ("实体选择", "selector"), ("confidence scorer", "scorer"),
                                         ("置信度", "scorer"), ("synonym generation", "synonyms"), ("同义词", "synonyms")) if m in sys_prompt), "other")
            st = stages.setdefault(stage, [0, 0])
            st[0] += reply_valid(row)
            st[1] += 1
        changed = [{"id": i, "mention": gold[i][0], "rules": pa[i].get("chosen_id"), "rules_label": pa[i].get("label"),
                    "llm": pb[i].get("chosen_id"), "llm_label": pb[i].get("label"), "rules_hit": bool(hit_a[k]), "llm_hit": bool(hit_b[k]),
                    "llm_rationale": str(pb[i].get("rationale") or "")[:200]}
                   for k, i in enumerate(ids) if pa[i].get("chosen_id") != pb[i].get("chosen_id")]
        res["quality"] = float(hit_b.mean()) if ids else 0.0
        res["quality_text"] = (f"Acc@1 {100 * hit_b.mean():.0f} % vs LLM-free {100 * hit_a.mean():.0f} %, "
                               f"Δ {100 * diff[0]:+.0f} [{100 * diff[1]:+.0f}, {100 * diff[2]:+.0f}]") if ids else "no mention linked"
        res["details"] = {"rules": side(hit_a, pa), "llm": side(hit_b, pb), "difference": list(diff), "stages": stages,
                          "rules_wall_s": round(base["wall_s"], 1), "changed": changed, "graph": str(self.el_graph)}
        return res

    def generator_questions(self, d: Path) -> Path:
        with open(REPO / "data/sample/mfh_catalog/mfh_catalog_106.csv", encoding="utf-8") as fh:
            names = [row["name_zh"] for row in csv.DictReader(fh)][: self.sizes["generator"]]
        qs = [{"id": f"g{i + 1:02d}", "question": f"{n}有什么功效？" if i % 2 == 0 else f"{n}的性味是什么？", "lang": "zh"}
              for i, n in enumerate(names)]
        return write_jsonl(d / "questions.jsonl", qs)

    def role_generator(self, d: Path) -> dict[str, Any]:
        q = self.generator_questions(d)
        cache = d / "llm_cache.sqlite"
        args = ["infer", str(q), "--output", str(d / "answers.jsonl"), "--graph", str(self.graph), "--config", "serving/small-llm",
                "--llm", f"{self.model}@{self.base_url}", "--set", "generator.max_concurrency=1", "--set", f"generator.timeout_s={self.timeout_s}",
                "--set", "generator.max_retries=1", "--set", f"generator.cache={cache}"]
        r = self.timed(args)
        res = {"commands": [r["command"]], "ran": r["rc"] == 0, "error": r["error"]}
        rows = cache_rows(cache)
        res.update(self.usage(rows, r["wall_s"], r["server_requests"]))
        answers = read_jsonl(d / "answers.jsonl")
        res["items"] = len(answers)
        valid = sum(1 for a in answers if not a.get("abstained") and a.get("citations") and not a.get("invalid_citations"))
        good = sum(len(a.get("citations") or []) for a in answers)
        bad = sum(len(a.get("invalid_citations") or []) for a in answers)
        res["valid"] = [valid, len(answers)]
        res["valid_text"] = f"{pct(valid, len(answers))} answers with ≥1 citation, none invalid"
        supported = sum(1 for a in answers for c in a.get("citations") or [] if c.get("supported") is not False)
        res["quality"] = supported / (good + bad) if good + bad else 0.0
        res["quality_text"] = (f"{pct(good, good + bad)} citations name evidence given; {pct(supported, good + bad)} name a text that "
                               f"states the claim (citation_support)")
        res["details"] = {"abstained": sum(bool(a.get("abstained")) for a in answers),
                          "citations_named_given": [good, good + bad], "citations_supported": [supported, good + bad],
                          "without_citation": sum(1 for a in answers if not a.get("abstained") and not a.get("citations")),
                          "with_invalid": sum(1 for a in answers if a.get("invalid_citations")),
                          "chinese_answers": sum(1 for a in answers if any("\u4e00" <= ch <= "\u9fff" for ch in str(a.get("answer") or ""))),
                          "examples": [{"id": a["id"], "question": a.get("question"), "answer": a.get("answer"),
                                        "citations": [c.get("n") for c in a.get("citations") or []],
                                        "invalid_citations": a.get("invalid_citations")} for a in answers[:4]]}
        return res

    def role_judge(self, d: Path) -> dict[str, Any]:
        from bencao.evaluation.annotate import Annotator
        from bencao.evaluation.context_metrics import lexical_context_scores
        from bencao.evaluation.systems import Output
        from bencao.serving.config import load_serve_config

        bench = self.dev_file("tcmbench")
        n = self.sizes["judge"]
        judge = {"enabled": True, "llm": self.llm(160), "max_contexts": 3, "max_context_chars": 200}
        recipe = self.recipe("judge", self.base_recipe(evaluation={"judge": judge}))
        r, out = self.eval_role(d, recipe, [bench], n, self.graph, system="llm-free")
        res = {"commands": [r["command"]], "recipe": str(recipe), "ran": r["rc"] == 0, "error": r["error"]}
        rows = cache_rows(out / "judge_cache.sqlite")
        res.update(self.usage(rows, r["wall_s"], r["server_requests"]))
        preds = read_jsonl(out / "predictions.jsonl")
        res["items"] = len(preds)
        asked = sum(3 if (p.get("context") or {}).get("context_precision") is not None else 2 for p in preds if p.get("context"))
        failed = sum(int((p.get("context") or {}).get("judge_failed", 0)) for p in preds)
        res["valid"] = [asked - failed, asked]
        res["valid_text"] = f"{pct(asked - failed, asked)} judge requests usable as verdicts"
        cfg = load_serve_config(recipe, [])
        recs = {rec["id"]: rec for rec in read_jsonl(bench)}
        ann = Annotator(self.graph, cfg, None)
        agree = total = 0
        pairs = []
        try:
            for p in preds:
                c = p.get("context") or {}
                if "judge_context_recall" not in c:
                    continue
                ctx = ann.contexts(Output(None, p.get("evidence") or {}, "")) or []
                seen = [x[: judge["max_context_chars"]] for x in ctx[: judge["max_contexts"]]]
                lex = (lexical_context_scores(recs[p["id"]], seen, cfg.eval.judge.lexical_coverage) or {}).get("context_recall")
                if lex is None:
                    continue
                total += 1
                agree += round(c["judge_context_recall"], 6) == round(lex, 6)
                pairs.append({"id": p["id"], "judge_recall": c["judge_context_recall"], "lexical_recall_on_shown": lex,
                              "judge_precision": c.get("judge_context_precision"), "judge_entity_recall": c.get("judge_context_entity_recall")})
        finally:
            ann.close()
        res["quality"] = agree / total if total else 0.0
        res["quality_text"] = f"{pct(agree, total)} records: judge's context recall = the lexical rule's on the contexts shown"
        res["details"] = {"schema_valid_replies": self.json_valid(rows)["valid"], "pairs": pairs}
        return res

    def copy_graph(self, d: Path) -> Path:
        self.ensure_graph(self.graph, lexical=True)
        dst = d / "graph"
        shutil.copytree(self.graph.resolve(), dst)
        return dst

    def role_extract(self, d: Path) -> dict[str, Any]:
        from bencao.retrieval.graph.store import Graph
        from bencao.text import norm_key

        g = self.copy_graph(d)
        out = d / "out"
        args = ["data", "extract", "--config", "data_gen/extract", "--graph", str(g), "--document", self.extract_document,
                *(["--section", self.extract_section] if self.extract_section else []), "--limit", str(self.sizes["extract"]),
                "--output", str(out), *self.llm_sets("llm", 384), "--set", f"relations=[{','.join(self.extract_relations)}]",
                "--set", "attributes=false", "--set", "max_snippet_chars=400", "--set", "max_triples=8", "--set", "progress=false"]
        r = self.timed(args)
        res = {"commands": [r["command"]], "ran": r["rc"] == 0, "error": r["error"]}
        rows = cache_rows(out / "llm_cache.sqlite")
        res.update(self.usage(rows, r["wall_s"], r["server_requests"]), **self.json_valid(rows))
        summary = json.loads((out / "extract.summary.json").read_text(encoding="utf-8")) if (out / "extract.summary.json").exists() else {}
        recs = records_of(out / "extract.records.jsonl")
        res["items"] = summary.get("total", len(recs))
        kept = sum(len(x["triples"]) for x in recs)
        not_in_text = sum(x["dropped"].get("not_in_text", 0) for x in recs)
        res["quality"] = kept / (kept + not_in_text) if kept + not_in_text else 0.0
        res["quality_text"] = f"{pct(kept, kept + not_in_text)} triples with head and tail in the snippet"
        sample: list[dict[str, Any]] = []
        with Graph.open(g, read_only=True) as gr:
            pool = [(x["snippet_id"], t) for x in recs for t in x["triples"]]
            for sid, t in random.Random(0).sample(pool, min(30, len(pool))):
                s = gr.get_snippet(sid) or {}
                sample.append({"key": f"{sid}|{norm_key(t['head'])}|{t['relation']}|{norm_key(t['tail'])}", "head": t["head"],
                               "relation": t["relation"], "tail": t["tail"], "snippet": " / ".join(s.get("path") or []) + "：" + (s.get("text") or "")[:400]})
        to_judge = d / "judge_sample.tsv"
        with open(to_judge, "w", encoding="utf-8", newline="") as fh:
            w = csv.writer(fh, delimiter="\t")
            w.writerow(["key", "head", "relation", "tail", "verdict", "reason", "snippet"])
            for s in sample:
                w.writerow([s["key"], s["head"], s["relation"], s["tail"], "", "", s["snippet"]])
        res["quality_text_unjudged"] = res["quality_text"]
        res["details"] = {"sample_keys": [x["key"] for x in sample], "summary": {k: summary.get(k) for k in ("total", "done", "skipped", "skipped_by_reason", "relations",
                                                                   "relation_selection", "triples", "dropped")},
                          "triples_kept": kept, "judge_sample": str(to_judge)}
        return with_verdicts(res)

    @staticmethod
    def judged(sample: list[dict[str, Any]]) -> list[int] | None:
        """Correct / judged over the sampled triples that ``bench/judged/llm_extract.tsv`` holds a verdict for (1 = the
    snippet states the triple, 0 = it does not; ``#`` lines are comments)."""
        if not JUDGED.exists() or not sample:
            return None
        with open(JUDGED, encoding="utf-8", newline="") as fh:
            rows = csv.DictReader((line for line in fh if not line.startswith("#")), delimiter="\t")
            verdicts = {row["key"]: row["verdict"].strip() for row in rows}
        got = [verdicts[s["key"]] for s in sample if verdicts.get(s["key"]) in ("0", "1")]
        return [sum(v == "1" for v in got), len(got)] if got else None

    def role_distill(self, d: Path) -> dict[str, Any]:
        from bencao.text import norm_key

        bench = self.dev_file("tcmbench")
        items = [rec for rec in read_jsonl(bench) if half_a(str(rec["id"]))][: self.sizes["distill"]]
        q = write_jsonl(d / "questions.jsonl", items)
        g = self.copy_graph(d)
        out = d / "out"
        args = ["data", "cot", "--config", "data_gen/cot_llm", "--teacher", "llm", "--graph", str(g), "--input", str(q),
                "--output", str(out), *self.llm_sets("llm", 320), "--set", "k_triples=5", "--set", "k_snippets=2",
                "--set", "progress=false"]
        r = self.timed(args)
        res = {"commands": [r["command"]], "ran": r["rc"] == 0, "error": r["error"]}
        rows = cache_rows(out / "llm_cache.sqlite")
        res.update(self.usage(rows, r["wall_s"], r["server_requests"]))
        summary = json.loads((out / "cot.summary.json").read_text(encoding="utf-8")) if (out / "cot.summary.json").exists() else {}
        res["items"] = len(items)
        done = summary.get("done", 0) + summary.get("done_before", 0)
        res["valid"] = [done, len(items)]
        res["valid_text"] = f"{pct(done, len(items))} questions → records (reasoning checked by the teacher's own answer)"
        ends = asked = 0
        for rec in items:
            reasons = [x for x in rows if not x["repair"] and "conclusion" in ((x["params"].get("json_schema") or {}).get("properties") or {})
                       and rec["question"] in x["messages"][-1]["content"]]
            if not reasons:
                continue
            asked += 1
            try:
                obj = json.loads(reasons[-1]["text"])
                concl = str(obj.get("conclusion") or "") or str(obj.get("reasoning") or "")[-80:]
            except (ValueError, AttributeError):
                continue
            gold = [str(a) for a in rec.get("answer") or []]
            texts = [norm_key(rec["options"][a]) for a in gold if a in rec.get("options", {})]
            letters = set(re.findall(r"(?<![A-Za-z])([A-E])(?![A-Za-z])", concl.upper()))
            ends += (bool(letters) and letters == set(gold)) or any(t and t in norm_key(concl) for t in texts)
        res["quality"] = ends / asked if asked else 0.0
        res["quality_text"] = f"{pct(ends, asked)} reasonings conclude the gold answer"
        manifest = json.loads((g / "manifest.json").read_text(encoding="utf-8"))
        distilled = (manifest.get("distilled") or {})
        res["details"] = {"summary": {k: summary.get(k) for k in ("total", "done", "skipped", "skipped_by_reason", "grounding",
                                                                   "train", "eval")},
                          "leakage_guard": {"graph": str(g), "recorded": sorted(distilled)[:5] if isinstance(distilled, dict) else distilled}}
        return res


# ---------------------------------------------------------------------------- the report


def with_verdicts(res: dict[str, Any]) -> dict[str, Any]:
    """An extract result with the hand verdicts ``bench/judged/llm_extract.tsv`` holds now for its sampled triples."""
    keys = (res.get("details") or {}).get("sample_keys")
    if not keys or "quality_text_unjudged" not in res:  # only the extract role samples triples to judge
        return res
    judged = Run.judged([{"key": k} for k in keys])
    res["details"]["judged"] = judged
    res["quality_text"] = res["quality_text_unjudged"] + (f"; judged {pct(judged[0], judged[1])} of a sample correct" if judged else "")
    return res


def table(results: list[dict[str, Any]]) -> str:
    lines = ["| role | CLI | ran | items | requests | valid output | judged quality | requests/min | prompt / generated tokens |",
             "|---|---|---|---:|---:|---|---|---:|---:|"]
    for r in results:
        ran = "yes" if r.get("ran") else f"no: {r.get('error') or '?'}"
        lines.append(f"| {r['title']} (`{r['role']}`) | `bencao {r['cli']}` | {ran} | {r.get('items', 0)} | {r.get('requests', 0)} "
                     f"({r.get('repairs', 0)} repairs) | {r.get('valid_text', '—')} | {r.get('quality_text', '—')} | {r.get('rpm') or 0:.1f} | "
                     f"{r.get('prompt_tokens', 0):,} / {r.get('completion_tokens', 0):,} |")
    return "\n".join(lines)


def link_table(r: dict[str, Any]) -> str:
    d = r["details"]
    lines = ["| linker | Acc@1 [95 % CI] | half 0 | half 1 | abstention | retried | via synonym |", "|---|---|---:|---:|---:|---:|---:|"]
    for key, label in (("rules", "LLM-free (rules selector, tier confidence, rule retry)"), ("llm", "real model as selector + scorer + synonym retry")):
        s = d[key]
        h0 = f"{100 * s['half0']:.0f} %" if s["half0"] is not None else "—"
        h1 = f"{100 * s['half1']:.0f} %" if s["half1"] is not None else "—"
        lines.append(f"| {label} | {100 * s['acc@1']:.0f} % [{100 * s['ci95'][0]:.0f}, {100 * s['ci95'][1]:.0f}] | {h0} | {h1} | "
                     f"{100 * s['abstention']:.0f} % | {100 * s['retried']:.0f} % | {s['via_synonym']} |")
    m, lo, hi = d["difference"]
    lines.append(f"\nPaired difference (LLM − LLM-free), {r['items']} mentions: **{100 * m:+.1f} points [{100 * lo:+.1f}, {100 * hi:+.1f}]** "
                 "(95 % paired bootstrap, 10,000 resamples). Requests by stage (schema-valid / all): "
                 + ", ".join(f"{k} {v[0]}/{v[1]}" for k, v in d["stages"].items()) + ".")
    return "\n".join(lines)


def report(results: list[dict[str, Any]], run: Run, argv: list[str]) -> str:
    import platform

    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    lines = [f"## Every LLM role on a real model, through the CLI: `bench/llm_roles.py` ({when})", "",
             f"Model `{run.model}` at `{run.base_url}`; machine: {platform.machine()}, {_cpus()} CPU cores (shared); command: "
             f"`.venv/bin/python bench/llm_roles.py {shlex.join(argv)}`.", "", table(results), ""]
    link = next((r for r in results if r["role"] == "link" and r.get("details")), None)
    if link is not None:
        lines += [f"Entity linking, dev CafeteriaFCD on `{link['details']['graph']}` (the sample graph with MiniLM entity vectors), the "
                  "same run:", "", link_table(link), ""]
    lines += ["Commands (each role's recipe is written under the work folder; the LLM block of every role: `backend: openai`, "
              "`json_schema: true`, `temperature: 0`, `max_concurrency: 1`):", "", "```bash", *run.build_commands]
    for r in results:
        lines += r.get("commands", [])
    lines += ["```", ""]
    return "\n".join(lines)


def _cpus() -> int:
    import os

    return os.cpu_count() or 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base-url", required=True, help="The endpoint every role reaches, e.g. http://127.0.0.1:8011/v1.")
    ap.add_argument("--model", required=True, help="Model name the endpoint serves.")
    ap.add_argument("--work", default="out/llm-roles", help="Work folder: graphs, recipes, each role's outputs and result.json.")
    ap.add_argument("--dev", default=str(REPO.parent / "shared/data/dev"), help="Folder of the dev files (TCMBench, MMLU nutrition, CafeteriaFCD).")
    ap.add_argument("--graph", default=None, help="The sample graph, lexical (default: WORK/sample, built when missing).")
    ap.add_argument("--el-graph", default=None, help="The sample graph with MiniLM entity vectors, for linking (default: WORK/sample-minilm).")
    ap.add_argument("--roles", default=",".join(ROLES), help=f"Comma-separated roles to run: {', '.join(ROLES)}.")
    ap.add_argument("--report-only", action="store_true", help="Run nothing: assemble the table from WORK/*/result.json.")
    ap.add_argument("--append", default=None, help="Append the section to this file (bench/RESULTS.md).")
    ap.add_argument("--timeout-s", type=float, default=900.0, help="Per-request timeout of every role's client.")
    ap.add_argument("--extract-document", default="神农本草经", help="bencao data extract --document.")
    ap.add_argument("--extract-section", default="卷一", help="bencao data extract --section ('' for none).")
    ap.add_argument("--extract-relations", default="has_flavour,has_nature,treats,has_effect,toxicity,enters_meridian",
                    help="A fixed relation set for bencao data extract (the sample graph's book relations); '' lets the teacher "
                         "select the schema (Yaoshi-RAG), which a 0.5B model does poorly.")
    # sizes of the recorded run (one busy CPU core, ~2 requests a minute); the suggestion: 20, 100, 20, 20, 20, 10, 50, 50
    for role, n in (("understand", 10), ("link", 50), ("planner", 10), ("cot", 10), ("generator", 10), ("judge", 5), ("extract", 20),
                    ("distill", 10)):
        ap.add_argument(f"--n-{role}", type=int, default=n, help=f"Items of the {role} role.")
    args = ap.parse_args(argv)
    roles = [r.strip() for r in args.roles.split(",") if r.strip()]
    bad = [r for r in roles if r not in ROLES]
    if bad:
        ap.error(f"unknown role(s) {', '.join(bad)}; known: {', '.join(ROLES)}")
    run = Run(args)
    run.work.mkdir(parents=True, exist_ok=True)
    if not args.report_only:
        run.ensure_graph(run.graph, lexical=True)
        for role in roles:
            run.run_role(role)
    results = [json.loads((run.work / r / "result.json").read_text(encoding="utf-8")) for r in ROLES if (run.work / r / "result.json").exists()]
    results = [with_verdicts(r) for r in results]  # verdicts written after the run (then --report-only) count too
    results = [r for r in results if r["role"] in roles] if not args.report_only else results
    text = report(results, run, argv if argv is not None else sys.argv[1:])
    print(text)
    if args.append:
        with open(args.append, "a", encoding="utf-8") as fh:
            fh.write("\n" + text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
