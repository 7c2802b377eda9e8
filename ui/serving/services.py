"""What every request shares: settings, the query engine, the index, the feedback and unanswered-question stores,
keys and the generation gate."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import threading
import time
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import TypeVar

from ingest.service import Library, library
from rag.components.feedback import FeedbackStore
from rag.components.index import Index
from rag.components.unanswered import UnansweredStore
from rag.config import Settings
from rag.core.answer import QueryEngine
from rag.core.errors import Busy
from rag.core.ports import Embedder
from rag.wiring import App, build_engine, build_store, collection_name
from ui.serving.metrics import Metrics
from ui.serving.principals import ApiKey, parse_api_keys

log = logging.getLogger("rag.serving")
INGEST_NICE = 10
T = TypeVar("T")


class Gate:
    """Bounds concurrent generations; a request waits up to `timeout` seconds for a slot, then gets Busy."""

    def __init__(self, slots: int, timeout: float) -> None:
        self._semaphore = asyncio.Semaphore(slots)
        self._timeout = timeout
        self._free = slots

    @property
    def free(self) -> int:
        """Slots free right now."""
        return self._free

    async def acquire(self) -> None:
        """Take a slot or raise Busy."""
        try:
            # Not wait_for: in Python 3.11 it can drop a slot acquired just as the wait is cancelled.
            async with asyncio.timeout(self._timeout):
                await self._semaphore.acquire()
        except TimeoutError as exc:
            raise Busy("all generation slots are busy; retry shortly") from exc
        self._free -= 1

    def release(self) -> None:
        """Give a slot back."""
        self._free += 1
        self._semaphore.release()

    @asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        """Hold a slot for the block."""
        await self.acquire()
        try:
            yield
        finally:
            self.release()


@dataclass
class Services:
    """Built once per process from settings; the API's routes and the chat's handlers both receive it."""

    settings: Settings
    embedder: Embedder
    store: Index
    engine: QueryEngine
    library: Library  # the documents of `store`'s collection, and the changes to them
    feedback: FeedbackStore
    keys: list[ApiKey] = field(default_factory=list)
    unanswered: UnansweredStore | None = None  # None: RAG_RECORD_UNANSWERED=false, nothing is kept
    gate: Gate = field(init=False)
    metrics: Metrics = field(default_factory=Metrics)
    ingest_pool: ThreadPoolExecutor = field(init=False)

    _generation_lock: threading.Lock = field(init=False, default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self.gate = Gate(self.settings.max_concurrent_generations, self.settings.queue_timeout_s)
        # Uploads, syncs and deletes wait for the ingest lock in threads of their own, never in the pool that
        # answers questions.
        self.ingest_pool = ThreadPoolExecutor(self.settings.ingest_workers, thread_name_prefix="ingest",
                                              initializer=lower_thread_priority)

    def on_current_generation(self) -> bool:
        """Whether these services search the collection RAG_COLLECTION resolves to now (a stat of the registry)."""
        return collection_name(self.settings) == self.store.name

    def follow_generation(self) -> Services:
        """These services, on the collection that RAG_COLLECTION resolves to now for RAG_EMBED_MODEL: after a
        `rag-ingest --reembed` of the same model (with a Chroma server, while this process runs) the next request
        searches the new generation, where syncs relabel and delete, instead of the one it opened at start."""
        current = collection_name(self.settings)
        if current == self.store.name:
            return self
        with self._generation_lock:
            if current != self.store.name:
                store = build_store(self.settings, collection=current)
                engine = build_engine(self.settings, embedder=self.embedder, store=store, llm=self.engine.llm)
                engine.retriever.warm()
                # Requests under way finish on the old ones.
                self.store, self.engine = store, engine
                self.library = dataclasses.replace(self.library, collection=current, store=lambda: store)
                log.info("searching the collection's new generation %s", current)
        return self

    async def run_ingest(self, change: Callable[[float], T]) -> T:
        """Run an ingest use case in the ingest pool, given the deadline (time.monotonic()) of a change arriving
        now: a change queued behind others waits for the ingest lock RAG_INGEST_WAIT_S in all, not more."""
        deadline = time.monotonic() + self.settings.ingest_wait_s
        return await asyncio.get_running_loop().run_in_executor(self.ingest_pool, change, deadline)


def lower_thread_priority() -> None:
    """Give the calling thread a lower CPU priority (nice +10): when an ingest and questions both want the cores,
    questions come first. Linux keeps a nice value per thread, and the threads an ingest thread starts (the store
    writer, torch's OpenMP team for its encode calls) inherit it."""
    thread = threading.get_native_id()
    with contextlib.suppress(OSError, AttributeError):
        os.setpriority(os.PRIO_PROCESS, thread, min(19, os.getpriority(os.PRIO_PROCESS, thread) + INGEST_NICE))


def build_services(app: App, metrics: Metrics | None = None) -> Services:
    """The app's parts, loaded now (MiniLM, Chroma embedded or server, the openai client to vLLM); tests pass fakes
    for the embedder or the LLM in the App."""
    settings = app.settings
    keys = parse_api_keys(settings.api_keys)  # a bad key entry fails before anything heavy loads
    documents = library(app, app.store, app.embedder)
    documents.settle_when_idle()  # what a crash left in the documents folder
    app.engine.retriever.warm()
    return Services(settings, app.embedder, app.store, app.engine, documents, app.feedback(), keys, app.unanswered(),
                    metrics=metrics or Metrics())
