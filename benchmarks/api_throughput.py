"""API throughput benchmark: 32 concurrent clients through `rag serve` vs the same prompts straight to vLLM.

    .venv/bin/python -m benchmarks.api_throughput [--clients 32] [--requests 64]

Both sides generate the same deterministic answers (temperature 0, same final messages, same max_tokens), so the
ratio of requests per second is the cost of our API (retrieval, prompt building, HTTP, streaming) under load. Passes
alternate (direct, API, direct, API) after a warm-up so neither side owns the warm prefix cache. Goal ≥ 0.9, no
errors.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from benchmarks.common import free_port
from benchmarks.query_path import QUESTIONS
from ingest import service
from rag.access import LOCAL_OPERATOR
from rag.answer import Retrieved
from rag.config import Settings
from rag.llm_server import is_healthy, start_llm_server, wait_until_healthy
from rag.prompt import answer_messages
from rag.wiring import build_embedder, build_engine, prefer_passive_threads

REPO = Path(__file__).resolve().parent.parent
MAX_TOKENS = 48


async def _load(url: str, bodies: list[dict[str, object]], clients: int) -> tuple[float, int]:
    """Send every body with `clients` concurrent workers; (seconds, errors)."""
    queue: asyncio.Queue[dict[str, object]] = asyncio.Queue()
    for body in bodies:
        queue.put_nowait(body)
    errors = 0

    async def worker(client: httpx.AsyncClient) -> None:
        nonlocal errors
        while not queue.empty():
            body = queue.get_nowait()
            response = await client.post(url, json=body)
            errors += response.status_code != 200

    started = time.perf_counter()
    async with httpx.AsyncClient(timeout=600, limits=httpx.Limits(max_connections=clients)) as client:
        await asyncio.gather(*(worker(client) for _ in range(clients)))
    return time.perf_counter() - started, errors


def _serve(settings: Settings, port: int) -> subprocess.Popen[bytes]:
    env = {**os.environ, "RAG_DATA_DIR": str(settings.data_dir), "RAG_LLM_BASE_URL": settings.llm_base_url,
           "RAG_MAX_ANSWER_TOKENS": str(MAX_TOKENS), "RAG_REFUSAL_THRESHOLD": "-1", "RAG_API_KEYS": ""}
    process = subprocess.Popen([str(Path(sys.executable).parent / "rag"), "serve", "--port", str(port)], env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                return process
        except httpx.HTTPError:
            time.sleep(0.5)
    process.terminate()
    raise RuntimeError("rag serve did not start")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--requests", type=int, default=64)
    args = parser.parse_args()
    prefer_passive_threads()
    settings = Settings()
    llm = None
    if not is_healthy(settings.llm_base_url):
        llm = start_llm_server(settings, settings.data_dir / "logs" / "vllm-bench.log")
        wait_until_healthy(settings, llm, settings.data_dir / "logs" / "vllm-bench.log")
    with tempfile.TemporaryDirectory() as tmp:
        local = settings.model_copy(update={"data_dir": Path(tmp)})
        embedder = build_embedder(local)
        service.sync([REPO / "data" / "samples"], local, embedder=embedder)
        engine = build_engine(local, embedder=embedder)
        engine.refusal_threshold = -1.0  # as in the served app below: every question reaches the LLM
        questions = [QUESTIONS[i % len(QUESTIONS)] for i in range(args.requests)]
        direct_bodies = [{"model": local.llm_model, "max_tokens": MAX_TOKENS, "temperature": 0.0,
                          "messages": answer_messages(q, next(e.hits for e in engine.stream(q, principal=LOCAL_OPERATOR)
                                                              if isinstance(e, Retrieved)))} for q in questions]
        api_bodies = [{"question": q} for q in questions]
        port = free_port()
        api = _serve(local, port)
        try:
            direct_url, api_url = f"{local.llm_base_url}/chat/completions", f"http://127.0.0.1:{port}/v1/ask"
            asyncio.run(_load(direct_url, direct_bodies, args.clients))  # warm-up
            runs = [asyncio.run(_load(u, b, args.clients)) for u, b in
                    [(direct_url, direct_bodies), (api_url, api_bodies)] * 2]
        finally:
            api.terminate()
            if llm is not None:
                llm.terminate()
    direct = sum(s for s, _ in runs[0::2]) / 2
    through_api = sum(s for s, _ in runs[1::2]) / 2
    errors = sum(e for _, e in runs)
    print(f"{args.clients} clients, {args.requests} requests per pass, {MAX_TOKENS} max tokens, 2 passes each")
    print(f"direct to vLLM: {args.requests / direct:.2f} req/s; through the API: {args.requests / through_api:.2f} "
          f"req/s; ratio {direct / through_api:.3f} (goal ≥ 0.9); errors {errors}")


if __name__ == "__main__":
    main()
