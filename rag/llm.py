"""The LLM seam: the official openai SDK talking to vLLM's OpenAI-compatible server; errors wrapped once."""

from __future__ import annotations

from collections.abc import Generator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

from rag.errors import LLMUnavailable, RagError
from rag.prompt import Message

if TYPE_CHECKING:
    from openai import OpenAI
    from openai.types.chat import ChatCompletionMessageParam


@dataclass(frozen=True, slots=True)
class Usage:
    """Token counts reported by the server."""

    prompt_tokens: int = 0
    completion_tokens: int = 0


@dataclass(frozen=True, slots=True)
class Delta:
    """A piece of streamed text, or (at the end) the usage of the whole call."""

    text: str = ""
    usage: Usage | None = None


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

    def stream(self, messages: Sequence[Message], max_tokens: int | None = None) -> Generator[Delta, None, None]:
        """Stream the reply as text deltas, then one Delta carrying the usage."""
        import openai

        try:
            # Closing the stream (when the caller stops early) drops the connection, and vLLM aborts the request.
            with self._client.chat.completions.create(
                model=self.model, messages=cast("list[ChatCompletionMessageParam]", list(messages)),
                max_tokens=max_tokens or self.max_tokens, temperature=self.temperature, stream=True,
                extra_body=self._extras(),
            ) as chunks:
                for chunk in chunks:
                    if chunk.choices and chunk.choices[0].delta.content:
                        yield Delta(text=chunk.choices[0].delta.content)
                    if chunk.usage is not None:
                        yield Delta(usage=Usage(chunk.usage.prompt_tokens, chunk.usage.completion_tokens))
        except (openai.APIConnectionError, openai.APITimeoutError) as exc:
            raise LLMUnavailable(
                f"the LLM server at {self.base_url} (RAG_LLM_BASE_URL) is unreachable or timed out: {exc}"
            ) from exc
        except openai.APIStatusError as exc:
            raise RagError(f"the LLM server at {self.base_url} answered {exc.status_code}: {exc.message}") from exc

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
