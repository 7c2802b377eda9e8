"""Every stream gives its generation slot back and stops the LLM when its client goes away: /v1/ask (SSE) and
/v1/chat/completions over a live uvicorn server, and the chat's handlers (stopped, or the browser gone), with a
slow fake LLM under the real openai SDK; and against the real vLLM, which aborts the request."""

from __future__ import annotations

import asyncio
import importlib
import json
import re
import shutil
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from openai import OpenAI

from ingest import service
from rag.components.llm import LLM
from rag.config import Settings
from rag.wiring import App
from tests.conftest import SAMPLES, CountingEmbedder, serving
from ui.api.app import create_app
from ui.serving.services import Services, build_services

SLOTS = 2  # RAG_MAX_CONCURRENT_GENERATIONS here: 2×SLOTS disconnects would exhaust them if any leaked
FIRST = "Staff get 25 days of annual leave."  # supported by leave.md: the first answer text a client sees
SLOW_START = "slow start"  # in a question: the model's first sentence comes after a second
QUICK = "quickly"  # in a question: the model answers at once


class SlowLLM:
    """A fake vLLM whose answers stream slowly: FIRST, then words without a sentence end, one every 20 ms for
    ten seconds, unless the client closes the stream. Counts the streams opened, closed and run to their end."""

    def __init__(self) -> None:
        self.opened = self.closed = self.exhausted = 0
        self.lock = threading.Lock()

    def llm(self) -> LLM:
        client = OpenAI(base_url="http://fake/v1", api_key="k", max_retries=0,
                        http_client=httpx2.Client(transport=httpx2.MockTransport(self._handle)))
        return LLM(client, "fake-model", max_tokens=1024)

    def _handle(self, request: httpx2.Request) -> httpx2.Response:
        prompt = json.loads(request.content)["messages"][-1]["content"]
        with self.lock:
            self.opened += 1
        return httpx2.Response(200, stream=_SlowBody(self, QUICK in prompt, SLOW_START in prompt),
                               headers={"content-type": "text/event-stream"})

    def all_closed(self) -> bool:
        with self.lock:
            return self.opened == self.closed


class _SlowBody(httpx2.SyncByteStream):
    def __init__(self, llm: SlowLLM, quick: bool, slow_start: bool) -> None:
        self.llm, self.quick, self.slow_start = llm, quick, slow_start

    def __iter__(self) -> Iterator[bytes]:
        time.sleep(1.0 if self.slow_start else 0.0)
        yield _chunk(FIRST)
        for n in range(0 if self.quick else 500):
            time.sleep(0.02)
            yield _chunk(f" Note{n}")
        with self.llm.lock:
            self.llm.exhausted += 0 if self.quick else 1
        yield b"data: [DONE]\n\n"

    def close(self) -> None:
        with self.llm.lock:
            self.llm.closed += 1


def _chunk(text: str) -> bytes:
    event = {"id": "x", "object": "chat.completion.chunk", "created": 0, "model": "m",
             "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}]}
    return f"data: {json.dumps(event)}\n\n".encode()


def _wait(condition: Callable[[], bool], seconds: float = 5.0) -> bool:
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.05)
    return condition()


@dataclass
class Live:
    url: str
    services: Services
    llm: SlowLLM


def _services(settings: Settings, embedder: CountingEmbedder, llm: SlowLLM, **changes: Any) -> Services:
    local = settings.model_copy(update={"max_concurrent_generations": SLOTS, "queue_timeout_s": 0.5,
                                        "refusal_threshold": 0.2, **changes})
    local.documents_dir.mkdir(parents=True, exist_ok=True)
    (local.documents_dir / "leave.md").write_text("# Leave\nStaff get 25 days of annual leave per year.\n")
    service.sync([local.documents_dir], local, embedder=embedder)
    return build_services(App(local, embedder=embedder, llm=llm.llm()))


@pytest.fixture
def live(settings: Settings, embedder: CountingEmbedder) -> Iterator[Live]:
    llm = SlowLLM()
    services = _services(settings, embedder, llm)
    with serving(create_app(services.settings, services)) as url:
        yield Live(url, services, llm)


def _address(url: str) -> tuple[str, int]:
    host, port = url.removeprefix("http://").split(":")
    return host, int(port)


def _request(path: str, body: dict[str, Any]) -> bytes:
    data = json.dumps(body).encode()
    head = f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n" \
           f"Content-Length: {len(data)}\r\n\r\n"
    return head.encode() + data


def _disconnect(live: Live, path: str, body: dict[str, Any], seen: bytes | None) -> None:
    """Start a streamed answer and hang up: once `seen` arrived, or (None) while the model has not yet said a
    word (the server is still waiting for the first answer text)."""
    opened = live.llm.opened
    with socket.create_connection(_address(live.url), timeout=10) as sock:
        sock.sendall(_request(path, body))
        if seen is None:
            assert _wait(lambda: live.llm.opened > opened), "the model was never asked"
            return
        data = b""
        while seen not in data:
            chunk = sock.recv(65536)
            assert chunk, data[:300]
            data += chunk
        assert data.startswith(b"HTTP/1.1 200"), data[:300]


ROUTES = [("/v1/ask", b"event: token"), ("/v1/chat/completions", FIRST.encode()[:20])]


def _body(path: str, question: str, stream: bool = True) -> dict[str, Any]:
    if path == "/v1/ask":
        return {"question": question, "stream": stream}
    return {"model": "rag", "stream": stream, "messages": [{"role": "user", "content": question}]}


@pytest.mark.parametrize(("path", "token"), ROUTES, ids=["ask-sse", "chat-completions"])
def test_disconnects_give_every_slot_back_and_close_the_llm_stream(live: Live, path: str, token: bytes) -> None:
    for n in range(2 * SLOTS):  # half before the first answer text, half after it
        question = f"How many days of annual leave do staff get? {SLOW_START if n % 2 else ''}"
        _disconnect(live, path, _body(path, question), None if n % 2 else token)
    assert _wait(lambda: live.services.gate.free == SLOTS), f"{live.services.gate.free} of {SLOTS} slots free"
    assert _wait(live.llm.all_closed), f"{live.llm.opened} LLM streams opened, {live.llm.closed} closed"
    assert live.llm.exhausted == 0  # every slow stream was stopped, none ran to its end
    with httpx.stream("POST", f"{live.url}{path}", json=_body(path, f"Annual leave days, {QUICK}?"),
                      timeout=30) as reply:
        assert reply.status_code == 200 and "25 days" in reply.read().decode()
    assert _wait(lambda: live.services.gate.free == SLOTS)


@pytest.mark.parametrize("path", ["/v1/ask", "/v1/chat/completions"])
def test_a_client_that_hangs_up_on_a_whole_answer_stops_it(live: Live, path: str) -> None:
    """Not streamed: the answer (ten seconds of the slow model) is stopped when its client goes, not finished."""
    for _ in range(2 * SLOTS):
        _disconnect(live, path, _body(path, "How many days of annual leave do staff get?", stream=False), None)
    assert _wait(lambda: live.services.gate.free == SLOTS, 3), f"{live.services.gate.free} of {SLOTS} slots free"
    assert _wait(live.llm.all_closed, 3) and live.llm.exhausted == 0


def test_a_stopped_or_closed_chat_gives_its_slot_back(settings: Settings, embedder: CountingEmbedder) -> None:
    """The chat's handler, cancelled the way Chainlit's stop button does, or by on_chat_end (the browser gone)."""
    import chainlit as cl
    from chainlit.context import init_http_context

    from ui.chat import state

    llm = SlowLLM()
    services = _services(settings, embedder, llm, ui_auth=False)
    state.install(state.ChatContext(services.settings, lambda: services, {}))
    handlers = importlib.reload(importlib.import_module("ui.chat.handlers"))

    async def ask_then_stop(n: int) -> None:
        init_http_context()
        question = f"How many days of annual leave do staff get? {SLOW_START if n % 2 else ''}"
        opened = llm.opened
        task = asyncio.create_task(handlers.on_message(cl.Message(content=question)))
        cl.context.session.current_task = task
        while llm.opened == opened:
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.3)  # mid-answer (or, with the slow start, before its first word)
        if n < SLOTS:
            task.cancel()  # what Chainlit's stop does
        else:
            await handlers.end()  # on_chat_end: the socket closed
        await asyncio.gather(task, return_exceptions=True)

    async def scenario() -> None:
        for n in range(2 * SLOTS):
            await ask_then_stop(n)

    asyncio.run(scenario())
    assert _wait(lambda: services.gate.free == SLOTS), f"{services.gate.free} of {SLOTS} slots free"
    assert _wait(llm.all_closed) and llm.exhausted == 0


def _metric(metrics_url: str, name: str = "num_requests_running") -> float:
    metrics = httpx.get(metrics_url, timeout=5).text
    return sum(float(value) for value in re.findall(rf"^vllm:{name}\{{[^}}]*\}} (\S+)$", metrics, re.M))


@pytest.mark.integration
def test_real_vllm_aborts_the_generation_when_the_client_goes(llm_settings: Settings, real_embedder: object,
                                                              tmp_path: Path) -> None:
    """Mid-answer on /v1/chat/completions (generating, before or after its first shown sentence): the client hangs
    up, and vLLM stops generating within seconds; it would otherwise run on to the answer's 2500 tokens."""
    docs = tmp_path / "docs"
    docs.mkdir()
    shutil.copy(SAMPLES / "en" / "python-tutorial-venv.html", docs)
    settings = llm_settings.model_copy(update={"data_dir": tmp_path / "data", "max_answer_tokens": 2500,
                                               "answer_mode": "generate"})  # no early stop on a withheld sentence
    service.sync([docs], settings, embedder=real_embedder)  # type: ignore[arg-type]
    services = build_services(App(settings, embedder=real_embedder, llm=_NoEos.build(settings)))  # type: ignore[arg-type]
    metrics = settings.llm_base_url.removesuffix("/v1") + "/metrics"
    assert _wait(lambda: _metric(metrics) == 0, 120), "vLLM is busy with other requests"
    question = "How do I create a Python virtual environment?"  # one the model answers: a refusal ends the draft
    with serving(create_app(settings, services)) as url, socket.create_connection(_address(url), timeout=60) as sock:
        sock.sendall(_request("/v1/chat/completions", _body("/v1/chat/completions", question)))
        tokens = _metric(metrics, "generation_tokens_total")
        assert _wait(lambda: _metric(metrics, "generation_tokens_total") > tokens + 20, 60), "vLLM never generated"
        sock.close()  # mid-answer
        assert _wait(lambda: _metric(metrics) == 0, 10), "vLLM is still generating for a client that is gone"
        assert _wait(lambda: services.gate.free == settings.max_concurrent_generations)


class _NoEos(LLM):
    """The real LLM client, asking vLLM to ignore the end-of-sequence token: a generation that runs to its token
    limit unless it is aborted."""

    @classmethod
    def build(cls, settings: Settings) -> LLM:
        from rag.wiring import build_llm

        real = build_llm(settings)
        return cls(real._client, real.model, settings.max_answer_tokens, real.temperature, real.repetition_penalty)

    def _extras(self) -> dict[str, object]:
        return super()._extras() | {"ignore_eos": True}
