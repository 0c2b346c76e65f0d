# `make demo` and `make test` each create .venv when missing and install from the committed lock
# (requirements/lock.txt, every dependency of every extra pinned; `make lock` regenerates it). The lock is
# applied as pip constraints: torch is installed first at the lock's version (2.13.0: the CPU build on these
# machines), then the project with the extras the target needs, every package at its locked version.
# --no-compile: pip would byte-compile every installed file (torch: 38 s with it, 12 s without, on 2 shared cores);
# Python compiles what is imported, once, on first use.
PIP_INSTALL := -m pip install -q --no-compile
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
GRAPH ?= graphs/sample
LOCK ?= requirements/lock.txt
PIP_VERSION ?= 25.3
export HF_HUB_OFFLINE ?= 1
export TRANSFORMERS_OFFLINE ?= 1
export HF_DATASETS_OFFLINE ?= 1
export TOKENIZERS_PARALLELISM ?= false

.PHONY: demo test test-all test-latest lock docs eval eval-llm retrieval-peers graph-routes eval-corpus bench train-demo gpu-check gpu-wheels venv install-core install-dev clean-graph llm-roles

$(BIN)/python:
	@echo "creating $(VENV) and installing torch from the lock ($(LOCK))"
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q "pip==$(PIP_VERSION)"
	$(BIN)/python $(PIP_INSTALL) -c $(LOCK) torch

venv: $(BIN)/python

$(VENV)/.installed-core: $(BIN)/python $(LOCK) pyproject.toml
	@echo "installing bencao[serve] with the locked dependencies (about a minute on a fresh machine)"
	$(BIN)/python $(PIP_INSTALL) -c $(LOCK) -e ".[serve]"
	@touch $@

$(VENV)/.installed-dev: $(BIN)/python $(LOCK) pyproject.toml
	@echo "installing bencao[dev] with the locked dependencies (one to two minutes on a fresh machine)"
	$(BIN)/python $(PIP_INSTALL) -c $(LOCK) -e ".[dev]"
	@touch $@ $(VENV)/.installed-core

# Regenerate the lock from pyproject.toml and requirements/constraints.in (needs PyPI), then run `make test`.
lock: $(VENV)/.installed-dev
	$(BIN)/python -m uv pip compile pyproject.toml --extra dev --universal --python-version 3.11 \
		-c requirements/constraints.in -o $(LOCK)

# The newest releases inside pyproject's ranges, in a separate venv, with the suite run on them: drift seen on
# purpose. Not part of CI; the report names every package whose version differs from the lock. torch stays at
# the CPU 2.13.0 (a newer one is a several-GB CUDA build here); TORCH=... tries another.
LATEST_VENV ?= .venv-latest
TORCH ?= 2.13.0
test-latest:
	test -x $(LATEST_VENV)/bin/python || $(PY) -m venv $(LATEST_VENV)
	$(LATEST_VENV)/bin/python -m pip install -q "pip==$(PIP_VERSION)"
	$(LATEST_VENV)/bin/python -m pip install -q "torch==$(TORCH)"
	$(LATEST_VENV)/bin/python -m pip install -q --upgrade --upgrade-strategy eager -e ".[dev]" "torch==$(TORCH)"
	$(LATEST_VENV)/bin/python -m bencao.lockcheck --lock $(LOCK) --report || true
	BENCAO_UNLOCKED=1 $(LATEST_VENV)/bin/python -m pytest -q

# The five-minute tour: the sample graph with lexical indexes (BM25 + alias tables: under 20 s on 2 cores;
# DEMO_INDEX=retrieval/default adds MiniLM vectors for English items, ~10 min more the first time), then questions.
DEMO_INDEX ?= retrieval/lexical
demo: $(VENV)/.installed-core
	$(BIN)/bencao graph build --config graph/sample --graph $(GRAPH) index_config=$(DEMO_INDEX)
	$(BIN)/bencao graph stats --graph $(GRAPH)
	$(BIN)/bencao ask --graph $(GRAPH) "山药有什么功效？"
	$(BIN)/bencao ask --graph $(GRAPH) "大棗的性味是什麼？"
	$(BIN)/bencao ask --graph $(GRAPH) "What kind of food is almond?"

test: $(VENV)/.installed-dev
	$(BIN)/python -m pytest -q

# The documentation site (MkDocs + Material; offline, strict: a broken link fails) into site/.
docs: $(VENV)/.installed-dev
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site

# Everything, slow tests included.
test-all: $(VENV)/.installed-dev
	$(BIN)/python -m pytest -q -m "not gpu"

# Dev-set evaluation: builds the sample graph once, then runs every benchmark file (*.jsonl) of the folder
# DEV=... (docs/evaluation.md: the record format; benchmark files are never bundled).
DEV ?= data/dev
EVAL_SYSTEM ?= llm-free
EVAL_OUT ?= out/eval
EVAL_CONFIG ?= serving/default
eval: $(VENV)/.installed-dev
	@test -f $(GRAPH)/graph.sqlite || $(BIN)/bencao graph build --config graph/sample --graph $(GRAPH)
	@if [ -d "$(DEV)" ] && ls $(DEV)/*.jsonl >/dev/null 2>&1; then \
		$(BIN)/bencao eval $(foreach f,$(sort $(wildcard $(DEV)/*.jsonl)),--bench $(f)) --graph $(GRAPH) --config $(EVAL_CONFIG) --system $(EVAL_SYSTEM) --out $(EVAL_OUT); \
	else echo "error: DEV=$(DEV): no benchmark files (*.jsonl) there; make eval DEV=FOLDER" >&2; exit 2; fi

# Retrieval peers side by side (bench/retrieval_peers.py; docs/evaluation-metrics.md): plain BM25 over the graph's
# snippets against bencao's question-only retrieval, whole and with each channel off, on the benchmark files of
# DEV (PEERS_BENCH narrows them), one table with 95 % intervals. LIMIT=N: the first N records of each file.
PEERS_CONFIG ?= serving/default
PEERS_BENCH ?= $(sort $(wildcard $(DEV)/*.jsonl))
retrieval-peers: $(VENV)/.installed-dev
	@test -n "$(PEERS_BENCH)" || { echo "error: DEV=$(DEV): no benchmark files (*.jsonl); make retrieval-peers DEV=FOLDER" >&2; exit 2; }
	@test -f $(GRAPH)/graph.sqlite || $(BIN)/bencao graph build --config graph/sample --graph $(GRAPH)
	$(BIN)/python bench/retrieval_peers.py --graph $(GRAPH) $(foreach f,$(PEERS_BENCH),--bench $(f)) --config $(PEERS_CONFIG) \
		$(if $(LIMIT),--limit $(LIMIT))

# The graph's other routes against plain BM25 (bench/graph_routes.py): entity votes, treats coverage, section
# aggregation, HippoRAG-style PPR, alias expansion; parameters chosen on one half of DEV, the table on the other;
# with the answers' ceiling (BM25 at 20..200 passages, the gold text anywhere in the graph). On the corpus graph:
# make graph-routes GRAPH=graphs/classics PEERS_CONFIG=serving/classics DEV=... (about 20 min on 2 cores).
graph-routes: $(VENV)/.installed-dev
	@test -n "$(PEERS_BENCH)" || { echo "error: DEV=$(DEV): no benchmark files (*.jsonl); make graph-routes DEV=FOLDER" >&2; exit 2; }
	@test -f $(GRAPH)/graph.sqlite || $(BIN)/bencao graph build --config graph/sample --graph $(GRAPH)
	$(BIN)/python bench/graph_routes.py --graph $(GRAPH) $(foreach f,$(PEERS_BENCH),--bench $(f)) --config $(PEERS_CONFIG) --ceiling

# Every LLM role once on a real model, through the CLI (bench/llm_roles.py, docs/llm-roles.md): understanding, entity
# selector + scorer + synonym retry (CafeteriaFCD Acc@1 beside the LLM-free linker), planner, CoT model, generator,
# context judge, teacher triple extraction and CoT distillation, all against one OpenAI-compatible endpoint. Serve a
# model first (bencao llm serve --model qwen2.5-coder-0.5b-instruct --engine llama-cpp --port 8011), then
# make llm-roles DEV=FOLDER [ROLES=link,generator] [APPEND=1: the section into bench/RESULTS.md]. Builds the sample
# graph twice under LLM_ROLES_OUT (lexical; with MiniLM entity vectors for linking, ~10 min the first time); about
# 3 hours on one busy CPU core with the 0.5B model.
LLM_URL ?= http://127.0.0.1:8011/v1
LLM_MODEL ?= qwen2.5-coder-0.5b-instruct
LLM_ROLES_OUT ?= out/llm-roles
ROLES ?=
APPEND ?=
llm-roles: $(VENV)/.installed-dev
	@test -d "$(DEV)" || { echo "error: DEV=$(DEV): no such folder (the dev files: make llm-roles DEV=FOLDER)" >&2; exit 2; }
	$(BIN)/python bench/llm_roles.py --base-url $(LLM_URL) --model $(LLM_MODEL) --work $(LLM_ROLES_OUT) --dev $(DEV) \
		$(if $(ROLES),--roles $(ROLES)) $(if $(APPEND),--append bench/RESULTS.md)

# The classics corpus graph and the LLM-free dev evaluation on it (docs/corpus.md). The graph is
# built once: `graph build --skip-current` keeps a graph this recipe built from the same books, recipe and
# ingestion code (on 2 cores about 16 min); then TCMBench, CMMLU-TCM and TCM-BEST4SDT → $(CORPUS_OUT)/report.md.
# An interrupted run resumes; LIMIT=N scores the first N records of each file; RESTART=1 discards earlier
# predictions (needed after the graph was rebuilt: they belong to the old one).
CORPUS ?= data/corpus/tcm_ancient_books
CORPUS_GRAPH ?= graphs/classics
CORPUS_OUT ?= out/eval-corpus
CORPUS_BENCH ?= $(DEV)/tcmbench_mcq.jsonl $(DEV)/cmmlu_traditional_chinese_medicine.jsonl $(DEV)/tcm_best4sdt_sd.jsonl
CORPUS_EVAL_CONFIG ?= serving/classics
LIMIT ?=
RESTART ?=
eval-corpus: $(VENV)/.installed-dev
	@test -d "$(CORPUS)" || { echo "error: CORPUS=$(CORPUS): no such folder (a local copy of TCM-Ancient-Books: make eval-corpus CORPUS=PATH DEV=PATH, see docs/corpus.md)" >&2; exit 2; }
	$(BIN)/bencao graph build --config graph/classics --graph $(CORPUS_GRAPH) root=$(CORPUS) --skip-current
	$(BIN)/bencao eval $(foreach f,$(CORPUS_BENCH),--bench $(f)) --graph $(CORPUS_GRAPH) --config $(CORPUS_EVAL_CONFIG) \
		--system llm-free --out $(CORPUS_OUT) $(if $(LIMIT),--limit $(LIMIT)) $(if $(RESTART),--restart)

# What bencao's evidence does for a real reader (bench/eval_llm.py, docs/llm.md): an installed model (bencao models
# install $(LLM_MODEL)) answers the dev files' multiple-choice and syndrome questions by its option-letter scores,
# closed book / with plain BM25 passages / with bencao's served context of the question alone / with bencao's full
# recipe, under the same evidence budget in characters, on the corpus graph (make eval-corpus builds it). Resumable;
# HALF=a|b keeps one half of the records, LIMIT=N the first N of each file; APPEND=bench/RESULTS.md records the table;
# CONDITIONS=closed,bm25,bencao,oracle picks conditions (oracle: BM25 given the gold answer, the reader's upper bound).
LLM_MODEL ?= qwen2.5-coder-0.5b-instruct
LLM_BUDGET ?= 1000
LLM_BENCH ?= $(CORPUS_BENCH)
LLM_THREADS ?= 1
eval-llm: $(VENV)/.installed-dev
	@test -f $(CORPUS_GRAPH)/graph.sqlite || { echo "error: no corpus graph at $(CORPUS_GRAPH) (make eval-corpus builds it)" >&2; exit 2; }
	$(BIN)/python bench/eval_llm.py --graph $(CORPUS_GRAPH) --model $(LLM_MODEL) --budget-chars $(LLM_BUDGET) \
		$(foreach f,$(LLM_BENCH),--bench $(f)) --threads $(LLM_THREADS) --out out/eval-llm \
		$(if $(LIMIT),--limit $(LIMIT)) $(if $(HALF),--half $(HALF)) $(if $(CONDITIONS),--conditions $(CONDITIONS)) \
		$(if $(APPEND),--append $(APPEND))

# Scale and speed figures at 1 % of TCM-DiffRAG's size (a few minutes), appended to bench/RESULTS.md.
# Full size (434k snippets, ~3.5M triples): $(BIN)/python bench/run_bench.py --scale 1.0 --runs 1
BENCH_SCALE ?= 0.01
bench: $(VENV)/.installed-dev
	$(BIN)/python bench/run_bench.py --scale $(BENCH_SCALE)

# The training loop end to end on CPU (6 min 53 s on the shared 2 cores at load ~1; bench/RESULTS.md): template pairs from a fresh sample graph ->
# a Chinese static embedder trained from scratch -> the graph re-indexed with it -> dev TCMBench/SD
# evaluation, BM25 only vs hybrid (when $(DEV) holds them), and encode speed vs MiniLM.
DEMO_OUT ?= out/train-demo
DEMO_STEPS ?= 300
train-demo: $(VENV)/.installed-dev
	$(BIN)/bencao graph build --config graph/sample --graph $(DEMO_OUT)/graph index=false
	$(BIN)/bencao data pairs --graph $(DEMO_OUT)/graph --output $(DEMO_OUT)/pairs
	$(BIN)/bencao train embedder --config embed/static-zh train_file=$(DEMO_OUT)/pairs/train.jsonl \
		output_dir=$(DEMO_OUT)/static-zh max_steps=$(DEMO_STEPS) seed=0 disable_tqdm=true
	$(BIN)/bencao graph index --graph $(DEMO_OUT)/graph --config retrieval/static-zh embedder.model=$(DEMO_OUT)/static-zh
	$(BIN)/python bench/static_zh.py --graph $(DEMO_OUT)/graph --model $(DEMO_OUT)/static-zh --out $(DEMO_OUT)/eval \
		$(foreach f,$(wildcard $(DEV)/tcmbench_mcq.jsonl $(DEV)/tcm_best4sdt_sd.jsonl),--bench $(f))

# The GPU check (bench/gpu_check.py, docs/training.md#the-gpu-check): bencao's SFT path (LoRA, and LoRA under ZeRO-2 in
# one process) on a Qwen2 7B-shaped model against a bare trl loop (tokens/s, MFU, peak memory), and the embedder and
# reranker trainers, in at most 8 minutes on one H100; on a machine without a GPU the same code on a tiny config.
# It runs with the .venv when there is one, else with python3 (a lent GPU machine has no .venv: there, first
# `python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl` and `export PYTHONPATH=/tmp/site`).
# REAL_MODEL=DIR adds LoRA on a real causal LM folder; GPU_CHECK_OUT: the figures as JSON.
GPU_PY ?= $(if $(wildcard $(BIN)/python),$(BIN)/python,python3)
GPU_CHECK_OUT ?= bench/results/gpu_check.json
REAL_MODEL ?=
gpu-check:
	$(GPU_PY) bench/gpu_check.py --out $(GPU_CHECK_OUT) $(if $(REAL_MODEL),--real-model $(REAL_MODEL))

# The wheels the GPU check needs on a lent GPU machine, which has torch and transformers but not trl, datasets nor
# deepspeed (requirements/gpu-check.txt says which and why), at the lock's versions, for Python 3.12 manylinux
# x86_64, into .whl/ (git-ignored; about 23 MiB; carry it: device README). deepspeed has no wheel on PyPI: it is built
# here from its source archive as a pure-Python wheel (DS_BUILD_OPS=0; its ops compile on first use there).
WHEEL_PLATFORMS := --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
	--platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64
gpu-wheels: $(BIN)/python
	mkdir -p .whl
	$(BIN)/python -m pip download -q --no-deps --only-binary=:all: $(WHEEL_PLATFORMS) -d .whl -c $(LOCK) -r requirements/gpu-check.txt
	DS_BUILD_OPS=0 $(BIN)/python -m pip wheel -q --no-deps --no-build-isolation -c $(LOCK) -w .whl deepspeed
	@du -ch .whl/*.whl | tail -1

# A graph is the link DIR, its versions .DIR.v-* and the lock .DIR.lock beside it (docs/reliability.md).
clean-graph:
	rm -rf $(GRAPH) $(dir $(GRAPH)).$(notdir $(GRAPH)).v-* $(dir $(GRAPH)).$(notdir $(GRAPH)).lock
