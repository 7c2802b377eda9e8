"""Chainlit handlers: sign-in, welcome, streamed cited answers with source panels, history, errors.

Loaded by Chainlit (mount_chainlit) after `mount_chat` installed the shared context; answers go through the same
serving layer as the API, as the signed-in user's principal (groups and role read from RAG_UI_USERS on every
message, so a changed grant applies at once).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import AsyncIterator
from typing import Any

import chainlit as cl
from chainlit.types import ThreadDict

from rag.core.access import ANONYMOUS, Principal
from rag.core.answer import Answer, Done, Event, Retrieved, Token
from rag.core.errors import Busy, EmptyIndex, LLMUnavailable, RagError, StoreUnavailable
from rag.core.prompt import Message
from ui.chat import state
from ui.chat.data_layer import ChatDataLayer, history_from_steps
from ui.chat.render import SourcePanel, answer_markdown, source_panels, welcome_markdown
from ui.chat.sessions import message_allowed, sign_in_metadata
from ui.chat.texts import Language, pick_language, text
from ui.chat.uploads import add_files, admin_hint, chat_profiles, dropped_files, forget
from ui.serving.answering import answer_stream, ask_body
from ui.serving.documents import visible_documents
from ui.serving.files import file_url, pdf_on_disk
from ui.serving.limits import QUESTION_CHARS
from ui.serving.users import authenticate

log = logging.getLogger("rag.chat")
context = state.current()
HISTORY_TURNS = 6  # messages of earlier turns given to the engine (it condenses them into a standalone question)


if context.settings.ui_auth:

    @cl.password_auth_callback
    async def sign_in(username: str, password: str) -> cl.User | None:
        """Check a name and password against RAG_UI_USERS (PBKDF2, off the event loop)."""
        current = state.current()  # the users the chat's guard checks sessions against
        user = await asyncio.to_thread(authenticate, current.users, username, password)
        if user is None:
            return None
        # The session carries a fingerprint of the password hash: a new hash ends it (ui.chat.sessions).
        return cl.User(identifier=user.name, metadata=sign_in_metadata(current.settings.ui_auth_secret, user))


@cl.data_layer
def data_layer() -> ChatDataLayer:
    """History and feedback in RAG_CHAT_DB_URL; ratings also go to the services' feedback store. Chainlit builds
    it on first use, by which time the app's start-up has built the services."""
    return ChatDataLayer(context.settings.chat_database_url, context.services().feedback, _visible_to)


def _visible_to(name: str) -> set[str]:
    """The doc ids a chat user may see now (for their stored threads)."""
    principal = _principal_of(name)
    return {entry.doc_id for entry in visible_documents(context.services(), principal)}


def _principal_of(name: str | None) -> Principal:
    if not context.settings.ui_auth or not name:
        return ANONYMOUS
    configured = context.users.get(name)
    return configured.principal if configured is not None else Principal(name)


def _principal() -> Principal:
    """The signed-in user's current grant; without sign-in (RAG_UI_AUTH=false) an anonymous reader. A user no
    longer in RAG_UI_USERS holds no groups."""
    user = cl.user_session.get("user")
    return _principal_of(user.identifier if user is not None else None)


@cl.set_chat_profiles
async def profiles(user: cl.User | None, language: str | None = None) -> list[cl.ChatProfile]:
    """One profile per user, for its settings: only admins get the button that attaches files (ui.chat.uploads)."""
    return chat_profiles(_principal_of(user.identifier if user is not None else None))


def _language() -> Language:
    environ: dict[str, Any] = cl.context.session.environ or {}
    return pick_language(str(environ.get("HTTP_ACCEPT_LANGUAGE", "")))


@cl.on_chat_start
async def start() -> None:
    """Greet with what is indexed."""
    cl.user_session.set("history", [])
    language = _language()
    try:
        welcome = await asyncio.to_thread(_welcome, language, _principal())
    except RagError:
        welcome = text(language, "store_down")
    await cl.Message(content=welcome).send()


def _welcome(language: Language, principal: Principal) -> str:
    entries = visible_documents(context.services(), principal)  # counts too: no hint of what one may not see
    welcome = welcome_markdown([e.source for e in entries], sum(len(e.chunk_ids) for e in entries), language)
    return f"{welcome}\n\n{admin_hint(context.settings, language)}" if principal.is_admin else welcome


@cl.on_chat_resume
async def resume(thread: ThreadDict) -> None:
    """Continue an earlier conversation: its turns become the history again (answers from documents the user
    may no longer see are left out)."""
    entries = await asyncio.to_thread(visible_documents, context.services(), _principal())
    visible = {entry.doc_id for entry in entries}
    cl.user_session.set("history", history_from_steps(thread.get("steps", []), HISTORY_TURNS, visible.__contains__))


@cl.on_message
async def on_message(message: cl.Message) -> None:
    """Add the files an admin dropped (ui.chat.uploads), then answer the question, if any, from the documents,
    streaming, with sources, or say clearly why not."""
    language = _language()
    files = dropped_files(message)
    if not await message_allowed(language):  # the sign-in expired or the user's account changed
        for file in files:
            forget(file)  # nothing of an ended session is kept
        return
    if files:
        await add_files(files, _principal(), language)
        if not message.content.strip():
            return
    if len(message.content) > QUESTION_CHARS:
        await cl.Message(content=f"⚠️ {text(language, 'too_long', limit=QUESTION_CHARS)}").send()
        return
    history: list[Message] = cl.user_session.get("history") or []
    reply = cl.Message(content="")
    try:
        answer = await _answer(message.content, history, reply, language)
    except Busy:
        await _fail(reply, text(language, "busy"))
        return
    except (LLMUnavailable, StoreUnavailable, EmptyIndex) as exc:
        await _fail(reply, text(language, _ERROR_TEXTS[type(exc)]))
        return
    except Exception:
        reference = uuid.uuid4().hex[:8]
        log.exception("chat answer failed (reference %s)", reference)
        await _fail(reply, text(language, "failed", ref=reference))
        return
    turn: list[Message] = [{"role": "user", "content": message.content}, {"role": "assistant", "content": answer.text}]
    cl.user_session.set("history", (history + turn)[-HISTORY_TURNS:])


@cl.on_chat_end
async def end() -> None:
    """The browser went away: stop an answer in progress, which closes its stream (the LLM stops, the slot frees)."""
    task = cl.context.session.current_task
    if task is not None and task is not asyncio.current_task() and not task.done():
        task.cancel()


_ERROR_TEXTS = {LLMUnavailable: "llm_down", StoreUnavailable: "store_down", EmptyIndex: "empty_index"}


async def _answer(question: str, history: list[Message], reply: cl.Message, language: Language) -> Answer:
    principal = _principal()
    # The stream is closed however this ends (finished, failed, stopped, the browser gone): that stops the LLM
    # and gives the generation slot back. Registered before any await can be cancelled.
    async with contextlib.AsyncExitStack() as resources:
        async with cl.Step(name=text(language, "searching"), type="retrieval", show_input=False) as step:
            events = await answer_stream(context.services(), principal, question, history, None, "chat")
            resources.push_async_callback(events.aclose)
            first = await anext(events)
            step.output = _retrieval_summary(first, question, language)
        answer = await _stream(first, events, reply)
    await _finish(reply, question, answer, language, principal)
    return answer


def _retrieval_summary(first: Event, question: str, language: Language) -> str:
    if not isinstance(first, Retrieved):
        return text(language, "found_none")
    found = text(language, "found", n=len(first.hits), score=first.hits[0].score)
    if first.query and first.query != question:
        return text(language, "searched_for", query=first.query) + "\n\n" + found
    return found


async def _stream(first: Event, events: AsyncIterator[Event], reply: cl.Message) -> Answer:
    event: Event = first
    while True:
        if isinstance(event, Token):
            await reply.stream_token(event.text)
        elif isinstance(event, Done):
            return event.answer
        event = await anext(events)


async def _finish(reply: cl.Message, question: str, answer: Answer, language: Language,
                  principal: Principal) -> None:
    """Replace the streamed text with the finished message: answer, sources, metrics; each source's name in the
    list opens its panel (Chainlit links every element whose name the message contains)."""
    pdfs = await asyncio.to_thread(_pdf_urls, principal, {source.hit.doc_id for source in answer.sources})
    reply.content = answer_markdown(answer, language)
    reply.elements = [_element(panel) for panel in source_panels(answer, pdfs, language)]  # type: ignore[misc]
    body = ask_body(answer, context.settings.escalate_below)
    reply.metadata = {"question": question, "answer": answer.text, "answerable": answer.answerable,
                      "sources": body["sources"], "confidence": answer.confidence}
    await reply.send()  # ends the stream (if any) and persists the message with its elements


def _pdf_urls(principal: Principal, doc_ids: set[str]) -> dict[str, str]:
    """The cited PDFs the user may read, by doc_id: the route's URL (it checks the session again on every read)."""
    return {entry.doc_id: file_url(entry.doc_id) for entry in visible_documents(context.services(), principal)
            if entry.doc_id in doc_ids and pdf_on_disk(entry) is not None}


def _element(panel: SourcePanel) -> cl.Pdf | cl.Text:
    if panel.kind == "pdf":
        # A URL, not a path: Chainlit would read the whole file and copy it into the session's folder. The
        # browser's PDF viewer reads it from the route, same origin, with the session cookie, in ranges.
        return cl.Pdf(name=panel.name, url=panel.url, page=panel.page, display="side")
    return cl.Text(name=panel.name, content=panel.content, display="side")


async def _fail(reply: cl.Message, message: str) -> None:
    reply.content = f"⚠️ {message}"
    await reply.send()

