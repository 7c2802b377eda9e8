"""Questions answered while a large ingest runs through the API: /v1/ask latency (p50, p99) with the app idle and
while POST /v1/sync ingests N chunks, in one run of one server; goal p99 during ≤ 2 × idle.

    .venv/bin/python -m benchmarks.answers_during_ingest [--chunks 10000] [--quick]

The app is the real one (MiniLM, embedded Chroma, the keyword index, grounding) in a uvicorn thread; the LLM is the
fake OpenAI-compatible server of the unit tests (it quotes the first excerpt's first sentence, so answers pass the
grounding check as a good model's do), so the figures are the app's own and not vLLM's. One client asks questions
back to back (a pause of 20 ms between them), first idle, then for as long as the sync runs. The corpus is
synthetic Markdown of the sample documents' words (the embedder's cost per chunk is what it is on real text).
`--quick` (10 + 20 chunks, MiniLM alone) checks that the benchmark runs.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import re
import tempfile
import time
from pathlib import Path

import httpx

from benchmarks.query_path import QUESTIONS
from ingest import service
from rag.components.models import BUNDLED_EMBED_MODEL
from rag.config import Settings
from rag.tools.evaluate import percentiles
from rag.wiring import App, build_embedder, prefer_passive_threads
from tests.conftest import serving
from tests.fake_llm import FakeLLMServer
from ui.api.app import create_app
from ui.serving.services import build_services

REPO = Path(__file__).resolve().parent.parent
KEY = "bench-admin-key-0123456789"
SAMPLES = REPO / "data" / "samples" / "en"
CHUNKS_PER_FILE = 10


def write_corpus(folder: Path, chunks: int, seed: int = 7, first: int = 0) -> None:
    """Markdown files of about ten 200-word sections each, together about `chunks` chunks (numbered from
    `first`)."""
    words = sorted({w for p in SAMPLES.glob("*.md") for w in re.findall(r"[a-z]{3,}", p.read_text().lower())})
    pick = random.Random(seed).choice
    folder.mkdir(parents=True, exist_ok=True)
    for n in range(first, first + max(1, chunks // CHUNKS_PER_FILE)):
        sections = [f"## Section {s}\n\n" + " ".join(pick(words) for _ in range(170)) + "."
                    for s in range(CHUNKS_PER_FILE)]
        (folder / f"bulk-{n:05d}.md").write_text(f"# Bulk {n}\n\n" + "\n\n".join(sections), encoding="utf-8")


def quote_first_excerpt(messages: list[dict[str, str]]) -> str:
    """The fake LLM's answer: the first sentence of excerpt [1], cited (a grounded answer, as a good model gives)."""
    body = messages[-1]["content"].split("excerpt [1]", 1)[1].split("\n", 1)[1]
    return re.split(r"(?<=[.!?])\s", body.strip(), maxsplit=1)[0] + " [1]"


async def _ask_until(client: httpx.AsyncClient, stop: asyncio.Event | None, count: int) -> list[float]:
    """Latencies (ms) of questions asked back to back: `count` of them, or until `stop` is set."""
    latencies: list[float] = []
    while (len(latencies) < count) if stop is None else not stop.is_set():
        started = time.perf_counter()
        response = await client.post("/v1/ask", json={"question": QUESTIONS[len(latencies) % len(QUESTIONS)]})
        response.raise_for_status()
        latencies.append((time.perf_counter() - started) * 1000)
        await asyncio.sleep(0.02)
    return latencies


async def _measure(url: str, idle_questions: int) -> tuple[list[float], list[float], dict[str, object], float]:
    async with httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {KEY}"}, timeout=3600) as client:
        await _ask_until(client, None, 5)  # warm-up
        idle = await _ask_until(client, None, idle_questions)
        stop = asyncio.Event()
        started = time.perf_counter()
        sync = asyncio.create_task(client.post("/v1/sync"))
        sync.add_done_callback(lambda _: stop.set())
        during = await _ask_until(client, stop, 0)
        report = (await sync).json()
        return idle, during, report, time.perf_counter() - started


def run(chunks: int, idle_questions: int, before: int = 1000, model: str | None = None) -> dict[str, float]:
    """Measure and print; the figures as a dict (`model`: RAG_EMBED_MODEL, the default's when None)."""
    prefer_passive_threads()
    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(data_dir=Path(tmp) / "data", api_keys=f"{KEY}:*:admin",  # type: ignore[call-arg]
                            _env_file=None)
        if model:
            settings = settings.model_copy(update={"embed_model": model})
        embedder = build_embedder(settings)
        write_corpus(settings.documents_dir, before, seed=1)  # what is there before: the idle index
        service.sync([settings.documents_dir], settings, embedder=embedder)
        write_corpus(settings.documents_dir, chunks, first=before // CHUNKS_PER_FILE)
        llm = FakeLLMServer(quote_first_excerpt).llm()
        with serving(create_app(settings, build_services(App(settings, embedder=embedder, llm=llm)))) as url:
            idle, during, report, seconds = asyncio.run(_measure(url, idle_questions))
    figures = _figures(idle, during, report, seconds)
    print(f"ingest through POST /v1/sync: {report.get('chunks')} chunks in {seconds:.0f} s; "
          f"questions answered meanwhile: {len(during)}")
    print(f"/v1/ask p50 idle {figures['p50_idle']:.0f} ms, during {figures['p50_during']:.0f} ms; "
          f"p99 idle {figures['p99_idle']:.0f} ms, during {figures['p99_during']:.0f} ms")
    print(f"p99 during / idle: {figures['p99_ratio']:.2f} (goal ≤ 2)")
    return figures


def _figures(idle: list[float], during: list[float], report: dict[str, object], seconds: float) -> dict[str, float]:
    quiet, busy = percentiles(idle), percentiles(during or [float("nan")])
    return {"p50_idle": quiet["p50"], "p99_idle": quiet["p99"], "p50_during": busy["p50"],
            "p99_during": busy["p99"], "p99_ratio": busy["p99"] / quiet["p99"], "seconds": seconds,
            "answered": float(len(during)), "chunks": float(str(report.get("chunks", 0)))}


def main(argv: list[str] | None = None) -> None:
    """Command line."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chunks", type=int, default=10_000)
    parser.add_argument("--idle-questions", type=int, default=60)
    parser.add_argument("--before", type=int, default=1000, help="chunks indexed before the measured sync")
    parser.add_argument("--quick", action="store_true",
                        help="10 chunks before, 20 ingested, 5 idle questions, MiniLM alone (the code path, quickly)")
    args = parser.parse_args(argv)
    if args.quick:
        run(20, 5, before=10, model=BUNDLED_EMBED_MODEL)
    else:
        run(args.chunks, args.idle_questions, args.before)


if __name__ == "__main__":
    main()
