"""Documents: upload (ingested through the same pipeline as rag-ingest), list, delete, re-sync, and feedback.

Listing shows what the caller may see; every change, and reading feedback, needs an admin key."""

from __future__ import annotations

import dataclasses
from functools import partial
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Query, Request
from starlette.concurrency import run_in_threadpool

from ingest.manifest import Entry
from rag.core.access import DocAccess
from ui.api.deps import PrincipalDep, ServicesDep
from ui.api.routes_ask import ADMIN_ERRORS, ERRORS
from ui.api.schemas import DocumentOut, FeedbackOut, SyncOut
from ui.api.uploads import stage_upload
from ui.serving import documents as use
from ui.serving import uploads

router = APIRouter(prefix="/v1", tags=["documents"])
# Read by the route itself, not by FastAPI (which would spool the whole body before the key is checked).
UPLOAD_BODY: dict[str, Any] = {"requestBody": {"required": True, "content": {"multipart/form-data": {"schema": {
    "type": "object", "required": ["file"], "properties": {"file": {"type": "string", "format": "binary"}}}}}}}


@router.post("/documents", status_code=201, responses={**ADMIN_ERRORS, 413: {}, 415: {}}, openapi_extra=UPLOAD_BODY)
async def upload(request: Request, services: ServicesDep, principal: PrincipalDep,
                 replace: bool = Query(False, description="replace a document of the same name")) -> dict[str, Any]:
    """Store an uploaded file (multipart/form-data, part `file`) in the documents folder and ingest it (admins);
    an existing document of the same name is replaced only with replace=true (else 409); a failed ingest keeps
    what was there. The key, role and name are checked before the file's bytes are read; they go to disk as they
    arrive, up to RAG_MAX_UPLOAD_MB."""
    use.require_admin(principal, "uploading documents")
    folder = services.settings.documents_dir.resolve()
    folder.mkdir(parents=True, exist_ok=True)

    async def accept(filename: str) -> Path:  # the same checks as the chat's dropped files (ui.serving.uploads)
        return await run_in_threadpool(uploads.accept, services, principal, filename, replace)

    target, staged = await stage_upload(request, folder, uploads.upload_limit(services.settings), accept)
    try:
        uploaded = await services.run_ingest(partial(use.ingest_upload, services, principal, staged.path, target,
                                                     replace))
    finally:
        staged.discard()  # moved into place on success; removed on any refusal
    return {**_document(uploaded.entry).model_dump(), "status": uploaded.status}


@router.get("/documents", response_model=list[DocumentOut], responses=ERRORS)
async def documents(services: ServicesDep, principal: PrincipalDep) -> list[DocumentOut]:
    """The ingested documents the caller may see: id, source, groups, content hash, chunks, when ingested."""
    return [_document(entry) for entry in await run_in_threadpool(use.visible_documents, services, principal)]


@router.delete("/documents/{doc_id}", responses=ADMIN_ERRORS)
async def delete(doc_id: str, services: ServicesDep, principal: PrincipalDep) -> dict[str, Any]:
    """Remove a document from the index, and its file when it lives in the documents folder (admins)."""
    entry = await services.run_ingest(partial(use.delete_document, services, principal, doc_id))
    return {"id": doc_id, "source": entry.source, "status": "deleted"}


@router.post("/sync", response_model=SyncOut, responses=ADMIN_ERRORS)
async def sync(services: ServicesDep, principal: PrincipalDep) -> dict[str, object]:
    """Re-sync the documents folder: add new files, replace changed ones, relabel regrouped ones, remove deleted
    ones (admins)."""
    report = await services.run_ingest(partial(use.sync_folder, services, principal))
    return report.as_json()


@router.get("/feedback", response_model=list[FeedbackOut], responses=ADMIN_ERRORS, tags=["feedback"])
async def feedback(services: ServicesDep, principal: PrincipalDep,
                   limit: int = Query(50, ge=1, le=1000)) -> list[FeedbackOut]:
    """The newest ratings of answers, with question, answer and sources (admins; ratings of answers that cite
    documents outside the admin's groups are left out)."""
    ratings = await run_in_threadpool(use.recent_feedback, services, principal, limit)
    return [FeedbackOut(**dataclasses.asdict(rating)) for rating in ratings]


def _document(entry: Entry) -> DocumentOut:
    access = DocAccess.from_label(entry.access)
    return DocumentOut(id=entry.doc_id, source=entry.source, content_hash=entry.content_hash,
                       chunks=len(entry.chunk_ids), ingested_at=entry.ingested_at, access=access.kind,
                       groups=list(access.groups))
