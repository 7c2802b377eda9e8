"""ui.serving.streaming.AnswerStream: the engine's events reach the event loop in order, events made while a wake-up
is on its way go with it, and a caller of the finished answer gets only Done."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Generator
from types import SimpleNamespace
from typing import Any

from rag.core.answer_types import Answer, Done, Event, Retrieved, Timings, Token
from rag.core.ports import Stop
from ui.serving.services import Gate
from ui.serving.streaming import AnswerStream

ANSWER = Answer("Run it [1].", True, True, [], Timings(0.0, 0.0, 0.0))
EVENTS: list[Event] = [Retrieved([]), *(Token(f"word{n} ") for n in range(50)), Done(ANSWER)]


def _read(final_only: bool, hold_loop: bool) -> tuple[list[Event], int]:
    """The events a stream yields, and how often the engine's thread woke the loop after the stream opened. With
    `hold_loop`, the loop is kept busy until the engine has handed everything over."""
    finished = threading.Event()

    def engine(_stop: Stop) -> Generator[Event, None, None]:
        yield from EVENTS
        finished.set()  # every event has been handed over

    async def run() -> tuple[list[Event], int]:
        loop = asyncio.get_running_loop()
        wakes: list[Callable[..., Any]] = []
        schedule = loop.call_soon_threadsafe

        def counted(callback: Callable[..., Any], *args: Any) -> Any:
            wakes.append(callback)
            return schedule(callback, *args)

        loop.call_soon_threadsafe = counted  # type: ignore[method-assign]
        services = SimpleNamespace(gate=Gate(1, 5.0), metrics=SimpleNamespace(observe_answer=lambda _a: None))
        stream = await AnswerStream.open(services, engine, final_only)  # type: ignore[arg-type]
        opened = len(wakes)
        if hold_loop:
            assert finished.wait(10)  # blocks the loop on purpose: nothing the thread hands over is taken meanwhile
        try:
            return [event async for event in stream], len(wakes) - opened
        finally:
            await stream.aclose()

    return asyncio.run(run())


def test_events_handed_over_while_the_loop_is_busy_arrive_together_and_in_order() -> None:
    events, wakes = _read(final_only=False, hold_loop=True)
    assert events == EVENTS
    assert wakes <= 2  # the rest of the burst in one wake-up (and the end in at most one more), not one per event


def test_events_arrive_in_order_while_the_loop_keeps_up() -> None:
    assert _read(final_only=False, hold_loop=False)[0] == EVENTS


def test_a_caller_of_the_finished_answer_gets_only_done() -> None:
    events, wakes = _read(final_only=True, hold_loop=False)
    assert events == [Done(ANSWER)]
    assert wakes <= 1  # whatever comes after Done and the end; the 51 events before never woke the loop
