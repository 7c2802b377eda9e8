"""One streamed answer: the synchronous engine in a worker thread, its events handed to the event loop, a
generation slot held until the stream is closed. Closing always frees everything, at once or after the engine's
next LLM token, whether the client finished, went away, or the chat was stopped."""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from collections.abc import Callable, Generator
from contextlib import suppress

import anyio
import anyio.to_thread

from rag.core.answer import Done, Event, Token
from rag.core.ports import Stop, Stopped
from ui.serving.services import Services

Start = Callable[[Stop], Generator[Event, None, None]]  # the engine's stream, given the event that stops it
_Item = Event | Exception | None  # an event, the engine's error, or None at the end


class AnswerStream:
    """Async iterator over an answer's events, holding a generation slot. Always `aclose()` it: closing sets the
    Stop (the LLM stream ends at its next chunk, or at once when still waiting on vLLM: its connection is shut
    down, and vLLM aborts the request), waits for the worker thread to close the engine's generator, then gives
    the slot back."""

    def __init__(self, services: Services, start: Start, final_only: bool = False) -> None:
        self._services = services
        self._stop = Stop()
        self._queue: asyncio.Queue[_Item] = asyncio.Queue()
        self._ahead: deque[_Item] = deque()
        self._ended = self._closed = False
        self._final_only = final_only
        # Events the worker thread made that the loop has not taken yet, and whether a wake-up is on its way.
        self._handed: list[_Item] = []
        self._handing = threading.Lock()
        self._wake_pending = False
        loop = asyncio.get_running_loop()
        # A thread of anyio's pool (sized per slot in the app's lifespan) for the whole answer.
        self._worker = asyncio.ensure_future(anyio.to_thread.run_sync(self._produce, start, loop))

    @classmethod
    async def open(cls, services: Services, start: Start, final_only: bool = False) -> AnswerStream:
        """Take a slot (or raise Busy), start the engine and wait for its first answer text, so that an empty
        index or an unreachable LLM is raised here, before any response has started. `final_only`: only the
        Done event comes through (a caller that wants the finished answer, not its tokens)."""
        await services.gate.acquire()
        try:
            stream = cls(services, start, final_only)
        except BaseException:
            services.gate.release()
            raise
        try:
            await stream._prime()
        except BaseException:
            await stream.aclose()
            raise
        return stream

    def __aiter__(self) -> AnswerStream:
        return self

    async def __anext__(self) -> Event:
        if self._ended:
            raise StopAsyncIteration
        item = self._ahead.popleft() if self._ahead else await self._queue.get()
        if item is None:
            self._ended = True
            raise StopAsyncIteration
        if isinstance(item, Exception):
            self._ended = True
            raise item
        if isinstance(item, Done):
            self._services.metrics.observe_answer(item.answer)
        return item

    async def aclose(self) -> None:
        """Stop the engine, let its thread close the LLM stream, give the slot back; safe to call again."""
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        if self._worker.done():
            self._services.gate.release()
        else:  # released when the thread is done, even if this wait is cancelled
            self._worker.add_done_callback(lambda _: self._services.gate.release())
            with anyio.CancelScope(shield=True):
                await asyncio.wait({self._worker})

    async def _prime(self) -> None:
        while True:
            item = await self._queue.get()
            if isinstance(item, Exception):
                raise item
            self._ahead.append(item)
            if item is None or isinstance(item, Token | Done):
                return

    def _produce(self, start: Start, loop: asyncio.AbstractEventLoop) -> None:
        """In the worker thread: run the engine, hand each event to the loop, close the generator here."""
        try:
            events = start(self._stop)
            try:
                for event in events:
                    # Every event handed over wakes the loop's thread (a context switch and a GIL hand-over:
                    # a fifth of a worker's CPU at 8 concurrent answers), so a caller of the finished answer
                    # gets only that.
                    if not self._final_only or isinstance(event, Done):
                        self._put(loop, event)
                    if self._stop.is_set():
                        break
            finally:
                events.close()  # runs the engine's finally blocks: the LLM stream is closed
        except Stopped:
            pass
        except Exception as exc:  # an empty index, a dead LLM: the reader raises it
            self._put(loop, exc)
        finally:
            self._put(loop, None)

    def _put(self, loop: asyncio.AbstractEventLoop, item: _Item) -> None:
        """Hand an item to the loop: events made while a wake-up is still on its way go with it."""
        with self._handing:
            self._handed.append(item)
            if self._wake_pending:
                return
            self._wake_pending = True
        with suppress(RuntimeError):  # the loop is closed: the server is shutting down, nobody reads
            loop.call_soon_threadsafe(self._take_handed)

    def _take_handed(self) -> None:
        """On the loop: move what the worker thread handed over into the queue."""
        with self._handing:
            items, self._handed = self._handed, []
            self._wake_pending = False
        for item in items:
            self._queue.put_nowait(item)
