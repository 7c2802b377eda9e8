"""Running the query path for HTTP: the generation gate, threads for the sync engine, errors before streaming."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Sequence

from starlette.concurrency import iterate_in_threadpool, run_in_threadpool

from rag.answer import Answer, Done, Event, Token
from rag.prompt import Message
from ui.api.services import Services

SNIPPET_CHARS = 300


async def answer_once(services: Services, question: str, history: Sequence[Message], top_k: int | None) -> Answer:
    """The finished answer (non-streaming), within a generation slot."""
    async with services.gate_slot():
        answer = await run_in_threadpool(services.engine.ask, question, history, top_k)
    services.metrics.observe_answer(answer)
    return answer


async def answer_stream(services: Services, question: str, history: Sequence[Message],
                        top_k: int | None) -> AsyncIterator[Event]:
    """Events of a streamed answer. Runs until the first token before returning, so that an empty index or an
    unreachable LLM becomes an HTTP error status instead of a broken stream."""
    assert services.gate is not None
    await services.gate.acquire()
    try:
        events = services.engine.stream(question, history, top_k)
        primed = await run_in_threadpool(_until_first_token, events)
    except BaseException:
        services.gate.release()
        raise
    return _rest(services, primed, events)


def _until_first_token(events: Iterator[Event]) -> list[Event]:
    primed: list[Event] = []
    for event in events:
        primed.append(event)
        if isinstance(event, Token | Done):
            break
    return primed


async def _rest(services: Services, primed: list[Event], events: Iterator[Event]) -> AsyncIterator[Event]:
    assert services.gate is not None
    try:
        for event in primed:
            yield _observed(services, event)
        async for event in iterate_in_threadpool(events):
            yield _observed(services, event)
    finally:
        services.gate.release()


def _observed(services: Services, event: Event) -> Event:
    if isinstance(event, Done):
        services.metrics.observe_answer(event.answer)
    return event


def ask_body(answer: Answer, escalate_below: float) -> dict[str, object]:
    """The /v1/ask response: `rag ask --json` plus confidence, escalate, headings and snippets."""
    body = answer.as_json()
    body["sources"] = [source.as_json() | {"headings": source.hit.headings, "snippet": source.hit.text[:SNIPPET_CHARS]}
                       for source in answer.sources]
    body["confidence"] = answer.confidence
    body["escalate"] = needs_human(answer, escalate_below)
    return body


def needs_human(answer: Answer, escalate_below: float) -> bool:
    """Hand over to a human: no answer, quoted instead of answered, sentences withheld, or low confidence."""
    return (not answer.answerable or not answer.cited or answer.mode != "generated" or bool(answer.withheld)
            or answer.loop or answer.confidence < escalate_below)


def history_messages(turns: Sequence[tuple[str, str]]) -> list[Message]:
    """(role, content) pairs as chat messages."""
    return [{"role": "assistant" if role == "assistant" else "user", "content": content} for role, content in turns]
