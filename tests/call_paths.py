"""Which of the project's files a request's path enters, and from where: a profiler hook over every thread while
one request runs (tests/test_call_paths.py holds what it finds; `report` prints it)."""

from __future__ import annotations

import collections
import inspect
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

REPO = Path(__file__).resolve().parent.parent
PACKAGES = tuple(f"{REPO / name}/" for name in ("rag", "ingest", "ui"))
# Calls the tracer sees as coming from outside although the project's own code is above them on the stack: a `with`
# block's __enter__/__exit__ and a generator's resumption go through the interpreter, not through a call site.
THROUGH_THE_INTERPRETER = frozenset({"__enter__", "__exit__", "__aenter__", "__aexit__", "<genexpr>"})
# ASGI middlewares wrap the `send` and `receive` they pass inwards: the app's messages go back out through each
# wrapper, up the stack by design (ui/api/metrics.py's `sending`, ui/serving/limits.py's guard).
ASGI_CALLBACKS = frozenset({"send", "receive", "sending"})
# The layers a way into a file is counted across (the first prefix a file starts with is its layer).
LAYERS = ("ui/api/", "ui/chat/", "ui/serving/", "ui/", "ingest/", "rag/core/", "rag/components/", "rag/tools/", "rag/")
SUSPENDS = inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR


def reads_a_value(frame: FrameType) -> bool:
    """Whether the call is a method or property of a frozen dataclass (a value the path carries, such as a
    Principal or a DocAccess), not a way into the layer that defines it."""
    owner = frame.f_locals.get("self", frame.f_locals.get("cls"))
    params = getattr(owner, "__dataclass_params__", None)
    return bool(params is not None and params.frozen)


def layer_of(name: str) -> str:
    """The layer a project file belongs to."""
    return next(layer for layer in LAYERS if name.startswith(layer))


def project_file(frame: FrameType | None) -> str | None:
    """The frame's file relative to the repository when it is the project's own (rag/, ingest/, ui/)."""
    if frame is None:
        return None
    path = frame.f_code.co_filename
    return path[len(str(REPO)) + 1:] if path.startswith(PACKAGES) else None


@dataclass
class Trace:
    """Calls into each project file from another file (`entries`: by caller file) and the climbs back: a call
    into a file that is already on the stack below its caller (the path returning up into a layer it left)."""

    entries: dict[str, collections.Counter[str]] = field(default_factory=lambda: collections.defaultdict(
        collections.Counter))
    climbs: list[str] = field(default_factory=list)
    ways_in: dict[str, set[str]] = field(default_factory=lambda: collections.defaultdict(set))
    _resumable: dict[int, FrameType] = field(default_factory=dict)

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        if event != "call" or (callee := project_file(frame)) is None:
            return
        caller_frame = frame.f_back
        caller = project_file(caller_frame)
        if caller == callee:
            return
        self.entries[callee][caller or "(outside)"] += 1
        if self._resumed(frame) or caller is None or caller_frame is None or reads_a_value(frame):
            return
        if layer_of(caller) != layer_of(callee):
            self.ways_in[callee].add(f"{caller}:{caller_frame.f_lineno} -> {frame.f_code.co_name}")
        if caller_frame.f_code.co_name in THROUGH_THE_INTERPRETER or frame.f_code.co_name in ASGI_CALLBACKS:
            return
        below = caller_frame.f_back
        while below is not None:
            if project_file(below) == callee:
                self.climbs.append(f"{caller}:{caller_frame.f_code.co_name} -> {callee}:{frame.f_code.co_name}")
                return
            below = below.f_back


    def _resumed(self, frame: FrameType) -> bool:
        """Whether the frame is a generator or coroutine going on where it stopped (not a new way into its file);
        the frames are held for the trace's life, so that no id is reused meanwhile."""
        if not frame.f_code.co_flags & SUSPENDS:
            return False
        seen = id(frame) in self._resumable
        self._resumable[id(frame)] = frame
        return seen


@contextmanager
def tracing() -> Iterator[Trace]:
    """A Trace of every call made on any thread inside the block."""
    trace = Trace()
    sys.setprofile(trace)
    threading.setprofile(trace)
    try:
        yield trace
    finally:
        sys.setprofile(None)
        threading.setprofile(None)  # type: ignore[arg-type]


def report(trace: Trace) -> str:
    """Entries per file, most first, with their callers; then the climbs back."""
    lines = [f"{sum(by.values()):4d} {name:40s} from {dict(by.most_common(4))}"
             for name, by in sorted(trace.entries.items(), key=lambda item: -sum(item[1].values()))]
    ways = [f"{len(sites):4d} ways into {name}: {sorted(sites)}"
            for name, sites in sorted(trace.ways_in.items(), key=lambda item: -len(item[1]))]
    return "\n".join(lines + ways + [f"climb: {climb}" for climb in trace.climbs])


def traced(call: Callable[[], object]) -> Trace:
    """The Trace of one call."""
    with tracing() as trace:
        call()
    return trace
