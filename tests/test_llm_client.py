"""The LLM seam's request and its reading of the stream, under the real openai SDK (a MockTransport server)."""

from __future__ import annotations

import json

import httpx2
import pytest
from openai import OpenAI

from rag.components.llm import LLM
from rag.core.errors import RagError
from rag.core.ports import Delta, Usage


def _llm(respond: httpx2.MockTransport) -> LLM:
    client = OpenAI(base_url="http://fake/v1", api_key="secret-key", http_client=httpx2.Client(transport=respond),
                    max_retries=0)
    return LLM(client, "served-model", max_tokens=64, temperature=0.0)


def _events(*events: object) -> httpx2.Response:
    body = "".join(f"data: {json.dumps(event)}\n\n" for event in events) + "data: [DONE]\n\n"
    return httpx2.Response(200, content=body.encode(), headers={"content-type": "text/event-stream"})


def test_the_request_is_the_chat_completions_call_with_the_key_and_the_usage_options() -> None:
    seen: list[httpx2.Request] = []

    def respond(request: httpx2.Request) -> httpx2.Response:
        seen.append(request)
        return _events({"choices": [{"index": 0, "delta": {"content": "Hi"}}]})

    list(_llm(httpx2.MockTransport(respond)).stream([{"role": "user", "content": "Hello?"}], max_tokens=7))
    (request,) = seen
    assert request.url == "http://fake/v1/chat/completions"
    assert request.headers["authorization"] == "Bearer secret-key"
    assert json.loads(request.content) == {
        "model": "served-model", "messages": [{"role": "user", "content": "Hello?"}], "max_tokens": 7,
        "temperature": 0.0, "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True}}


def test_chunks_become_text_deltas_then_usage() -> None:
    usage = {"prompt_tokens": 12, "completion_tokens": 2, "total_tokens": 14}
    response = _events({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]},
                       {"choices": [{"index": 0, "delta": {"content": "Yes"}}], "usage": usage},
                       {"choices": [{"index": 0, "delta": {"content": "."}, "finish_reason": "stop"}]},
                       {"choices": [], "usage": usage})
    deltas = list(_llm(httpx2.MockTransport(lambda _: response)).stream([{"role": "user", "content": "?"}]))
    assert deltas == [Delta(text="Yes"), Delta(usage=Usage(12, 2)), Delta(text="."), Delta(usage=Usage(12, 2))]


def test_a_chunk_that_is_not_an_object_is_a_clear_error() -> None:
    response = _events({"choices": [{"index": 0, "delta": {"content": "Yes"}}]}, [1, 2])
    with pytest.raises(RagError, match="not a JSON object"):
        list(_llm(httpx2.MockTransport(lambda _: response)).stream([{"role": "user", "content": "?"}]))


def test_an_error_status_names_the_server_and_the_status() -> None:
    respond = httpx2.MockTransport(lambda _: httpx2.Response(400, json={"error": {"message": "too long"}}))
    with pytest.raises(RagError, match="answered 400"):
        list(_llm(respond).stream([{"role": "user", "content": "?"}]))
