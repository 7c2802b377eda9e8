"""Chroma collection access (embedded PersistentClient or a Chroma server): upsert, search, delete.

Every write is mirrored into the keyword index when one is attached, so dense and keyword search see the same
chunks whichever edge (CLI, API upload, sync) wrote them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from rag.embedder import Vectors
from rag.errors import ConfigError, StoreUnavailable
from rag.keyword import KeywordIndex
from rag.types import Chunk, Hit

if TYPE_CHECKING:
    from chromadb.api import ClientAPI
    from chromadb.api.models.Collection import Collection


class ChromaStore:
    """One Chroma collection in cosine space; embeddings are always computed by us, never by Chroma."""

    def __init__(self, client: ClientAPI, name: str, embed_model: str, keyword: KeywordIndex | None = None) -> None:
        self._client = client
        self.name = name
        self.embed_model = embed_model
        self.keyword = keyword
        self._collection = self._open(name, embed_model)
        self._max_batch = max(1, int(client.get_max_batch_size()))

    def _open(self, name: str, embed_model: str) -> Collection:
        try:
            collection = self._client.get_or_create_collection(
                name,
                metadata={"hnsw:space": "cosine", "embed_model": embed_model},
                embedding_function=None,
            )
        except Exception as exc:  # chromadb raises many transport/db types; one message for all
            raise StoreUnavailable(f"cannot open Chroma collection {name!r}: {exc}") from exc
        stored = (collection.metadata or {}).get("embed_model")
        if stored and stored != embed_model:
            # Vectors from two models live in different spaces: searching across them returns noise.
            raise ConfigError(
                f"collection {name!r} was built with embedder {stored!r}, but RAG_EMBED_MODEL is "
                f"{embed_model!r}; use another RAG_COLLECTION or re-ingest into a fresh one"
            )
        return collection

    def heartbeat(self) -> None:
        """Raise StoreUnavailable unless the store answers."""
        try:
            self._client.heartbeat()
        except Exception as exc:
            raise StoreUnavailable(f"Chroma does not answer: {exc}") from exc

    def count(self) -> int:
        """Number of chunks in the collection."""
        return int(self._collection.count())

    def upsert(self, chunks: Sequence[Chunk], vectors: Vectors) -> None:
        """Insert or replace chunks with their embeddings, in batches the server accepts."""
        for start in range(0, len(chunks), self._max_batch):
            part = chunks[start : start + self._max_batch]
            self._collection.upsert(
                ids=[c.chunk_id for c in part],
                embeddings=vectors[start : start + len(part)],
                metadatas=[c.metadata() for c in part],
                documents=[c.text for c in part],
            )
        if self.keyword is not None:
            self.keyword.add(chunks)

    def ids_of_document(self, doc_id: str) -> set[str]:
        """Ids of every chunk stored for one document."""
        found = self._collection.get(where={"doc_id": doc_id}, include=[])
        return set(found["ids"])

    def delete(self, ids: Sequence[str]) -> None:
        """Remove chunks by id (missing ids are ignored)."""
        for start in range(0, len(ids), self._max_batch):
            self._collection.delete(ids=list(ids[start : start + self._max_batch]))
        if self.keyword is not None:
            self.keyword.delete(ids)

    def all_ids(self) -> set[str]:
        """Every chunk id in the collection (for consistency checks and tests)."""
        return set(self._collection.get(include=[])["ids"])

    def fetch(self, ids: Sequence[str], query: Vectors) -> list[Hit]:
        """Chunks by id, scored by cosine similarity to a normalized query vector (for keyword-only finds)."""
        if not ids:
            return []
        found = self._collection.get(ids=list(ids), include=["documents", "metadatas", "embeddings"])
        vectors = np.asarray(found["embeddings"], dtype=np.float32)
        similarity = vectors @ np.asarray(query, dtype=np.float32)
        docs, metas = found["documents"] or [], found["metadatas"] or []
        return [_hit(i, d, m, 1.0 - float(s)) for i, d, m, s in zip(found["ids"], docs, metas, similarity, strict=True)]

    def sync_keyword(self) -> tuple[int, int]:
        """Bring the keyword index in line with the collection (after a crash, or for an index built before it
        existed): (chunks added, chunks removed)."""
        if self.keyword is None:
            return 0, 0
        stored, indexed = self.all_ids(), self.keyword.ids()
        missing, extra = sorted(stored - indexed), sorted(indexed - stored)
        for start in range(0, len(missing), self._max_batch):
            found = self._collection.get(ids=missing[start : start + self._max_batch],
                                         include=["documents", "metadatas"])
            self.keyword.add([Chunk(i, d or "", "", str((m or {}).get("doc_id", "")), "", 0)
                              for i, d, m in zip(found["ids"], found["documents"] or [], found["metadatas"] or [],
                                                 strict=True)])
        self.keyword.delete(extra)
        return len(missing), len(extra)

    def search(self, query: Vectors, k: int, where: dict[str, Any] | None = None) -> list[Hit]:
        """The k chunks closest to a normalized query vector, best first."""
        result = self._collection.query(
            query_embeddings=np.asarray([query], dtype=np.float32),
            n_results=k,
            where=where,
            include=["documents", "metadatas", "distances"],
        )
        ids = result["ids"][0]
        docs = (result["documents"] or [[]])[0]
        metas = (result["metadatas"] or [[]])[0]
        dists = (result["distances"] or [[]])[0]
        return [_hit(i, d, m, dist) for i, d, m, dist in zip(ids, docs, metas, dists, strict=True)]


def _hit(chunk_id: str, text: str | None, meta: Any, distance: float) -> Hit:
    meta = dict(meta or {})
    page = meta.get("page")
    return Hit(
        chunk_id=chunk_id,
        text=text or "",
        source=str(meta.get("source", "")),
        score=round(1.0 - float(distance), 6),  # cosine distance → cosine similarity
        page=int(page) if page is not None else None,
        headings=str(meta.get("headings", "")),
        title=str(meta.get("title", "")),
        doc_id=str(meta.get("doc_id", "")),
    )
