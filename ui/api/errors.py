"""Errors as `{"error": {"type": …, "message": …}}` with the right status, for every failure the API reports."""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from rag.core.errors import (
    Busy,
    ConfigError,
    Conflict,
    EmptyIndex,
    Forbidden,
    IngestBusy,
    InvalidDocument,
    LLMUnavailable,
    NotFound,
    RagError,
    ReadOnlyFolder,
    StoreInUse,
    StoreUnavailable,
)
from ui.serving.errors import error_response
from ui.serving.uploads import UploadRefused


class ApiError(Exception):
    """An error with an HTTP status, a machine-readable type and a message for people."""

    def __init__(self, status: int, kind: str, message: str, headers: dict[str, str] | None = None,
                 details: dict[str, object] | None = None) -> None:
        super().__init__(message)
        self.status, self.kind, self.message, self.headers = status, kind, message, headers or {}
        self.details = details or {}  # more fields of the error object, for clients that act on them


# The core's named errors as (status, type), most specific first; anything else from upstream is a 502.
STATUSES: tuple[tuple[type[RagError], int, str], ...] = (
    (Busy, 429, "busy"), (IngestBusy, 409, "ingest_busy"), (Forbidden, 403, "forbidden"), (NotFound, 404, "not_found"),
    (Conflict, 409, "document_exists"),
    (ReadOnlyFolder, 409, "folder_read_only"), (InvalidDocument, 422, "unreadable_document"),
    (LLMUnavailable, 503, "llm_unavailable"), (StoreUnavailable, 503, "store_unavailable"),
    (EmptyIndex, 503, "empty_index"),
    (StoreInUse, 503, "store_in_use"), (ConfigError, 500, "config_error"),
)


def from_rag_error(exc: RagError) -> ApiError:
    """The status and type for the core's named errors."""
    for kind, status, name in STATUSES:
        if isinstance(exc, kind):
            retry = exc.retry_after_s if isinstance(exc, (Busy, IngestBusy)) else None
            headers = {"Retry-After": str(retry)} if retry is not None else None
            details: dict[str, object] = {"running": exc.running} if isinstance(exc, IngestBusy) else {}
            return ApiError(status, name, str(exc), headers=headers, details=details)
    return ApiError(502, "upstream_error", str(exc))


def install_error_handlers(app: FastAPI) -> None:
    """Every error leaves as the JSON error body."""

    @app.exception_handler(ApiError)
    async def _api(_: Request, exc: ApiError) -> JSONResponse:
        return error_response(exc.status, exc.kind, exc.message, exc.headers, exc.details)

    @app.exception_handler(RagError)
    async def _rag(_: Request, exc: RagError) -> JSONResponse:
        error = from_rag_error(exc)
        return error_response(error.status, error.kind, error.message, error.headers, error.details)

    @app.exception_handler(UploadRefused)
    async def _upload(_: Request, exc: UploadRefused) -> JSONResponse:
        return error_response(exc.status, exc.kind, exc.message)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors())
        return error_response(422, "invalid_request", problems)

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        return error_response(exc.status_code, "http_error", str(exc.detail), dict(exc.headers or {}))
