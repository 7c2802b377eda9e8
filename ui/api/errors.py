"""Errors as `{"error": {"type": …, "message": …}}` with the right status, for every failure the API reports."""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from rag.errors import (
    Busy,
    ConfigError,
    Conflict,
    EmptyIndex,
    Forbidden,
    InvalidDocument,
    LLMUnavailable,
    NotFound,
    RagError,
    StoreUnavailable,
)


class ApiError(Exception):
    """An error with an HTTP status, a machine-readable type and a message for people."""

    def __init__(self, status: int, kind: str, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.kind, self.message, self.headers = status, kind, message, headers or {}


def error_response(status: int, kind: str, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    """The JSON error body."""
    return JSONResponse({"error": {"type": kind, "message": message}}, status_code=status, headers=headers)


def from_rag_error(exc: RagError) -> ApiError:
    """The status and type for the core's named errors."""
    if isinstance(exc, Busy):
        return ApiError(429, "busy", str(exc), headers={"Retry-After": str(exc.retry_after_s)})
    if isinstance(exc, Forbidden):
        return ApiError(403, "forbidden", str(exc))
    if isinstance(exc, NotFound):
        return ApiError(404, "not_found", str(exc))
    if isinstance(exc, Conflict):
        return ApiError(409, "document_exists", str(exc))
    if isinstance(exc, InvalidDocument):
        return ApiError(422, "unreadable_document", str(exc))
    if isinstance(exc, LLMUnavailable):
        return ApiError(503, "llm_unavailable", str(exc))
    if isinstance(exc, StoreUnavailable):
        return ApiError(503, "store_unavailable", str(exc))
    if isinstance(exc, EmptyIndex):
        return ApiError(503, "empty_index", str(exc))
    if isinstance(exc, ConfigError):
        return ApiError(500, "config_error", str(exc))
    return ApiError(502, "upstream_error", str(exc))


def install_error_handlers(app: FastAPI) -> None:
    """Every error leaves as the JSON error body."""

    @app.exception_handler(ApiError)
    async def _api(_: Request, exc: ApiError) -> JSONResponse:
        return error_response(exc.status, exc.kind, exc.message, exc.headers)

    @app.exception_handler(RagError)
    async def _rag(_: Request, exc: RagError) -> JSONResponse:
        error = from_rag_error(exc)
        return error_response(error.status, error.kind, error.message, error.headers)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors())
        return error_response(422, "invalid_request", problems)

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        return error_response(exc.status_code, "http_error", str(exc.detail), dict(exc.headers or {}))
