"""The LLM client's transport: connections kept across streamed answers (the openai SDK drops each one)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import suppress

import httpx2

# The SSE event that ends an OpenAI-compatible stream, at the start of a line (inside a chunk's JSON a newline is
# escaped, so the model cannot write it); and what is read after it at most before the connection is dropped.
_DONE_EVENT = b"\ndata: [DONE]"
_TAIL_BYTES = 64 * 1024


class _ReadToEnd(httpx2.SyncByteStream):
    """A streamed response body that, closed after the `[DONE]` event, first reads the few bytes the server sends
    after it. The openai SDK closes the response as soon as it sees `[DONE]`, before the HTTP body's last chunk, and
    a connection closed mid-body cannot be reused: every answer opened a new one (a socket, a connect and the
    server's accept, ~1 ms of the app's CPU each). Closed earlier (a caller stopping), the connection is still
    dropped: that is how vLLM learns to abort the generation."""

    def __init__(self, stream: httpx2.SyncByteStream) -> None:
        self._stream = stream
        self._chunks: Iterator[bytes] | None = None
        self._done, self._last = False, b"\n"

    def __iter__(self) -> Iterator[bytes]:
        self._chunks = iter(self._stream)
        for chunk in self._chunks:
            self._done = self._done or _DONE_EVENT in self._last + chunk[: len(_DONE_EVENT)] or _DONE_EVENT in chunk
            self._last = chunk[-len(_DONE_EVENT):]
            yield chunk

    def close(self) -> None:
        """Read what is left after `[DONE]` (so the connection goes back to the pool), then close."""
        try:
            if self._done and self._chunks is not None:
                with suppress(Exception):  # a broken tail only costs the connection
                    left = _TAIL_BYTES
                    for chunk in self._chunks:
                        left -= len(chunk)
                        if left < 0:
                            break
        finally:
            self._stream.close()


class KeptAliveTransport(httpx2.BaseTransport):
    """An httpx transport whose streamed responses give their connection back once the server ended them."""

    def __init__(self, inner: httpx2.BaseTransport) -> None:
        self._inner = inner

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        """The inner transport's response, its body wrapped in _ReadToEnd."""
        response = self._inner.handle_request(request)
        assert isinstance(response.stream, httpx2.SyncByteStream)
        response.stream = _ReadToEnd(response.stream)
        return response

    def close(self) -> None:
        """Close the inner transport's connections."""
        self._inner.close()


def pooled_http_client() -> httpx2.Client:
    """The openai SDK's default client (its pool size), on a KeptAliveTransport."""
    from openai import DefaultHttpxClient

    pool = httpx2.HTTPTransport(limits=httpx2.Limits(max_connections=1000, max_keepalive_connections=100))
    return DefaultHttpxClient(transport=KeptAliveTransport(pool))
