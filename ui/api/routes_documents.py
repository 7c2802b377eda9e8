"""Documents: upload (ingested through the same pipeline as rag-ingest), list, delete, and re-sync the folder."""

from __future__ import annotations

import os
import re
import tempfile
import unicodedata
from pathlib import Path
from typing import Any

from fastapi import APIRouter, UploadFile
from starlette.concurrency import run_in_threadpool

from ingest import service
from ingest.manifest import Entry
from ingest.parse import is_supported
from rag.config import Settings
from ui.api.deps import KeyDep, ServicesDep
from ui.api.errors import ApiError
from ui.api.routes_ask import ERRORS
from ui.api.schemas import DocumentOut, SyncOut
from ui.api.services import Services

router = APIRouter(prefix="/v1", tags=["documents"])
_UNSAFE = re.compile(r"[^\w.\- ()]+")
READ_BLOCK = 1 << 20


def safe_name(raw: str) -> str:
    """A plain file name: no folders, no traversal, no control or shell-special characters, no leading dot."""
    name = unicodedata.normalize("NFC", raw.replace("\\", "/").rsplit("/", 1)[-1])
    name = _UNSAFE.sub("_", "".join(ch for ch in name if ch.isprintable())).strip(" .")
    if not name or name.startswith("."):
        raise ApiError(422, "invalid_filename", f"unusable file name {raw!r}")
    return name[:200]


@router.post("/documents", status_code=201, responses={**ERRORS, 413: {}, 415: {}})
async def upload(file: UploadFile, services: ServicesDep, _: KeyDep) -> dict[str, Any]:
    """Store an uploaded file in the documents folder and ingest it; a failed ingest keeps what was there."""
    settings = services.settings
    name = safe_name(file.filename or "")
    if not is_supported(Path(name)):
        raise ApiError(415, "unsupported_type", f"{name}: supported types are PDF, Markdown, TXT/RST, HTML, DOCX")
    folder = settings.documents_dir.resolve()
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / name
    if target.parent != folder:
        raise ApiError(422, "invalid_filename", f"unusable file name {file.filename!r}")
    staged = await _stage(file, folder, int(settings.max_upload_mb * 2**20))
    return await run_in_threadpool(_ingest_upload, services, staged, target)


async def _stage(file: UploadFile, folder: Path, limit: int) -> Path:
    handle, path = tempfile.mkstemp(prefix=".upload-", dir=folder)  # hidden: never picked up by a sync
    size = 0
    with os.fdopen(handle, "wb") as out:
        while block := await file.read(READ_BLOCK):
            size += len(block)
            if size > limit:
                out.close()
                os.unlink(path)
                raise ApiError(413, "too_large", f"upload exceeds {limit // 2**20} MiB (RAG_MAX_UPLOAD_MB)")
            out.write(block)
    return Path(path)


def _ingest_upload(services: Services, staged: Path, target: Path) -> dict[str, Any]:
    backup = target.with_name(f".backup-{target.name}")
    if target.exists():
        os.replace(target, backup)
    os.replace(staged, target)
    _, report = service.sync([target], services.settings, prune=False, embedder=services.embedder,
                             store=services.store)
    if report.failed:
        if backup.exists():
            os.replace(backup, target)  # the previous version stays, as its chunks did
        else:
            target.unlink()
        raise ApiError(422, "unreadable_document", f"{target.name}: {next(iter(report.failed.values()))}")
    backup.unlink(missing_ok=True)
    entry = next(e for e in service.list_documents(services.settings)
                 if Path(e.root) / e.source == target)
    status = "unchanged" if report.unchanged else "updated" if report.updated else "added"
    return {**_document(entry).model_dump(), "status": status}


@router.get("/documents", response_model=list[DocumentOut], responses=ERRORS)
async def documents(services: ServicesDep, _: KeyDep) -> list[DocumentOut]:
    """Every ingested document: id, source, content hash, chunks, when it was ingested."""
    return [_document(entry) for entry in await run_in_threadpool(service.list_documents, services.settings)]


@router.delete("/documents/{doc_id}", responses={**ERRORS, 404: {}})
async def delete(doc_id: str, services: ServicesDep, _: KeyDep) -> dict[str, Any]:
    """Remove a document from the index (and its file, when it lives in the documents folder)."""
    entry = await run_in_threadpool(service.delete_document, doc_id, services.settings, services.store)
    if entry is None:
        raise ApiError(404, "not_found", f"no document with id {doc_id!r}")
    path = Path(entry.root) / entry.source
    if _inside(path, services.settings):
        path.unlink(missing_ok=True)
    return {"id": doc_id, "source": entry.source, "status": "deleted"}


@router.post("/sync", response_model=SyncOut, responses=ERRORS)
async def sync(services: ServicesDep, _: KeyDep) -> dict[str, object]:
    """Re-sync the documents folder: add new files, replace changed ones, remove deleted ones."""
    folder = services.settings.documents_dir
    folder.mkdir(parents=True, exist_ok=True)
    plan_report = await run_in_threadpool(lambda: service.sync([folder], services.settings,
                                                               embedder=services.embedder, store=services.store))
    return plan_report[1].as_json()


def _document(entry: Entry) -> DocumentOut:
    return DocumentOut(id=entry.doc_id, source=entry.source, content_hash=entry.content_hash,
                       chunks=len(entry.chunk_ids), ingested_at=entry.ingested_at)


def _inside(path: Path, settings: Settings) -> bool:
    return path.resolve().parent.is_relative_to(settings.documents_dir.resolve())
