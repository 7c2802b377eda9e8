"""The sync manifest: what was ingested from which file, with its content hash (SQLite under the data dir)."""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

_SCHEMA = """
CREATE TABLE IF NOT EXISTS documents (
    scope TEXT NOT NULL,
    doc_id TEXT NOT NULL,
    root TEXT NOT NULL,
    source TEXT NOT NULL,
    content_hash TEXT NOT NULL,
    size INTEGER NOT NULL,
    mtime_ns INTEGER NOT NULL,
    title TEXT NOT NULL,
    chunk_ids TEXT NOT NULL,
    ingested_at TEXT NOT NULL,
    access TEXT,
    sidecar_hash TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (scope, doc_id)
)
"""
# Documents whose chunks are being written or deleted: a row is added before the first store write and removed
# with the manifest write that ends the change, so a crash in between leaves it for the next sync to repair.
_PENDING = "CREATE TABLE IF NOT EXISTS pending (scope TEXT NOT NULL, doc_id TEXT NOT NULL, PRIMARY KEY (scope, doc_id))"
# Columns added after the first release: added in place to an older manifest (NULL access: not yet labelled).
_ADDED = {"access": "ALTER TABLE documents ADD COLUMN access TEXT",
          "sidecar_hash": "ALTER TABLE documents ADD COLUMN sidecar_hash TEXT NOT NULL DEFAULT ''"}
_COLUMNS = "doc_id, root, source, content_hash, size, mtime_ns, title, chunk_ids, ingested_at, access, sidecar_hash"


@dataclass(frozen=True, slots=True)
class Entry:
    """One ingested file as recorded after its chunks were stored."""

    doc_id: str
    root: str
    source: str
    content_hash: str
    size: int
    mtime_ns: int
    title: str
    chunk_ids: tuple[str, ...]
    ingested_at: str = ""
    access: str | None = None  # rag.core.access.DocAccess.label; None for entries recorded before access labels
    sidecar_hash: str = ""  # of the NAME.meta.yaml beside the file ("" when none): a change relabels the chunks


class Manifest:
    """Per-collection record of ingested files; each write is its own committed transaction."""

    def __init__(self, path: Path, scope: str) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        # One connection shared by the pipeline's writer thread and the caller, serialized by a lock.
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute(_SCHEMA)
        self._db.execute(_PENDING)
        present = {row[1] for row in self._db.execute("PRAGMA table_info(documents)")}
        for column, statement in _ADDED.items():
            if column not in present:
                self._db.execute(statement)
        self._lock = threading.Lock()
        self.scope = scope

    def close(self) -> None:
        """Close the database connection."""
        self._db.close()

    def __enter__(self) -> Manifest:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def entries(self, root: str | None = None) -> dict[str, Entry]:
        """Entries by doc_id, for one ingest root or all."""
        query = f"SELECT {_COLUMNS} FROM documents WHERE scope = ?" + (" AND root = ?" if root is not None else "")
        args = (self.scope, root) if root is not None else (self.scope,)
        with self._lock:
            rows = self._db.execute(query, args).fetchall()
        return {row[0]: _entry(row) for row in rows}

    def put(self, entry: Entry) -> None:
        """Record (or replace) a file after its chunks were stored; its change is no longer pending."""
        now = datetime.now(UTC).isoformat(timespec="seconds")
        with self._lock, self._db:
            self._db.execute("BEGIN IMMEDIATE")
            self._db.execute(
                f"INSERT OR REPLACE INTO documents (scope, {_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (self.scope, entry.doc_id, entry.root, entry.source, entry.content_hash, entry.size,
                 entry.mtime_ns, entry.title, json.dumps(list(entry.chunk_ids)), now, entry.access,
                 entry.sidecar_hash),
            )
            self._done(entry.doc_id)

    def remove(self, doc_id: str) -> None:
        """Forget a file (after its chunks were deleted); its change is no longer pending."""
        with self._lock, self._db:
            self._db.execute("BEGIN IMMEDIATE")
            self._db.execute("DELETE FROM documents WHERE scope = ? AND doc_id = ?", (self.scope, doc_id))
            self._done(doc_id)

    def begin(self, doc_ids: list[str]) -> None:
        """Note that these documents' chunks are about to change (before the first store write)."""
        with self._lock, self._db:
            self._db.execute("BEGIN IMMEDIATE")
            self._db.executemany("INSERT OR IGNORE INTO pending VALUES (?, ?)", [(self.scope, i) for i in doc_ids])

    def pending(self) -> list[str]:
        """Documents whose change a crash interrupted (begun, never put or removed)."""
        with self._lock:
            rows = self._db.execute("SELECT doc_id FROM pending WHERE scope = ? ORDER BY doc_id", (self.scope,))
            return [row[0] for row in rows]

    def _done(self, doc_id: str) -> None:
        self._db.execute("DELETE FROM pending WHERE scope = ? AND doc_id = ?", (self.scope, doc_id))

    def clear(self) -> None:
        """Forget every file of this scope (its collection was dropped)."""
        with self._lock, self._db:
            self._db.execute("BEGIN IMMEDIATE")
            self._db.execute("DELETE FROM documents WHERE scope = ?", (self.scope,))
            self._db.execute("DELETE FROM pending WHERE scope = ?", (self.scope,))

    def __iter__(self) -> Iterator[Entry]:
        return iter(self.entries().values())


def _entry(row: tuple[str, str, str, str, int, int, str, str, str, str | None, str]) -> Entry:
    return Entry(row[0], row[1], row[2], row[3], row[4], row[5], row[6], tuple(json.loads(row[7])), row[8], row[9],
                 row[10])
