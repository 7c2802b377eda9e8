"""Prometheus metrics: requests by route and status, per-stage latency, refusals."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

from fastapi import FastAPI, Request, Response
from prometheus_client import CollectorRegistry, Counter, Histogram

from rag.answer import Answer

BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)


class Metrics:
    """One registry per app (tests build many apps in one process)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter("rag_requests", "HTTP requests by route and status", ["route", "method", "status"],
                                registry=self.registry)
        self.stage = Histogram("rag_stage_seconds", "Latency of the query stages", ["stage"], buckets=BUCKETS,
                               registry=self.registry)
        self.refusals = Counter("rag_refusals", "Answers refused as not in the documents", registry=self.registry)

    def observe_answer(self, answer: Answer) -> None:
        """Record the stages of one answer."""
        self.stage.labels("retrieve").observe(answer.timings.retrieve_ms / 1000)
        if answer.timings.first_token_ms is not None:
            self.stage.labels("first_token").observe(answer.timings.first_token_ms / 1000)
        self.stage.labels("total").observe(answer.timings.total_ms / 1000)
        if not answer.answerable:
            self.refusals.inc()


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
