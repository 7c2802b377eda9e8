"""Counting HTTP requests into the serving layer's metrics (route templates, not raw paths)."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

from fastapi import FastAPI, Request, Response

from ui.serving.metrics import Metrics


def install_request_metrics(app: FastAPI, metrics: Metrics) -> None:
    """Count every request by its route template (not its raw path, which would explode the label set)."""

    @app.middleware("http")
    async def _count(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        started = time.perf_counter()
        response = await call_next(request)
        route = getattr(request.scope.get("route"), "path", "unmatched")
        metrics.requests.labels(route, request.method, str(response.status_code)).inc()
        if route in ("/v1/ask", "/v1/chat/completions") and response.status_code >= 400:
            metrics.stage.labels("failed").observe(time.perf_counter() - started)
        return response
