"""The LLM client keeps its connection across streamed answers, and still drops it when a caller stops early (how
vLLM learns to abort): the client build_llm makes, against a live uvicorn server that notes each request's port."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.routing import Route

from rag.components.llm import LLM
from rag.config import Settings
from rag.core.ports import Stop, Stopped
from rag.wiring import build_llm
from tests.conftest import serving

WORDS = ["Staff", " get", " 25", " days", "."]


def _event(content: str | None) -> str:
    delta = {"content": content} if content is not None else {}
    choices = [{"index": 0, "delta": delta, "finish_reason": None}] if delta else []
    body = {"id": "x", "object": "chat.completion.chunk", "created": 0, "model": "m", "choices": choices}
    return f"data: {json.dumps(body)}\n\n"


class PortNotingModel:
    """A streaming chat endpoint: WORDS then [DONE], or (a question holding "slow") a word every 10 ms for ten
    seconds; notes the client port of every request (one port per connection)."""

    def __init__(self) -> None:
        self.ports: list[int] = []

    async def chat(self, request: Request) -> StreamingResponse:
        self.ports.append(request.client.port if request.client else 0)
        slow = "slow" in (await request.json())["messages"][-1]["content"]
        return StreamingResponse(self._slow() if slow else self._quick(), media_type="text/event-stream")

    async def _quick(self) -> AsyncIterator[str]:
        for word in WORDS:
            yield _event(word)
        yield "data: [DONE]\n\n"

    async def _slow(self) -> AsyncIterator[str]:
        for _ in range(1000):
            yield _event(" word")
            await asyncio.sleep(0.01)
        yield "data: [DONE]\n\n"


@pytest.fixture
def model_and_llm() -> Iterator[tuple[PortNotingModel, LLM]]:
    model = PortNotingModel()
    app = Starlette(routes=[Route("/v1/chat/completions", model.chat, methods=["POST"])])
    with serving(app) as url:
        yield model, build_llm(Settings(llm_base_url=f"{url}/v1", llm_model="m"))


def _ask(llm: LLM, question: str) -> str:
    return "".join(delta.text for delta in llm.stream([{"role": "user", "content": question}]))


def test_answers_that_end_share_one_connection(model_and_llm: tuple[PortNotingModel, LLM]) -> None:
    model, llm = model_and_llm
    answers = [_ask(llm, "How many days?") for _ in range(4)]
    assert answers == ["Staff get 25 days."] * 4
    assert len(model.ports) == 4 and len(set(model.ports)) == 1


def test_a_stream_closed_early_drops_its_connection(model_and_llm: tuple[PortNotingModel, LLM]) -> None:
    model, llm = model_and_llm
    deltas = llm.stream([{"role": "user", "content": "slow please"}])
    assert next(deltas).text == " word"
    deltas.close()  # as the query path does when it stops reading: the server must see the connection go
    assert _ask(llm, "How many days?") == "Staff get 25 days."
    assert len(set(model.ports)) == 2


def test_a_stop_mid_stream_drops_the_connection_at_once(model_and_llm: tuple[PortNotingModel, LLM]) -> None:
    model, llm = model_and_llm
    stop = Stop()
    deltas = llm.stream([{"role": "user", "content": "slow please"}], stop=stop)
    next(deltas)
    stop.set()
    with pytest.raises(Stopped):
        list(deltas)
    assert _ask(llm, "How many days?") == "Staff get 25 days."
    assert _ask(llm, "How many days?") == "Staff get 25 days."
    assert len(model.ports) == 3 and len(set(model.ports)) == 2
