"""A document's PDF for a principal who may see it, read from where it was ingested and never from outside that
folder. Every refusal is the same NotFound (unknown id, not visible, not a PDF, file gone, outside its root): the
answer says nothing about what exists."""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from urllib.parse import quote

from ingest.manifest import Entry
from rag.core.access import Principal
from rag.core.errors import NotFound
from ui.serving.documents import visible_documents
from ui.serving.services import Services

PDF_SUFFIX = ".pdf"
FILE_PATH = "/v1/documents/{doc_id}/file"  # the route that streams it (ui.api.routes_files)
NOT_FOUND = "no PDF with this id that you may read"


@dataclass(frozen=True, slots=True)
class DocumentFile:
    """A PDF to stream: its path with every symlink resolved, the name to show, and its stat when looked up."""

    path: Path
    name: str
    stat: os.stat_result


def file_url(doc_id: str) -> str:
    """Where a browser or client reads a document's PDF (same origin as the chat)."""
    return FILE_PATH.format(doc_id=quote(doc_id, safe=""))


def readable_pdf(services: Services, principal: Principal, doc_id: str) -> DocumentFile:
    """The document's PDF when the principal may see the document and the file is on disk inside its root."""
    entry = next((entry for entry in visible_documents(services, principal) if entry.doc_id == doc_id), None)
    found = pdf_on_disk(entry) if entry is not None else None
    if found is None:
        raise NotFound(NOT_FOUND)
    return found


def pdf_on_disk(entry: Entry) -> DocumentFile | None:
    """The entry's file when it is a PDF and a regular file that lies, all symlinks resolved, inside the root it was
    ingested from; else None."""
    if PurePosixPath(entry.source).suffix.lower() != PDF_SUFFIX:
        return None
    try:
        root = Path(entry.root).resolve(strict=True)
        path = (root / entry.source).resolve(strict=True)
        info = path.stat()
    except (OSError, RuntimeError):  # gone, unreadable, a symlink loop
        return None
    if not path.is_relative_to(root) or path.suffix.lower() != PDF_SUFFIX or not stat.S_ISREG(info.st_mode):
        return None
    return DocumentFile(path, PurePosixPath(entry.source).name, info)
