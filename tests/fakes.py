"""Fakes of the core's ports (rag.core.ports) for tests of the answer logic that need no model, index or server."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Generator, Iterable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from rag.core.access import DocAccess, Principal, Visible
from rag.core.ports import Admits, Delta, DenseIndex, KeywordSearch, Nearest, Stop, Stopped, Usage, Vectors
from rag.core.prompt import Message
from rag.core.retrieve import Retriever
from rag.core.types import Chunk, Hit

Reply = str | Callable[[Sequence[Message]], str]

DIMENSION = 256
_WORD = re.compile(r"\w+")


class ListSearcher:
    """Returns the hits it was given, the first k, for every question; records the questions searched."""

    def __init__(self, hits: Sequence[Hit]) -> None:
        self.hits = list(hits)
        self.questions: list[str] = []

    def search(self, question: str, k: int, principal: Principal) -> list[Hit]:
        """The first k hits, whoever asks (access is the real retriever's job, tested there)."""
        self.questions.append(question)
        return self.hits[:k]

    def warm(self) -> None:
        """Nothing to load."""


class ScriptedChatModel:
    """Replies with the scripted replies in turn (the last one repeats), each a text or a function of the request's
    messages; records every request's messages."""

    model = "scripted"
    base_url = "http://scripted.invalid/v1"

    def __init__(self, *replies: Reply) -> None:
        self.replies = list(replies)
        self.requests: list[list[Message]] = []

    def _next(self, messages: Sequence[Message]) -> str:
        self.requests.append(list(messages))
        reply = self.replies[min(len(self.requests), len(self.replies)) - 1]
        return reply if isinstance(reply, str) else reply(messages)

    def complete(self, messages: Sequence[Message], max_tokens: int | None = None) -> str:
        """The next scripted reply."""
        return self._next(messages)

    def stream(self, messages: Sequence[Message], max_tokens: int | None = None,
               stop: Stop | None = None) -> Generator[Delta, None, None]:
        """The next scripted reply word by word, then its usage."""
        words = re.findall(r"\S+\s*", self._next(messages))
        for word in words:
            if stop is not None and stop.is_set():
                raise Stopped
            yield Delta(text=word)
        yield Delta(usage=Usage(prompt_tokens=100, completion_tokens=len(words)))


class HashingEncoder:
    """A deterministic bag-of-words embedder: each lower-cased word hashed into one of DIMENSION slots."""

    name = "hashing"
    batch_size = 64
    max_tokens = 512
    dimension = DIMENSION

    def _vector(self, text: str) -> Vectors:
        vector = np.zeros(DIMENSION, dtype=np.float32)
        for word in _WORD.findall(text.lower()):
            vector[int(hashlib.blake2b(word.encode(), digest_size=4).hexdigest(), 16) % DIMENSION] += 1.0
        norm = float(np.linalg.norm(vector))
        return vector / norm if norm else vector

    def embed_documents(self, texts: Sequence[str]) -> Vectors:
        """One normalized row per text."""
        return np.stack([self._vector(text) for text in texts]) if texts else np.zeros((0, DIMENSION), np.float32)

    def embed_query(self, text: str) -> Vectors:
        """The question's normalized vector."""
        return self._vector(text)


@dataclass(frozen=True)
class Page:
    """A one-chunk document for MemoryIndex: its path, section heading and text."""

    source: str
    heading: str
    text: str
    access: DocAccess = DocAccess()


class MemoryIndex:
    """A DenseIndex in a list: exact cosine search (Chroma's contract, tests/test_contracts.py, without Chroma)."""

    name = "memory"

    def __init__(self) -> None:
        self.hits: dict[str, Hit] = {}
        self.vectors: dict[str, Vectors] = {}

    def upsert(self, chunks: Sequence[Chunk], vectors: Vectors) -> None:
        """Insert or replace chunks with their vectors."""
        for chunk, vector in zip(chunks, vectors, strict=True):
            self.hits[chunk.chunk_id] = Hit(chunk.chunk_id, chunk.text, chunk.source, 0.0, chunk.page,
                                            " > ".join(chunk.headings), chunk.title, chunk.doc_id, chunk.access.label)
            self.vectors[chunk.chunk_id] = vector

    def _scored(self, ids: Iterable[str], query: Vectors, admits: Admits | None) -> list[Hit]:
        hits = [replace(self.hits[i], score=round(float(self.vectors[i] @ query), 6)) for i in ids if i in self.hits]
        return [hit for hit in hits if admits is None or admits(hit.access)]

    def search(self, query: Vectors, k: int, visible: Visible | None = None, overfetch: int = 0,
               likely: Callable[[str], bool] | None = None) -> list[Hit]:
        """The k closest visible chunks, best first (the stored label decides)."""
        admits = visible.admits if visible is not None else None
        return sorted(self._scored(self.hits, query, admits), key=lambda hit: hit.score, reverse=True)[:k]

    def fetch(self, ids: Sequence[str], query: Vectors, admits: Admits | None = None) -> list[Hit]:
        """Chunks by id, scored against the query."""
        return self._scored(ids, query, admits)

    def nearest(self, query: Vectors, k: int, overfetch: int, likely: Callable[[str], bool]) -> Nearest:
        """The overfetch nearest, exact."""
        ranked = sorted(self._scored(self.hits, query, None), key=lambda hit: hit.score, reverse=True)[:overfetch]
        return Nearest([hit.chunk_id for hit in ranked if likely(hit.chunk_id)][:k],
                       {hit.chunk_id: 1.0 - hit.score for hit in ranked})

    def read(self, nearest: Nearest, named: Sequence[str], query: Vectors, visible: Visible,
             admits: Admits | None) -> tuple[list[Hit], list[Hit]]:
        """The picked chunks visible, and the named ones admitted."""
        return self._scored(nearest.picked, query, visible.admits), self._scored(named, query, admits)

    def count(self) -> int:
        """Number of chunks."""
        return len(self.hits)


@dataclass(frozen=True)
class MemorySearchIndex:
    """A SearchIndex of a MemoryIndex alone (dense retrieval, no keyword side)."""

    dense: DenseIndex
    keyword: KeywordSearch | None = None


def page_chunks(*pages: Page) -> list[Chunk]:
    """One chunk a page, its text starting with its section heading (as ingest writes it)."""
    return [Chunk(f"c{n}", f"{page.heading}\n{page.text}", page.source, page.source, "", 0, headings=(page.heading,),
                  access=page.access) for n, page in enumerate(pages)]


def memory_retriever(*pages: Page) -> Retriever:
    """The real Retriever (dense mode) over pages held in memory, embedded by the HashingEncoder."""
    encoder, index, chunks = HashingEncoder(), MemoryIndex(), page_chunks(*pages)
    index.upsert(chunks, encoder.embed_documents([chunk.text for chunk in chunks]))
    return Retriever(encoder, MemorySearchIndex(index), mode="dense")
