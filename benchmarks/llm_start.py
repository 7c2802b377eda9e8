"""How long the local vLLM server takes to start, compiled or eager, and what each costs in speed, measured in one
run.

    .venv/bin/python -m benchmarks.llm_start [--quick [--url URL]]

Starts `rag llm`'s server on free ports: compiled with an empty inductor cache (a fresh clone's first start), then
eager (`RAG_LLM_COMPILE=eager`, no torch.compile) beside it; times each start until /health answers, then times a
~1,500-token prefill and 64 decoded tokens on the two servers in turn, five rounds (so that both see the same
machine load), and prints medians and ratios. Last it stops both and starts compiled again with the cache the first
start left (every later start of a compiled server). Each server is stopped however the run ends. `--quick` times
the server already running at --url once, with 8 decoded tokens: it checks the code in seconds.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

from benchmarks.common import REPO, free_port, stopped_on_exit
from benchmarks.llm_dtype import PROMPT, timed_request
from rag.config import Settings
from rag.tools.llm_server import llm_dtype, start_llm_server, wait_until_healthy

ROUNDS = 5


def start(compile_mode: str, cache: Path, log: Path, stack: ExitStack) -> tuple[Settings, float]:
    """A server started here (stopped when stack closes) and the seconds until its /health answered."""
    settings = Settings(llm_base_url=f"http://127.0.0.1:{free_port()}/v1", llm_compile=compile_mode,  # type: ignore[arg-type]
                        vllm_python=REPO / ".venv-vllm/bin/python", _env_file=None)  # type: ignore[call-arg]
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(cache)
    started = time.perf_counter()
    process = stack.enter_context(stopped_on_exit(start_llm_server(settings, log)))
    wait_until_healthy(settings, process, log)
    return settings, time.perf_counter() - started


def interleaved(urls: dict[str, str], model: str, rounds: int, decode_tokens: int) -> dict[str, tuple[float, float]]:
    """(prefill s, decode tok/s) per server, medians of requests that alternate between the servers."""
    prefill: dict[str, list[float]] = {name: [] for name in urls}
    decode: dict[str, list[float]] = {name: [] for name in urls}
    for n in range(rounds):
        for name, url in urls.items():
            prefill[name].append(timed_request(url, model, f"{n} {name} {PROMPT}", 1))
            decode[name].append(timed_request(url, model, f"{n} {name} Tell a story.", decode_tokens))
    return {name: (statistics.median(prefill[name]), decode_tokens / statistics.median(decode[name]))
            for name in urls}


def run_starts(tmp: Path) -> None:
    """Cold compiled and eager side by side, timed in turn; then a warm compiled start."""
    (tmp / "inductor").mkdir()
    saved = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    try:
        with ExitStack() as stack:
            cold, cold_s = start("compile", tmp / "inductor", tmp / "compiled.log", stack)
            eager, eager_s = start("eager", tmp / "eager-cache", tmp / "eager.log", stack)
            speed = interleaved({"compiled": cold.llm_base_url, "eager": eager.llm_base_url}, cold.llm_model,
                                ROUNDS, 64)
        with ExitStack() as stack:
            warm_s = start("compile", tmp / "inductor", tmp / "warm.log", stack)[1]
    finally:
        os.environ.pop("TORCHINDUCTOR_CACHE_DIR", None)
        if saved is not None:
            os.environ["TORCHINDUCTOR_CACHE_DIR"] = saved
    print(f"start until /health: compiled, cold cache {cold_s:.0f} s; compiled, warm cache {warm_s:.0f} s; "
          f"eager {eager_s:.0f} s (eager ÷ cold {eager_s / cold_s:.2f}x, ÷ warm {eager_s / warm_s:.2f}x)")
    for name, (prefill, decode) in speed.items():
        print(f"{name:9} prefill {prefill:5.2f} s   decode {decode:5.1f} tok/s   (medians of {ROUNDS}, interleaved)")
    (c_prefill, c_decode), (e_prefill, e_decode) = speed["compiled"], speed["eager"]
    print(f"eager ÷ compiled: prefill speed {c_prefill / e_prefill:.2f}x, decode speed {e_decode / c_decode:.2f}x")


def main(argv: list[str] | None = None) -> None:
    """Command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="time the running server at --url once")
    parser.add_argument("--url", default=os.environ.get("RAG_LLM_BASE_URL", "http://127.0.0.1:8010/v1"))
    args = parser.parse_args(argv)
    print(f"weights' type: {llm_dtype('auto')} (auto on this CPU); {os.cpu_count()} cores")
    if args.quick:
        model = Settings(_env_file=None).llm_model  # type: ignore[call-arg]
        prefill, decode = interleaved({"running": args.url}, model, 1, 8)["running"]
        print(f"running server prefill {prefill:5.2f} s   decode {decode:5.1f} tok/s", flush=True)
        return
    with tempfile.TemporaryDirectory() as tmp:
        run_starts(Path(tmp))


if __name__ == "__main__":
    main()
