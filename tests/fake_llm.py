"""A fake OpenAI-compatible server under the real openai SDK (httpx MockTransport), for fast unit tests only."""

from __future__ import annotations

import json
from collections.abc import Callable

import httpx2
from openai import OpenAI

from rag.components.llm import LLM

Reply = Callable[[list[dict[str, str]]], str]


def _sse(text: str, prompt_tokens: int) -> bytes:
    words = text.split(" ")
    pieces = [(" " if i else "") + word for i, word in enumerate(words) if word]
    events: list[dict[str, object]] = [
        {"choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": None}]} for piece in pieces
    ]
    events.append({"choices": [], "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": len(pieces),
                                            "total_tokens": prompt_tokens + len(pieces)}})
    head = {"id": "x", "object": "chat.completion.chunk", "created": 0, "model": "m"}
    body = "".join(f"data: {json.dumps(head | event)}\n\n" for event in events)
    return (body + "data: [DONE]\n\n").encode()


class FakeLLMServer:
    """Records every request; answers with reply(messages), streamed word by word."""

    def __init__(self, reply: Reply) -> None:
        self.reply = reply
        self.requests: list[dict[str, object]] = []

    def handler(self, request: httpx2.Request) -> httpx2.Response:
        body = json.loads(request.content)
        self.requests.append(body)
        text = self.reply(body["messages"])
        return httpx2.Response(200, content=_sse(text, 100), headers={"content-type": "text/event-stream"})

    def llm(self, repetition_penalty: float = 1.0) -> LLM:
        client = OpenAI(base_url="http://fake/v1", api_key="k",
                        http_client=httpx2.Client(transport=httpx2.MockTransport(self.handler)))
        return LLM(client, "fake-model", max_tokens=64, repetition_penalty=repetition_penalty)
