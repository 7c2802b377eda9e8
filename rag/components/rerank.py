"""An optional cross-encoder reranker (RAG_RERANK_MODEL): scores (question, passage) pairs jointly."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from rag.core.types import Hit


class CrossEncoderReranker:
    """Reorders hits by a sentence-transformers CrossEncoder; the fused score stays `score`, the rerank score goes
    to `extra["rerank"]` (it is on another scale, so the refusal threshold keeps using the fused score)."""

    def __init__(self, model: Any, batch_size: int = 32) -> None:
        self._model = model
        self._batch_size = batch_size

    def rerank(self, question: str, hits: Sequence[Hit]) -> list[Hit]:
        """The hits, best first by the cross-encoder."""
        if not hits:
            return []
        scores = self._model.predict([(question, hit.text) for hit in hits], batch_size=self._batch_size,
                                     show_progress_bar=False)
        ranked = sorted(zip(hits, scores, strict=True), key=lambda pair: float(pair[1]), reverse=True)
        return [replace(hit, extra={**hit.extra, "rerank": round(float(score), 6)}) for hit, score in ranked]
