"""Running the query path for one request: the generation gate, threads for the synchronous engine, the principal
passed through, and the one mapping from answers to the wire bodies that the API, SSE and the chat use."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

from rag.access import Principal
from rag.answer import Answer, Done, Source
from rag.prompt import Message
from rag.types import Hit
from ui.serving.services import Services
from ui.serving.streaming import AnswerStream

SNIPPET_CHARS = 300


async def answer_once(services: Services, principal: Principal, question: str, history: Sequence[Message],
                      top_k: int | None) -> Answer:
    """The finished answer from what the principal may see (non-streaming), within a generation slot."""
    async with contextlib.aclosing(await answer_stream(services, principal, question, history, top_k)) as events:
        async for event in events:
            if isinstance(event, Done):
                return event.answer
    raise AssertionError("a stream always ends with Done")


async def answer_stream(services: Services, principal: Principal, question: str, history: Sequence[Message],
                        top_k: int | None) -> AnswerStream:
    """Events of a streamed answer, holding a generation slot until closed: the caller must `aclose()` it (an
    `aclosing` block, or a response that closes it however it ends). Runs until the first answer text before
    returning, so that an empty index or an unreachable LLM becomes an error status instead of a broken stream."""
    return await AnswerStream.open(services, lambda stop: services.engine.stream(
        question, history, top_k, principal=principal, stop=stop))


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
