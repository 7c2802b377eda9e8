"""A document's PDF, streamed from disk with HTTP ranges: for API keys, and for the chat's signed-in users (their
browser reads a cited PDF from here, at its page, instead of Chainlit copying the file into each session)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import FileResponse
from starlette.concurrency import run_in_threadpool

from rag.core.access import Principal
from ui.api.deps import ServicesDep, key_principal
from ui.api.errors import ApiError
from ui.api.schemas import ErrorBody
from ui.serving import files

router = APIRouter(prefix="/v1", tags=["documents"])
# app.state.session_principal, set by ui.server when the chat is mounted: a request's chat user (None without a
# current session, or from another site's page). Kept on the app so that the API does not import the chat.
SessionReader = Callable[[Request], Principal | None]
# Private: a shared cache must not keep one user's document for the next; nosniff: never run as anything but a PDF.
HEADERS = {"Cache-Control": "private", "X-Content-Type-Options": "nosniff"}
PDF = {"application/pdf": {"schema": {"type": "string", "format": "binary"}}}
RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {"content": PDF, "description": "The whole PDF (`Accept-Ranges: bytes`)."},
    206: {"content": PDF, "description": "The requested byte range (`Range: bytes=a-b`), with `Content-Range`."},
    401: {"model": ErrorBody, "description": "No API key and no chat session."},
    403: {"model": ErrorBody, "description": "A wrong API key."},
    404: {"model": ErrorBody, "description": "Unknown id, a document the caller may not see, not a PDF, or its file "
                                             "is gone: one answer for all."},
    416: {"description": "The range lies beyond the end of the file (`Content-Range: bytes */size`)."},
}


def get_reader(request: Request, services: ServicesDep) -> Principal:
    """Who reads: a bearer key by the API's rule; without one, the chat's signed-in user when the chat is mounted;
    without either, 401 when keys are configured, else the API's anonymous reader."""
    sessions: SessionReader | None = getattr(request.app.state, "session_principal", None)
    if sessions is not None and "authorization" not in request.headers:
        principal = sessions(request)
        if principal is not None:
            return principal
        if services.keys:
            raise ApiError(401, "unauthorized", "sign in to the chat, or send `Authorization: Bearer <key>`",
                           headers={"WWW-Authenticate": "Bearer"})
    return key_principal(request, services)


@router.get("/documents/{doc_id}/file", response_class=FileResponse, responses=RESPONSES)
async def document_file(doc_id: str, services: ServicesDep,
                        principal: Annotated[Principal, Depends(get_reader)]) -> FileResponse:
    """A PDF the caller may see, as stored in the documents folder it was ingested from, shown inline; byte ranges
    (`Range: bytes=a-b`) for viewers that read it piece by piece. Authorised by a bearer key, or from the chat's
    own pages by its sign-in."""
    found = await run_in_threadpool(files.readable_pdf, services, principal, doc_id)
    return FileResponse(found.path, headers=HEADERS, media_type="application/pdf", filename=found.name,
                        stat_result=found.stat, content_disposition_type="inline")
