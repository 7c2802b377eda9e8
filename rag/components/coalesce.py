"""Calls from many threads run together: a server's concurrent questions are embedded in one model call.

One forward pass over 8 questions costs a quarter to a third of 8 passes of one (MiniLM and e5 on 2 cores, torch bf16
and ONNX Runtime: `python -m benchmarks.app_cost` prints it), and 8 threads running the model at once fight over the
same cores. No call waits for company: a call made while none runs goes at once, alone; calls that arrive while a
batch runs wait for it and go together in the next one, led by the first of them. Recent results are
remembered: a question asked again, or embedded twice for one answer (the search, then the quote ranking).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Iterable
from typing import Generic, TypeVar

from rag.components.recent import Recent

# Questions whose vectors an embedder keeps (1.5 KiB each for MiniLM or e5-small): a helpdesk's staff ask the same
# questions again, and a question embedded once costs each of the pair's models 5–10 ms of CPU when it comes alone.
# Also one answer's second look (the quote ranking). benchmarks.app_cost asks 40 of its 160 questions twice.
RECENT_QUERIES = 2048
T = TypeVar("T", bound=Hashable)
R = TypeVar("R")


class _Call(Generic[T, R]):
    """One waiting call: its item, then its result or error, or the word that it leads the next batch."""

    __slots__ = ("error", "item", "leads", "ready", "result")

    def __init__(self, item: T) -> None:
        self.item = item
        self.result: R | None = None
        self.error: BaseException | None = None
        self.leads = False
        self.ready = threading.Event()


class Coalescer(Generic[T, R]):
    """`coalescer(item)` returns `batch([... item ...])`'s result for it, running at most `most` items per batch
    and one batch at a time; an error of a batch is raised in every call of it. The results of the last `remember`
    items are shared: callers must not change them."""

    def __init__(self, batch: Callable[[list[T]], Iterable[R]], most: int = 32, remember: int = 0) -> None:
        self._batch, self._most = batch, most
        self._lock = threading.Lock()
        self._waiting: list[_Call[T, R]] = []
        self._running = False
        self._recent: Recent[T, R] = Recent(remember)
        self.batches = 0  # how many batches ran (for tests and benchmarks)

    def __call__(self, item: T) -> R:
        call: _Call[T, R] = _Call(item)
        with self._lock:
            if (known := self._recent.get(item)) is not None:
                return known
            self._waiting.append(call)
            call.leads = not self._running
            self._running = True
        if not call.leads:
            call.ready.wait()
        if call.leads:  # at the head of the queue: its batch holds it
            self._run_next()
        if call.error is not None:
            raise call.error
        return call.result  # type: ignore[return-value]

    def _run_next(self) -> None:
        with self._lock:
            calls = self._waiting[:self._most]
            del self._waiting[:self._most]
        try:
            results = self._batch([call.item for call in calls])
            for call, result in zip(calls, results, strict=True):
                call.result = result
            self._keep(calls)
        except BaseException as exc:
            for call in calls:
                call.error = exc
        finally:
            self.batches += 1
            self._hand_over()
            for call in calls:
                call.leads = False
                call.ready.set()

    def _keep(self, calls: list[_Call[T, R]]) -> None:
        for call in calls:
            self._recent.put(call.item, call.result)  # type: ignore[arg-type]

    def _hand_over(self) -> None:
        """The first waiting call leads the next batch; with none waiting, the next call runs at once."""
        with self._lock:
            if self._waiting:
                self._waiting[0].leads = True
                self._waiting[0].ready.set()
            else:
                self._running = False
