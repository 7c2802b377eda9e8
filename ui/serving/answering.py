"""Running the query path for one request: the generation gate, threads for the synchronous engine, the principal
passed through, and the one mapping from answers to the wire bodies that the API, SSE and the chat use."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Iterator, Sequence

from starlette.concurrency import iterate_in_threadpool, run_in_threadpool

from rag.access import Principal
from rag.answer import Answer, Done, Event, Source, Token
from rag.prompt import Message
from rag.types import Hit
from ui.serving.services import Services

SNIPPET_CHARS = 300


async def answer_once(services: Services, principal: Principal, question: str, history: Sequence[Message],
                      top_k: int | None) -> Answer:
    """The finished answer from what the principal may see (non-streaming), within a generation slot."""
    async with services.gate.slot():
        answer = await run_in_threadpool(lambda: services.engine.ask(question, history, top_k, principal=principal))
    services.metrics.observe_answer(answer)
    return answer


async def answer_stream(services: Services, principal: Principal, question: str, history: Sequence[Message],
                        top_k: int | None) -> AsyncGenerator[Event, None]:
    """Events of a streamed answer. Runs until the first token before returning, so that an empty index or an
    unreachable LLM becomes an error status instead of a broken stream."""
    await services.gate.acquire()
    try:
        events = services.engine.stream(question, history, top_k, principal=principal)
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


async def _rest(services: Services, primed: list[Event], events: Iterator[Event]) -> AsyncGenerator[Event, None]:
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


def hit_json(n: int, hit: Hit) -> dict[str, object]:
    """A numbered excerpt on the wire: where it is from, its score, headings and a snippet."""
    return {"n": n, "source": hit.source, "page": hit.page, "score": hit.score, "chunk_id": hit.chunk_id,
            "doc_id": hit.doc_id, "headings": hit.headings, "snippet": hit.text[:SNIPPET_CHARS]}


def source_json(source: Source) -> dict[str, object]:
    """A source of an answer on the wire: the excerpt and whether the answer cites it."""
    return hit_json(source.n, source.hit) | {"cited": source.cited}


def ask_body(answer: Answer, escalate_below: float) -> dict[str, object]:
    """The /v1/ask response: `rag ask --json` plus confidence, escalate, headings and snippets."""
    body = answer.as_json()
    body["sources"] = [source_json(source) for source in answer.sources]
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
