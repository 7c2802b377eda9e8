"""The error body every HTTP answer of the app uses: `{"error": {"type": …, "message": …}}` (API routes and the
guards in front of the whole app alike)."""

from __future__ import annotations

from starlette.responses import JSONResponse


def error_response(status: int, kind: str, message: str, headers: dict[str, str] | None = None,
                   details: dict[str, object] | None = None) -> JSONResponse:
    """The JSON error body."""
    body = {"type": kind, "message": message, **(details or {})}
    return JSONResponse({"error": body}, status_code=status, headers=headers)
