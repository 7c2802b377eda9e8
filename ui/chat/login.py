"""The sign-in throttle: `POST /chat/login` attempts counted per client address and per user name, and a cap on
the password hashes computed at once.

Each PBKDF2 check costs about a quarter of a second of one core (600,000 rounds), so unthrottled sign-ins are both
a password-guessing channel and a cheap way to take the server's CPUs. Attempts are counted before the password
is looked at (concurrent tries cannot slip past the count) and a successful one is forgiven; over the limit, the
answer is 429 with Retry-After and no hash is computed. Unknown names are counted like known ones, so the throttle
tells nothing about who exists.
"""

from __future__ import annotations

import asyncio
import collections
import json
import math
import time
from collections.abc import Callable, Iterable

from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

MAX_FORM_BYTES = 16 * 1024  # a name and a password; anything larger is not a sign-in
MAX_KEYS = 50_000  # addresses and names remembered at most (the oldest are dropped first)
QUEUE_S = 5.0  # how long a sign-in waits for a hashing slot before 429


class Throttle:
    """Sliding-window counts of attempts by key; a key at `limit` attempts within `window_s` is blocked."""

    def __init__(self, limit: int, window_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.limit, self.window_s, self.clock = limit, window_s, clock
        self._attempts: dict[str, collections.deque[float]] = {}

    def retry_after(self, keys: Iterable[str]) -> float | None:
        """Seconds until every key may try again; None when none is blocked."""
        now, waits = self.clock(), []
        for key in keys:
            attempts = self._recent(key, now)
            if len(attempts) >= self.limit:
                waits.append(attempts[-self.limit] + self.window_s - now)
        return max(waits) if waits else None

    def record(self, keys: Iterable[str]) -> float:
        """Count an attempt for each key; returns its time stamp (to forgive it later)."""
        stamp = self.clock()
        for key in keys:
            self._attempts.setdefault(key, collections.deque()).append(stamp)
        if len(self._attempts) > MAX_KEYS:
            self._prune(stamp)
        return stamp

    def forgive(self, keys: Iterable[str], stamp: float) -> None:
        """Take back an attempt that turned out fine (a successful sign-in, or one never checked)."""
        for key in keys:
            attempts = self._attempts.get(key)
            if attempts is not None and stamp in attempts:
                attempts.remove(stamp)

    def _prune(self, now: float) -> None:
        """Forget keys without recent attempts, then the oldest keys, down to MAX_KEYS."""
        for key in [key for key in self._attempts if not self._recent(key, now)]:
            del self._attempts[key]
        while len(self._attempts) > MAX_KEYS:
            del self._attempts[next(iter(self._attempts))]

    def _recent(self, key: str, now: float) -> collections.deque[float]:
        attempts = self._attempts.get(key, collections.deque())
        while attempts and attempts[0] <= now - self.window_s:
            attempts.popleft()
        return attempts


class LoginLimiter:
    """Throttles sign-ins and runs at most `concurrency` of them (each one password hash) at once."""

    def __init__(self, max_failures: int, window_s: float, concurrency: int, queue_s: float = QUEUE_S) -> None:
        self.throttle = Throttle(max_failures, window_s)
        self.queue_s = queue_s
        self._slots = asyncio.Semaphore(concurrency)

    async def __call__(self, app: ASGIApp, scope: Scope, receive: Receive, send: Send) -> None:
        """Answer one `POST /login` through `app` (Chainlit's login route), or 413/429 without it."""
        body = await _read_body(receive)
        if body is None:
            await reply(send, 413, "sign-in form too large")
            return
        client = scope.get("client")
        keys = (f"address:{client[0] if client else '?'}", f"user:{(await _user_name(scope, body))[:256]}")
        if (wait := self.throttle.retry_after(keys)) is not None:
            await reply(send, 429, "too many sign-in attempts; try again later", retry_after=wait)
            return
        stamp = self.throttle.record(keys)
        try:
            async with asyncio.timeout(self.queue_s):
                await self._slots.acquire()  # cancel-safe: a timed-out wait holds no slot
        except TimeoutError:
            self.throttle.forgive(keys, stamp)
            await reply(send, 429, "too many sign-ins at once; try again in a moment", retry_after=1)
            return
        try:
            status = await _forward(app, scope, body, receive, send)
        finally:
            self._slots.release()
        if status == 200:
            self.throttle.forgive(keys, stamp)


async def _read_body(receive: Receive) -> bytes | None:
    """The request body, or None once it passes MAX_FORM_BYTES."""
    body = b""
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return body
        body += bytes(message.get("body", b""))
        if len(body) > MAX_FORM_BYTES:
            return None
        if not message.get("more_body", False):
            return body


def _replay(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def replaying() -> Message:
        nonlocal sent
        if sent:
            return await receive()  # after the body: the client's disconnect, if any
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replaying


async def _user_name(scope: Scope, body: bytes) -> str:
    """The form's user name (URL-encoded or multipart, as Chainlit's login accepts); empty if unreadable."""
    async def no_more() -> Message:
        return {"type": "http.disconnect"}

    try:
        form = await Request(scope, _replay(body, no_more)).form()
    except Exception:  # a malformed form: Chainlit refuses it; the address is still counted
        return ""
    name = form.get("username")
    return name if isinstance(name, str) else ""


async def _forward(app: ASGIApp, scope: Scope, body: bytes, receive: Receive, send: Send) -> int:
    """Run the request through `app` with its body replayed; returns the response status."""
    status = 0

    async def sending(message: Message) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = int(message["status"])
        await send(message)

    await app(scope, _replay(body, receive), sending)
    return status


async def reply(send: Send, status: int, detail: str, retry_after: float | None = None) -> None:
    """A small JSON error response."""
    body = json.dumps({"detail": detail}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if retry_after is not None:
        headers.append((b"retry-after", str(max(1, math.ceil(retry_after))).encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
