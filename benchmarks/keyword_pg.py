"""Hybrid retrieval with the keyword index in PostgreSQL (RAG_KEYWORD_DB_URL) vs the embedded one, at 100k chunks:
p50/p99 of both and their ratio, in one run.

    .venv/bin/python -m benchmarks.keyword_pg [--chunks 100000] [--unique 4000] [--quick] [--json]

Text is real: python3.11-doc's reStructuredText sources (data/cache, benchmarks/fetch_corpus.sh) and the Chinese
samples, cut into passages of 60 words; --quick (1,000 chunks, seconds) uses only files in the repository (Python
FAQ dev set and samples). As in benchmarks/access_latency, only --unique passages are embedded for real and the
chunks are copies of them (a distinct prefix each, the passage's vector plus N(0, 0.02) noise), in documents of 20
chunks that belong to one of ten groups or to none. One embedded Chroma collection serves both variants; the keyword
indexes hold the same chunks: the embedded one (SQLite + in-memory snapshots) and PostgreSQL, a throwaway server
this script starts from Debian's binaries (initdb in a temporary folder) and always stops. Every dev-set question
runs against both, back to back in alternating order, for the local operator (no filter) and a one-group reader; a
query is the whole retrieval (embedding, dense search, BM25, fetching keyword-only finds, fusion).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from benchmarks.access_latency import copy_vectors, document_access, split_passages
from benchmarks.common import CACHE, REPO, _sigterm_as_exit
from rag.components.index import Index
from rag.components.keyword import KeywordIndex
from rag.components.keyword_pg import PgKeywordIndex
from rag.components.store import ChromaStore
from rag.config import Settings
from rag.core.access import LOCAL_OPERATOR, Principal
from rag.core.ports import Embedder, KeywordStore
from rag.core.retrieve import Retriever
from rag.core.types import Chunk
from rag.tools.evaluate import load_cases, percentiles
from rag.wiring import build_chroma_client, build_embedder, prefer_passive_threads

CHUNKS, UNIQUE, ROUNDS = 100_000, 4_000, 3
QUICK_CHUNKS, QUICK_UNIQUE, QUICK_QUESTIONS = 1_000, 100, 10
DOC_CHUNKS, WRITE_BATCH, TOP_K = 20, 2_000, 3
READERS = {"all": LOCAL_OPERATOR, "1 group": Principal("bench", frozenset({"g3"}))}
SIDES = ("embedded", "postgres")


def texts(quick: bool) -> list[str]:
    """The source texts: the repository's own files for --quick, python3.11-doc and the Chinese samples else."""
    from ingest.html import load_html

    samples = REPO / "data" / "samples" / "zh"
    chinese = [p.read_text(encoding="utf-8") for p in sorted(samples.glob("*.md"))]
    chinese += ["\n".join(s.text for s in load_html(p.read_bytes(), p.name).sections)
                for p in sorted(samples.glob("*.html"))]
    folder = REPO / "data" / "eval" / "python-faq" / "docs" if quick else CACHE / "python3.11-doc"
    if not folder.exists():
        subprocess.run([str(REPO / "benchmarks" / "fetch_corpus.sh"), "python3.11-doc", str(folder)], check=True)
    return chinese + [p.read_text(encoding="utf-8", errors="replace") for p in sorted(folder.rglob("*.txt"))]


def passages(quick: bool, unique: int) -> list[str]:
    """Up to `unique` distinct passages, Chinese ones first (they are few), then evenly spread over the rest."""
    found = list(dict.fromkeys(p for text in texts(quick) for p in split_passages(text)))
    step = max(1, len(found) // unique)
    return (found[:unique] if len(found) <= unique else found[::step][:unique])


def make_chunks(texts_: Sequence[str], total: int) -> list[Chunk]:
    """`total` chunks, copies of the passages with a distinct prefix, in documents of 20 with a group (or none)."""
    chunks = []
    for i in range(total):
        doc, position = divmod(i, DOC_CHUNKS)
        body = f"d{doc:05d}p{position:02d} {texts_[i % len(texts_)]}"
        chunks.append(Chunk(f"kw-{i:06d}", body, "bench", f"doc-{doc:05d}", "", position,
                            access=document_access(doc)))
    return chunks


@contextmanager
def postgres() -> Iterator[str]:
    """A throwaway PostgreSQL server (Debian's binaries) on 127.0.0.1; stopped and removed on the way out."""
    bins = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"))
    if not bins:
        raise SystemExit("PostgreSQL server binaries are missing: sudo apt-get install -y postgresql")
    folder = Path(tempfile.mkdtemp(prefix="rag-bench-postgres-"))
    folder.chmod(0o777)  # the server runs as `postgres` when we are root
    as_postgres = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    pg_ctl, data = str(bins[-1].parent / "pg_ctl"), str(folder / "data")
    previous = _sigterm_as_exit()  # a SIGTERM to this script stops the server too
    try:
        subprocess.run([*as_postgres, str(bins[-1]), "-D", data, "-A", "trust", "-U", "rag", "-E", "UTF8"],
                       check=True, capture_output=True)
        options = f"-p {port} -k {folder} -c listen_addresses=127.0.0.1"
        subprocess.run([*as_postgres, pg_ctl, "-D", data, "-o", options, "-l", str(folder / "log"), "-w", "start"],
                       check=True, capture_output=True)
        yield f"postgresql://rag@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run([*as_postgres, pg_ctl, "-D", data, "-m", "fast", "stop"], capture_output=True)
        shutil.rmtree(folder, ignore_errors=True)
        print(f"stopped PostgreSQL and removed {folder}", flush=True)
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def build(chunks: list[Chunk], vectors: np.ndarray, dense: ChromaStore,
          keyword: dict[str, KeywordStore]) -> dict[str, float]:
    """Write the chunks to Chroma and to each keyword index; seconds spent per keyword index."""
    spent = dict.fromkeys(keyword, 0.0)
    unique = len(vectors)
    copies = {copy: copy_vectors(vectors, copy) for copy in range(-(-len(chunks) // unique))}
    for start in range(0, len(chunks), WRITE_BATCH):
        part = chunks[start : start + WRITE_BATCH]
        dense.upsert(part, np.stack([copies[i // unique][i % unique] for i in range(start, start + len(part))]))
        for name, index in keyword.items():
            started = time.perf_counter()
            index.add(part)
            spent[name] += time.perf_counter() - started
        print(f"  wrote {start + len(part)}/{len(chunks)} chunks", flush=True)
    return spent


def vacuum(url: str) -> None:
    """VACUUM ANALYZE, as autovacuum does within a minute of a bulk load: index-only scans need the visibility map."""
    import psycopg

    started = time.perf_counter()
    with psycopg.connect(url, autocommit=True) as db:
        db.execute("VACUUM ANALYZE")
    print(f"  VACUUM ANALYZE in {time.perf_counter() - started:.1f} s", flush=True)


def questions(limit: int | None) -> list[str]:
    """The dev sets' questions (Python FAQ, Chinese)."""
    files = [REPO / "data" / "eval" / name / "questions.jsonl" for name in ("python-faq", "zh")]
    asked = [case.question for path in files for case in load_cases(path)]
    return asked[:: max(1, len(asked) // limit)][:limit] if limit else asked


def measure(retrievers: dict[str, Retriever], asked: list[str], rounds: int) -> dict[str, list[float]]:
    """Milliseconds per (reader, side) over every question and round, sides alternating which goes first."""
    times: dict[str, list[float]] = {f"{reader} {side}": [] for reader in READERS for side in SIDES}
    for round_ in range(rounds):
        for i, question in enumerate(asked):
            for reader, principal in READERS.items():
                for side in SIDES if (i + round_) % 2 == 0 else SIDES[::-1]:
                    started = time.perf_counter()
                    retrievers[side].search(question, TOP_K, principal)
                    times[f"{reader} {side}"].append((time.perf_counter() - started) * 1000)
    return times


def report(times: dict[str, list[float]], chunks: int, writes: dict[str, float], rounds: int,
           asked: int) -> dict[str, object]:
    """Print the table and the ratios; the figures as a dict (--json prints it)."""
    stats = {name: percentiles(values) for name, values in times.items()}
    print(f"{chunks} chunks, {asked} questions x {rounds} rounds, hybrid top-{TOP_K}")
    print(f"{'reader / keyword index':<26}{'p50 ms':>9}{'p99 ms':>9}")
    for name, row in stats.items():
        print(f"{name:<26}{row['p50']:>9.1f}{row['p99']:>9.1f}")
    figures: dict[str, object] = {"chunks": chunks, "write_s": {k: round(v, 1) for k, v in writes.items()}}
    for reader in READERS:
        pg, embedded = stats[f"{reader} postgres"], stats[f"{reader} embedded"]
        print(f"{reader}: postgres / embedded: p50 {pg['p50'] / embedded['p50']:.2f}, "
              f"p99 {pg['p99'] / embedded['p99']:.2f}")
        figures[reader] = {"embedded": embedded, "postgres": pg}
    figures.update(embedded=stats["all embedded"], postgres=stats["all postgres"])  # unfiltered, at the top level
    print(f"keyword index writes of {chunks} chunks: embedded {writes['embedded']:.1f} s, "
          f"postgres {writes['postgres']:.1f} s")
    return figures


def main(argv: Sequence[str] | None = None, embedder: Embedder | None = None) -> dict[str, object]:
    """Build, measure, print; returns the figures."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--chunks", type=int, default=CHUNKS)
    parser.add_argument("--unique", type=int, default=UNIQUE, help="passages embedded for real")
    parser.add_argument("--quick", action="store_true", help="1,000 chunks from the repository's files, seconds")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON on the last line")
    args = parser.parse_args(argv)
    total, unique = (QUICK_CHUNKS, QUICK_UNIQUE) if args.quick else (args.chunks, args.unique)
    prefer_passive_threads()
    with tempfile.TemporaryDirectory(prefix="rag-bench-keyword-") as tmp, postgres() as url:
        settings = Settings(data_dir=Path(tmp), _env_file=None)  # type: ignore[call-arg]
        embedder = embedder or build_embedder(settings)
        found = passages(args.quick, unique)
        print(f"embedding {len(found)} passages for {total} chunks", flush=True)
        vectors = embedder.embed_documents(found)
        dense = ChromaStore(build_chroma_client(settings), "bench", settings.embed_model)
        keyword: dict[str, KeywordStore] = {"embedded": KeywordIndex(Path(tmp) / "kw.sqlite3"),
                                            "postgres": PgKeywordIndex(url, "bench")}
        writes = build(make_chunks(found, total), vectors, dense, keyword)
        vacuum(url)
        retrievers = {side: Retriever(embedder, Index(dense, keyword[side])) for side in SIDES}
        asked = questions(QUICK_QUESTIONS if args.quick else None)
        for retriever in retrievers.values():
            retriever.warm()
        measure(retrievers, asked[:3], 1)  # warm caches (HNSW pages, jieba, PostgreSQL's buffers)
        rounds = 1 if args.quick else ROUNDS
        figures = report(measure(retrievers, asked, rounds), total, writes, rounds, len(asked))
        keyword["postgres"].close()  # type: ignore[attr-defined]
    if args.json:
        print(json.dumps(figures))
    return figures


if __name__ == "__main__":
    main()
