"""Prometheus metrics of the serving layer: requests by route and status, per-stage latency, refusals."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram

from rag.core.answer import Answer

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
