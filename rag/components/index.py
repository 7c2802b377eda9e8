"""The two indexes under the retriever, side by side: dense (Chroma) and keyword (BM25), each behind a Protocol of
rag.core.ports, and the writer that mirrors every change into both so that they always hold the same chunks. The
keyword index is embedded (rag.components.keyword, SQLite beside the data dir) or shared by replicas in PostgreSQL
(rag.components.keyword_pg)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from rag.components.store import ChromaStore
from rag.core.access import DocAccess
from rag.core.ports import KeywordStore, Vectors
from rag.core.types import Chunk


class Index:
    """What ingest writes to: the dense store and the keyword index, kept in step."""

    def __init__(self, dense: ChromaStore, keyword: KeywordStore | None) -> None:
        self.dense = dense
        self.keyword = keyword
        self.name = dense.name

    def heartbeat(self) -> None:
        """Raise StoreUnavailable unless the dense store answers."""
        self.dense.heartbeat()

    def count(self) -> int:
        """Number of chunks stored."""
        return self.dense.count()

    def upsert(self, chunks: Sequence[Chunk], vectors: Vectors) -> None:
        """Store chunks with their vectors, dense side first (a crash in between is repaired by sync_keyword)."""
        self.dense.upsert(chunks, vectors)
        if self.keyword is not None:
            self.keyword.add(chunks)

    def replace(self, chunks: Sequence[Chunk], vectors: Vectors, documents: Mapping[str, Sequence[str]]) -> None:
        """Store chunks with their vectors, then remove each of `documents`' stored chunks that are not among its
        ids (document id -> its chunk ids now): new chunks are in place before old ones go, so that a file is never
        missing from search."""
        self.upsert(chunks, vectors)
        for doc_id, ids in documents.items():
            self.delete(sorted(self.ids_of_document(doc_id) - set(ids)))

    def delete(self, ids: Sequence[str]) -> None:
        """Remove chunks from both sides."""
        self.dense.delete(ids)
        if self.keyword is not None:
            self.keyword.delete(ids)

    def set_access(self, ids: Sequence[str], access: DocAccess, previous: tuple[str, ...] = ()) -> None:
        """Relabel a document's chunks on both sides, without embedding or tokenizing again."""
        self.dense.set_access(ids, access, previous)
        if self.keyword is not None:
            self.keyword.set_access(ids, access)

    def ids_of_document(self, doc_id: str) -> set[str]:
        """Ids of every chunk stored for one document."""
        return self.dense.ids_of_document(doc_id)

    def all_ids(self) -> set[str]:
        """Every chunk id in the dense store."""
        return self.dense.all_ids()

    def repair_and_count(self) -> int:
        """The end of a sync: what a crash (or an index older than keyword search) left out of the keyword index
        repaired (sync_keyword), then the number of chunks stored."""
        self.sync_keyword()
        return self.count()

    def sync_keyword(self) -> tuple[int, int]:
        """Bring the keyword index in line with the dense store (after a crash, or for an index built before
        keyword search or access labels existed): (chunks added or relabelled, chunks removed)."""
        if self.keyword is None:
            return 0, 0
        stored, indexed = self.all_ids(), self.keyword.ids()
        missing, extra = sorted(stored - indexed), sorted(indexed - stored)
        self.keyword.add(self.dense.chunks(missing))
        self.keyword.delete(extra)
        unlabelled = sorted(set(self.keyword.unlabelled()) & stored)
        by_access: dict[DocAccess, list[str]] = {}
        for chunk in self.dense.chunks(unlabelled):
            by_access.setdefault(chunk.access, []).append(chunk.chunk_id)
        for access, ids in by_access.items():
            self.keyword.set_access(ids, access)
        return len(missing) + len(unlabelled), len(extra)
