"""The LLM seam: the official openai SDK talking to vLLM's OpenAI-compatible server; errors wrapped once."""

from __future__ import annotations

import socket
from collections.abc import Generator, Iterator, Sequence
from contextlib import nullcontext
from functools import partial
from typing import TYPE_CHECKING

from rag.core.errors import LLMUnavailable, RagError
from rag.core.ports import Delta, Stop, Stopped, Usage
from rag.core.prompt import Message

if TYPE_CHECKING:
    from openai import OpenAI


class LLM:
    """Chat completions against one served model; vLLM applies the model's own chat template."""

    def __init__(self, client: OpenAI, model: str, max_tokens: int = 512, temperature: float = 0.0,
                 repetition_penalty: float = 1.0) -> None:
        self._client = client
        self.model = model
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.repetition_penalty = repetition_penalty

    @property
    def base_url(self) -> str:
        """Where the server is (for error messages)."""
        return str(self._client.base_url)

    def stream(self, messages: Sequence[Message], max_tokens: int | None = None,
               stop: Stop | None = None) -> Generator[Delta, None, None]:
        """Stream the reply as text deltas, then one Delta carrying the usage; raises Stopped once `stop` is set."""
        import openai

        try:
            yield from self._deltas(messages, max_tokens, stop)
        except Stopped:
            raise
        except Exception as exc:
            if stop is not None and stop.is_set():  # the read was cut short by the hang-up
                raise Stopped("the caller stopped the stream") from exc
            if isinstance(exc, openai.APIConnectionError | openai.APITimeoutError):
                raise LLMUnavailable(
                    f"the LLM server at {self.base_url} (RAG_LLM_BASE_URL) is unreachable or timed out: {exc}"
                ) from exc
            if isinstance(exc, openai.APIStatusError):
                answered = f"answered {exc.status_code}: {exc.message}"
                raise RagError(f"the LLM server at {self.base_url} {answered}") from exc
            raise

    def _deltas(self, messages: Sequence[Message], max_tokens: int | None,
                stop: Stop | None) -> Generator[Delta, None, None]:
        from openai import Stream

        if stop is not None and stop.is_set():
            raise Stopped("the caller stopped the stream")  # before the request: vLLM never sees it
        body = {"model": self.model, "messages": list(messages), "max_tokens": max_tokens or self.max_tokens,
                "temperature": self.temperature, "stream": True, **self._extras()}
        # The SDK's own request (its connection, auth, retries, SSE reader and errors), given the body as JSON and
        # its chunks as plain dicts: `chat.completions.create` walks the typed parameters (the long prompt
        # included) and builds a pydantic object per chunk, ~2.5 ms of a generated answer's ~30 CPU ms
        # (benchmarks.app_cost). Closing the stream (when the caller stops early) drops the connection, and vLLM
        # aborts the request.
        with self._client.post("/chat/completions", cast_to=object, body=body, stream=True,
                               options={"security": {"bearer_auth": True}}, stream_cls=Stream[object],
                               ) as chunks, stop.hook(partial(_hang_up, chunks.response)) if stop else nullcontext():
            for chunk in chunks:
                if stop is not None and stop.is_set():
                    raise Stopped("the caller stopped the stream")
                yield from _chunk_deltas(chunk)

    def _extras(self) -> dict[str, object]:
        # Usage on every chunk (vLLM's continuous_usage_stats; others ignore it), so that an answer stopped early
        # still has its token counts. repetition_penalty is vLLM's extension; sent only when set.
        extras: dict[str, object] = {"stream_options": {"include_usage": True, "continuous_usage_stats": True}}
        if self.repetition_penalty != 1.0:
            extras["repetition_penalty"] = self.repetition_penalty
        return extras

    def complete(self, messages: Sequence[Message], max_tokens: int | None = None) -> str:
        """The whole reply as one string (used for short internal calls like question condensing)."""
        return "".join(delta.text for delta in self.stream(messages, max_tokens))


def _chunk_deltas(chunk: object) -> Iterator[Delta]:
    """A streamed chunk's text, then its usage (each when present), from the chunk's JSON."""
    if not isinstance(chunk, dict):
        raise RagError(f"the LLM server sent a chunk that is not a JSON object: {str(chunk)[:200]!r}")
    choices = chunk.get("choices") or [{}]
    if text := (choices[0].get("delta") or {}).get("content"):
        yield Delta(text=text)
    if (usage := chunk.get("usage")) is not None:
        yield Delta(usage=Usage(usage.get("prompt_tokens") or 0, usage.get("completion_tokens") or 0))


def _hang_up(response: object) -> None:
    """Shut down the connection under a response, from another thread: a read waiting on it returns at once.
    The plain socket's shutdown, also under TLS (the SSL object stays with the reading thread)."""
    extensions: dict[str, object] = getattr(response, "extensions", {})
    stream = extensions.get("network_stream")
    connection = getattr(stream, "get_extra_info", lambda _: None)("socket")
    if isinstance(connection, socket.socket):
        socket.socket.shutdown(connection, socket.SHUT_RDWR)
