"""Which of our files a request's path enters, and how often: a profiler hook on every thread records each call into
a function of rag/, ingest/ or ui/ made from another of our files (library frames in between are looked through).
An entry is a distinct (calling function, called function) pair crossing into the file, so a loop counts once."""

from __future__ import annotations

import sys
import threading
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

REPO = Path(__file__).resolve().parent.parent
PACKAGES = tuple(str(REPO / name) + "/" for name in ("rag", "ingest", "ui"))


def _ours(filename: str) -> str | None:
    """The repository-relative path of one of our package files, else None."""
    return filename[len(str(REPO)) + 1:] if filename.startswith(PACKAGES) else None


@dataclass
class CallPath:
    """The entries recorded: per file, the set of (caller file:function, called function)."""

    entries: dict[str, set[tuple[str, str]]] = field(default_factory=lambda: defaultdict(set))
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def _hook(self, frame: FrameType, event: str, arg: Any) -> None:
        if event != "call":
            return
        callee = _ours(frame.f_code.co_filename)
        if callee is None:
            return
        caller_frame = frame.f_back
        while caller_frame is not None and _ours(caller_frame.f_code.co_filename) is None:
            caller_frame = caller_frame.f_back
        if caller_frame is None:
            return  # entered from the framework alone (a route, a thread's target): the path's start
        caller = _ours(caller_frame.f_code.co_filename)
        if caller != callee:
            with self._lock:
                self.entries[callee].add((f"{caller}:{caller_frame.f_code.co_name}", frame.f_code.co_qualname))

    def counts(self) -> dict[str, int]:
        """Entries per file, most first."""
        return dict(sorted(((name, len(pairs)) for name, pairs in self.entries.items()), key=lambda kv: -kv[1]))


@contextmanager
def recording() -> Iterator[CallPath]:
    """Record the entries of whatever runs in the block, on every thread."""
    path = CallPath()
    previous = sys.getprofile()
    threading.setprofile(path._hook)
    sys.setprofile(path._hook)
    try:
        yield path
    finally:
        sys.setprofile(previous)
        threading.setprofile(None)  # type: ignore[arg-type]
