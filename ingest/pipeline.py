"""Incremental sync of folders into the vector store: plan (what changed), then run (parse → embed → write)."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from ingest.manifest import Entry, Manifest
from ingest.parse import ParsedDoc
from ingest.scan import FoundFile, content_hash, document_id, scan_path, sidecar_hash
from rag.core.types import Chunk


@dataclass(frozen=True, slots=True)
class Task:
    """A file to (re-)ingest."""

    found: FoundFile
    doc_id: str
    content_hash: str
    action: str  # "add" | "update" | "regroup" (same content, new access: relabel without embedding)
    sidecar_hash: str = ""


@dataclass(slots=True)
class Plan:
    """What a sync will do; computed without touching the store."""

    tasks: list[Task] = field(default_factory=list)
    regroups: list[Task] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    deletions: list[Entry] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)


@dataclass(slots=True)
class Report:
    """The outcome of a sync, as printed by rag-ingest --json."""

    added: int = 0
    updated: int = 0
    regrouped: int = 0
    unchanged: int = 0
    deleted: int = 0
    skipped: int = 0
    failed: dict[str, str] = field(default_factory=dict)
    locked: list[str] = field(default_factory=list)  # groups unreadable: stored, visible to no one but `*`
    chunks: int = 0
    seconds: float = 0.0

    def as_json(self) -> dict[str, object]:
        """The --json contract."""
        failed = [{"path": path, "error": error} for path, error in sorted(self.failed.items())]
        return {"added": self.added, "updated": self.updated, "regrouped": self.regrouped,
                "unchanged": self.unchanged, "deleted": self.deleted, "skipped": self.skipped, "failed": failed,
                "locked": sorted(self.locked),
                "chunks": self.chunks, "seconds": round(self.seconds, 3)}


class Progress(Protocol):
    """Receives progress as the run goes (the CLI draws rich bars from it)."""

    def files_total(self, n: int) -> None: ...
    def file_done(self, source: str, error: str | None) -> None: ...
    def chunks_added(self, n: int) -> None: ...
    def chunks_written(self, n: int) -> None: ...


class NoProgress:
    """A Progress that ignores everything."""

    def files_total(self, n: int) -> None: ...
    def file_done(self, source: str, error: str | None) -> None: ...
    def chunks_added(self, n: int) -> None: ...
    def chunks_written(self, n: int) -> None: ...


def plan_sync(paths: Sequence[Path], manifest: Manifest, max_bytes: int, prune: bool = True,
              within: Path | None = None) -> Plan:
    """Compare the files under paths with the manifest: add, update, unchanged, delete, skip, fail. Files given
    by name are named relative to `within` (see scan_path)."""
    plan = Plan()
    for path in paths:
        scan = scan_path(path, within)
        known = manifest.entries(root=scan.root.as_posix())
        plan.skipped += scan.skipped
        plan.failed.update(scan.failed)
        present: set[str] = set()
        # A file named alone (an upload swapped into place, `rag-ingest FILE`) is always hashed: a replacement of
        # the same size staged within the same clock tick as the file it replaced has its recorded mtime too.
        named = path.is_file()
        for found in scan.files:
            doc_id = document_id(found.root, found.source)
            present.add(doc_id)
            if found.size > max_bytes:
                plan.failed[found.source] = f"file is {found.size / 2**20:.1f} MiB, over the limit of " \
                                            f"{max_bytes / 2**20:.1f} MiB (RAG_MAX_FILE_MB)"
                continue
            _classify(plan, found, doc_id, known.get(doc_id), trust_stat=not named)
        if prune and scan.prune:
            plan.deletions += [entry for doc_id, entry in known.items() if doc_id not in present]
    return plan


def _classify(plan: Plan, found: FoundFile, doc_id: str, entry: Entry | None, trust_stat: bool = True) -> None:
    sidecar = sidecar_hash(found)
    # Same size and mtime as recorded: trust the recorded hash (as rsync does).
    if trust_stat and entry and (entry.size, entry.mtime_ns) == (found.size, found.mtime_ns):
        digest = entry.content_hash
    else:
        try:
            digest = content_hash(found)
        except OSError as exc:
            plan.failed[found.source] = f"cannot read: {exc.strerror}"
            return
    if entry and entry.content_hash == digest:
        if entry.access is None or entry.sidecar_hash != sidecar:
            plan.regroups.append(Task(found, doc_id, digest, "regroup", sidecar))
        else:
            plan.unchanged.append(found.source)
    else:
        plan.tasks.append(Task(found, doc_id, digest, "update" if entry else "add", sidecar))


def chunk_id(doc_id: str, digest: str, position: int) -> str:
    """Deterministic chunk id: a re-run after a crash rewrites the same ids."""
    return hashlib.sha256(f"{doc_id}:{digest}:{position}".encode()).hexdigest()[:32]


def build_chunks(task: Task, parsed: ParsedDoc) -> list[Chunk]:
    """Chunks of one parsed file, with ids and metadata."""
    return [
        Chunk(chunk_id=chunk_id(task.doc_id, task.content_hash, i), text=piece.text, source=task.found.source,
              doc_id=task.doc_id, content_hash=task.content_hash, position=i, page=piece.page,
              headings=piece.headings, title=parsed.title, access=parsed.access)
        for i, piece in enumerate(parsed.pieces)
    ]
