# make demo: set up what is missing, ingest the samples, show a search.   make test: set up, lint, run all tests.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
PYTHON ?= python3
UV := $(PYTHON) -m uv
VENV := .venv
BIN := $(VENV)/bin
DEMO_QUESTION ?= How do I create a Python virtual environment?
export HF_HUB_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: setup demo test lint unit bench clean

setup: $(VENV)/.synced

# uv resolves and installs the locked set in seconds (pip's resolver backtracks for minutes on chainlit).
$(VENV)/.synced: pyproject.toml uv.lock
	@$(UV) --version >/dev/null 2>&1 || $(PYTHON) -m pip install --quiet "uv>=0.5"
	$(UV) sync --frozen
	@touch $@

demo: setup
	$(BIN)/rag-ingest data/samples
	$(BIN)/rag search "$(DEMO_QUESTION)" -k 3

lint: setup
	$(BIN)/ruff check rag ingest ui tests benchmarks
	$(BIN)/mypy

test: setup lint
	$(BIN)/pytest -q

bench: setup
	$(BIN)/python -m benchmarks.ingest_throughput

clean:
	rm -rf data/index
