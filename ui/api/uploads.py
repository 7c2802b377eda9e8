"""Uploads streamed to disk as the bytes arrive: the `file` part of a multipart body goes straight into a hidden
temp file in the documents folder, its size limit applied as it grows; the whole file is never held in memory, and
the temp file is removed on every failure (too large, refused, malformed, the client gone)."""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING

from python_multipart.exceptions import FormParserError
from python_multipart.multipart import MultipartParser, parse_options_header
from starlette.concurrency import run_in_threadpool
from starlette.requests import ClientDisconnect, Request

from ingest import files
from ui.api.errors import ApiError
from ui.serving.uploads import too_large

if TYPE_CHECKING:
    from python_multipart.multipart import MultipartCallbacks

FIELD = "file"
FLUSH_BYTES = 1 << 20  # written to disk (in a thread) a MiB at a time
Accept = Callable[[str], Awaitable[Path]]  # the file name as sent → where the file will go, or an ApiError


async def stage_upload(request: Request, folder: Path, limit: int, accept: Accept) -> tuple[Path, StagedUpload]:
    """(target, staged upload) for the body's `file` part. `accept` runs once its headers arrive, before any of
    its bytes are stored; past `limit` bytes the upload ends in 413. The caller discards the staged upload."""
    parts = _Parts(_boundary(request.headers.get("content-type", "")))
    staged: StagedUpload | None = None
    target, in_file, done = None, False, False
    try:
        async for chunk in request.stream():
            for kind, value in parts.feed(chunk):
                if kind == "headers":
                    name, filename = _disposition(value)
                    in_file = name == FIELD and filename is not None and staged is None
                    if in_file:
                        target = await accept(filename or "")
                        staged = StagedUpload(folder, limit)
                elif kind == "data" and in_file and staged is not None:
                    await staged.write(value)
                elif kind == "end" and in_file:
                    in_file, done = False, True
        if staged is None or target is None or not done or not parts.ended:
            raise ApiError(422, "invalid_request", f"send the file as multipart/form-data in a `{FIELD}` part")
        await staged.finish()
        return target, staged
    except ClientDisconnect:
        raise ApiError(400, "client_disconnected", "the upload ended before its last byte") from None
    finally:
        if staged is not None and not staged.finished:
            staged.discard()


class _Parts:
    """python-multipart's callbacks gathered per chunk, as (kind, value): headers (the part's
    Content-Disposition), data, end."""

    def __init__(self, boundary: bytes) -> None:
        self._events: list[tuple[str, bytes]] = []
        self._field = self._value = self._disposition = b""
        self.ended = False
        callbacks: MultipartCallbacks = {
            "on_part_begin": self._begin, "on_header_field": self._on_field, "on_header_value": self._on_value,
            "on_header_end": self._header_end, "on_headers_finished": self._headers_done,
            "on_part_data": lambda data, start, end: self._events.append(("data", data[start:end])),
            "on_part_end": lambda: self._events.append(("end", b"")), "on_end": self._end,
        }
        self._parser = MultipartParser(boundary, callbacks)

    def feed(self, chunk: bytes) -> list[tuple[str, bytes]]:
        """The events in this chunk of the body."""
        try:
            self._parser.write(chunk)
        except FormParserError as exc:
            raise ApiError(422, "invalid_request", f"malformed multipart body: {exc}") from exc
        events, self._events = self._events, []
        return events

    def _begin(self) -> None:
        self._disposition = b""

    def _on_field(self, data: bytes, start: int, end: int) -> None:
        self._field += data[start:end]

    def _on_value(self, data: bytes, start: int, end: int) -> None:
        self._value += data[start:end]

    def _header_end(self) -> None:
        if self._field.lower() == b"content-disposition":
            self._disposition = self._value
        self._field = self._value = b""

    def _headers_done(self) -> None:
        self._events.append(("headers", self._disposition))

    def _end(self) -> None:
        self.ended = True


class StagedUpload:
    """A hidden temp file in the documents folder (never picked up by a sync), written as the bytes arrive. It
    stays open, and locked, until discarded: a clean-up of leftovers removes only files no live upload holds."""

    def __init__(self, folder: Path, limit: int) -> None:
        handle, self.path = files.staged_file(folder)
        self._file = os.fdopen(handle, "wb")
        self._limit, self._size, self._buffer = limit, 0, bytearray()
        self.finished = False

    async def write(self, data: bytes) -> None:
        """Take the next bytes; 413 past the limit."""
        self._size += len(data)
        if self._size > self._limit:
            refusal = too_large(self._limit)
            raise ApiError(413, refusal.kind, refusal.message,
                           headers={"Connection": "close"})  # the client should stop sending the rest
        self._buffer += data
        if len(self._buffer) >= FLUSH_BYTES:
            await self._flush()

    async def finish(self) -> None:
        """Write what is buffered; the file is whole."""
        await self._flush()
        await run_in_threadpool(self._file.flush)
        self.finished = True

    def discard(self) -> None:
        """Close the file (releasing its lock) and remove it unless it was moved into place."""
        self._file.close()
        self.path.unlink(missing_ok=True)

    async def _flush(self) -> None:
        data, self._buffer = bytes(self._buffer), bytearray()
        await run_in_threadpool(self._file.write, data)


def _boundary(content_type: str) -> bytes:
    kind, options = parse_options_header(content_type)
    if kind != b"multipart/form-data" or not options.get(b"boundary"):
        raise ApiError(422, "invalid_request", f"send the file as multipart/form-data in a `{FIELD}` part")
    return options[b"boundary"]


def _disposition(value: bytes) -> tuple[str, str | None]:
    """The part's field name and file name (None when it is not a file)."""
    _, options = parse_options_header(value)
    name, filename = options.get(b"name", b"").decode("latin-1"), options.get(b"filename")
    return name, None if filename is None else filename.decode("utf-8", "replace")
