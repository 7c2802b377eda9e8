"""What the offline default LLM (Qwen2.5-Coder-0.5B-Instruct) costs against the former one (SmolLM2-135M), in one run.

    .venv/bin/python -m benchmarks.llm_models [--rounds 5]

Starts `rag llm`'s server (eager, the default) for each model folder prepared by `make setup`, one after the other
on free ports with the same flags, and times: the start until /health; a ~1,500-token prefill (1 output token) and
64 decoded tokens, interleaved between the two servers over several rounds (both see the same machine load); and
the server's resident memory (all processes of its group, from /proc). Prints medians and Qwen ÷ SmolLM2 ratios.
Each server is stopped however the run ends.
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

MODELS = {"qwen2.5-coder-0.5b": "qwen2.5-coder-0.5b-instruct", "smollm2-135m": "smollm2-135m-instruct"}


def group_rss_mib(pgid: int) -> float:
    """Resident memory of every process in the process group, MiB."""
    total = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            if int(fields[2]) == pgid:
                total += int((entry / "statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, IndexError, ValueError):
            continue
    return total / 2**20


def start(folder: str, log: Path, stack: ExitStack) -> tuple[Settings, float, int]:
    """A server for data/models/FOLDER (stopped when stack closes), seconds until /health, its process group."""
    settings = Settings(llm_base_url=f"http://127.0.0.1:{free_port()}/v1", llm_model=folder,  # type: ignore[call-arg]
                        llm_model_path=REPO / "data" / "models" / folder,
                        vllm_python=REPO / ".venv-vllm/bin/python", _env_file=None)
    started = time.perf_counter()
    process = stack.enter_context(stopped_on_exit(start_llm_server(settings, log)))
    wait_until_healthy(settings, process, log)
    return settings, time.perf_counter() - started, process.pid


def alternating(servers: dict[str, Settings], rounds: int, decode_tokens: int = 64) -> dict[str, tuple[float, float]]:
    """(prefill s, decode tok/s) per server: medians of requests that alternate between the servers."""
    prefill: dict[str, list[float]] = {name: [] for name in servers}
    decode: dict[str, list[float]] = {name: [] for name in servers}
    for n in range(rounds):
        for name, settings in servers.items():
            prefill[name].append(timed_request(settings.llm_base_url, settings.llm_model, f"{n} {PROMPT}", 1))
            decode[name].append(timed_request(settings.llm_base_url, settings.llm_model, f"{n} Tell a story.",
                                              decode_tokens))
    return {name: (statistics.median(prefill[name]), decode_tokens / statistics.median(decode[name]))
            for name in servers}


def main(argv: list[str] | None = None) -> None:
    """Command line."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    print(f"weights' type: {llm_dtype('auto')} (auto on this CPU); {os.cpu_count()} cores")
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        servers = {name: start(folder, Path(tmp) / f"{name}.log", stack) for name, folder in MODELS.items()}
        rss = {name: group_rss_mib(pid) for name, (_, _, pid) in servers.items()}
        speed = alternating({name: settings for name, (settings, _, _) in servers.items()}, args.rounds)
    for name, (prefill, decode) in speed.items():
        print(f"{name:20} start {servers[name][1]:4.0f} s   prefill {prefill:5.2f} s   decode {decode:5.1f} tok/s   "
              f"RSS {rss[name] / 1024:4.1f} GiB")
    (q_prefill, q_decode), (s_prefill, s_decode) = speed["qwen2.5-coder-0.5b"], speed["smollm2-135m"]
    print(f"qwen ÷ smollm2: prefill speed {s_prefill / q_prefill:.2f}x, decode speed {q_decode / s_decode:.2f}x, "
          f"memory {rss['qwen2.5-coder-0.5b'] / rss['smollm2-135m']:.2f}x")


if __name__ == "__main__":
    main()
