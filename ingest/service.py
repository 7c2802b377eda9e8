"""Sync as a use case: a Library holds one collection's parts (manifest, lock, store, embedder, limits) and is what
rag-ingest, its watcher, re-embed and the API (uploads, /v1/sync, documents) call; `library` builds it from an App."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from ingest import files
from ingest.manifest import Entry, Manifest
from ingest.parse import ChunkSpec
from ingest.pipeline import Plan, Progress, Report, plan_sync
from ingest.runner import remove_document, repair_pending, run_sync, warm_parsers
from rag.components import filelock
from rag.components.index import Index
from rag.components.sentence_cache import QuoteVectors
from rag.config import Settings
from rag.core.errors import IngestBusy
from rag.core.ports import Embedder
from rag.wiring import App, quote_vectors, tokenizer_path


@dataclass(frozen=True, slots=True, kw_only=True)
class SyncLimits:
    """What a sync reads besides its parts: file size cap, parse timeout, batch and worker counts, chunk sizes."""

    max_file_bytes: int
    parse_timeout_s: float
    batch_chunks: int
    parse_workers: int
    writers: int
    embed_model: str  # RAG_EMBED_MODEL: its (first) model's tokenizer sizes the chunks
    chunk_tokens: int
    overlap_tokens: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Library:
    """The documents of one collection and the changes to them, one writer at a time per data dir. The store and
    the embedder come through callables: a sync with nothing to embed never loads the model."""

    collection: str
    store_url: str  # the Chroma server's URL, or "embedded": manifests are kept per store and collection
    index_dir: Path
    documents_dir: Path
    wait_s: float  # how long a change waits for the ingest lock by default (RAG_INGEST_WAIT_S)
    limits: SyncLimits
    store: Callable[[], Index]
    embedder: Callable[[], Embedder]
    quote_vectors: QuoteVectors | None = None  # made at ingest (RAG_QUOTE_VECTORS_AT_INGEST), else None

    def manifest(self, collection: str | None = None) -> Manifest:
        """The manifest of this collection (or of another one of the same store: a re-embed's generations)."""
        return Manifest(self.index_dir / "manifest.sqlite3", f"{self.store_url}|{collection or self.collection}")

    @contextlib.contextmanager
    def lock(self, what: str, deadline: float | None = None) -> Iterator[None]:
        """One writer at a time per data dir (manifest, keyword index, embedded Chroma): wait until `deadline`
        (time.monotonic(); default RAG_INGEST_WAIT_S from now), then IngestBusy saying what holds it and since
        when."""
        deadline = time.monotonic() + self.wait_s if deadline is None else deadline
        try:
            with filelock.exclusive(self.index_dir / "ingest.lock", what, deadline):
                yield
        except filelock.Taken as taken:
            raise IngestBusy(f"another ingest is running: {taken.holder.describe()}; try again when it ends",
                             running=taken.holder.as_json()) from None

    @contextlib.contextmanager
    def change(self, what: str, deadline: float | None = None) -> Iterator[None]:
        """The ingest lock, then the leftovers of crashed uploads and deletes settled before anything else changes
        (what the API's changes hold)."""
        with self.lock(what, deadline):
            self.settle_leftovers()
            yield

    def sync(self, paths: Sequence[Path], *, prune: bool = True, progress: Progress | None = None,
             locked: bool = False, what: str = "rag-ingest", within: Path | None = None) -> tuple[Plan, Report]:
        """Plan and run a sync of paths under the ingest lock (`locked`: the caller holds it already). Files given
        by name are named relative to `within` (the folder whose syncs would find them), else to their own."""
        if not locked:
            with self.lock(what):
                return self.sync(paths, prune=prune, progress=progress, locked=True, within=within)
        with self.manifest() as manifest:
            if manifest.pending():
                repair_pending(self.store(), manifest)  # before planning: a repaired entry is planned again
            plan = plan_sync(paths, manifest, self.limits.max_file_bytes, prune=prune, within=within)
            if plan.tasks:
                warm_parsers()  # the parser server starts while the embedder loads
            store = self.store()
            embedder = self.embedder() if plan.tasks else None
            limits = self.limits
            spec = (ChunkSpec(tokenizer_path(limits.embed_model), limits.chunk_tokens, limits.overlap_tokens,
                              embedder.max_tokens) if embedder else ChunkSpec("", 0, 0, 0))
            report = run_sync(plan, embedder, store, manifest, spec, limits.parse_timeout_s, progress,
                              limits.batch_chunks, parse_workers=limits.parse_workers, writers=limits.writers,
                              quote_vectors=self.quote_vectors)
        return plan, report

    def settle_leftovers(self) -> list[str]:
        """Settle the hidden files that crashed uploads and deletes left in the documents folder (call with the
        ingest lock held): the names settled."""
        folder = self.documents_dir.resolve()
        with self.manifest() as manifest:
            committed = {entry.source: entry.content_hash
                         for entry in manifest.entries(root=folder.as_posix()).values()}
        return files.clean_leftovers(folder, committed)

    def settle_when_idle(self) -> list[str]:
        """At a server's start: settle the leftovers unless an ingest is running (then the next API change does)."""
        try:
            with self.lock("clean-up of leftovers at start", deadline=time.monotonic()):
                return self.settle_leftovers()
        except IngestBusy:
            return []

    def dry_run(self, paths: Sequence[Path], *, prune: bool = True) -> Plan:
        """The plan alone: nothing is parsed, embedded or written."""
        with self.manifest() as manifest:
            return plan_sync(paths, manifest, self.limits.max_file_bytes, prune=prune)

    def documents(self) -> list[Entry]:
        """Every ingested file of the collection, by source."""
        with self.manifest() as manifest:
            return sorted(manifest, key=lambda entry: (entry.root, entry.source))

    def entry_at(self, path: Path) -> Entry | None:
        """The entry of the file at `path`; None when it was not ingested."""
        return next((entry for entry in self.documents() if Path(entry.root) / entry.source == path), None)

    def find(self, doc_id: str) -> Entry | None:
        """One ingested file's entry by id; None when unknown."""
        with self.manifest() as manifest:
            return manifest.entries().get(doc_id)

    def delete(self, doc_id: str, *, locked: bool = False) -> Entry | None:
        """Remove one document's chunks and its manifest entry; None when the id is unknown."""
        if not locked:
            with self.lock(f"delete of document {doc_id}"):
                return self.delete(doc_id, locked=True)
        with self.manifest() as manifest:
            entry = manifest.entries().get(doc_id)
            if entry is not None:
                remove_document(self.store(), manifest, entry)
            return entry


def library(app: App, store: Index | None = None, embedder: Embedder | None = None) -> Library:
    """The Library of the app's collection with the app's store and embedder, loaded on first need (or those
    given: a server's, loaded at its start)."""
    settings = app.settings
    limits = SyncLimits(max_file_bytes=settings.max_file_bytes, parse_timeout_s=settings.parse_timeout_s,
                        batch_chunks=settings.ingest_batch_chunks, parse_workers=settings.parse_workers,
                        writers=settings.ingest_writers, embed_model=settings.embed_model,
                        chunk_tokens=settings.chunk_tokens, overlap_tokens=settings.chunk_overlap_tokens)
    return Library(collection=store.name if store else app.collection, store_url=settings.chroma_url or "embedded",
                   index_dir=settings.index_dir, documents_dir=settings.documents_dir, wait_s=settings.ingest_wait_s,
                   limits=limits, store=lambda: store or app.store, embedder=lambda: embedder or app.embedder,
                   quote_vectors=quote_vectors(settings) if settings.quote_vectors_at_ingest else None)


def sync(paths: Sequence[Path], settings: Settings, *, embedder: Embedder | None = None, store: Index | None = None,
         prune: bool = True, progress: Progress | None = None) -> tuple[Plan, Report]:
    """For scripts (tests, benchmarks): a sync through the Library of App(settings) with the parts given."""
    return library(App(settings, embedder=embedder, store=store)).sync(paths, prune=prune, progress=progress)
