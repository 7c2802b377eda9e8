"""What the API shares between requests: settings, the query engine, the store, keys and the generation gate."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from rag.answer import QueryEngine
from rag.config import Settings
from rag.embedder import Embedder
from rag.store import ChromaStore
from rag.wiring import build_embedder, build_engine, build_store
from ui.api.auth import ApiKey, parse_api_keys
from ui.api.errors import ApiError
from ui.api.metrics import Metrics


class Gate:
    """Bounds concurrent generations; a request waits up to `timeout` seconds for a slot, then gets 429."""

    def __init__(self, slots: int, timeout: float) -> None:
        self._semaphore = asyncio.Semaphore(slots)
        self._timeout = timeout

    async def acquire(self) -> None:
        """Take a slot or raise 429."""
        try:
            await asyncio.wait_for(self._semaphore.acquire(), self._timeout)
        except TimeoutError as exc:
            raise ApiError(429, "busy", "all generation slots are busy; retry shortly",
                           headers={"Retry-After": "1"}) from exc

    def release(self) -> None:
        """Give a slot back."""
        self._semaphore.release()


@dataclass
class Services:
    """Built once per app from settings; routes receive it through a dependency."""

    settings: Settings
    embedder: Embedder
    store: ChromaStore
    engine: QueryEngine
    keys: list[ApiKey] = field(default_factory=list)
    gate: Gate | None = None
    metrics: Metrics = field(default_factory=Metrics)

    def __post_init__(self) -> None:
        self.gate = self.gate or Gate(self.settings.max_concurrent_generations, self.settings.queue_timeout_s)

    @asynccontextmanager
    async def gate_slot(self) -> AsyncIterator[None]:
        """Hold a generation slot for the block (429 ApiError when none frees up in time)."""
        assert self.gate is not None
        await self.gate.acquire()
        try:
            yield
        finally:
            self.gate.release()


def build_services(settings: Settings, embedder: Embedder | None = None, metrics: Metrics | None = None) -> Services:
    """The real wiring: MiniLM, Chroma (embedded or server) and the openai client to vLLM."""
    embedder = embedder or build_embedder(settings)
    store = build_store(settings)
    engine = build_engine(settings, embedder=embedder, store=store)
    engine.retriever.warm()
    return Services(settings, embedder, store, engine, parse_api_keys(settings.api_keys),
                    metrics=metrics or Metrics())
