"""GPU serving benchmark of the ERNIE-4.5-0.3B profile on vLLM: TTFT and TPOT under online load, fp8, prefix caching.

Runs on a machine with an NVIDIA GPU and vLLM (0.20.x) installed; needs no network:

    python3 -m benchmarks.gpu_serving --tokenizer DIR --out results.json [--profiles bf16,fp8,...]
    python3 -m benchmarks.gpu_serving --report results.json [more.json ...]   # the table, anywhere
    python3 -m benchmarks.gpu_serving --quick [--url URL --model NAME]  # a tiny load on a running server, on CPU

`--quick` drives an OpenAI-compatible vLLM that already runs (default $RAG_LLM_BASE_URL, the local CPU server) with
two cells of 3 requests and 4 output tokens, and prints the table: it checks the client and statistics code.

- The model is ERNIE-4.5-0.3B's exact configuration (Ernie4_5ForCausalLM: hidden 1024, 18 layers, 16 query / 2 KV
  heads, head_dim 128, intermediate 3072, vocab 103,424, tied embeddings, rope θ 500,000) with random weights
  (`--load-format dummy`): the real weights cannot be had offline, and speed does not depend on their values.
  ERNIE's tokenizer cannot be had either: TOKENIZER is any Hugging Face tokenizer folder with a chat template and a
  vocabulary under 103,424 (we use SmolLM2's, bundled with this repo's offline model); prompt token counts are
  reported as measured.
- Prompts come from our own prompt builder (rag.core.prompt.answer_messages): the byte-stable system prompt, three
  excerpts drawn from a pool of real passages (data/eval/python-faq/docs), and a dev-set question.
- Each profile starts its own vLLM OpenAI server, then drives it at fixed Poisson request rates and unbounded,
  streaming, `ignore_eos`, 128 output tokens, a bounded number of requests per cell, REPEATS times.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from contextlib import AbstractContextManager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks.common import server_process  # noqa: E402
from rag.core.prompt import answer_messages  # noqa: E402
from rag.core.types import Hit  # noqa: E402
from rag.tools.evaluate import load_cases  # noqa: E402

ERNIE_CONFIG = {
    "architectures": ["Ernie4_5ForCausalLM"], "model_type": "ernie4_5", "hidden_size": 1024,
    "intermediate_size": 3072, "num_hidden_layers": 18, "num_attention_heads": 16, "num_key_value_heads": 2,
    "head_dim": 128, "vocab_size": 103424, "max_position_embeddings": 131072, "rope_theta": 500000.0,
    "rms_norm_eps": 1e-05, "tie_word_embeddings": True, "hidden_act": "silu", "use_bias": False,
    "torch_dtype": "bfloat16", "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0,
}
# The production profile (deploy/vllm-ernie.sh, docker-compose.yml); each profile below changes only what it names.
BASE_FLAGS = ["--dtype", "bfloat16", "--max-model-len", "8192", "--max-num-seqs", "256",
              "--gpu-memory-utilization", "0.85", "--load-format", "dummy"]
PROFILES = {
    "bf16": ["--enable-prefix-caching"],
    "fp8": ["--quantization", "fp8", "--enable-prefix-caching"],
    "bf16-nopc": ["--no-enable-prefix-caching"],
    "fp8-nopc": ["--quantization", "fp8", "--no-enable-prefix-caching"],
    "fp8-kv8": ["--quantization", "fp8", "--kv-cache-dtype", "fp8", "--enable-prefix-caching"],
}
RATES = [10.0, 50.0, 100.0, 200.0, float("inf")]
OUTPUT_TOKENS = 128
SERVED = "ernie-4.5-0.3b"


@dataclass(frozen=True)
class Target:
    """The server under load: its OpenAI base URL (…/v1), the served model's name, output tokens per request."""

    base_url: str
    model: str = SERVED
    output_tokens: int = OUTPUT_TOKENS


@dataclass
class Cell:
    """One profile at one rate, one repeat."""

    profile: str
    rate: float
    repeat: int
    requests: int
    seconds: float
    ttft_p50_ms: float
    ttft_p99_ms: float
    tpot_p50_ms: float
    tpot_p99_ms: float
    throughput_rps: float
    output_tok_s: float
    prompt_tokens_mean: float
    prefix_hit_rate: float | None


def requests_for(rate: float, cap: int = 200) -> int:
    """Requests per cell: a few seconds of arrivals at low rates, `cap` when the server is the limit."""
    return cap if rate == float("inf") else int(min(cap, max(50, rate * 5)))


def passage_pool(limit: int = 400) -> list[str]:
    """Real passages of about one chunk (~900 characters) from the Python FAQ answers."""
    pieces = []
    for path in sorted((REPO / "data" / "eval" / "python-faq" / "docs").glob("*.txt")):
        text = " ".join(path.read_text(encoding="utf-8").split())
        pieces += [text[i : i + 900] for i in range(0, len(text), 900) if len(text[i : i + 900]) > 200]
    return pieces[:limit]


def prompts(count: int, seed: int) -> list[list[dict[str, str]]]:
    """Messages built by our prompt builder: system prompt, three random excerpts, a dev-set question."""
    rng = random.Random(seed)
    pool = passage_pool()
    questions = [c.question for p in ("python-faq", "zh") for c in load_cases(REPO / "data" / "eval" / p /
                                                                               "questions.jsonl")]
    built = []
    for _ in range(count):
        hits = [Hit(f"c{rng.randrange(10**6)}", text, f"faq/{rng.randrange(171):03d}.txt", 0.5)
                for text in rng.sample(pool, 3)]
        built.append([dict(m) for m in answer_messages(rng.choice(questions), hits)])
    return built


def write_model(folder: Path, tokenizer: Path) -> None:
    """ERNIE-4.5-0.3B's config (random weights are made by vLLM's dummy loader) and the stand-in tokenizer."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(ERNIE_CONFIG, indent=1))
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja"):
        if (tokenizer / name).is_file():
            (folder / name).write_bytes((tokenizer / name).read_bytes())


def start_server(python: str, model: Path, profile: str, port: int, log: Path,
                 extra: list[str]) -> AbstractContextManager[Any]:
    """vLLM's OpenAI server with the profile's flags (`extra` last: it overrides), once /health answers; stopped
    on the way out, however the run ends."""
    args = [python, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model), "--served-model-name",
            SERVED, "--host", "127.0.0.1", "--port", str(port), *BASE_FLAGS, *PROFILES[profile], *extra]
    return server_process(args, f"http://127.0.0.1:{port}/health", log, timeout_s=600)


def prefix_counters(base_url: str) -> dict[str, float]:
    """vLLM's prefix-cache counters from /metrics (queries and hits, in tokens)."""
    with urllib.request.urlopen(base_url.rsplit("/v1", 1)[0] + "/metrics", timeout=5) as response:
        text = response.read().decode()
    counters: dict[str, float] = {}
    for match in re.finditer(r"^(vllm:prefix_cache_(?:queries|hits))(?:_total)?(?:\{[^}]*\})? ([0-9.e+]+)$", text,
                             re.MULTILINE):
        counters[match[1]] = counters.get(match[1], 0.0) + float(match[2])
    return counters


async def one_request(client: object, target: Target,
                      messages: list[dict[str, str]]) -> tuple[float, float, float, int, int]:
    """(sent, first token, end, output tokens, prompt tokens) of one streamed request."""
    sent = time.perf_counter()
    first = 0.0
    usage = (0, 0)
    stream = await client.chat.completions.create(  # type: ignore[attr-defined]
        model=target.model, messages=messages, max_tokens=target.output_tokens, temperature=0.0, stream=True,
        stream_options={"include_usage": True}, extra_body={"ignore_eos": True})
    async for chunk in stream:
        if not first and chunk.choices and chunk.choices[0].delta.content is not None:
            first = time.perf_counter()
        if chunk.usage is not None:
            usage = (chunk.usage.completion_tokens, chunk.usage.prompt_tokens)
    return sent, first or time.perf_counter(), time.perf_counter(), usage[0], usage[1]


async def drive(target: Target, rate: float, batch: list[list[dict[str, str]]], seed: int) -> tuple[list, float]:
    """Send the batch at Poisson arrivals of `rate` per second (all at once when unbounded)."""
    from openai import AsyncOpenAI

    client = AsyncOpenAI(base_url=target.base_url, api_key="EMPTY", max_retries=0, timeout=600)
    rng = random.Random(seed)
    tasks = []
    started = time.perf_counter()
    for messages in batch:
        tasks.append(asyncio.create_task(one_request(client, target, messages)))
        if rate != float("inf"):
            await asyncio.sleep(rng.expovariate(rate))
    results = await asyncio.gather(*tasks)
    elapsed = time.perf_counter() - started
    await client.close()
    return results, elapsed


def measure(profile: str, target: Target, rate: float, repeat: int, seed: int, cap: int) -> Cell:
    """One cell: drive the server and summarize latencies, throughput and prefix-cache hits."""
    batch = prompts(requests_for(rate, cap), seed)
    before = prefix_counters(target.base_url)
    results, elapsed = asyncio.run(drive(target, rate, batch, seed))
    after = prefix_counters(target.base_url)
    ttft = [(first - sent) * 1000 for sent, first, _, _, _ in results]
    tpot = [(end - first) * 1000 / max(1, out - 1) for _, first, end, out, _ in results]
    queries = after.get("vllm:prefix_cache_queries", 0) - before.get("vllm:prefix_cache_queries", 0)
    hits = after.get("vllm:prefix_cache_hits", 0) - before.get("vllm:prefix_cache_hits", 0)
    return Cell(profile, rate, repeat, len(results), round(elapsed, 2), _pct(ttft, 50), _pct(ttft, 99),
                _pct(tpot, 50), _pct(tpot, 99), round(len(results) / elapsed, 1),
                round(sum(r[3] for r in results) / elapsed, 0), round(statistics.mean(r[4] for r in results), 0),
                round(hits / queries, 3) if queries else None)


def _pct(values: list[float], p: int) -> float:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(len(ordered) * p / 100))], 2)


def gpu_memory_mib() -> int | None:
    """GPU memory in use, from nvidia-smi (vLLM takes --gpu-memory-utilization of the card up front)."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=10).stdout
        return int(out.split()[0])
    except (OSError, ValueError, IndexError):
        return None


def server_facts(log: Path) -> dict[str, str]:
    """Weights memory, KV cache size and maximum concurrency as vLLM logged them at start."""
    text = log.read_text(errors="replace")
    facts = {}
    patterns = {"weights": r"Model loading took ([0-9.]+ ?GiB)", "kv_cache_tokens": r"KV cache size: ([0-9,]+) tokens",
                "kv_cache_memory": r"Available KV cache memory: ([0-9.]+ ?GiB)",
                "max_concurrency_8k": r"Maximum concurrency for [0-9,]+ tokens per request: ([0-9.]+x)",
                "vllm": r"version (\d+\.\d+\.\d+\S*)", "engine_init_s": r"init engine .* took ([0-9.]+) s"}
    for key, pattern in patterns.items():
        if found := re.findall(pattern, text):
            facts[key] = found[-1]
    return facts


def run(args: argparse.Namespace) -> dict[str, object]:
    """Every profile: start, warm up, measure each rate REPEATS times, stop."""
    model = Path(tempfile.mkdtemp()) / "ernie-4.5-0.3b-shaped"
    write_model(model, Path(args.tokenizer))
    cells: list[Cell] = []
    facts: dict[str, dict[str, object]] = {}
    for n, profile in enumerate(args.profiles.split(",")):
        log = Path(args.logs) / f"vllm-{profile}.log"
        started = time.perf_counter()
        target = Target(f"http://127.0.0.1:{args.port + n}/v1")
        with start_server(args.python, model, profile, args.port + n, log, args.extra.split()):
            facts[profile] = {**server_facts(log), "start_s": round(time.perf_counter() - started, 1),
                              "gpu_memory_mib": gpu_memory_mib()}
            measure(profile, target, float("inf"), -1, 0, args.max_requests)  # warm-up, not reported
            for repeat in range(args.repeats):
                for rate in args.rates:
                    seed = 1000 * repeat + int(min(rate, 999))
                    cells.append(measure(profile, target, rate, repeat, seed, args.max_requests))
                    print(json.dumps(asdict(cells[-1])), flush=True)
        if args.out:  # after every profile, so that a run cut short keeps what it measured
            Path(args.out).write_text(json.dumps(_result(facts, cells), indent=1))
    return _result(facts, cells)


def _result(facts: dict[str, dict[str, object]], cells: list[Cell]) -> dict[str, object]:
    return {"date": time.strftime("%Y-%m-%d"), "gpu": _gpu_name(), "profiles": facts,
            "cells": [asdict(c) for c in cells]}


def _gpu_name() -> str:
    try:
        return subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                              text=True, timeout=10).stdout.strip()
    except OSError:
        return "unknown"


def report(paths: list[Path]) -> None:
    """One table over result files: per profile and rate, the median over repeats and the spread (min–max)."""
    results = [json.loads(p.read_text()) for p in paths]
    for result in results:
        print(f"{result['date']} · {result['gpu']} · " + "; ".join(
            f"{name}: vLLM {f.get('vllm', '?')}, start {f.get('start_s')} s, weights {f.get('weights', '?')}, "
            f"KV cache {f.get('kv_cache_tokens', '?')} tokens ({f.get('max_concurrency_8k', '?')} at 8k)"
            for name, f in result["profiles"].items()))
    cells = [c for r in results for c in r["cells"]]
    print("\n| profile | rate (req/s) | TTFT p50 ms | TTFT p99 ms | TPOT p50 ms | TPOT p99 ms | req/s | out tok/s "
          "| prefix hits |")
    print("|---|---|---|---|---|---|---|---|---|")
    keys = sorted({(c["profile"], c["rate"]) for c in cells}, key=lambda k: (k[0], k[1]))
    for profile, rate in keys:
        group = [c for c in cells if c["profile"] == profile and c["rate"] == rate]
        print(f"| {profile} | {'∞' if rate == float('inf') else int(rate)} | " + " | ".join(
            _spread([c[field] for c in group]) for field in
            ("ttft_p50_ms", "ttft_p99_ms", "tpot_p50_ms", "tpot_p99_ms", "throughput_rps", "output_tok_s")) +
            f" | {_spread([c['prefix_hit_rate'] for c in group if c['prefix_hit_rate'] is not None]) or '–'} |")


def _spread(values: list[float]) -> str:
    if not values:
        return ""
    mid = statistics.median(values)
    return f"{mid:g}" if len(values) == 1 else f"{mid:g} ({min(values):g}–{max(values):g})"


def quick(url: str, model: str) -> None:
    """Two small cells against a server that already runs, then the table of them."""
    target = Target(url, model, output_tokens=4)
    cells = [measure("quick", target, rate, 0, n, 3) for n, rate in enumerate((20.0, float("inf")))]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "quick.json"
        path.write_text(json.dumps(_result({"quick": {"vllm": url}}, cells)))
        report([path])


def main(argv: list[str] | None = None) -> None:
    """Command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokenizer", help="a tokenizer folder with a chat template (vocabulary < 103,424)")
    parser.add_argument("--profiles", default=",".join(PROFILES))
    parser.add_argument("--rates", type=lambda s: [float(x) for x in s.split(",")], default=RATES)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--max-requests", type=int, default=200, help="requests per cell at most")
    parser.add_argument("--python", default=sys.executable, help="the interpreter that has vLLM")
    parser.add_argument("--port", type=int, default=8100)
    parser.add_argument("--extra", default="", help="more vLLM flags, after the profile's (e.g. for a CPU smoke test)")
    parser.add_argument("--logs", default=os.environ.get("OUT", "."))
    parser.add_argument("--out", help="write the results here (JSON)")
    parser.add_argument("--report", nargs="+", type=Path, help="print the table of earlier result files")
    parser.add_argument("--quick", action="store_true", help="a tiny load on the server at --url (no GPU needed)")
    parser.add_argument("--url", default=os.environ.get("RAG_LLM_BASE_URL", "http://127.0.0.1:8010/v1"))
    parser.add_argument("--model", default=os.environ.get("RAG_LLM_MODEL", "smollm2-135m-instruct"))
    args = parser.parse_args(argv)
    if args.report:
        report(args.report)
        return
    if args.quick:
        quick(args.url, args.model)
        return
    result = run(args)
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1))
        report([Path(args.out)])


if __name__ == "__main__":
    main()
