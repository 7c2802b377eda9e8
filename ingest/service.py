"""Sync as a use case: the functions that rag-ingest and the API (uploads, /v1/sync, documents) call."""

from __future__ import annotations

import contextlib
import fcntl
from collections.abc import Iterator, Sequence
from pathlib import Path

from ingest.manifest import Entry, Manifest
from ingest.parse import ChunkSpec
from ingest.pipeline import Plan, Progress, Report, plan_sync
from ingest.runner import remove_document, run_sync, warm_parsers
from rag.config import Settings
from rag.embedder import Embedder
from rag.index import Index
from rag.wiring import build_embedder, build_store, collection_name, resolve_embed_model


def open_manifest(settings: Settings, collection: str | None = None) -> Manifest:
    """The manifest of the configured store and collection (or of the given Chroma collection)."""
    scope = f"{settings.chroma_url or 'embedded'}|{collection or collection_name(settings)}"
    return Manifest(settings.index_dir / "manifest.sqlite3", scope)


@contextlib.contextmanager
def ingest_lock(settings: Settings) -> Iterator[None]:
    """One writer at a time per data dir: embedded Chroma allows a single writer process."""
    settings.index_dir.mkdir(parents=True, exist_ok=True)
    with (settings.index_dir / "ingest.lock").open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def chunk_spec(settings: Settings, embedder: Embedder) -> ChunkSpec:
    """Chunk sizes from settings, the hard limit from the embedder."""
    return ChunkSpec(resolve_embed_model(settings.embed_model), settings.chunk_tokens,
                     settings.chunk_overlap_tokens, embedder.max_tokens)


def sync(paths: Sequence[Path], settings: Settings, *, prune: bool = True, progress: Progress | None = None,
         embedder: Embedder | None = None, store: Index | None = None) -> tuple[Plan, Report]:
    """Plan and run a sync of paths; the embedder is loaded only when some file needs embedding."""
    with ingest_lock(settings):
        # A server passes the store it opened at start: its collection, even if a re-embed registered a newer one.
        collection = store.name if store else collection_name(settings)
        return _sync(paths, settings, collection, prune, progress, embedder, store)


def _sync(paths: Sequence[Path], settings: Settings, collection: str, prune: bool, progress: Progress | None,
          embedder: Embedder | None, store: Index | None) -> tuple[Plan, Report]:
    with open_manifest(settings, collection) as manifest:
        plan = plan_sync(paths, manifest, settings.max_file_bytes, prune=prune)
        if plan.tasks:
            warm_parsers()  # the parser server starts while the embedder loads
        store = store or build_store(settings, collection=collection)
        if plan.tasks and embedder is None:
            embedder = build_embedder(settings)
        spec = chunk_spec(settings, embedder) if embedder else ChunkSpec("", 0, 0, 0)
        report = run_sync(plan, embedder, store, manifest, spec, settings.parse_timeout_s, progress,
                          settings.ingest_batch_chunks)
        store.sync_keyword()  # repairs what a crash (or an index older than keyword search) left out
    return plan, report


def dry_run(paths: Sequence[Path], settings: Settings, *, prune: bool = True) -> Plan:
    """The plan alone: nothing is parsed, embedded or written."""
    with open_manifest(settings) as manifest:
        return plan_sync(paths, manifest, settings.max_file_bytes, prune=prune)


def list_documents(settings: Settings) -> list[Entry]:
    """Every ingested file of the configured collection, by source."""
    with open_manifest(settings) as manifest:
        return sorted(manifest, key=lambda entry: (entry.root, entry.source))


def delete_document(doc_id: str, settings: Settings, store: Index) -> Entry | None:
    """Remove one document's chunks and its manifest entry; None when the id is unknown."""
    with ingest_lock(settings), open_manifest(settings, store.name) as manifest:
        entry = manifest.entries().get(doc_id)
        if entry is not None:
            remove_document(store, manifest, entry)
        return entry
