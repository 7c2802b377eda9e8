#!/usr/bin/env bash
# Run a command as on the slow CPU kind (AVX2 only, no native bf16), on a machine of another kind: for the test
# suite's and benchmarks' figures when no AVX2-only machine is at hand (docs/performance.md).
#
#   sudo benchmarks/slow_kind.sh make test        (root: a private mount namespace)
#
# What it changes, for the command and its children only: /proc/cpuinfo without the AVX-512 and AMX flags (the app
# reads it to pick bf16 for the embedder and vLLM: it picks ONNX Runtime in float32 and vLLM in float32, as there),
# torch's kernels capped at AVX2 (ATEN_CPU_CAPABILITY) and oneDNN's too (ONEDNN_MAX_CPU_ISA). What it cannot change:
# ONNX Runtime and vLLM's own kernels still use the AVX-512 they find, and the cores' speed is this machine's.
set -euo pipefail
[ $# -gt 0 ] || { echo "usage: $0 COMMAND [ARGS...]" >&2; exit 2; }
fake=$(mktemp /tmp/cpuinfo-avx2.XXXXXX)
trap 'rm -f "$fake"' EXIT
sed -E 's/ (avx512[a-z0-9_]*|amx[a-z0-9_]*)//g' /proc/cpuinfo > "$fake"
unshare --mount --propagation private bash -c 'mount --bind "$0" /proc/cpuinfo &&
  ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 "$@"' "$fake" "$@"
