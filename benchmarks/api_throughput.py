"""API throughput benchmark: 32 concurrent clients through `rag serve` vs the same prompts straight to vLLM.

    .venv/bin/python -m benchmarks.api_throughput [--clients 32] [--requests 64] [--quick]

Both sides generate the same deterministic answers (temperature 0, same final messages, same max_tokens), so the
ratio of requests per second is the cost of our API (retrieval, prompt building, HTTP, streaming) under load. Passes
alternate (direct, API, direct, API) after a warm-up so neither side owns the warm prefix cache. Goal ≥ 0.9, no
errors. The server is configured as a deployment is (an API key, the chat's sign-in), and it and a vLLM the
benchmark started are stopped however the run ends. `--quick` (seconds) checks that the benchmark runs.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import sys
import tempfile
import time
from contextlib import AbstractContextManager
from pathlib import Path

import httpx

from benchmarks.common import free_port, llm_server, sample_docs, server_process
from benchmarks.query_path import QUESTIONS
from ingest import service
from rag.config import Settings
from rag.core.access import LOCAL_OPERATOR
from rag.core.answer import Retrieved
from rag.core.ports import Embedder
from rag.core.prompt import answer_messages
from rag.wiring import build_embedder, build_engine, prefer_passive_threads

KEY = secrets.token_hex(24)  # the API key the benchmark's `rag serve` accepts


async def _load(url: str, bodies: list[dict[str, object]], clients: int,
                headers: dict[str, str] | None = None) -> tuple[float, int]:
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
    async with httpx.AsyncClient(timeout=600, limits=httpx.Limits(max_connections=clients),
                                 headers=headers) as client:
        await asyncio.gather(*(worker(client) for _ in range(clients)))
    return time.perf_counter() - started, errors


def serve_env(settings: Settings, max_tokens: int) -> dict[str, str]:
    """`rag serve`'s environment as a deployment's: an API key (KEY), the chat's sign-in (a fresh secret, one user)."""
    from ui.serving.users import hash_password

    return {**os.environ, "RAG_DATA_DIR": str(settings.data_dir), "RAG_LLM_BASE_URL": settings.llm_base_url,
            "RAG_MAX_ANSWER_TOKENS": str(max_tokens), "RAG_REFUSAL_THRESHOLD": "-1", "RAG_API_KEYS": f"{KEY}:*",
            "RAG_UI_AUTH_SECRET": secrets.token_hex(32),
            "RAG_UI_USERS": f"bench:{hash_password(secrets.token_hex(16))}"}


def api_server(settings: Settings, port: int, max_tokens: int) -> AbstractContextManager[object]:
    """`rag serve` on the port, once /healthz answers; stopped on the way out, however the benchmark ends."""
    command = [str(Path(sys.executable).parent / "rag"), "serve", "--port", str(port)]
    return server_process(command, f"http://127.0.0.1:{port}/healthz", settings.data_dir / "logs" / "serve.log",
                          env=serve_env(settings, max_tokens))


def bodies(local: Settings, embedder: Embedder, questions: list[str], max_tokens: int) -> list[dict[str, object]]:
    """The direct side's requests: the final messages the API would send for each question."""
    engine = build_engine(local, embedder=embedder)
    engine.refusal_threshold = -1.0  # as in the served app: every question reaches the LLM
    return [{"model": local.llm_model, "max_tokens": max_tokens, "temperature": 0.0,
             "messages": answer_messages(q, next(e.hits for e in engine.stream(q, principal=LOCAL_OPERATOR)
                                                 if isinstance(e, Retrieved)))} for q in questions]


def measure(args: argparse.Namespace, settings: Settings, tmp: Path) -> list[tuple[float, int]]:
    """Ingest, start `rag serve`, warm up, then the timed passes: direct, API, direct, API, …"""
    local = settings.model_copy(update={"data_dir": tmp / "data"})
    embedder = build_embedder(local)
    service.sync([sample_docs(args.quick, tmp / "docs")], local, embedder=embedder)
    questions = [QUESTIONS[i % len(QUESTIONS)] for i in range(args.requests)]
    direct_bodies = bodies(local, embedder, questions, args.max_tokens)
    api_bodies: list[dict[str, object]] = [{"question": q} for q in questions]
    port = args.port or free_port()
    with api_server(local, port, args.max_tokens):
        direct_url, api_url = f"{local.llm_base_url}/chat/completions", f"http://127.0.0.1:{port}/v1/ask"
        asyncio.run(_load(direct_url, direct_bodies, args.clients))  # warm-up
        return [asyncio.run(_load(u, b, args.clients, h)) for u, b, h in
                [(direct_url, direct_bodies, {}), (api_url, api_bodies, {"Authorization": f"Bearer {KEY}"})]
                * args.passes]


def main(argv: list[str] | None = None) -> None:
    """Command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, help="concurrent clients (default 32; --quick: 2)")
    parser.add_argument("--requests", type=int, help="requests per pass (default 64; --quick: 2)")
    parser.add_argument("--max-tokens", type=int, help="answer tokens (default 48; --quick: 16, the least allowed)")
    parser.add_argument("--passes", type=int, help="timed passes of each side (default 2; --quick: 1)")
    parser.add_argument("--port", type=int, default=0, help="rag serve's port (default: a free one)")
    parser.add_argument("--quick", action="store_true",
                        help="2 clients, 2 requests, 16 tokens, 1 pass each, 3 small documents")
    args = parser.parse_args(argv)
    for name, full, quick in (("clients", 32, 2), ("requests", 64, 2), ("max_tokens", 48, 16), ("passes", 2, 1)):
        if getattr(args, name) is None:
            setattr(args, name, quick if args.quick else full)
    prefer_passive_threads()
    settings = Settings()
    with llm_server(settings), tempfile.TemporaryDirectory() as tmp:
        runs = measure(args, settings, Path(tmp))
    direct = sum(s for s, _ in runs[0::2]) / args.passes
    through_api = sum(s for s, _ in runs[1::2]) / args.passes
    errors = sum(e for _, e in runs)
    print(f"{args.clients} clients, {args.requests} requests per pass, {args.max_tokens} max tokens, "
          f"{args.passes} passes each")
    print(f"direct to vLLM: {args.requests / direct:.2f} req/s; through the API: {args.requests / through_api:.2f} "
          f"req/s; ratio {direct / through_api:.3f} (goal ≥ 0.9); errors {errors}")


if __name__ == "__main__":
    main()
