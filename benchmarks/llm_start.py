"""How long the local vLLM server takes to answer its first request, compiled or eager, and what each costs in speed,
measured in one run.

    .venv/bin/python -m benchmarks.llm_start [--quick [--url URL]]

Starts `rag llm`'s server three times on a free port, one after the other: compiled with an empty inductor cache
(a fresh clone's first `make demo`), compiled again with the cache the first start left (every later start), and
eager (`RAG_LLM_COMPILE=eager`, no torch.compile). For each it times the start until /health answers, a ~1,500-token
prefill and 100 decoded tokens (medians of three), and prints the ratios against the cold compiled start. Each
server is stopped however the run ends. `--quick` times the server already running at --url once with 8 decoded
tokens, in place of the three starts: it checks the timing and printing code in seconds.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from benchmarks.common import REPO, free_port, stopped_on_exit
from benchmarks.llm_dtype import time_server
from rag.config import Settings
from rag.llm_server import llm_dtype, start_llm_server, wait_until_healthy

# name: (RAG_LLM_COMPILE, whether the inductor cache is the one the previous start filled)
CONFIGS = {"compiled, cold cache": ("compile", False), "compiled, warm cache": ("compile", True),
           "eager": ("eager", False)}
Figures = tuple[float, float, float]  # start s, prefill s, decode tok/s


def measure(compile_mode: str, cache: Path, log: Path) -> Figures:
    """(seconds until /health answers, prefill s, decode tok/s) for one server started here and stopped after."""
    settings = Settings(llm_base_url=f"http://127.0.0.1:{free_port()}/v1", llm_compile=compile_mode,  # type: ignore[arg-type]
                        vllm_python=REPO / ".venv-vllm/bin/python", _env_file=None)  # type: ignore[call-arg]
    saved = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(cache)
    try:
        started = time.perf_counter()
        with stopped_on_exit(start_llm_server(settings, log)) as process:
            wait_until_healthy(settings, process, log)
            ready = time.perf_counter() - started
            return (ready, *time_server(settings.llm_base_url, settings.llm_model))
    finally:
        os.environ.pop("TORCHINDUCTOR_CACHE_DIR")
        if saved is not None:
            os.environ["TORCHINDUCTOR_CACHE_DIR"] = saved


def print_row(name: str, figures: Figures) -> None:
    """One configuration's figures."""
    ready, prefill, decode = figures
    print(f"{name:22} start {ready:6.1f} s   prefill {prefill:6.2f} s   decode {decode:5.1f} tok/s", flush=True)


def run_starts(tmp: Path) -> dict[str, Figures]:
    """The three starts, in order, sharing one inductor cache folder that starts empty."""
    results: dict[str, Figures] = {}
    cache = tmp / "inductor"
    for name, (compile_mode, warm) in CONFIGS.items():
        if not warm and compile_mode == "compile":
            cache.mkdir(exist_ok=False)
        results[name] = measure(compile_mode, cache if compile_mode == "compile" else tmp / name, tmp / "vllm.log")
        print_row(name, results[name])
    return results


def main(argv: list[str] | None = None) -> None:
    """Command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="time the running server at --url once")
    parser.add_argument("--url", default=os.environ.get("RAG_LLM_BASE_URL", "http://127.0.0.1:8010/v1"))
    args = parser.parse_args(argv)
    print(f"weights' type: {llm_dtype('auto')} (auto on this CPU); {os.cpu_count()} cores")
    if args.quick:
        model = Settings(_env_file=None).llm_model  # type: ignore[call-arg]
        results = {"running server": (0.0, *time_server(args.url, model, repeats=1, decode_tokens=8))}
        print_row("running server", results["running server"])
    else:
        with tempfile.TemporaryDirectory() as tmp:
            results = run_starts(Path(tmp))
    base_ready, base_prefill, base_decode = next(iter(results.values()))
    for name, (ready, prefill, decode) in results.items():
        print(f"{name:22} start {ready / base_ready if base_ready else 0:4.2f}x   prefill speed-up "
              f"{base_prefill / prefill:4.2f}x   decode speed-up {decode / base_decode:4.2f}x")


if __name__ == "__main__":
    main()
