# The app image: API + chat UI (`rag serve`) and `rag-ingest`. vLLM and Chroma run as their own containers
# (docker-compose.yml). Multi-stage: uv builds the locked environment; the runtime stage holds only that and the code.
ARG PYTHON_IMAGE=python:3.11.14-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
COPY --from=ghcr.io/astral-sh/uv:0.13.9 /uv /usr/local/bin/uv
ENV UV_COMPILE_BYTECODE=1 UV_LINK_MODE=copy UV_PYTHON_DOWNLOADS=never
WORKDIR /app
# uv.lock takes torch 2.13.0+cpu from a local wheel folder (/opt/wheels, [tool.uv] find-links): fill that folder
# from PyTorch's CPU index first; `uv sync --frozen` then checks the wheel against the hash in the lock.
RUN python -m pip download --no-deps --dest /opt/wheels \
        --index-url https://download.pytorch.org/whl/cpu "torch==2.13.0+cpu"
COPY pyproject.toml uv.lock ./
RUN uv sync --frozen --no-dev --no-group bench --no-install-project
COPY rag ./rag
COPY ingest ./ingest
COPY ui ./ui
RUN uv sync --frozen --no-dev --no-group bench --no-editable

FROM ${PYTHON_IMAGE} AS runtime
# /app/.cache: the embedders' ONNX exports and the bundled multilingual e5's conversion (~9 s, 470 MB), made below.
RUN groupadd --system --gid 10001 rag && useradd --system --uid 10001 --gid rag --home-dir /app rag \
    && mkdir -p /data /docs /app/.cache && chown rag:rag /data /docs /app/.cache
WORKDIR /app
COPY --from=build --chown=rag:rag /app/.venv /app/.venv
# Chainlit's config and texts are read from ui/chat (CHAINLIT_APP_ROOT); it writes session files there.
COPY --chown=rag:rag ui/chat /app/ui/chat
ENV PATH=/app/.venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    HF_HUB_OFFLINE=1 \
    TOKENIZERS_PARALLELISM=false \
    XDG_CACHE_HOME=/app/.cache \
    CHAINLIT_APP_ROOT=/app/ui/chat \
    RAG_DATA_DIR=/data \
    RAG_DOCS_DIR=/docs
USER rag
# Both default embedders prepared (rag/tools/prepare_models.py: e5 converted, ONNX exported) once here, never at a start.
RUN python -m rag.tools.prepare_models
EXPOSE 8000
HEALTHCHECK --interval=15s --timeout=5s --start-period=60s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=4)"]
# Every interface of the container, so that its published port reaches it: `rag serve` then refuses to start unless
# RAG_API_KEYS, the chat's sign-in (RAG_UI_AUTH_SECRET, RAG_UI_USERS) and RAG_TRUSTED_HOSTS are set.
CMD ["rag", "serve", "--host", "0.0.0.0", "--port", "8000"]
