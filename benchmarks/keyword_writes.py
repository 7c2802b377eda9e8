"""What one write to the keyword index costs until the next search sees it, and search latency, at 100k chunks:
the full rebuild per write (bm25s, as rag.components.keyword did before snapshots) against incremental snapshots, in
one run.

    .venv/bin/python -m benchmarks.keyword_writes [--chunks 100000] [--rounds 10] [--quick]

Synthetic chunks of 120 words drawn from a Zipf-distributed vocabulary of 40,000 (real text's shape: a few very
common words, a long tail) are written straight into two SQLite files of the index's schema. A write is one
20-chunk document added, or one document deleted, through the index's own methods; the time runs until a search
has returned with the change visible (same process: the writer's next search; other process: searches of a second
index on the same file, which catches up from the change log, repeated until one shows it). Search latency: the
same 3-word queries on both, alternating. `--quick` (1,000 chunks, 2 rounds, 50 searches) checks that it runs.
"""

from __future__ import annotations

import argparse
import math
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from rag.components.keyword import SCHEMA, KeywordIndex
from rag.components.keyword_snapshot import K1, B, compact
from rag.core.access import DocAccess
from rag.core.text import tokenize
from rag.core.types import Chunk
from rag.tools.evaluate import percentiles

VOCABULARY = 40_000
WORDS_PER_CHUNK = 120
DOC_CHUNKS = 20
SEARCHES = 200


class FullRebuild:
    """The keyword index before snapshots: SQLite writes, and a whole bm25s matrix rebuilt by the next search."""

    def __init__(self, path: Path) -> None:
        self.path, self.loaded, self.bm25, self.ids = path, -1, None, list[str]()

    def write(self, sql: str, rows: list[tuple[str, ...]]) -> None:
        """One write and a revision bump, as the old add/delete did."""
        with sqlite3.connect(self.path) as db:
            db.executemany(sql, rows)
            db.execute("UPDATE revision SET value = value + 1")

    def search(self, query: str, k: int = 10) -> list[str]:
        """The old search: reload when the revision moved, then bm25s scores and the top k."""
        with sqlite3.connect(self.path) as db:
            revision = db.execute("SELECT value FROM revision").fetchone()[0]
        if revision != self.loaded:
            self.load()
            self.loaded = revision
        scores = self.bm25.get_scores(tokenize(query))  # type: ignore[attr-defined]
        best = min(k, int(np.count_nonzero(scores)))
        part = np.argpartition(-scores, best - 1)[:best] if best else np.array([], dtype=int)
        return [self.ids[int(i)] for i in part[np.argsort(-scores[part])]]

    def load(self) -> None:
        """The old _load: every row read, tokenized again by split, indexed by bm25s."""
        import bm25s

        with sqlite3.connect(self.path) as db:
            rows = db.execute("SELECT chunk_id, tokens, access FROM tokens ORDER BY chunk_id").fetchall()
        self.ids = [row[0] for row in rows]
        labels = [DocAccess.from_label(row[2]).label for row in rows]
        corpus = [row[1].split() or [""] for row in rows]
        self.bm25 = bm25s.BM25(k1=K1, b=B, method="lucene")
        self.bm25.index(corpus, show_progress=False)
        del labels


def vocabulary() -> list[str]:
    """Made-up words that tokenize() keeps as they are (no stemming, no stopwords)."""
    return [f"w{i}x" for i in range(VOCABULARY)]


def texts(rng: np.random.Generator, words: list[str], n: int) -> list[str]:
    """n chunk texts of Zipf-distributed words."""
    ranks = np.minimum(rng.zipf(1.1, size=(n, WORDS_PER_CHUNK)), VOCABULARY) - 1
    return [" ".join(words[r] for r in row) for row in ranks.tolist()]


def fill(paths: list[Path], rng: np.random.Generator, words: list[str], n: int) -> None:
    """The same n chunks, 20 per document, into each SQLite file."""
    rows = [(f"d{i // DOC_CHUNKS}:{i}", f"d{i // DOC_CHUNKS}", text, "open")
            for i, text in enumerate(texts(rng, words, n))]
    for path in paths:
        with sqlite3.connect(path) as db:
            db.executescript(SCHEMA)
            db.executemany("INSERT INTO tokens VALUES (?, ?, ?, ?)", rows)


def timed(action: Callable[[], Any]) -> float:
    """Milliseconds for one call."""
    started = time.perf_counter()
    action()
    return (time.perf_counter() - started) * 1000


def document(rng: np.random.Generator, words: list[str], name: str) -> list[Chunk]:
    """A new 20-chunk document; its first chunk holds a word no other chunk has, to see it arrive."""
    bodies = texts(rng, words, DOC_CHUNKS)
    return [Chunk(f"{name}:{i}", (f"marker{name} " if i == 0 else "") + body, "bench.md", name, "h", i)
            for i, body in enumerate(bodies)]


def write_rounds(rounds: int, add: Callable[[list[Chunk]], None], delete: Callable[[list[str]], None],
                 sees: Callable[[str], bool], rng: np.random.Generator, words: list[str], tag: str,
                 ) -> tuple[list[float], list[float]]:
    """(ms per add, ms per delete) of a 20-chunk document, each until `sees` confirms the change."""
    adds, deletes = [], []
    for n in range(rounds):
        chunks, marker = document(rng, words, f"{tag}{n}"), f"marker{tag}{n}"
        started = time.perf_counter()
        add(chunks)
        _until(sees, marker, True, started)
        adds.append((time.perf_counter() - started) * 1000)
        started = time.perf_counter()
        delete([c.chunk_id for c in chunks])
        _until(sees, marker, False, started)
        deletes.append((time.perf_counter() - started) * 1000)
    return adds, deletes


def _until(sees: Callable[[str], bool], marker: str, present: bool, started: float) -> None:
    """Search again until the change shows (another process may be compacting); at most a minute."""
    while sees(marker) != present:
        if time.perf_counter() - started > 60:
            raise AssertionError("no search saw the write within a minute")
        time.sleep(0.001)


def search_latency(old: FullRebuild, new: KeywordIndex, queries: list[str]) -> tuple[list[float], list[float]]:
    """ms per search, old and new, the same queries alternating which goes first."""
    old_ms, new_ms = [], []
    for n, query in enumerate(queries):
        pair = [(old_ms, partial(old.search, query)), (new_ms, partial(new.search, query, 10))]
        for into, search in pair if n % 2 else pair[::-1]:
            into.append(timed(search))
    return old_ms, new_ms


def run(n: int, rounds: int, searches: int, folder: Path) -> None:
    """Build, measure and print the figures."""
    rng, words = np.random.default_rng(16), vocabulary()
    old_path, new_path = folder / "old.sqlite3", folder / "new.sqlite3"
    fill([old_path, new_path], rng, words, n)
    old, new, other = FullRebuild(old_path), KeywordIndex(new_path), KeywordIndex(new_path)
    import bm25s  # noqa: F401  (imports and jieba's dictionary are loaded before anything is timed)

    tokenize("预热")
    load_old, load_new = timed(old.load), timed(new.warm)
    other.warm()
    print(f"{n:,} chunks, {WORDS_PER_CHUNK} words each; a write = one {DOC_CHUNKS}-chunk document, {rounds} rounds")
    print(f"first load: full rebuild {load_old:,.0f} ms, snapshot {load_new:,.0f} ms")
    seen_old: Callable[[str], bool] = lambda word: bool(old.search(word))  # noqa: E731
    old_add, old_delete = write_rounds(
        rounds, lambda cs: old.write("INSERT OR REPLACE INTO tokens VALUES (?, ?, ?, ?)",
                                     [(c.chunk_id, c.doc_id, " ".join(tokenize(c.text)), "open") for c in cs]),
        lambda ids: old.write("DELETE FROM tokens WHERE chunk_id = ?", [(i,) for i in ids]), seen_old, rng, words, "o")
    new_add, new_delete = write_rounds(rounds, new.add, new.delete, lambda w: bool(new.search(w, 10)), rng, words, "n")
    far_add, far_delete = write_rounds(rounds, new.add, new.delete, lambda w: bool(other.search(w, 10)), rng, words,
                                       "f")
    print(f"{'write, until the next search sees it (median ms)':<52}{'old':>10}{'new':>10}{'old/new':>9}")
    for name, before, after in [("add a document, same process", old_add, new_add),
                                ("delete a document, same process", old_delete, new_delete),
                                ("add a document, other process", old_add, far_add),
                                ("delete a document, other process", old_delete, far_delete)]:
        a, b = statistics.median(before), statistics.median(after)
        print(f"{name:<52}{a:>10.1f}{b:>10.2f}{a / b:>9.0f}")
    queries = [" ".join(words[int(r)] for r in rng.integers(20, 2000, size=3)) for _ in range(searches)]
    old_ms, new_ms = search_latency(old, new, queries)
    p_old, p_new = percentiles(old_ms), percentiles(new_ms)
    print(f"{'search (ms)':<52}{'old':>10}{'new':>10}{'old/new':>9}")
    for p in ("p50", "p99"):
        print(f"{'search ' + p:<52}{p_old[p]:>10.2f}{p_new[p]:>10.2f}{p_old[p] / p_new[p]:>9.2f}")
    rebuilt = timed(lambda: compact(_with_tombstones(new)))
    print(f"full compaction (after {math.ceil(0.25 * n):,} deletes; off the search path): {rebuilt:,.0f} ms")


def _with_tombstones(index: KeywordIndex) -> Any:
    """The index's snapshot with a quarter of its chunks deleted, so that compact() rebuilds it."""
    from rag.components.keyword_snapshot import apply

    snapshot = index._snapshot
    assert snapshot is not None
    doomed = [snapshot.chunk_id(i) for i in range(0, len(snapshot.alive), 3)]
    return apply(snapshot, snapshot.revision, deletes=doomed)


def main(argv: list[str] | None = None) -> None:
    """Parse arguments, run in a temporary folder."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--chunks", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--quick", action="store_true", help="1,000 chunks, 2 rounds: checks that it runs")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        if args.quick:
            run(1_000, 2, 50, Path(tmp))
        else:
            run(args.chunks, args.rounds, SEARCHES, Path(tmp))


if __name__ == "__main__":
    main()
