"""Streaming responses that close their answer stream however they end: finished, failed, or the client gone.

Starlette and sse-starlette cancel a streaming response when the client disconnects; a body generator cancelled
between events, or before its first one, is never closed, and the answer's generation slot would come back only
when the garbage collector finds it (or never, for a generator that never started)."""

from __future__ import annotations

from collections.abc import AsyncIterable, Awaitable
from typing import Any, TypeVar

import anyio
from sse_starlette import EventSourceResponse
from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from ui.api.errors import ApiError
from ui.serving.streaming import AnswerStream

T = TypeVar("T")


async def until_disconnected(request: Request, work: Awaitable[T]) -> T:
    """`work` (an answer, or a stream's wait for its first text), cancelled if the client hangs up meanwhile: a
    generation nobody will read is stopped. The body is read by then: the next message is the disconnect."""
    done: list[T] = []
    failed: list[Exception] = []  # raised after the task group, which would wrap it in an ExceptionGroup
    async with anyio.create_task_group() as group:

        async def watch() -> None:
            while (await request.receive())["type"] != "http.disconnect":
                pass
            group.cancel_scope.cancel()

        group.start_soon(watch)
        try:
            done.append(await work)
        except Exception as exc:
            failed.append(exc)
        group.cancel_scope.cancel()
    if failed:
        raise failed[0]
    if not done:
        raise ApiError(400, "client_disconnected", "the client hung up before the answer")
    return done[0]


class AnswerChunks(StreamingResponse):
    """A StreamingResponse over an answer: the body and the answer stream are closed when the response ends."""

    def __init__(self, content: AsyncIterable[str], answer: AnswerStream, **options: Any) -> None:
        super().__init__(content, **options)
        self.answer = answer

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            await close_both(self.body_iterator, self.answer)


class AnswerEvents(EventSourceResponse):
    """Server-Sent Events over an answer: the body and the answer stream are closed when the response ends."""

    def __init__(self, content: AsyncIterable[dict[str, str]], answer: AnswerStream, **options: Any) -> None:
        super().__init__(content, **options)
        self.answer = answer

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            await close_both(self.body_iterator, self.answer)


async def close_both(body: object, answer: AnswerStream) -> None:
    """Close the body generator, then the answer stream, shielded from the cancellation that ended the response."""
    with anyio.CancelScope(shield=True):
        try:
            aclose = getattr(body, "aclose", None)
            if aclose is not None:
                await aclose()
        finally:
            await answer.aclose()
