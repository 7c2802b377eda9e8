"""Keyword search beside Chroma: BM25 over jieba tokens for Chinese and word tokens otherwise.

The tokens of every chunk live in a SQLite file next to the sync manifest, updated by each ingest (add, change,
delete), so the index survives restarts; that file is the truth, and its `revision` counter tells other processes
that it changed. Each chunk's access label is stored beside its tokens: a search masks out what the caller may not
see before any chunk is ranked, so the top k are all visible ones.

In memory a search reads one immutable snapshot (rag.components.keyword_snapshot), swapped in by a single assignment:
it never
sees a half-applied write, and only the first load (warm) makes anyone wait. Writes update it incrementally:
- this process's own writes are applied to the snapshot directly, before the write returns (a deleted chunk never
  comes back afterwards);
- other processes' writes are read from a change log (table `changes`: revision, chunk id, kind), written in the same
  transaction as the tokens: a reader behind by a few revisions reads only the rows of the chunks they touched
  instead of the whole table (at 100k chunks a full load takes seconds; a 20-chunk write, milliseconds). A search
  that notices a small change applies it itself; a large one (or a gap in the log: pruned, or written by code from
  before the log) is loaded by a background thread while searches go on with the current snapshot. The log keeps
  the last LOG_REVISIONS revisions; the tokens table keeps its old schema, so an older reader still works.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rag.components.keyword_snapshot import Snapshot, apply, compact, load, needs_compaction
from rag.core.access import DocAccess
from rag.core.ports import Admits, KeywordHit
from rag.core.text import HAN_RANGE, tokenize
from rag.core.types import Chunk

ADD, LABEL, DELETE = "add", "label", "delete"  # kinds of change in the log
LOG_REVISIONS = 1000  # the change log keeps this many revisions; a reader further behind loads everything
INLINE_ROWS = 2000  # a search applies a change of up to this many rows itself; larger ones load in the background
SCHEMA = """
CREATE TABLE IF NOT EXISTS tokens (chunk_id TEXT PRIMARY KEY, doc_id TEXT NOT NULL, tokens TEXT NOT NULL,
                                   access TEXT);
CREATE INDEX IF NOT EXISTS tokens_doc ON tokens (doc_id);
CREATE TABLE IF NOT EXISTS revision (id INTEGER PRIMARY KEY CHECK (id = 1), value INTEGER NOT NULL);
INSERT OR IGNORE INTO revision VALUES (1, 0);
CREATE TABLE IF NOT EXISTS changes (revision INTEGER NOT NULL, chunk_id TEXT NOT NULL, kind TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS changes_revision ON changes (revision);
"""


class KeywordIndex:
    """BM25 over the chunks of one collection, persisted as tokens in SQLite, searched through immutable snapshots."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._path = path
        self._lock = threading.Lock()  # held by whoever builds the next snapshot; searches only ever try it
        self._snapshot: Snapshot | None = None
        self._worker: threading.Thread | None = None  # a background load or compaction
        self._languages: tuple[int, dict[str, tuple[int, int]]] | None = None  # (revision, languages())
        with self._connect() as db:
            db.executescript(SCHEMA)
            columns = {row[1] for row in db.execute("PRAGMA table_info(tokens)")}
            if "access" not in columns:  # an index from before access labels: NULL reads as locked until repaired
                db.execute("ALTER TABLE tokens ADD COLUMN access TEXT")
        # One connection for the revision check every search makes (a fresh one per search costs more than BM25).
        self._reader = sqlite3.connect(path, timeout=30, check_same_thread=False)
        self._reader_lock = threading.Lock()

    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        """A connection for one unit of work: committed (or rolled back) and closed at the end."""
        db = sqlite3.connect(self._path, timeout=30)
        try:
            db.execute("PRAGMA journal_mode=WAL")  # readers (the app) never wait for the ingest writer
            with db:
                yield db
        finally:
            db.close()

    def add(self, chunks: Sequence[Chunk]) -> None:
        """Index (or re-index) chunks."""
        rows = [(c.chunk_id, c.doc_id, " ".join(tokenize(c.text)), c.access.label) for c in chunks]
        if rows:
            upserts = [(row[0], row[2].split(), row[3]) for row in rows]  # as another process reads them back
            self._write("INSERT OR REPLACE INTO tokens VALUES (?, ?, ?, ?)", rows, ADD, [r[0] for r in rows],
                        upserts=upserts)

    def set_access(self, chunk_ids: Sequence[str], access: DocAccess) -> None:
        """Relabel chunks (a document's groups changed) without tokenizing them again."""
        rows = [(access.label, i) for i in chunk_ids]
        if rows:
            self._write("UPDATE tokens SET access = ? WHERE chunk_id = ?", rows, LABEL, chunk_ids,
                        relabels=[(i, access.label) for i in chunk_ids])

    def delete(self, chunk_ids: Sequence[str]) -> None:
        """Forget chunks (unknown ids are ignored)."""
        if chunk_ids:
            self._write("DELETE FROM tokens WHERE chunk_id = ?", [(i,) for i in chunk_ids], DELETE, chunk_ids,
                        deletes=chunk_ids)

    def _write(self, sql: str, rows: Sequence[tuple[str, ...]], kind: str, ids: Sequence[str], **change: Any) -> None:
        """One write to SQLite (tokens, revision and change log in one transaction), then to the snapshot."""
        with self._lock:
            with self._connect() as db:
                db.executemany(sql, rows)
                revision = int(db.execute("UPDATE revision SET value = value + 1 RETURNING value").fetchone()[0])
                log = [(revision, chunk_id, kind) for chunk_id in dict.fromkeys(ids)]
                db.executemany("INSERT INTO changes VALUES (?, ?, ?)", log)
                db.execute("DELETE FROM changes WHERE revision <= ?", (revision - LOG_REVISIONS,))
            snapshot = self._snapshot
            if snapshot is None:  # never searched here (an ingest process): the first search loads everything
                return
            if revision == snapshot.revision + 1:  # nobody else wrote in between: apply it as it is
                self._install(apply(snapshot, revision, **change), compact_now=True)
            else:
                self._catch_up(compact_now=True)

    def unlabelled(self) -> list[str]:
        """Chunks indexed before access labels existed (to be labelled from the vector store)."""
        with self._connect() as db:
            return [row[0] for row in db.execute("SELECT chunk_id FROM tokens WHERE access IS NULL")]

    def ids(self) -> set[str]:
        """Every indexed chunk id."""
        with self._connect() as db:
            return {row[0] for row in db.execute("SELECT chunk_id FROM tokens")}

    def revision(self) -> int:
        """A number that changes with every write."""
        with self._reader_lock:
            return int(self._reader.execute("SELECT value FROM revision").fetchone()[0])

    def languages(self) -> dict[str, tuple[int, int]]:
        """Per access label: (chunks, chunks holding Chinese), as of the last write (counted again after one)."""
        revision = self.revision()
        counted = self._languages
        if counted is not None and counted[0] == revision:
            return counted[1]
        with self._connect() as db:  # GLOB matches by code point: any Han character of HAN_RANGE
            rows = db.execute("SELECT access, count(*), sum(tokens GLOB ?) FROM tokens WHERE access IS NOT NULL "
                              "GROUP BY access", (f"*[{HAN_RANGE}]*",)).fetchall()
        counts = {str(label): (int(total), int(han)) for label, total, han in rows}
        self._languages = (revision, counts)
        return counts

    def warm(self) -> None:
        """Load the snapshot and jieba's dictionary now, so the first question does not wait for them."""
        self._current()
        tokenize("预热")

    def search(self, query: str, k: int, include: Sequence[str] = (), admits: Admits | None = None) -> list[KeywordHit]:
        """The k chunks with the best BM25 scores for the query among those `admits` lets through (all when None),
        best first, then the chunks named in `include` (scored too, so that fusion knows their coverage)."""
        snapshot = self._current()
        terms = tokenize(query)
        if not snapshot.live or not terms:
            return []
        import numpy as np

        visible = snapshot.visible(admits)
        scores, ceiling = snapshot.scores(terms, visible)
        best = min(k, int(np.count_nonzero(scores)))
        # Partition the negated scores: with kth near the end, the many zeros make argpartition ~10x slower.
        part = np.argpartition(-scores, best - 1)[:best] if best else np.array([], dtype=int)
        top: list[int] = [int(i) for i in part[np.argsort(-scores[part])]]
        chosen = set(top)
        top += [i for i in map(snapshot.slot, include) if i is not None and i not in chosen]
        if visible is not None:  # ids the caller named are checked too: nothing invisible leaves this method
            top = [i for i in top if visible.mask[i]]
        return [KeywordHit(snapshot.chunk_id(i), float(scores[i]), float(scores[i]) / ceiling) for i in top]

    def query_ceiling(self, terms: Sequence[str], admits: Admits | None = None) -> float:
        """The most any chunk `admits` lets through could score for these terms: coverage's denominator, so
        coverage stays within 0–1.

        The Lucene variant of BM25 scores a term `idf · tf / (tf + k1·(1 − b + b·len/avglen))`, which approaches
        `idf` as the term repeats (one occurrence at average length gives `idf / (1 + k1)`). Terms the index has
        never seen count at the highest idf, so questions about absent things cover little."""
        snapshot = self._current()
        return snapshot.ceiling(terms, snapshot.visible(admits))

    def visibility(self, admits: Admits) -> tuple[float, Callable[[str], bool]]:
        """The share of indexed chunks that `admits` lets through (0–1), and the same rule by chunk id from this
        index's copy of the labels (unknown ids: no): a fast first look for the dense side, which checks the
        stored label again."""
        snapshot = self._current()
        verdicts = snapshot.verdicts(admits).tolist()
        visible = sum(count for count, seen in zip(snapshot.counts, verdicts, strict=True) if seen)
        share = visible / snapshot.live if snapshot.live else 0.0
        codes = snapshot.codes
        return share, lambda chunk_id: (p := snapshot.slot(chunk_id)) is not None and verdicts[codes[p]]

    def _current(self) -> Snapshot:
        """The snapshot to search: loaded on first use (the only wait), brought up to date without waiting after."""
        snapshot = self._snapshot
        if snapshot is None:
            with self._lock:
                if self._snapshot is None:
                    self._install(self._read_all(), compact_now=True)
                snapshot = self._snapshot
            assert snapshot is not None
            return snapshot
        if self.revision() == snapshot.revision or not self._lock.acquire(blocking=False):
            return snapshot  # current, or someone is building the next one: search this one meanwhile
        try:
            if self._pending() <= INLINE_ROWS:
                self._catch_up(compact_now=False)
            else:
                self._in_background(self._load)
        finally:
            self._lock.release()
        return self._snapshot or snapshot

    def _install(self, snapshot: Snapshot, compact_now: bool) -> None:
        """Swap in the next snapshot (caller holds the lock); compaction now, or in the background for a search."""
        self._snapshot = snapshot
        if needs_compaction(snapshot):
            if compact_now:
                self._snapshot = compact(snapshot)
            else:
                self._in_background(self._compact)

    def _busy(self) -> bool:
        return self._worker is not None and self._worker.is_alive()

    def _in_background(self, work: Callable[[], None]) -> None:
        """Run work in a daemon thread, unless one is already running (the next search asks again)."""
        if not self._busy():
            self._worker = threading.Thread(target=work, name="keyword-index", daemon=True)
            self._worker.start()

    def _load(self) -> None:
        """Catch up with a large change, holding the lock: searches go on with the current snapshot meanwhile."""
        with self._lock:
            self._catch_up(compact_now=True)

    def _compact(self) -> None:
        """Compact without holding the lock (searches keep catching up), then swap the result in and replay from the
        change log whatever was written meanwhile."""
        snapshot = self._snapshot
        if snapshot is None or not needs_compaction(snapshot):
            return
        compacted = compact(snapshot)
        with self._lock:
            if self._snapshot is snapshot:
                self._snapshot = compacted
            else:  # written meanwhile: readers must never see the compacted one without those writes
                self._catch_up(compact_now=False, since=compacted)

    def _pending(self) -> int:
        """Rows to read to catch up: changed chunks when the log covers every revision since ours, else all."""
        snapshot = self._snapshot
        assert snapshot is not None
        with self._connect() as db:
            db.execute("BEGIN")
            revision = int(db.execute("SELECT value FROM revision").fetchone()[0])
            rows, revisions = db.execute("SELECT COUNT(*), COUNT(DISTINCT revision) FROM changes WHERE revision > ?",
                                         (snapshot.revision,)).fetchone()
        return int(rows) if revisions == revision - snapshot.revision else snapshot.live

    def _catch_up(self, compact_now: bool, since: Snapshot | None = None) -> None:
        """Apply what was written since our snapshot (or `since`) by others (caller holds the lock): the log's rows,
        or all of them when the log cannot bridge the gap."""
        snapshot = since or self._snapshot
        assert snapshot is not None
        with self._connect() as db:
            db.execute("BEGIN")  # the revision, the log and the rows as of one moment
            revision = int(db.execute("SELECT value FROM revision").fetchone()[0])
            log = db.execute("SELECT revision, chunk_id, kind FROM changes WHERE revision > ? AND revision <= ?",
                             (snapshot.revision, revision)).fetchall()
            if {row[0] for row in log} != set(range(snapshot.revision + 1, revision + 1)):
                self._install(load(revision, _rows(db.execute("SELECT chunk_id, tokens, access FROM tokens"))),
                              compact_now)
                return
            kinds: dict[str, set[str]] = {}
            for _, chunk_id, kind in log:
                kinds.setdefault(chunk_id, set()).add(kind)
            found = {row[0]: row for row in _rows(_select(db, list(kinds)))}
        relabels = [(i, found[i][2]) for i, k in kinds.items() if k == {LABEL} and i in found
                    and snapshot.slot(i) is not None]
        relabelled = {i for i, _ in relabels}
        upserts = [row for i, row in found.items() if i not in relabelled]
        deletes = [i for i in kinds if i not in found]
        self._install(apply(snapshot, revision, upserts, relabels, deletes), compact_now)

    def _read_all(self) -> Snapshot:
        with self._connect() as db:
            db.execute("BEGIN")
            revision = int(db.execute("SELECT value FROM revision").fetchone()[0])
            return load(revision, _rows(db.execute("SELECT chunk_id, tokens, access FROM tokens ORDER BY chunk_id")))


def _select(db: sqlite3.Connection, chunk_ids: list[str]) -> Iterator[tuple[str, str, str | None]]:
    """The token rows of these chunks (those that still exist), a batch of ids at a time."""
    for lo in range(0, len(chunk_ids), 500):
        batch = chunk_ids[lo : lo + 500]
        marks = ",".join("?" * len(batch))
        yield from db.execute(f"SELECT chunk_id, tokens, access FROM tokens WHERE chunk_id IN ({marks})", batch)


def _rows(rows: Iterator[tuple[str, str, str | None]]) -> list[tuple[str, list[str], str]]:
    """(chunk id, tokens, label) per row; a NULL or unknown label reads as locked (fail closed)."""
    labels: dict[str | None, str] = {}
    found = []
    for chunk_id, tokens, access in rows:
        if access not in labels:
            labels[access] = DocAccess.from_label(access).label
        found.append((chunk_id, tokens.split(), labels[access]))
    return found
