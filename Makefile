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
PROTO_FILES := $(wildcard proto/dualpath/rpc/v1/*.proto)

.PHONY: help install run test bench lint proto clean distclean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F ':.*## ' '{printf "  %-10s %s\n", $$1, $$2}'

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -e ".[dev]"
	touch $@

install: $(STAMP) ## create .venv (if absent) and install the package with its dev extras

run: $(STAMP) ## main job: emulated cluster + demo workload (PRESET=smoke) -> out/report.{json,md}
	mkdir -p $(OUT)
	$(DUALPATH) sim --preset $(PRESET) --out $(OUT)/report.json
	@test -s $(OUT)/report.json || { echo "missing $(OUT)/report.json" >&2; exit 1; }
	@test -s $(OUT)/report.md || { echo "missing $(OUT)/report.md" >&2; exit 1; }
	@echo "report: $(OUT)/report.json $(OUT)/report.md"

test: $(STAMP) ## run the test suite
	$(BIN)/python -m pytest -q -p no:cacheprovider $(PYTEST_ARGS)

bench: $(STAMP) ## micro-benchmarks of the emulation core
	$(BIN)/python -m dualpath.bench

lint: $(STAMP) ## ruff check, ruff format --check, mypy (strict)
	$(BIN)/ruff check services tests
	$(BIN)/ruff format --check services tests
	$(BIN)/mypy

proto: $(STAMP) ## regenerate gRPC/protobuf code into services/dualpath/rpc/v1 (bundled protoc)
	$(BIN)/python -m grpc_tools.protoc -Iproto --python_out=services --pyi_out=services \
		--grpc_python_out=services $(PROTO_FILES)

clean: ## remove outputs and caches (keeps .venv)
	rm -rf $(OUT) build dist .pytest_cache .mypy_cache .ruff_cache .hypothesis
	find services tests -name __pycache__ -type d -prune -exec rm -rf {} +

distclean: clean ## also remove .venv
	rm -rf $(VENV)
