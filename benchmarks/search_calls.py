"""What one hybrid search costs in Chroma: calls per search, this process's CPU, and a Chroma server's CPU.

    .venv/bin/python -m benchmarks.search_calls [--docs 120] [--seconds 10] [--quick]

- Corpus: the first DOCS files of the Python FAQ dev set, ingested with the default embedder twice: into an embedded
  store (this process) and into a `chroma run` server (its own process, as compose runs it).
- Searches: the dev set's questions through `Retriever.search` (top 3), their vectors embedded once beforehand so
  that only retrieval counts, for two readers: anonymous (what `rag serve` answers without API keys, and any reader
  limited to groups: the dense side's unfiltered look-ahead, then a read of the rows) and an operator who sees every
  group (one filtered query, then a read of the keyword side's finds).
- Printed per store and reader: Chroma calls per search (the collection's query and get, counted), this process's
  CPU ms per search (`time.process_time`: Chroma's Rust threads included), and for the server its process's CPU ms
  per search (/proc/PID/stat), each over SECONDS of back-to-back searches.
`--quick` (3 documents, 1 second each) checks that the benchmark runs.
"""

from __future__ import annotations

import argparse
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.app_cost import corpus, cpu_seconds, questions
from benchmarks.gpu_ingest import chroma_server


def counted(collection: Any, calls: list[str]) -> None:
    """Count the collection's query and get calls into `calls` (by name)."""
    for name in ("query", "get"):
        method = getattr(collection, name)
        setattr(collection, name, lambda *a, _method=method, _name=name, **k: calls.append(_name) or _method(*a, **k))


def per_search(search: Callable[[str], object], asked: list[str], seconds: float,
               server_pid: int | None) -> tuple[int, float, float | None]:
    """(searches, this process's CPU ms per search, the server's CPU ms per search or None) over `seconds`."""
    done, started = 0, time.monotonic()
    cpu, served = time.process_time(), cpu_seconds([server_pid]) if server_pid else 0.0
    while time.monotonic() - started < seconds:
        search(asked[done % len(asked)])
        done += 1
    mine = 1000 * (time.process_time() - cpu) / done
    theirs = 1000 * (cpu_seconds([server_pid]) - served) / done if server_pid else None
    return done, mine, theirs


def measure(store: str, data: Path, url: str, folder: Path, seconds: float, server_pid: int | None) -> list[str]:
    """Ingest into one store, then the two readers' rows."""
    from ingest import service
    from rag.config import Settings
    from rag.core.access import ANONYMOUS, LOCAL_OPERATOR
    from rag.wiring import build_engine

    settings = Settings(data_dir=data, chroma_url=url, embed_threads=1)
    service.sync([folder], settings)
    retriever = build_engine(settings).retriever
    asked = list(dict.fromkeys(questions(400, folder)))
    calls: list[str] = []
    counted(retriever._dense._collection, calls)  # type: ignore[attr-defined]
    rows = []
    for reader, principal in (("anonymous", ANONYMOUS), ("operator", LOCAL_OPERATOR)):
        for question in asked:  # vectors embedded (and remembered), caches warm
            retriever.search(question, 3, principal)
        calls.clear()
        retriever.search(asked[0], 3, principal)
        per_call = len(calls)
        done, mine, theirs = per_search(lambda question, p=principal: retriever.search(question, 3, p), asked,
                                        seconds, server_pid)
        server = f"{theirs:6.2f}" if theirs is not None else "     -"
        rows.append(f"{store:<9} {reader:<10} {per_call:>5} {done:>8} {mine:>11.2f} {server:>10}")
    return rows


def main(argv: list[str] | None = None) -> None:
    """Command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, help="documents ingested (default 120; --quick: 3)")
    parser.add_argument("--seconds", type=float, help="seconds of searches per row (default 10; --quick: 1)")
    parser.add_argument("--quick", action="store_true", help="3 documents, 1 second per row")
    args = parser.parse_args(argv)
    docs = args.docs or (3 if args.quick else 120)
    seconds = args.seconds or (1.0 if args.quick else 10.0)
    with tempfile.TemporaryDirectory() as tmp:
        folder = corpus(docs, Path(tmp) / "docs")
        rows = measure("embedded", Path(tmp) / "embedded", "", folder, seconds, None)
        with chroma_server(Path(tmp) / "server") as url:
            pid = int(subprocess.check_output(["pgrep", "-n", "-f", str(Path(tmp) / "server" / "db")]).split()[0])
            rows += measure("server", Path(tmp) / "data", url, folder, seconds, pid)
    print(f"{docs} documents, top 3, hybrid, {seconds:g} s per row")
    print(f"{'store':<9} {'reader':<10} {'calls':>5} {'searches':>8} {'CPU ms here':>11} {'server CPU':>10}")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
