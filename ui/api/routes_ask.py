"""POST /v1/ask: the answer a helpdesk tool can act on, as JSON or as Server-Sent Events."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Request

from rag.core.answer import Done, Event, Retrieved, Token
from rag.core.errors import RagError
from ui.api.deps import PrincipalDep, ServicesDep
from ui.api.errors import from_rag_error
from ui.api.schemas import AskRequest, AskResponse, ErrorBody, history_messages
from ui.api.streams import AnswerEvents, until_disconnected
from ui.serving.answering import answer_once, answer_stream, ask_body, hit_json

router = APIRouter(prefix="/v1", tags=["ask"])
ERRORS: dict[int | str, dict[str, Any]] = {code: {"model": ErrorBody} for code in (401, 403, 413, 422, 429, 503)}
ADMIN_ERRORS: dict[int | str, dict[str, Any]] = {**ERRORS, 404: {"model": ErrorBody}, 409: {"model": ErrorBody}}


@router.post("/ask", response_model=AskResponse, responses={
    **ERRORS, 200: {"content": {"text/event-stream": {"example": "event: token\ndata: {\"text\": \"Run\"}\n\n"}},
                    "description": "JSON, or with stream=true the events sources, token…, done (or error)."}})
async def ask(body: AskRequest, request: Request, services: ServicesDep, principal: PrincipalDep) -> Any:
    """Answer a question from the documents the caller may see; `escalate` says when to hand over to a human."""
    history = history_messages([(turn.role, turn.content) for turn in body.history])
    if not body.stream:
        answer = await until_disconnected(request, answer_once(services, principal, body.question, history,
                                                                body.top_k))
        return ask_body(answer, services.settings.escalate_below)
    events = await until_disconnected(request, answer_stream(services, principal, body.question, history,
                                                             body.top_k))
    return AnswerEvents(_sse(events, services.settings.escalate_below), events)


async def _sse(events: AsyncIterator[Event], escalate_below: float) -> AsyncIterator[dict[str, str]]:
    try:
        async for event in events:
            if isinstance(event, Retrieved):
                sources = [hit_json(n, hit, event.links) for n, hit in enumerate(event.hits, start=1)]
                yield {"event": "sources", "data": json.dumps(sources, ensure_ascii=False)}
            elif isinstance(event, Token):
                yield {"event": "token", "data": json.dumps({"text": event.text}, ensure_ascii=False)}
            elif isinstance(event, Done):
                yield {"event": "done", "data": json.dumps(ask_body(event.answer, escalate_below), ensure_ascii=False)}
    except RagError as exc:  # the LLM failed mid-stream: the status line is already sent
        error = from_rag_error(exc)
        yield {"event": "error", "data": json.dumps({"error": {"type": error.kind, "message": error.message}})}
