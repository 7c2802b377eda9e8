"""Advisory file locks between processes (flock) that say who holds them: the holder writes what it is doing, its
pid and since when into the lock file, so a refused caller can say what it waits for instead of hanging."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

POLL_S = 0.05  # how often a waiting caller tries again


@dataclass(frozen=True, slots=True)
class Holder:
    """Who holds a lock, as its holder recorded it ("" when the file says nothing readable)."""

    what: str
    pid: int
    since: str

    def describe(self) -> str:
        """`rag-ingest docs (pid 123) since 2026-12-01T05:00:00+00:00 (4 min ago)`, or a plain fallback."""
        if not self.what:
            return "another process"
        return f"{self.what} (pid {self.pid}) since {self.since}{_ago(self.since)}"

    def as_json(self) -> dict[str, object]:
        """The holder as a JSON object (for an API error body)."""
        return {"what": self.what, "pid": self.pid, "since": self.since}


class Taken(Exception):
    """The lock stayed held by another process (or another handle in this one) until the deadline."""

    def __init__(self, held_by: Holder) -> None:
        super().__init__(held_by.describe())
        self.holder = held_by


def _ago(since: str) -> str:
    try:
        seconds = (datetime.now(UTC) - datetime.fromisoformat(since)).total_seconds()
    except ValueError:
        return ""
    return f" ({seconds:.0f} s ago)" if seconds < 120 else f" ({seconds / 60:.0f} min ago)"


def holder(path: Path) -> Holder:
    """What the lock file says about its holder (may be stale once the holder ends; flock itself decides)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8") or "{}")
        return Holder(str(data["what"]), int(data["pid"]), str(data["since"]))
    except (OSError, ValueError, KeyError, TypeError):
        return Holder("", 0, "")


@contextlib.contextmanager
def exclusive(path: Path, what: str, deadline: float) -> Iterator[None]:
    """Hold the lock for the block, trying until `deadline` (time.monotonic()); raise Taken, naming the holder, when
    it stays held. The lock is released when the block ends or the process dies."""
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        _acquire(descriptor, path, deadline)
        try:
            _record(descriptor, what)
            yield
        finally:
            os.ftruncate(descriptor, 0)
            fcntl.flock(descriptor, fcntl.LOCK_UN)
    finally:
        os.close(descriptor)


def _acquire(descriptor: int, path: Path, deadline: float) -> None:
    while True:
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() >= deadline:
                raise Taken(holder(path)) from None
            time.sleep(POLL_S)


def _record(descriptor: int, what: str) -> None:
    since = datetime.now(UTC).isoformat(timespec="seconds")
    text = json.dumps({"what": what, "pid": os.getpid(), "since": since}).encode()
    os.ftruncate(descriptor, 0)
    os.pwrite(descriptor, text, 0)
