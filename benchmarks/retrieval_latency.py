"""Retrieval latency at 100k chunks of real text: dense-only vs hybrid, p50/p99, and the cost of hybrid as a ratio.

    RAG_DATA_DIR=data/cache/bench-100k .venv/bin/rag-ingest data/cache/python3.11-doc \\
        data/cache/postgresql-doc-15 data/cache/debian-handbook      # once (benchmarks/fetch_corpus.sh PKG DIR)
    .venv/bin/python -m benchmarks.retrieval_latency [DATA_DIR] [--quick]

Questions: the dev sets (Python FAQ, Chinese Debian docs, off-topic). Each question runs in both modes back to back,
alternating which goes first, so that the machine's noise falls on both alike. A query is the whole retrieval:
embedding the question, the dense (Chroma HNSW) search, the BM25 search, fetching keyword-only finds, fusion.
`--quick` (3 small documents ingested into a temporary data dir, 10 questions, 1 round) checks that it runs.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from benchmarks.common import CACHE, REPO, sample_docs
from ingest import service
from rag.config import Settings
from rag.core.access import LOCAL_OPERATOR
from rag.core.ports import Embedder
from rag.core.retrieve import Retriever
from rag.tools.evaluate import load_cases, percentiles
from rag.wiring import build_embedder, build_store, prefer_passive_threads

ROUNDS = 3
TOP_K = 3


def questions() -> list[str]:
    """Every question of the dev sets."""
    eval_dir = REPO / "data" / "eval"
    files = [eval_dir / "python-faq" / "questions.jsonl", eval_dir / "zh" / "questions.jsonl"]
    return [case.question for path in files for case in load_cases(path)]


def timed(retriever: Retriever, question: str) -> float:
    """Milliseconds for one retrieval."""
    started = time.perf_counter()
    retriever.search(question, TOP_K, LOCAL_OPERATOR)
    return (time.perf_counter() - started) * 1000


def alternating_times(retrievers: dict[str, Retriever], asked: list[str], rounds: int) -> dict[str, list[float]]:
    """Milliseconds per retrieval of each retriever, run back to back per question, the order rotating (after
    warming the caches: HNSW pages, jieba, tokenizers)."""
    for question in asked[:10]:
        for retriever in retrievers.values():
            retriever.search(question, TOP_K, LOCAL_OPERATOR)
    times: dict[str, list[float]] = {name: [] for name in retrievers}
    for round_ in range(rounds):
        for i, question in enumerate(asked):
            order = list(retrievers) if (i + round_) % 2 == 0 else list(reversed(retrievers))
            for name in order:
                times[name].append(timed(retrievers[name], question))
    return times


def measure(settings: Settings, asked: list[str], rounds: int, embedder: Embedder | None = None) -> None:
    """Time both modes over the questions and print the table and the ratios."""
    embedder, store = embedder or build_embedder(settings), build_store(settings)
    chunks = store.count()
    modes = {mode: Retriever(embedder, store, mode) for mode in ("dense", "hybrid")}
    started = time.perf_counter()
    modes["hybrid"].warm()
    print(f"{chunks} chunks in {settings.data_dir}; keyword index loaded in {time.perf_counter() - started:.1f} s")
    stats = {mode: percentiles(values) for mode, values in alternating_times(modes, asked, rounds).items()}
    print(f"{len(asked)} questions x {rounds} rounds, top-{TOP_K}")
    print(f"{'mode':<8}{'p50 ms':>9}{'p95 ms':>9}{'p99 ms':>9}")
    for mode, row in stats.items():
        print(f"{mode:<8}{row['p50']:>9.1f}{row['p95']:>9.1f}{row['p99']:>9.1f}")
    print(f"hybrid / dense: p50 {stats['hybrid']['p50'] / stats['dense']['p50']:.2f}, "
          f"p99 {stats['hybrid']['p99'] / stats['dense']['p99']:.2f}")


def main(argv: list[str] | None = None) -> None:
    """Command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data_dir", nargs="?", type=Path, default=CACHE / "bench-100k")
    parser.add_argument("--quick", action="store_true", help="3 small documents, 10 questions, 1 round")
    args = parser.parse_args(argv)
    prefer_passive_threads()
    if not args.quick:
        measure(Settings(data_dir=args.data_dir, _env_file=None), questions(), ROUNDS)  # type: ignore[call-arg]
        return
    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(data_dir=Path(tmp) / "data", _env_file=None)  # type: ignore[call-arg]
        embedder = build_embedder(settings)
        service.sync([sample_docs(True, Path(tmp) / "docs")], settings, embedder=embedder)
        measure(settings, questions()[:10], 1, embedder)


if __name__ == "__main__":
    main()
