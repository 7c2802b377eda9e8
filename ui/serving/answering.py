"""Running the query path for one request: the generation gate, threads for the synchronous engine, the principal
passed through, and the one mapping from answers to the wire bodies that the API, SSE and the chat use."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Generator, Sequence
from typing import Literal

from sqlalchemy.exc import SQLAlchemyError

from rag.core.access import Principal, groups_label
from rag.core.answer import Answer, Done, Event
from rag.core.gaps import Asked, Reason
from rag.core.ports import Stop
from rag.core.prompt import Message
from rag.core.sanitize import STRICT, LinkPolicy, Removed
from rag.core.types import Hit
from ui.serving.services import Services
from ui.serving.streaming import AnswerStream

SNIPPET_CHARS = 300
Channel = Literal["api", "chat"]
log = logging.getLogger("rag.serving")


async def answer_once(services: Services, principal: Principal, question: str, history: Sequence[Message],
                      top_k: int | None, channel: Channel = "api") -> Answer:
    """The finished answer from what the principal may see (non-streaming), within a generation slot."""
    async with contextlib.aclosing(await answer_stream(services, principal, question, history, top_k,
                                                       channel, final_only=True)) as events:
        async for event in events:
            if isinstance(event, Done):
                return event.answer
    raise AssertionError("a stream always ends with Done")


async def answer_stream(services: Services, principal: Principal, question: str, history: Sequence[Message],
                        top_k: int | None, channel: Channel = "api", final_only: bool = False) -> AnswerStream:
    """Events of a streamed answer, holding a generation slot until closed: the caller must `aclose()` it (an
    `aclosing` block, or a response that closes it however it ends). Runs until the first answer text before
    returning, so that an empty index or an unreachable LLM becomes an error status instead of a broken stream.
    A refused or escalated answer is recorded here, once for every edge (RAG_RECORD_UNANSWERED). `final_only`:
    the stream holds only the finished answer (Done), for callers that do not stream."""

    def start(stop: Stop) -> Generator[Event, None, None]:
        done: list[Answer] = []
        try:
            with contextlib.closing(services.engine.stream(question, history, top_k, principal=principal,
                                                           stop=stop)) as events:
                for event in events:
                    if isinstance(event, Done):
                        done.append(event.answer)
                    yield event
        finally:  # after Done went out (the database costs the reader nothing), even if the reader left at once
            if done:
                record_unanswered(services, question, done[0], principal, channel)

    return await AnswerStream.open(services, start, final_only)


def unanswered_reason(answer: Answer, escalate_below: float) -> Reason | None:
    """Why an answer counts as a gap in the documents: refused, escalated (handed to a human), or None."""
    if not answer.answerable:
        return "refused"
    return "escalated" if needs_human(answer, escalate_below) else None


def record_unanswered(services: Services, question: str, answer: Answer, principal: Principal,
                      channel: Channel) -> None:
    """Keep a refused or escalated question for the gap report (in the engine's thread); a database that fails
    costs the record, never the answer."""
    reason = unanswered_reason(answer, services.settings.escalate_below)
    if services.unanswered is None or reason is None:
        return
    top = answer.sources[0].hit if answer.sources else None
    # The standalone question: a follow-up ("and on Windows?") means nothing without its conversation.
    asked = Asked(question=answer.standalone_question or question, reason=reason, user=principal.name,
                  channel=channel, source=top.source if top else "", doc_id=top.doc_id if top else "",
                  groups=groups_label(principal))
    try:
        services.unanswered.record(asked)
    except SQLAlchemyError as exc:
        log.warning("could not record an unanswered question: %s", type(exc).__name__)


def hit_json(n: int, hit: Hit, links: LinkPolicy = STRICT) -> dict[str, object]:
    """A numbered excerpt on the wire: where it is from, its score, headings and a snippet; headings and snippet
    are document text, sanitised for Markdown (rag.core.sanitize: no images, no links off the allowlist, no HTML)."""
    return _shown_hit(n, hit, links)[0]


def _shown_hit(n: int, hit: Hit, links: LinkPolicy) -> tuple[dict[str, object], tuple[Removed, ...]]:
    # The whole chunk is sanitised before the snippet is cut: no image or link is cut in half, and `removed`
    # tells of what the rest of the chunk held too.
    headings, text = links.clean(hit.headings), links.clean(hit.text)
    return ({"n": n, "source": hit.source, "page": hit.page, "score": hit.score, "chunk_id": hit.chunk_id,
             "doc_id": hit.doc_id, "headings": headings.text, "snippet": text.text[:SNIPPET_CHARS]},
            headings.removed + text.removed)


def ask_body(answer: Answer, escalate_below: float) -> dict[str, object]:
    """An answer on the wire, wherever it leaves (/v1/ask, the chat's and the OpenAI route's extras, `rag ask
    --json`): the answer's own fields plus confidence, escalate, headings and snippets, and `removed`: what
    sanitising took out of the answer and of the snippets."""
    body = answer.as_json()
    shown = [_shown_hit(source.n, source.hit, answer.links) for source in answer.sources]
    body["sources"] = [hit | {"cited": source.cited} for (hit, _), source in zip(shown, answer.sources, strict=True)]
    in_sources = dict.fromkeys(removed for _, found in shown for removed in found)
    body["removed"] = [removed.as_json() | {"where": "answer"} for removed in answer.removed] + \
        [removed.as_json() | {"where": "sources"} for removed in in_sources]
    body["confidence"] = answer.confidence
    body["escalate"] = needs_human(answer, escalate_below)
    return body


def needs_human(answer: Answer, escalate_below: float) -> bool:
    """Hand over to a human: no answer, quoted instead of answered, sentences withheld, or low confidence."""
    return (not answer.answerable or not answer.cited or answer.mode != "generated" or bool(answer.withheld)
            or answer.loop or answer.confidence < escalate_below)
