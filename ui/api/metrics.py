"""Counting HTTP requests into the serving layer's metrics (route templates, not raw paths)."""

from __future__ import annotations

import time

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ui.serving.metrics import Metrics

ANSWER_ROUTES = ("/v1/ask", "/v1/chat/completions")


class RequestMetrics:
    """Counts every request by its route template (not its raw path, which would explode the label set), method
    and status, and times failed answers. Plain ASGI: Starlette's `@app.middleware("http")` would pass each
    response, chunk by chunk, through a stream and a task of its own."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app, self.metrics = app, metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started, status = time.perf_counter(), [500]

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            self._count(scope, status[0], time.perf_counter() - started)

    def _count(self, scope: Scope, status: int, seconds: float) -> None:
        route = getattr(scope.get("route"), "path", "unmatched")  # the router notes the route in the scope
        self.metrics.requests.labels(route, scope["method"], str(status)).inc()
        if route in ANSWER_ROUTES and status >= 400:
            self.metrics.stage.labels("failed").observe(seconds)
