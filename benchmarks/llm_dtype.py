"""How the local vLLM server's weights type and reserved cores change its speed on this CPU, measured in one run.

    .venv/bin/python -m benchmarks.llm_dtype [--quick [--url URL]]

Starts `rag llm`'s server three times on a free port, one after the other: the former default (bfloat16, one core
kept for vLLM's scheduler), float32 with that core kept, and today's `auto` (float32 without native bf16, no core
kept on ≤ 4 cores). For each it times a ~1,500-token prefill (first token) and 100 decoded tokens, three times,
and prints medians and the ratios against the former default. Each server is stopped however the run ends.
`--quick` times the server already running at --url (default $RAG_LLM_BASE_URL) once, with 8 decoded tokens, in
place of the three it would start: it checks the timing and printing code in seconds.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

import httpx

from benchmarks.common import REPO, free_port, stopped_on_exit
from rag.components.cpu import cpu_flags
from rag.config import Settings
from rag.tools.llm_server import llm_dtype, start_llm_server, wait_until_healthy

PROMPT = " ".join(f"word{i} is a fine example of text number {i}." for i in range(110))
CONFIGS = {"bf16, 1 core kept (former)": ("bfloat16", "1"), "float32, 1 core kept": ("float32", "1"),
           "auto (today)": ("auto", None)}


def timed_request(base_url: str, model: str, content: str, max_tokens: int) -> float:
    """Seconds for one non-streamed chat completion."""
    started = time.perf_counter()
    body = {"model": model, "messages": [{"role": "user", "content": content}], "max_tokens": max_tokens,
            "temperature": 0, "ignore_eos": True}
    httpx.post(f"{base_url}/chat/completions", json=body, timeout=600).raise_for_status()
    return time.perf_counter() - started


def time_server(url: str, model: str, repeats: int = 3, decode_tokens: int = 100) -> tuple[float, float]:
    """(prefill s for ~1,500 tokens and 1 output token, decode tokens/s), medians over `repeats` requests each."""
    prefill = statistics.median(timed_request(url, model, f"{n} {PROMPT}", 1) for n in range(repeats))
    decode = statistics.median(timed_request(url, model, f"{n} Tell a story.", decode_tokens) for n in range(repeats))
    return prefill, decode_tokens / decode


def measure(dtype: str, reserved: str | None, log: Path) -> tuple[float, float]:
    """time_server's figures for one server configuration, started here and stopped after."""
    settings = Settings(llm_base_url=f"http://127.0.0.1:{free_port()}/v1", llm_dtype=dtype,
                        vllm_python=REPO / ".venv-vllm/bin/python", _env_file=None)  # type: ignore[call-arg]
    saved = os.environ.pop("VLLM_CPU_NUM_OF_RESERVED_CPU", None)
    if reserved is not None:
        os.environ["VLLM_CPU_NUM_OF_RESERVED_CPU"] = reserved
    try:
        with stopped_on_exit(start_llm_server(settings, log)) as process:
            wait_until_healthy(settings, process, log)
            return time_server(settings.llm_base_url, settings.llm_model)
    finally:
        os.environ.pop("VLLM_CPU_NUM_OF_RESERVED_CPU", None)
        if saved is not None:
            os.environ["VLLM_CPU_NUM_OF_RESERVED_CPU"] = saved


def print_row(name: str, prefill: float, decode: float) -> None:
    """One configuration's medians."""
    print(f"{name:28} prefill {prefill:6.2f} s   decode {decode:5.1f} tok/s", flush=True)


def main(argv: list[str] | None = None) -> None:
    """Command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="time the running server at --url once")
    parser.add_argument("--url", default=os.environ.get("RAG_LLM_BASE_URL", "http://127.0.0.1:8010/v1"))
    args = parser.parse_args(argv)
    print(f"CPU bf16 flags: {sorted(cpu_flags() & {'avx512_bf16', 'amx_bf16'}) or 'none'}; "
          f"auto picks {llm_dtype('auto')}")
    results: dict[str, tuple[float, float]] = {}
    if args.quick:
        model = Settings(_env_file=None).llm_model  # type: ignore[call-arg]
        results["running server"] = time_server(args.url, model, repeats=1, decode_tokens=8)
        print_row("running server", *results["running server"])
    with tempfile.TemporaryDirectory() as tmp:
        for name, (dtype, reserved) in {} if args.quick else CONFIGS.items():
            results[name] = measure(dtype, reserved, Path(tmp) / "vllm.log")
            print_row(name, *results[name])
    base_prefill, base_decode = next(iter(results.values()))
    for name, (prefill, decode) in results.items():
        print(f"{name:28} prefill speed-up {base_prefill / prefill:4.2f}x   "
              f"decode speed-up {decode / base_decode:4.2f}x")


if __name__ == "__main__":
    main()
