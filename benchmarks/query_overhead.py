"""The query path's CPU overhead without the LLM at 10k chunks, for each embedder: p50/p90 and their ratio, one run.

    .venv/bin/python -m benchmarks.query_overhead [--models A,B] [--total 10000] [--unique 1000] [--quick]

For each RAG_EMBED_MODEL (default: MiniLM alone, and the MiniLM + e5 pair), a temporary collection of `--total`
chunks is built as benchmarks.access_latency builds its own: `--unique` real passages of the Python FAQ dev set's
documents embedded for real, the rest copies with a little noise on their vectors. Then every dev-set question
(Python FAQ, Chinese) is retrieved top-3 in hybrid mode by each model's retriever back to back, the order rotating,
so the machine's noise falls on both alike. A query is everything before the prompt: embedding the question (both
models for English questions with the pair, e5 alone for Chinese ones), the dense and BM25 searches, fetching
keyword-only finds, calibration, fusion and the substance prior. The goal (issue 28): p50 ≤ 60 ms, p90 ≤ 150 ms.
`--quick`: 400 chunks from 40 passages, 10 questions, 1 round (checks that it runs).
"""

from __future__ import annotations

import argparse
import os
import platform
import tempfile
from pathlib import Path

from benchmarks.access_latency import ensure_collection, faq_passages, questions
from benchmarks.retrieval_latency import alternating_times
from rag.components.cpu import BF16_FLAGS, cpu_flags
from rag.components.models import BUNDLED_EMBED_MODEL
from rag.config import BUNDLED_PAIR_MODEL, Settings
from rag.core.retrieve import Retriever
from rag.tools.evaluate import percentiles
from rag.wiring import build_embedder, build_retriever, build_store, prefer_passive_threads

ROUNDS = 2
TOP_K = 3


def retriever_for(model: str, data_dir: Path, total: int, unique: int) -> Retriever:
    """A hybrid retriever over a collection of `total` chunks embedded by `model` (built here)."""
    settings = Settings(data_dir=data_dir, embed_model=model, _env_file=None)  # type: ignore[call-arg]
    embedder, store = build_embedder(settings), build_store(settings)
    ensure_collection(settings, embedder, store, unique, total, faq_passages)
    retriever = build_retriever(settings, embedder, store)
    retriever.warm()
    return retriever


def measure(retrievers: dict[str, Retriever], asked: list[str], rounds: int) -> dict[str, dict[str, float]]:
    """Milliseconds per retrieval of each model over the questions: p50 / p90 / p99."""
    return {model: _p90(values) for model, values in alternating_times(retrievers, asked, rounds).items()}


def _p90(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {**percentiles(values), "p90": round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.9))], 2)}


def main(argv: list[str] | None = None) -> None:
    """Command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=f"{BUNDLED_EMBED_MODEL},{BUNDLED_PAIR_MODEL}")
    parser.add_argument("--total", type=int, default=10_000)
    parser.add_argument("--unique", type=int, default=1_000)
    parser.add_argument("--quick", action="store_true", help="400 chunks, 10 questions, 1 round")
    args = parser.parse_args(argv)
    prefer_passive_threads()
    total, unique = (400, 40) if args.quick else (args.total, args.unique)
    asked = questions()[:10] if args.quick else questions()
    with tempfile.TemporaryDirectory() as tmp:
        retrievers = {model: retriever_for(model, Path(tmp) / f"m{n}", total, unique)
                      for n, model in enumerate(args.models.split(","))}
        stats = measure(retrievers, asked, 1 if args.quick else ROUNDS)
    bf16 = "native bf16" if cpu_flags() & BF16_FLAGS else "no native bf16"
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, {bf16}")
    print(f"{total} chunks, {len(asked)} questions x {1 if args.quick else ROUNDS} rounds, hybrid top-{TOP_K}")
    for model, row in stats.items():
        print(f"{model}: p50 {row['p50']:.1f} ms  p90 {row['p90']:.1f} ms  p99 {row['p99']:.1f} ms")
    first, *others = stats
    for model in others:
        print(f"{model} ÷ {first}: p50 {stats[model]['p50'] / stats[first]['p50']:.2f}, "
              f"p90 {stats[model]['p90'] / stats[first]['p90']:.2f}  (goal: p50 ≤ 60 ms, p90 ≤ 150 ms)")


if __name__ == "__main__":
    main()
