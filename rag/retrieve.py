"""Retrieval: the question's embedding against the store → the top-k hits."""

from __future__ import annotations

from rag.embedder import Embedder
from rag.errors import EmptyIndex
from rag.store import ChromaStore
from rag.types import Hit


class Retriever:
    """Finds the chunks closest to a question."""

    def __init__(self, embedder: Embedder, store: ChromaStore) -> None:
        self._embedder = embedder
        self._store = store

    def search(self, question: str, k: int) -> list[Hit]:
        """The k best chunks for a question, best first; EmptyIndex when nothing was ingested."""
        hits = self._store.search(self._embedder.embed_query(question), k)
        # Counting only when nothing came back keeps the store round trip off every normal query.
        if not hits and self._store.count() == 0:
            raise EmptyIndex(f"collection {self._store.name!r} is empty: run `rag-ingest PATH` first")
        return hits
