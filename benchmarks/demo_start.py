"""Time from the end of `make setup` to the first answer of `make demo`, before and after starting vLLM eagerly
while the samples are ingested, measured in one run.

    .venv/bin/python -m benchmarks.demo_start [--quick [--url URL]]

Runs the demo's commands as a newcomer's `make demo` runs them, each time on a free port with an empty data folder
and an empty inductor cache (a fresh clone; the embedder's ONNX export is made by `make setup`):

- before: `rag llm --detach` compiling the model, then `rag-ingest data/samples`, then `rag ask`;
- after: `rag llm --no-wait` (eager: RAG_LLM_COMPILE=auto), `rag-ingest data/samples` meanwhile, `rag llm --detach`
  (waits for the server), then `rag ask`.

For each it prints the seconds of each step and until the first answer, and the ratio after/before (what eager
costs each answer afterwards: benchmarks.llm_start times both servers in turn). `--quick` runs the ingest and the
question of the quick sample against the server already running at --url, in seconds: it checks the code, not the
figures.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import tempfile
import time
from pathlib import Path

from benchmarks.common import REPO, free_port, sample_docs

BIN = REPO / ".venv" / "bin"
QUESTION = "How do I create a Python virtual environment?"
# name: the demo's commands, in order (before: today's make demo before this change)
STEPS = {
    "before": [["rag", "llm", "--detach"], ["rag-ingest", "{docs}"], ["rag", "ask", QUESTION]],
    "after": [["rag", "llm", "--no-wait"], ["rag-ingest", "{docs}"], ["rag", "llm", "--detach"],
              ["rag", "ask", QUESTION]],
}
COMPILE = {"before": "compile", "after": "auto"}


def run_steps(steps: list[list[str]], env: dict[str, str], docs: Path) -> list[float]:
    """Seconds each command took; a failing command stops the run with its output."""
    seconds = []
    for step in steps:
        command = [str(BIN / step[0]), *(part.replace("{docs}", str(docs)) for part in step[1:])]
        started = time.perf_counter()
        done = subprocess.run(command, env=env, cwd=REPO, capture_output=True, text=True, timeout=1800)
        if done.returncode != 0:
            raise SystemExit(f"{' '.join(step)} failed ({done.returncode}):\n{done.stderr[-2000:]}")
        seconds.append(time.perf_counter() - started)
    return seconds


def demo_env(tmp: Path, compile_mode: str, base_url: str) -> dict[str, str]:
    """A newcomer's environment: no RAG_* of ours, an empty data folder and compile cache, a port of its own."""
    env = {name: value for name, value in os.environ.items() if not name.startswith("RAG_")}
    return env | {"RAG_DATA_DIR": str(tmp / "data"), "RAG_LLM_BASE_URL": base_url, "RAG_LLM_COMPILE": compile_mode,
                  "TORCHINDUCTOR_CACHE_DIR": str(tmp / "inductor")}


def measure(name: str, docs: Path) -> list[float]:
    """Seconds per step of one demo run; its server is stopped however the run ends."""
    with tempfile.TemporaryDirectory() as tmp:
        env = demo_env(Path(tmp), COMPILE[name], f"http://127.0.0.1:{free_port()}/v1")
        try:
            return run_steps(STEPS[name], env, docs)
        finally:
            subprocess.run([str(BIN / "rag"), "llm", "--stop"], env=env, cwd=REPO, capture_output=True, timeout=120)


def quick(url: str, tmp: Path) -> None:
    """The ingest and the question against the running server."""
    env = demo_env(tmp, "auto", url)
    seconds = run_steps(STEPS["after"][1:2] + STEPS["after"][3:], env, sample_docs(True, tmp / "docs"))
    print(f"running server: ingest {seconds[0]:.1f} s, first answer {seconds[1]:.1f} s", flush=True)


def _label(step: list[str]) -> str:
    return " ".join(part for part in step if part not in {QUESTION, "{docs}"})


def main(argv: list[str] | None = None) -> None:
    """Command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="ingest and ask against the server at --url")
    parser.add_argument("--url", default=os.environ.get("RAG_LLM_BASE_URL", "http://127.0.0.1:8010/v1"))
    args = parser.parse_args(argv)
    if args.quick:
        with tempfile.TemporaryDirectory() as tmp:
            quick(args.url, Path(tmp))
        return
    results = {}
    for name in STEPS:
        seconds = results[name] = measure(name, REPO / "data" / "samples")
        steps = ", ".join(f"{_label(step)} {took:.0f} s" for step, took in zip(STEPS[name], seconds, strict=True))
        print(f"{name:6}: first answer {sum(seconds):5.0f} s ({steps})", flush=True)
    print(f"after / before: time to first answer {sum(results['after']) / sum(results['before']):.2f}x")


if __name__ == "__main__":
    main()
