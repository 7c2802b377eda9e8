"""Adding a document, for the API's upload route and the chat's dropped files alike: the same file name rules, types,
size limit (RAG_MAX_UPLOAD_MB), admin check, replace rule, ingest lock and labels (from the file's own front matter
or sidecar, as for rag-ingest: without one, every reader sees it, unless an admin of some groups uploaded it: then
those groups, and its uploads live in a folder of their own)."""

from __future__ import annotations

import os
import re
import shutil
import unicodedata
from pathlib import Path

from ingest import files
from ingest.parse import SUPPORTED, is_supported
from rag.config import Settings
from rag.core.access import Principal
from ui.serving.documents import Uploaded, check_upload, ingest_upload, require_admin, upload_folder
from ui.serving.limits import size_text
from ui.serving.services import Services

MAX_FILES = 10  # per chat message; each is its own locked ingest, one after the other
KINDS = "PDF, Markdown, TXT/RST, HTML, DOCX"
_UNSAFE = re.compile(r"[^\w.\- ()]+")


class UploadRefused(Exception):
    """An upload refused before anything is stored: an HTTP status and error type for the API, a message for all."""

    def __init__(self, status: int, kind: str, message: str) -> None:
        super().__init__(message)
        self.status, self.kind, self.message = status, kind, message


def suffixes() -> tuple[str, ...]:
    """The file name endings an upload may have (those ingest reads)."""
    return tuple(SUPPORTED)


def upload_limit(settings: Settings) -> int:
    """The largest upload in bytes (RAG_MAX_UPLOAD_MB)."""
    return int(settings.max_upload_mb * 2**20)


def too_large(limit: int) -> UploadRefused:
    """The 413 refusal of a file over `limit` bytes."""
    return UploadRefused(413, "too_large", f"upload over {size_text(limit)} (RAG_MAX_UPLOAD_MB)")


def safe_name(raw: str) -> str:
    """A plain file name: no folders, no traversal, no control or shell-special characters, no leading dot."""
    name = unicodedata.normalize("NFC", raw.replace("\\", "/").rsplit("/", 1)[-1])
    name = _UNSAFE.sub("_", "".join(ch for ch in name if ch.isprintable())).strip(" .")
    if not name or name.startswith("."):
        raise UploadRefused(422, "invalid_filename", f"unusable file name {raw!r}")
    return name[:200]


def upload_target(services: Services, principal: Principal, filename: str) -> Path:
    """Where the principal's upload named `filename` goes (ui.serving.documents.upload_folder); refused when the
    name or type is unusable."""
    name = safe_name(filename)
    if not is_supported(Path(name)):
        raise UploadRefused(415, "unsupported_type", f"{name}: supported types are {KINDS}")
    folder = upload_folder(services, principal)
    target = folder / name
    if target.parent != folder:
        raise UploadRefused(422, "invalid_filename", f"unusable file name {filename!r}")
    return target


def accept(services: Services, principal: Principal, filename: str, replace: bool) -> Path:
    """Before any byte is stored: the target in the documents folder, for an admin, not over a document unless
    `replace` (UploadRefused, Forbidden or Conflict otherwise)."""
    require_admin(principal, "uploading documents")
    target = upload_target(services, principal, filename)
    target.parent.mkdir(parents=True, exist_ok=True)
    check_upload(services, principal, target, replace)
    return target


def add_file(services: Services, principal: Principal, source: Path, filename: str, replace: bool = False,
             deadline: float | None = None, channel: str = "chat") -> Uploaded:
    """Add a file already on disk (the chat's dropped file) as the document `filename`: checked as an API upload,
    copied into a hidden staged file in the documents folder, then ingested as one locked change. `source` is
    left for the caller to remove. Run it in the ingest pool."""
    target = accept(services, principal, filename, replace)
    limit = upload_limit(services.settings)
    if source.stat().st_size > limit:
        raise too_large(limit)
    handle, staged = files.staged_file(target.parent)
    try:
        with os.fdopen(handle, "wb") as out:  # holds the staged file's lock until ingested (see files.staged_file)
            with source.open("rb") as data:
                shutil.copyfileobj(data, out, 1 << 20)
            out.flush()
            return ingest_upload(services, principal, staged, target, replace, deadline, channel)
    finally:
        staged.unlink(missing_ok=True)  # moved into place on success; removed on any refusal
