"""Bounded requests: length caps on every text a caller sends, and the body size cap enforced as bytes arrive.

`BodyLimit` is pure ASGI and wraps the whole app (API and chat): FastAPI reads and parses a body before any
dependency runs, so the API key check comes too late to stop a 40 MiB body; this cap comes first.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

# Text caps (characters). A question is a long paragraph with pasted error output; an earlier turn holds an
# answer of RAG_MAX_ANSWER_TOKENS several times over. History goes into the prompt whole, hence a total too.
QUESTION_CHARS = 4000
TURN_CHARS = 8000
HISTORY_TURNS = 50
HISTORY_CHARS = 24_000
# Chat completions: the history, the question and system or tool messages (which the assistant ignores).
MESSAGES = 64
MESSAGE_PARTS = 16
MESSAGES_CHARS = QUESTION_CHARS + HISTORY_CHARS + 4000
NAME_CHARS = 200  # model names and other identifiers

# The largest valid JSON request is about MESSAGES_CHARS × 6 bytes (a client's \uXXXX escapes of CJK text):
# ~190 KiB, under RAG_MAX_BODY_KB's default of 256.
UPLOAD_OVERHEAD = 64 * 1024  # multipart boundaries and part headers around the file itself
# The API's upload, and Chainlit's (an admin's file dropped into the chat at /chat: ui.chat.mount.CHAT_PATH).
CHAT_UPLOAD = ("POST", "/chat/project/file")
UPLOAD_ROUTES = frozenset({("POST", "/v1/documents"), CHAT_UPLOAD})


class BodyLimit:
    """Request bodies over their route's limit end in 413 before the app reads them: a declared Content-Length at
    once, without reading a byte; a chunked body as soon as the bytes received pass the limit. Uploads
    (POST /v1/documents, POST /chat/project/file) get RAG_MAX_UPLOAD_MB plus multipart overhead, everything else
    RAG_MAX_BODY_KB."""

    def __init__(self, app: ASGIApp, body_limit: int, upload_limit: int) -> None:
        self.app, self.body_limit, self.upload_limit = app, body_limit, upload_limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        upload = (scope["method"], scope["path"].rstrip("/")) in UPLOAD_ROUTES
        limit = self.upload_limit + UPLOAD_OVERHEAD if upload else self.body_limit
        refusal = _refusal(self.upload_limit, "upload", "RAG_MAX_UPLOAD_MB") if upload else \
            _refusal(self.body_limit, "request body", "RAG_MAX_BODY_KB")
        declared = _declared_length(scope)
        if declared is not None and declared > limit:
            await _send_all(send, refusal)
            return
        guard = _Guard(receive, send, limit, refusal)
        try:
            await self.app(scope, guard.receive, guard.send)
        except Exception:
            if not guard.refused:  # else: the app's reaction to the cut-off body, which nobody will see
                raise


class _Guard:
    """Counts a request's body bytes as the app reads them; past the limit, answers 413 and tells the app the
    client is gone (so it stops reading), and drops whatever the app sends after that."""

    def __init__(self, receive: Receive, send: Send, limit: int, refusal: list[Message]) -> None:
        self._receive, self._send, self._limit, self._refusal = receive, send, limit, refusal
        self.received = 0
        self.cut = self.refused = self.started = False

    async def receive(self) -> Message:
        if self.cut:
            return {"type": "http.disconnect"}
        message = await self._receive()
        if message["type"] == "http.request":
            self.received += len(message.get("body", b""))
            if self.received > self._limit:
                self.cut = True
                if not self.started:
                    await _send_all(self._send, self._refusal)
                    self.refused = True
                return {"type": "http.disconnect"}
        return message

    async def send(self, message: Message) -> None:
        if self.refused:
            return
        self.started = self.started or message["type"] == "http.response.start"
        await self._send(message)


def _declared_length(scope: Scope) -> int | None:
    for name, value in scope["headers"]:
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None  # the server refuses a malformed length itself
    return None


def size_text(size: int) -> str:
    """A byte count for people: 50 MiB, 256 KiB."""
    return f"{size / 2**20:.3g} MiB" if size >= 2**20 else f"{size / 2**10:.3g} KiB"


def _refusal(limit: int, what: str, setting: str) -> list[Message]:
    """The 413 in the API's error shape; `connection: close` so the client stops sending the rest."""
    message = f"{what} over {size_text(limit)} ({setting})"
    body = json.dumps({"error": {"type": "too_large", "message": message}}).encode()
    headers: list[Any] = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                          (b"connection", b"close")]
    return [{"type": "http.response.start", "status": 413, "headers": headers},
            {"type": "http.response.body", "body": body}]


async def _send_all(send: Send, messages: list[Message]) -> None:
    for message in messages:
        await send(message)
