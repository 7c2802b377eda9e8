"""OpenAI-compatible chat completions and models: works with the openai SDK and LangChain's ChatOpenAI."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Request

from rag.core.answer import Answer, Done, Event, Token
from rag.core.errors import RagError
from ui.api.deps import PrincipalDep, ServicesDep
from ui.api.errors import ApiError, from_rag_error
from ui.api.routes_ask import ERRORS
from ui.api.schemas import ChatRequest, history_messages
from ui.api.streams import AnswerChunks, until_disconnected
from ui.serving.answering import answer_once, answer_stream, ask_body
from ui.serving.limits import QUESTION_CHARS

router = APIRouter(prefix="/v1", tags=["openai"])


@router.get("/models")
async def models(services: ServicesDep, _: PrincipalDep) -> dict[str, Any]:
    """The one model this server offers: the knowledge base, named like the configured LLM."""
    return {"object": "list", "data": [{"id": services.settings.llm_model, "object": "model", "created": 0,
                                        "owned_by": "rag-kb"}]}


@router.post("/chat/completions", responses=ERRORS)
async def chat_completions(body: ChatRequest, request: Request, services: ServicesDep, principal: PrincipalDep
                           ) -> Any:
    """The last user message is the question, earlier turns the history; the answer cites sources as [n] and
    the sources come in an extra `sources` field (on the last chunk when streaming)."""
    question, history = _split(body)
    model = services.settings.llm_model
    if not body.stream:
        answer = await until_disconnected(request, answer_once(services, principal, question, history, None))
        return _completion(answer, model, services.settings.escalate_below)
    events = await until_disconnected(request, answer_stream(services, principal, question, history, None))
    include_usage = bool((body.stream_options or {}).get("include_usage"))
    return AnswerChunks(_chunks(events, model, include_usage, services.settings.escalate_below), events,
                        media_type="text/event-stream")


def _split(body: ChatRequest) -> tuple[str, list[Any]]:
    turns = [(m.role, m.text()) for m in body.messages if m.role in ("user", "assistant")]
    if not turns or turns[-1][0] != "user" or not turns[-1][1].strip():
        raise ApiError(422, "invalid_request", "the last message must be a non-empty user message")
    if len(turns[-1][1]) > QUESTION_CHARS:
        raise ApiError(422, "invalid_request", f"the last user message (the question) holds {len(turns[-1][1])} "
                                               f"characters; at most {QUESTION_CHARS}")
    return turns[-1][1], history_messages(turns[:-1])


def _completion(answer: Answer, model: str, escalate_below: float) -> dict[str, Any]:
    usage = answer.usage
    extra = ask_body(answer, escalate_below)
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion", "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": answer.text}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": usage.prompt_tokens, "completion_tokens": usage.completion_tokens,
                  "total_tokens": usage.prompt_tokens + usage.completion_tokens},
        **_extras(extra),
    }


def _extras(body: dict[str, Any]) -> dict[str, Any]:
    """The knowledge base's fields beside OpenAI's: sources, checks, escalation."""
    keys = ("sources", "answerable", "mode", "fallback", "grounded", "sentences", "confidence", "escalate", "removed")
    return {key: body[key] for key in keys}


async def _chunks(events: AsyncIterator[Event], model: str, include_usage: bool,
                  escalate_below: float) -> AsyncIterator[str]:
    head = {"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion.chunk", "created": int(time.time()),
            "model": model}
    yield _data(head | {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
                                     "finish_reason": None}]})
    try:
        async for event in events:
            if isinstance(event, Token):
                yield _data(head | {"choices": [{"index": 0, "delta": {"content": event.text}, "finish_reason": None}]})
            elif isinstance(event, Done):
                yield _data(_final(head, event.answer, escalate_below))
                if include_usage:
                    usage = event.answer.usage
                    yield _data(head | {"choices": [], "usage": {
                        "prompt_tokens": usage.prompt_tokens, "completion_tokens": usage.completion_tokens,
                        "total_tokens": usage.prompt_tokens + usage.completion_tokens}})
    except RagError as exc:
        error = from_rag_error(exc)
        yield _data({"error": {"type": error.kind, "message": error.message}})
    yield "data: [DONE]\n\n"


def _final(head: dict[str, Any], answer: Answer, escalate_below: float) -> dict[str, Any]:
    extra = ask_body(answer, escalate_below)
    return head | {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}], **_extras(extra)}


def _data(payload: dict[str, Any]) -> str:
    return f"data: {json.dumps(payload, ensure_ascii=False)}\n\n"
