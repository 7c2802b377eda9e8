#!/usr/bin/env bash
# Production LLM profile: baidu/ERNIE-4.5-0.3B-PT on one NVIDIA GPU, vLLM's OpenAI-compatible server.
# Checked against vLLM 0.20.2's source (the pinned production version): Ernie4_5ForCausalLM is in
# vllm/model_executor/models/registry.py, "fp8" in the quantization methods, and every flag below is an
# EngineArgs field in vllm/engine/arg_utils.py.
#
# The app then needs only:
#   RAG_LLM_BASE_URL=http://<gpu-host>:8000/v1  RAG_LLM_MODEL=ernie-4.5-0.3b  RAG_LLM_API_KEY=<VLLM_API_KEY>
#   RAG_LLM_LANGUAGES=en,zh
#
# VLLM_API_KEY (e.g. `openssl rand -hex 24`) is required unless HOST is a loopback address. vLLM reads it from its
# environment: it is never put on the command line, which every user of the host can read (ps, /proc).
set -euo pipefail

host="${HOST:-0.0.0.0}"
if [[ -z "${VLLM_API_KEY:-}" && ! "$host" =~ ^(127\.[0-9.]+|::1|localhost)$ ]]; then
  echo "vllm-ernie.sh: HOST=$host is reachable from the network: set VLLM_API_KEY (openssl rand -hex 24)" >&2
  exit 2
fi
if [[ -n "${VLLM_API_KEY:-}" ]]; then
  export VLLM_API_KEY
fi

args=(
  "${ERNIE_MODEL:-baidu/ERNIE-4.5-0.3B-PT}"
  --served-model-name "${SERVED_MODEL_NAME:-ernie-4.5-0.3b}"
  --host "$host" --port "${PORT:-8000}"
  --dtype bfloat16
  # fp8 weights (online quantization of the bf16 checkpoint): lower first-token and per-token latency under load
  # than bf16 on an H200 (docs/performance.md); --kv-cache-dtype fp8 measured no faster, so it stays off.
  --quantization fp8
  # The system prompt is byte-stable (rag/core/prompt.py), so its KV blocks are computed once and reused.
  --enable-prefix-caching
  # 3 excerpts of <=256 tokens + ~450-token system prompt + history + a 384-token answer fit easily.
  --max-model-len "${MAX_MODEL_LEN:-8192}"
  --max-num-seqs "${MAX_NUM_SEQS:-256}"
  # Four tokens to a streamed chunk (the first goes alone): a quarter of the SSE events for vLLM to write and for
  # the app's workers to parse (docs/performance.md, benchmarks/app_cost.py --stream-interval).
  --stream-interval "${STREAM_INTERVAL:-4}"
  # A dedicated GPU: 0.85 measured best. Sharing the GPU: 0.4 still holds 3.2M KV tokens (388 requests of 8k),
  # more than 256 sequences need (docs/performance.md).
  --gpu-memory-utilization "${GPU_MEMORY_UTILIZATION:-0.85}"
)
exec "${VLLM_PYTHON:-python3}" -m vllm.entrypoints.openai.api_server "${args[@]}" "$@"
