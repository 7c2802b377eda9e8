"""Bounded requests over a live uvicorn server: oversized bodies end in 413 before any key check and before the body
is read (declared lengths at once, chunked bodies at the limit), uploads stream to disk within their limit, and
every text field has a length cap (422)."""

from __future__ import annotations

import json
import select
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ingest import service
from rag.config import Settings
from rag.wiring import App
from tests.conftest import CountingEmbedder, serving
from tests.fake_llm import FakeLLMServer
from ui.api.app import create_app
from ui.serving import limits
from ui.serving.services import build_services

ADMIN_KEY, READER_KEY = "admin-key-" + "a" * 32, "reader-key-" + "r" * 32
ADMIN, READER = {"Authorization": f"Bearer {ADMIN_KEY}"}, {"Authorization": f"Bearer {READER_KEY}"}
MIB = 2**20
UPLOAD_MB = 1  # RAG_MAX_UPLOAD_MB in these tests: a 40 MiB upload is far over it
BOUNDARY = "rag-test-boundary"


class Counting:
    """Outside the whole app: counts the body bytes the server handed over and the statuses sent back."""

    def __init__(self, app: ASGIApp) -> None:
        self.app, self.received, self.statuses = app, 0, list[int]()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def counted() -> Message:
            message = await receive()
            self.received += len(message.get("body", b""))
            return message

        async def sent(message: Message) -> None:
            if message["type"] == "http.response.start":
                self.statuses.append(message["status"])
            await send(message)

        await self.app(scope, counted, sent)


@dataclass
class Live:
    url: str
    counting: Counting
    settings: Settings

    @property
    def address(self) -> tuple[str, int]:
        host, port = self.url.removeprefix("http://").split(":")
        return host, int(port)


@pytest.fixture
def live(settings: Settings, embedder: CountingEmbedder) -> Iterator[Live]:
    local = settings.model_copy(update={"api_keys": f"{ADMIN_KEY}:*:admin,{READER_KEY}", "max_upload_mb": UPLOAD_MB})
    local.documents_dir.mkdir(parents=True, exist_ok=True)
    (local.documents_dir / "leave.md").write_text("# Leave\nStaff get 25 days of annual leave per year.\n")
    service.sync([local.documents_dir], local, embedder=embedder)
    llm = FakeLLMServer(lambda _: "Staff get 25 days of annual leave [1].").llm()
    counting = Counting(create_app(local, build_services(App(local, embedder=embedder, llm=llm))))
    with serving(counting) as url:
        yield Live(url, counting, local)


def _head(path: str, headers: dict[str, str]) -> bytes:
    lines = [f"POST {path} HTTP/1.1", "Host: 127.0.0.1", *(f"{k}: {v}" for k, v in headers.items())]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def _response(sock: socket.socket) -> bytes:
    """The server's response (head and Content-Length body), or what came before it hung up."""
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
            head, _, body = data.partition(b"\r\n\r\n")
            length = next((int(line.split(b":")[1]) for line in head.lower().split(b"\r\n")
                           if line.startswith(b"content-length:")), None)
            if length is not None and len(body) >= length:
                break
    except OSError:
        pass  # a reset after the response
    return data


def _declared(live: Live, path: str, length: int, headers: dict[str, str]) -> bytes:
    """Headers declaring a `length`-byte body, and not one byte of it: the reply must come without it."""
    with socket.create_connection(live.address, timeout=5) as sock:
        sock.sendall(_head(path, {"Content-Length": str(length), **headers}))
        return _response(sock)


def _chunked(live: Live, path: str, total: int, headers: dict[str, str], prefix: bytes = b"") -> int:
    """Sends up to `total` bytes chunked, stopping once the server answers or hangs up; the bytes sent."""
    sent, block = 0, b"x" * 65536
    with socket.create_connection(live.address, timeout=10) as sock:
        sock.sendall(_head(path, {"Transfer-Encoding": "chunked", **headers}))
        answered = select.poll()  # not select(): it fails on descriptors above 1024
        answered.register(sock, select.POLLIN)
        try:
            for chunk in [prefix] * bool(prefix) + [block] * (total // len(block)):
                if answered.poll(0):
                    break  # the server answered early
                sock.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                sent += len(chunk)
            else:
                sock.sendall(b"0\r\n\r\n")
        except OSError:
            pass  # it hung up: it stopped reading
        _response(sock)
    return sent


def _multipart_head(name: str) -> bytes:
    return (f"--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{name}\"\r\n"
            "Content-Type: text/plain\r\n\r\n").encode()


def test_declared_oversized_bodies_get_413_before_auth_without_being_read(live: Live) -> None:
    json_body = {"Content-Type": "application/json"}
    upload = {"Content-Type": f"multipart/form-data; boundary={BOUNDARY}"}
    for path, length, headers in (("/v1/ask", 40 * MIB, json_body), ("/v1/chat/completions", MIB, json_body),
                                  ("/v1/documents", 40 * MIB, upload), ("/v1/documents", 40 * MIB, upload | READER),
                                  ("/chat/project/file", 40 * MIB, upload)):
        reply = _declared(live, path, length, headers)
        assert reply.startswith(b"HTTP/1.1 413"), (path, reply[:200])
        body = json.loads(reply.split(b"\r\n\r\n", 1)[1])
        assert body["error"]["type"] == "too_large"
        uploads = ("/v1/documents", "/chat/project/file")  # the chat's: an admin's file dropped into the chat
        assert ("RAG_MAX_UPLOAD_MB" if path in uploads else "RAG_MAX_BODY_KB") in body["error"]["message"]
    # Within the upload limit but without a key, or with a reader's: refused before the upload is read.
    for headers, status in ((upload, b"401"), (upload | READER, b"403")):
        reply = _declared(live, "/v1/documents", UPLOAD_MB * MIB // 2, headers)
        assert reply.startswith(b"HTTP/1.1 " + status), reply[:200]


def test_chunked_oversized_json_is_cut_off_at_the_limit_before_auth(live: Live) -> None:
    sent = _chunked(live, "/v1/ask", 40 * MIB, {"Content-Type": "application/json"})
    assert live.counting.statuses == [413]
    limit = live.settings.max_body_kb * 1024
    assert limit < live.counting.received <= limit + 256 * 1024  # read up to the limit, then no more
    assert sent < 40 * MIB


def test_chunked_upload_streams_to_disk_and_stops_at_the_limit(live: Live) -> None:
    documents = live.settings.documents_dir
    before = (documents / "leave.md").read_bytes()
    headers = {"Content-Type": f"multipart/form-data; boundary={BOUNDARY}", **ADMIN}
    sent = _chunked(live, "/v1/documents?replace=true", 40 * MIB, headers, prefix=_multipart_head("leave.md"))
    assert live.counting.statuses == [413]
    assert UPLOAD_MB * MIB < live.counting.received <= UPLOAD_MB * MIB + limits.UPLOAD_OVERHEAD + 256 * 1024
    assert sent < 40 * MIB
    assert (documents / "leave.md").read_bytes() == before  # nothing stored is lost
    deadline = time.monotonic() + 5  # the app cleans up after the 413 went out
    while [p for p in documents.iterdir() if p.name.startswith(".")] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [p.name for p in documents.iterdir() if p.name.startswith(".")]  # no temp file left


def test_upload_within_the_limit_is_stored(live: Live) -> None:
    files = {"file": ("notes.md", b"# Notes\n" + b"The canteen opens at eight. " * 100, "text/markdown")}
    created = httpx.post(f"{live.url}/v1/documents", files=files, headers=ADMIN, timeout=60)
    assert created.status_code == 201 and created.json()["source"] == "notes.md"
    assert (live.settings.documents_dir / "notes.md").read_bytes() == files["file"][1]
    missing = httpx.post(f"{live.url}/v1/documents", data={"other": "x"}, headers=ADMIN)
    assert missing.status_code == 422 and "`file`" in missing.json()["error"]["message"]


TOO_LONG: list[tuple[str, dict[str, Any], str]] = [
    ("/v1/ask", {"question": "x" * (limits.QUESTION_CHARS + 1)}, "at most 4000"),
    ("/v1/ask", {"question": "q", "history": [{"role": "user", "content": "x" * (limits.TURN_CHARS + 1)}]},
     "at most 8000"),
    ("/v1/ask", {"question": "q", "history": [{"role": "user", "content": "hi"}] * (limits.HISTORY_TURNS + 1)},
     "at most 50"),
    ("/v1/ask", {"question": "q", "history": [{"role": "user", "content": "x" * 7000}] * 4}, "24000 in all"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x" * (limits.TURN_CHARS + 1)}]},
     "at most 8000 characters"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x" * (limits.QUESTION_CHARS + 1)}]},
     "(the question) holds 4001"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": [{"type": "text", "text": "x" * 5000}] * 2}]},
     "not 10000"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": [{"type": "text", "text": "x"}] * 17}]},
     "at most 16 parts"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}] * (limits.MESSAGES + 1)}, "at most 64"),
    ("/v1/chat/completions", {"messages": [{"role": "system", "content": "x" * 8000}] * 5
                              + [{"role": "user", "content": "q"}]}, "32000 in all"),
    ("/v1/chat/completions", {"model": "m" * 201, "messages": [{"role": "user", "content": "q"}]}, "at most 200"),
    ("/v1/ask", {"question": "q", "top_k": 21}, "less than or equal to 20"),
]


def test_every_text_field_has_a_length_cap(live: Live) -> None:
    with httpx.Client(base_url=live.url, headers=READER) as client:
        for path, body, problem in TOO_LONG:
            reply = client.post(path, json=body)
            assert reply.status_code == 422, (path, reply.status_code, reply.text[:300])
            assert reply.json()["error"]["type"] == "invalid_request" and problem in reply.json()["error"]["message"]
    # The longest valid requests pass, and fit the body cap even with every character \u-escaped.
    han = "假"  # sent \u-escaped: six bytes a character
    history = [{"role": "user", "content": han * 8000}, {"role": "assistant", "content": han * 8000},
               {"role": "user", "content": han * 8000}]
    ask = json.dumps({"question": han * 4000, "history": history})
    messages = [*history, {"role": "system", "content": han * 4000}, {"role": "user", "content": han * 4000}]
    chat = json.dumps({"model": "rag", "messages": messages})
    assert len(ask) > 160_000 and len(chat) > 190_000
    with httpx.Client(base_url=live.url, headers=READER | {"Content-Type": "application/json"}, timeout=30) as client:
        for path, text in (("/v1/ask", ask), ("/v1/chat/completions", chat)):
            assert client.post(path, content=text).status_code not in (413, 422), path


def test_a_small_body_cap_setting_applies(settings: Settings, embedder: CountingEmbedder) -> None:
    local = settings.model_copy(update={"max_body_kb": 16})
    with serving(create_app(local, build_services(App(local, embedder=embedder)))) as url:
        reply = httpx.post(f"{url}/v1/ask", json={"question": "q" * 4000, "history": [
            {"role": "user", "content": "x" * 8000}, {"role": "assistant", "content": "y" * 8000}]})
    assert reply.status_code == 413 and "16 KiB (RAG_MAX_BODY_KB)" in reply.json()["error"]["message"]
