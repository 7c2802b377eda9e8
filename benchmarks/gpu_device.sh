#!/usr/bin/env bash
# The GPU machine's side of benchmarks/gpu_ingest.py and benchmarks/gpu_stack.py (docs/performance.md).
#
# That machine has no network and starts bare: everything travels as one tar stream (manifest.sha256, app.tar.xz =
# the app's cp312 dependencies, corpus.tar.xz = python3.11-doc, tok.tar.xz = the stand-in tokenizer, model.tar =
# MiniLM in fp16, vdeps.tar.xz = vLLM's pure dependencies, the vLLM wheel) cut into parts small enough for one call
# each (benchmarks/gpu_carry.sh builds them). Each call, made within 30 s of the last so that the machine and its
# /tmp survive:
#
#   bash benchmarks/gpu_device.sh PART_DIR STEP        STEP: facts | ingest | ingest-synthetic | stack | wait | app-cost
#
# keeps its part, unpacks every member whose sha256 matches (complete), then runs STEP with results under $OUT.
set -uo pipefail
G=${GPU_SCRATCH:-/tmp/gpu}
PY=${PYTHON:-python3}
OUT=${OUT:-$G/out}
EXTRA=${EXTRA:-}
mkdir -p "$G/parts" "$G/done" "$OUT"
[ -d "$1" ] && cp "$1"/part-* "$G/parts/"
cat "$G"/parts/part-* > "$G/stream.tar"
(cd "$G" && tar -xf stream.tar 2>/dev/null; rm -f stream.tar; true)

unpack() {  # MEMBER COMMAND...: run COMMAND once, when MEMBER arrived whole
  local member=$1; shift
  [ -f "$G/done/$member" ] && return 0
  [ -f "$G/$member" ] && [ -f "$G/manifest.sha256" ] || return 1
  local want; want=$(grep " $member\$" "$G/manifest.sha256" | cut -d' ' -f1)
  [ "$(sha256sum "$G/$member" | cut -d' ' -f1)" = "$want" ] || return 1
  "$@" && touch "$G/done/$member" && rm -f "$G/$member" && echo "unpacked $member"
}
unpack app.tar.xz tar -xJf "$G/app.tar.xz" -C "$G"
unpack corpus.tar.xz tar -xJf "$G/corpus.tar.xz" -C "$G"
unpack tok.tar.xz tar -xJf "$G/tok.tar.xz" -C "$G"
unpack model.tar tar -xf "$G/model.tar" -C "$G/site"
unpack vdeps.tar.xz tar -xJf "$G/vdeps.tar.xz" -C "$G"
unpack vllm-nofa2.whl "$PY" -c "import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])" \
  "$G/vllm-nofa2.whl" "$G/site"
unpack qwen.gguf env PYTHONPATH="$G/site" "$PY" scripts/convert_gguf.py "$G/qwen" --gguf "$G/qwen.gguf"
ls "$G/done" | tr '\n' ' '; echo

export PYTHONPATH="$G/site:$PWD" HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
DOCS="$G/python3.11-doc"

wait_stack() {  # until the stack run ends or ~9.5 minutes pass; what it wrote goes to $OUT
  local deadline=$((SECONDS + ${WAIT_S:-560}))
  while [ ! -f "$G/stack.done" ] && [ $SECONDS -lt $deadline ]; do sleep 5; done
  cp "$G/stack.json" "$OUT/" 2>/dev/null
  tail -c 200000 "$G/stack.log" > "$OUT/stack.log" 2>/dev/null
  for log in "$G"/stack-logs/vllm*.log; do tail -c 60000 "$log" > "$OUT/$(basename "$log")"; done 2>/dev/null
  tail -c 30000 "$G/stack-logs/worker-0.log" > "$OUT/worker-0.log" 2>/dev/null
  if [ -f "$G/stack.done" ]; then echo "stack finished"; else echo "stack still running"; fi
  tail -n 40 "$G/stack.log"
}

case "${2:-facts}" in
  facts)
    { nvidia-smi; "$PY" -V; "$PY" -c "import torch, sentence_transformers, transformers, numpy, chromadb, pydantic
print(torch.__version__, torch.cuda.is_available(), sentence_transformers.__version__, transformers.__version__,
      numpy.__version__, chromadb.__version__, pydantic.__version__)
import ingest.service, ui.server, benchmarks.gpu_ingest, benchmarks.gpu_stack; print('app imports: ok')"
      nproc; free -g; df -h /tmp; } 2>&1 | tee "$OUT/facts.txt" ;;
  ingest)
    "$PY" -m benchmarks.gpu_ingest --docs "$DOCS" --synthetic-dir "$G/synth" --synthetic-variants tuned \
      --out "$OUT/gpu-ingest-a.json" $EXTRA 2>&1 | tee "$OUT/ingest-a.log" | grep -v "it/s\]" | tail -n 80 ;;
  ingest-synthetic)
    "$PY" -m benchmarks.gpu_ingest --docs "$DOCS" --no-stages --corpora synthetic --synthetic-dir "$G/synth" \
      --synthetic-variants "${VARIANTS:-parse-12}" --out "$OUT/gpu-ingest-b.json" $EXTRA 2>&1 \
      | tee "$OUT/ingest-b.log" | grep -v "it/s\]" | tail -n 40 ;;
  stack)
    rm -f "$G/stack.done"
    model=""  # the real offline default LLM when it travelled: converted to bf16, else its GGUF as it is
    [ -f "$G/qwen.gguf" ] && model="--model '$G/qwen.gguf' --model-config '$G/tok/qwen'"
    [ -f "$G/qwen/config.json" ] && model="--model '$G/qwen'"
    setsid bash -c "'$PY' -m benchmarks.gpu_stack --docs '$DOCS' --tokenizer '$G/tok' $model \
      --logs '$G/stack-logs' --out '$G/stack.json' $EXTRA > '$G/stack.log' 2>&1; touch '$G/stack.done'" \
      < /dev/null > /dev/null 2>&1 &
    wait_stack ;;
  wait) wait_stack ;;
  app-cost)  # the app's CPU per answer (stub LLM), questions embedded on the CPU, then on the GPU; MiniLM travels
    for device in cpu cuda; do
      RAG_EMBED_MODEL=bundled:all-MiniLM-L6-v2 RAG_EMBED_DEVICE=$device "$PY" -m benchmarks.app_cost $EXTRA 2>&1 \
        | tee "$OUT/app-cost-$device.txt" | tail -n 16
    done ;;
esac
