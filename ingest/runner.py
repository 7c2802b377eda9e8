"""Running a sync plan: parse in a worker process (time-limited), embed in batches, write in a thread."""

from __future__ import annotations

import multiprocessing
import queue
import threading
import time
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, replace

from pebble import ProcessExpired, ProcessPool

from ingest.loaders import LoadError
from ingest.manifest import Entry, Manifest
from ingest.parse import ChunkSpec, ParsedDoc, init_worker, parse_file, read_access
from ingest.pipeline import NoProgress, Plan, Progress, Report, Task, build_chunks
from ingest.scan import sidecar_bytes
from rag.components.index import Index
from rag.components.sentence_cache import QuoteVectors
from rag.core.access import DocAccess
from rag.core.ports import Embedder, Vectors
from rag.core.types import Chunk

IN_FLIGHT = 16  # files parsed ahead of the embedder (per parse worker: 4 each, at least this many)
FIRST_BATCH = 64  # the first batches are small so the embedder starts soon; they double up to the setting


def parser_context() -> multiprocessing.context.ForkServerContext:
    """Parse workers fork from a server that imported the parsers once (not from this process: it holds
    torch threads, which must not be forked)."""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["ingest.parse"])
    return context


def warm_parsers() -> threading.Thread:
    """Start the parser fork server in the background (overlaps its imports with loading the embedder)."""
    from multiprocessing import forkserver

    parser_context()
    thread = threading.Thread(target=forkserver.ensure_running, name="warm-parsers", daemon=True)
    thread.start()
    return thread


@dataclass(slots=True)
class Batch:
    """Whole documents' chunks with their vectors, handed to the writer."""

    docs: list[tuple[Task, ParsedDoc, list[Chunk]]]
    vectors: Vectors

    @property
    def chunks(self) -> list[Chunk]:
        """Every chunk of the batch, in order."""
        return [chunk for _, _, chunks in self.docs for chunk in chunks]


def run_sync(plan: Plan, embedder: Embedder | None, store: Index, manifest: Manifest, spec: ChunkSpec,
             parse_timeout: float, progress: Progress | None = None, batch_chunks: int = 512, *,
             parse_workers: int = 1, writers: int = 1, quote_vectors: QuoteVectors | None = None) -> Report:
    """Carry out a plan; failures of single files are reported, never fatal; store errors are raised.
    `parse_workers` processes parse and chunk files ahead of the embedder; `writers` threads store embedded batches
    (each batch whole documents, so they never touch the same document); with `quote_vectors`, each batch's quotable
    sentences are embedded while it is written (the quote ranking's vectors, made ahead of the questions)."""
    progress = progress or NoProgress()
    if plan.tasks and embedder is None:
        raise ValueError("an embedder is needed when the plan has files to ingest")
    started = time.perf_counter()
    report = Report(unchanged=len(plan.unchanged), skipped=len(plan.skipped), failed=dict(plan.failed))
    progress.files_total(len(plan.tasks))
    writer = _Writer(store, manifest, report, progress, writers)
    try:
        parsed = _parse_all(plan.tasks, spec, parse_timeout, report, progress, parse_workers)
        for batch in _embed(parsed, embedder, progress, batch_chunks) if embedder else ():
            writer.put(batch)
            if quote_vectors is not None and embedder is not None:
                quote_vectors.keep(batch.chunks, embedder)
    finally:
        writer.close()
    regroup(plan.regroups, store, manifest, report)
    for entry in plan.deletions:
        remove_document(store, manifest, entry)
        report.deleted += 1
    report.chunks = store.repair_and_count()
    report.seconds = time.perf_counter() - started
    return report


def regroup(tasks: list[Task], store: Index, manifest: Manifest, report: Report) -> None:
    """Files whose content is unchanged but whose access may have changed (sidecar edited, or recorded before
    access labels): read the groups alone and relabel the stored chunks, without parsing or embedding."""
    entries = manifest.entries()
    for task in tasks:
        entry = entries[task.doc_id]
        access = read_access(task.found, sidecar_bytes(task.found))
        if access.label != entry.access:
            ids = sorted(store.ids_of_document(task.doc_id) | set(entry.chunk_ids))
            store.set_access(ids, access, DocAccess.from_label(entry.access).groups)
            report.regrouped += 1
        else:
            report.unchanged += 1
        if access.locked:
            report.locked.append(task.found.source)
        manifest.put(replace(entry, access=access.label, sidecar_hash=task.sidecar_hash))


def remove_document(store: Index, manifest: Manifest, entry: Entry) -> None:
    """Delete a document's chunks (recorded and any strays a crash left) and forget it."""
    manifest.begin([entry.doc_id])
    store.delete(sorted(store.ids_of_document(entry.doc_id) | set(entry.chunk_ids)))
    manifest.remove(entry.doc_id)


def repair_pending(store: Index, manifest: Manifest) -> list[str]:
    """Settle the documents whose change a crash interrupted (run before planning): chunks the manifest does not
    record are deleted, and a recorded entry loses its content hash, so that the sync ingests its file again (or
    prunes it when gone)."""
    pending = manifest.pending()
    entries = manifest.entries()
    for doc_id in pending:
        entry = entries.get(doc_id)
        recorded = set(entry.chunk_ids) if entry else set()
        store.delete(sorted(store.ids_of_document(doc_id) - recorded))
        if entry is None:
            manifest.remove(doc_id)
        else:
            manifest.put(replace(entry, content_hash=""))
    return pending


def _parse_all(tasks: list[Task], spec: ChunkSpec, timeout: float, report: Report,
               progress: Progress, workers: int = 1) -> Iterator[tuple[Task, ParsedDoc]]:
    if not tasks:
        return
    # Results are taken in plan order; the window keeps every worker busy meanwhile.
    ahead = max(IN_FLIGHT, 4 * workers)
    with ProcessPool(max_workers=workers, initializer=init_worker, context=parser_context()) as pool:
        window: deque[tuple[Task, Future[ParsedDoc]]] = deque()
        pending = iter(tasks)
        for task in pending:
            window.append((task, _schedule(pool, task, spec, timeout)))
            if len(window) >= ahead:
                break
        while window:
            task, future = window.popleft()
            if (following := next(pending, None)) is not None:
                window.append((following, _schedule(pool, following, spec, timeout)))
            result = _outcome(future, timeout)
            if isinstance(result, str):
                report.failed[task.found.source] = result
                progress.file_done(task.found.source, result)
            else:
                yield task, result


def _schedule(pool: ProcessPool, task: Task, spec: ChunkSpec, timeout: float) -> Future[ParsedDoc]:
    args = (task.found, task.content_hash, sidecar_bytes(task.found), spec)
    return pool.schedule(parse_file, args=args, timeout=timeout)


def _outcome(future: Future[ParsedDoc], timeout: float) -> ParsedDoc | str:
    try:
        return future.result()
    except LoadError as exc:
        return str(exc)
    except FutureTimeout:
        return f"parsing took longer than {timeout:g} s (RAG_PARSE_TIMEOUT_S); stopped"
    except ProcessExpired as exc:
        return f"the parser crashed or ran out of memory (exit code {exc.exitcode})"
    except MemoryError:
        return "the parser ran out of memory (decompression bomb?)"
    except Exception as exc:  # a parser bug must not stop the other files
        return f"unexpected parser error: {type(exc).__name__}: {exc}"


def _embed(parsed: Iterator[tuple[Task, ParsedDoc]], embedder: Embedder, progress: Progress,
           batch_chunks: int) -> Iterator[Batch]:
    # Large batches let encode() sort by length (little padding); small ones commit files sooner.
    docs: list[tuple[Task, ParsedDoc, list[Chunk]]] = []
    size, threshold = 0, min(FIRST_BATCH, batch_chunks)
    for task, doc in parsed:
        chunks = build_chunks(task, doc)
        progress.chunks_added(len(chunks))
        docs.append((task, doc, chunks))
        size += len(chunks)
        if size >= threshold:
            yield _batch(docs, embedder)
            docs, size, threshold = [], 0, min(threshold * 2, batch_chunks)
    if docs:
        yield _batch(docs, embedder)


def _batch(docs: list[tuple[Task, ParsedDoc, list[Chunk]]], embedder: Embedder) -> Batch:
    texts = [chunk.text for _, _, chunks in docs for chunk in chunks]
    return Batch(docs, embedder.embed_documents(texts))


class _Writer:
    """Threads that store batches while the next one is embedded; each file is recorded once it is stored. Several
    threads keep a Chroma server busy (each write waits on the server); batches never share a document."""

    def __init__(self, store: Index, manifest: Manifest, report: Report, progress: Progress, threads: int = 1) -> None:
        self._store, self._manifest, self._report, self._progress = store, manifest, report, progress
        self._queue: queue.Queue[Batch | None] = queue.Queue(maxsize=2 * threads)
        self._error: BaseException | None = None
        self._record = threading.Lock()  # the report and the progress are updated by one thread at a time
        self._threads = [threading.Thread(target=self._loop, name=f"ingest-writer-{n}", daemon=True)
                         for n in range(threads)]
        for thread in self._threads:
            thread.start()

    def put(self, batch: Batch) -> None:
        """Queue a batch (blocks while two per thread are waiting); raises the writer's error if it failed."""
        self._raise()
        self._queue.put(batch)

    def close(self) -> None:
        """Wait for queued batches to be stored; raise the writer's error if any."""
        for _ in self._threads:
            self._queue.put(None)
        for thread in self._threads:
            thread.join()
        self._raise()

    def _raise(self) -> None:
        if self._error is not None:
            raise self._error

    def _loop(self) -> None:
        while (batch := self._queue.get()) is not None:
            if self._error is None:
                try:
                    self._store_batch(batch)
                except BaseException as exc:  # handed to the main thread, which raises it
                    self._error = exc

    def _store_batch(self, batch: Batch) -> None:
        self._manifest.begin([task.doc_id for task, _, _ in batch.docs])
        chunk_ids = {task.doc_id: tuple(chunk.chunk_id for chunk in chunks) for task, _, chunks in batch.docs}
        self._store.replace(batch.chunks, batch.vectors, chunk_ids)
        for task, doc, chunks in batch.docs:
            ids = chunk_ids[task.doc_id]
            found = task.found
            self._manifest.put(Entry(task.doc_id, found.root.as_posix(), found.source, task.content_hash,
                                     found.size, found.mtime_ns, doc.title, ids, access=doc.access.label,
                                     sidecar_hash=task.sidecar_hash))
            with self._record:
                self._recorded(task, doc, len(chunks))

    def _recorded(self, task: Task, doc: ParsedDoc, chunks: int) -> None:
        found = task.found
        if doc.access.locked:
            self._report.locked.append(found.source)
        if task.action == "add":
            self._report.added += 1
        else:
            self._report.updated += 1
        self._progress.file_done(found.source, None)
        self._progress.chunks_written(chunks)
