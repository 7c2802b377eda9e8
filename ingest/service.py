"""Sync as a use case: the functions that rag-ingest and the API (uploads, /v1/sync, documents) call."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

from ingest import files
from ingest.manifest import Entry, Manifest
from ingest.parse import ChunkSpec
from ingest.pipeline import Plan, Progress, Report, plan_sync
from ingest.runner import remove_document, repair_pending, run_sync, warm_parsers
from rag.components import filelock
from rag.components.index import Index
from rag.config import Settings
from rag.core.errors import IngestBusy
from rag.core.ports import Embedder
from rag.wiring import build_embedder, build_store, collection_name, tokenizer_path


def open_manifest(settings: Settings, collection: str | None = None) -> Manifest:
    """The manifest of the configured store and collection (or of the given Chroma collection)."""
    scope = f"{settings.chroma_url or 'embedded'}|{collection or collection_name(settings)}"
    return Manifest(settings.index_dir / "manifest.sqlite3", scope)


@contextlib.contextmanager
def ingest_lock(settings: Settings, what: str, deadline: float | None = None) -> Iterator[None]:
    """One writer at a time per data dir (manifest, keyword index, embedded Chroma): wait until `deadline`
    (time.monotonic(); default RAG_INGEST_WAIT_S from now), then IngestBusy saying what holds it and since when."""
    deadline = time.monotonic() + settings.ingest_wait_s if deadline is None else deadline
    path = settings.index_dir / "ingest.lock"
    try:
        with filelock.exclusive(path, what, deadline):
            yield
    except filelock.Taken as taken:
        raise IngestBusy(f"another ingest is running: {taken.holder.describe()}; try again when it ends",
                         running=taken.holder.as_json()) from None


def chunk_spec(settings: Settings, embedder: Embedder) -> ChunkSpec:
    """Chunk sizes from settings, the hard limit from the embedder."""
    return ChunkSpec(tokenizer_path(settings.embed_model), settings.chunk_tokens,
                     settings.chunk_overlap_tokens, embedder.max_tokens)


def sync(paths: Sequence[Path], settings: Settings, *, prune: bool = True, progress: Progress | None = None,
         embedder: Embedder | None = None, store: Index | None = None, locked: bool = False,
         what: str = "rag-ingest", within: Path | None = None) -> tuple[Plan, Report]:
    """Plan and run a sync of paths under the ingest lock (`locked`: the caller holds it already); the embedder is
    loaded only when some file needs embedding. Files given by name are named relative to `within` (the folder
    whose syncs would find them), else to their own folder."""
    if not locked:
        with ingest_lock(settings, what):
            return sync(paths, settings, prune=prune, progress=progress, embedder=embedder, store=store, locked=True,
                        within=within)
    # A server passes the store it opened at start: its collection, even if a re-embed registered a newer one.
    collection = store.name if store else collection_name(settings)
    with open_manifest(settings, collection) as manifest:
        if manifest.pending():
            store = store or build_store(settings, collection=collection)
            repair_pending(store, manifest)  # before planning: a repaired entry is planned again
        plan = plan_sync(paths, manifest, settings.max_file_bytes, prune=prune, within=within)
        if plan.tasks:
            warm_parsers()  # the parser server starts while the embedder loads
        store = store or build_store(settings, collection=collection)
        if plan.tasks and embedder is None:
            embedder = build_embedder(settings)
        spec = chunk_spec(settings, embedder) if embedder else ChunkSpec("", 0, 0, 0)
        report = run_sync(plan, embedder, store, manifest, spec, settings.parse_timeout_s, progress,
                          settings.ingest_batch_chunks, parse_workers=settings.parse_workers,
                          writers=settings.ingest_writers)
        store.sync_keyword()  # repairs what a crash (or an index older than keyword search) left out
    return plan, report


def settle_leftovers(settings: Settings, collection: str | None = None) -> list[str]:
    """Settle the hidden files that crashed uploads and deletes left in the documents folder (call with the ingest
    lock held): the names settled."""
    folder = settings.documents_dir.resolve()
    with open_manifest(settings, collection) as manifest:
        committed = {entry.source: entry.content_hash for entry in manifest.entries(root=folder.as_posix()).values()}
    return files.clean_leftovers(folder, committed)


def settle_when_idle(settings: Settings, collection: str | None = None) -> list[str]:
    """At a server's start: settle the leftovers unless an ingest is running (then the next API change does)."""
    try:
        with ingest_lock(settings, "clean-up of leftovers at start", deadline=time.monotonic()):
            return settle_leftovers(settings, collection)
    except IngestBusy:
        return []


def dry_run(paths: Sequence[Path], settings: Settings, *, prune: bool = True) -> Plan:
    """The plan alone: nothing is parsed, embedded or written."""
    with open_manifest(settings) as manifest:
        return plan_sync(paths, manifest, settings.max_file_bytes, prune=prune)


def list_documents(settings: Settings) -> list[Entry]:
    """Every ingested file of the configured collection, by source."""
    with open_manifest(settings) as manifest:
        return sorted(manifest, key=lambda entry: (entry.root, entry.source))


def find_document(doc_id: str, settings: Settings, collection: str | None = None) -> Entry | None:
    """One ingested file's entry by id; None when unknown."""
    with open_manifest(settings, collection) as manifest:
        return manifest.entries().get(doc_id)


def delete_document(doc_id: str, settings: Settings, store: Index, locked: bool = False) -> Entry | None:
    """Remove one document's chunks and its manifest entry; None when the id is unknown."""
    if not locked:
        with ingest_lock(settings, f"delete of document {doc_id}"):
            return delete_document(doc_id, settings, store, locked=True)
    with open_manifest(settings, store.name) as manifest:
        entry = manifest.entries().get(doc_id)
        if entry is not None:
            remove_document(store, manifest, entry)
        return entry
