"""Files dropped into the chat: an admin's are added to the knowledge base, one locked ingest each in the ingest
pool, with a message per file saying how it went; anyone else's are refused.

Chainlit takes a dropped file at `POST /chat/project/file` and keeps it in the session's folder (ui/chat/.files/
<session>/) until the session ends. The guard (ui.chat.guard) lets only admins post there; whatever reaches a message
is removed as soon as it is handled, added or not. Chainlit checks uploads against its global configuration only,
so that says "on", with our types and size; the attach button is shown per user through a chat profile (one per
user, so Chainlit shows no profile picker) that turns it off for everyone but admins.
"""

from __future__ import annotations

import logging
import math
import uuid
from functools import partial
from pathlib import Path
from typing import Any

import chainlit as cl
from chainlit.config import FILES_DIRECTORY, ChainlitConfig, ChainlitConfigOverrides, SpontaneousFileUploadFeature
from chainlit.element import Element

from rag.config import Settings
from rag.core.access import DocAccess, Principal
from rag.core.errors import Conflict, IngestBusy, RagError
from ui.chat import state
from ui.chat.texts import Language, text
from ui.serving.documents import Uploaded
from ui.serving.limits import size_text
from ui.serving.uploads import KINDS, MAX_FILES, UploadRefused, add_file, suffixes, upload_limit

log = logging.getLogger("rag.chat")
PROFILE = "Knowledge base"
ASK_TIMEOUT_S = 300  # how long the replace question waits for an answer (then the indexed version is kept)


def configure(config: ChainlitConfig, settings: Settings) -> None:
    """Chainlit's upload settings from ours: our file types (by ending, whatever type the browser names), at most
    MAX_FILES a message, RAG_MAX_UPLOAD_MB each. Chainlit counts whole MB (10^6 bytes in the browser, MiB on the
    server): rounded up, so that a file just over our limit gets our exact refusal rather than Chainlit's."""
    endings = list(suffixes())
    config.features.spontaneous_file_upload = SpontaneousFileUploadFeature(
        enabled=True, accept={"application/*": endings, "text/*": endings}, max_files=MAX_FILES,
        max_size_mb=math.ceil(upload_limit(settings) / 1e6))


def chat_profiles(principal: Principal) -> list[cl.ChatProfile]:
    """The user's one chat profile: the attach button for admins only."""
    overrides = None if principal.is_admin else ChainlitConfigOverrides.model_validate(
        {"features": {"spontaneous_file_upload": {"enabled": False}}})
    return [cl.ChatProfile(name=PROFILE, markdown_description="", default=True, config_overrides=overrides)]


def admin_hint(settings: Settings, language: Language) -> str:
    """What the welcome tells an admin about dropping files."""
    return text(language, "admin_hint", kinds=KINDS, size=size_text(upload_limit(settings)), n=MAX_FILES)


def dropped_files(message: cl.Message) -> list[Element]:
    """The files attached to a message: Chainlit's elements that point into its sessions' folder, still there (an
    edited message comes back with the files it had, already handled and removed)."""
    folder = FILES_DIRECTORY.resolve()
    return [element for element in message.elements or [] if element.path
            and Path(element.path).resolve().is_relative_to(folder) and Path(element.path).is_file()]


async def add_files(files: list[Element], principal: Principal, language: Language) -> None:
    """Add an admin's files one after the other, or refuse them all; every file leaves the session's folder."""
    try:
        names = ", ".join(f"`{file.name}`" for file in files)
        if not principal.is_admin:
            await _say(text(language, "upload_admins_only", files=names))
        elif len(files) > MAX_FILES:
            await _say(text(language, "upload_too_many", limit=MAX_FILES, files=names))
        else:
            for file in files:
                await _add(file, principal, language)
                forget(file)
    finally:
        for file in files:
            forget(file)


def forget(file: Element) -> None:
    """Remove a dropped file from the session's folder and from Chainlit's list of the session's files."""
    if file.path:
        Path(file.path).unlink(missing_ok=True)
    if file.chainlit_key:
        getattr(cl.context.session, "files", {}).pop(file.chainlit_key, None)


async def _add(file: Element, principal: Principal, language: Language) -> None:
    path = Path(str(file.path))
    size = path.stat().st_size if path.exists() else 0
    status = cl.Message(content=text(language, "upload_received", name=file.name, size=size_text(size)))
    await status.send()  # type: ignore[no-untyped-call]
    try:
        uploaded = await _ingest(path, file.name, principal, language)
        status.content = _done(uploaded, language) if uploaded is not None else \
            text(language, "upload_failed", name=file.name, reason=text(language, "upload_kept"))
    except Exception as exc:
        status.content = text(language, "upload_failed", name=file.name, reason=_reason(exc, language))
    await status.update()  # type: ignore[no-untyped-call]


async def _say(refusal: str) -> None:
    await cl.Message(content=f"⚠️ {refusal}").send()  # type: ignore[no-untyped-call]


async def _ingest(path: Path, name: str, principal: Principal, language: Language) -> Uploaded | None:
    """The file added as the document `name`; None when the admin keeps the indexed document of that name."""
    services = state.current().services()
    try:
        return await services.run_ingest(partial(add_file, services, principal, path, name, False))
    except Conflict:
        if not await confirm_replace(name, language):
            return None
    return await services.run_ingest(partial(add_file, services, principal, path, name, True))


async def confirm_replace(name: str, language: Language) -> bool:
    """Ask whether to replace the indexed document of the same name (no answer in time: keep it)."""
    actions = [cl.Action(name="replace", payload={"replace": True}, label=text(language, "upload_replace")),
               cl.Action(name="keep", payload={"replace": False}, label=text(language, "upload_keep"))]
    answer: Any = await cl.AskActionMessage(content=text(language, "upload_exists", name=name), actions=actions,
                                            timeout=ASK_TIMEOUT_S).send()
    return bool(answer and answer.get("payload", {}).get("replace"))


def _done(uploaded: Uploaded, language: Language) -> str:
    entry, access = uploaded.entry, DocAccess.from_label(uploaded.entry.access)
    if access.kind == "grouped":
        visible = text(language, "visible_groups", groups=", ".join(f"`{group}`" for group in access.groups))
    elif access.kind == "locked":
        visible = text(language, "visible_locked")
    else:
        public = state.current().settings.ungrouped == "public"
        visible = text(language, "visible_public" if public else "visible_private")
    chunks = len(entry.chunk_ids)
    return text(language, "upload_done", name=entry.source, status=text(language, f"upload_{uploaded.status}"),
                chunks=text(language, "passage_one" if chunks == 1 else "passage_many", n=chunks), visible=visible)


def _reason(exc: Exception, language: Language) -> str:
    """Why a file was not added, for the admin: the same words the API's error gives, or a reference to the log."""
    if isinstance(exc, UploadRefused):
        return exc.message
    if isinstance(exc, IngestBusy):
        return text(language, "upload_busy", reason=str(exc))
    if isinstance(exc, RagError):  # forbidden, unreadable, read-only folder, store down: their messages say it
        return str(exc)
    reference = uuid.uuid4().hex[:8]
    log.exception("adding a dropped file failed (reference %s)", reference)
    return text(language, "upload_error", ref=reference)
