"""Fakes of the core's ports (rag.core.ports) for tests of the answer logic that need no model, index or server."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from rag.core.access import Principal
from rag.core.ports import Admits, Delta, DenseIndex, KeywordSearch, Stop, Stopped, Usage, Vectors
from rag.core.prompt import Message
from rag.core.retrieve import Retriever
from rag.core.types import Hit

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
    access: str = ""


class MemoryIndex:
    """A DenseIndex in a list: exact cosine search over HashingEncoder vectors (Chroma's contract, no Chroma)."""

    name = "memory"

    def __init__(self, pages: Sequence[Page], encoder: HashingEncoder) -> None:
        # A chunk's text starts with its section heading, as ingest writes it.
        self.hits = [Hit(chunk_id=f"c{n}", text=f"{page.heading}\n{page.text}", source=page.source, score=0.0,
                         headings=page.heading, doc_id=page.source, access=page.access)
                     for n, page in enumerate(pages)]
        self.vectors = encoder.embed_documents([hit.text for hit in self.hits])

    def _scored(self, query: Vectors, admits: Admits | None) -> list[Hit]:
        scores = (self.vectors @ query).tolist() if self.hits else []
        hits = [replace(hit, score=round(score, 6)) for hit, score in zip(self.hits, scores, strict=True)]
        return [hit for hit in hits if admits is None or admits(hit.access)]

    def search(self, query: Vectors, k: int, where: dict[str, Any] | None = None, admits: Admits | None = None,
               overfetch: int = 0, likely: Callable[[str], bool] | None = None) -> list[Hit]:
        """The k closest admitted chunks, best first."""
        return sorted(self._scored(query, admits), key=lambda hit: hit.score, reverse=True)[:k]

    def fetch(self, ids: Sequence[str], query: Vectors, admits: Admits | None = None) -> list[Hit]:
        """Chunks by id, scored against the query."""
        return [hit for hit in self._scored(query, admits) if hit.chunk_id in set(ids)]

    def count(self) -> int:
        """Number of chunks."""
        return len(self.hits)


@dataclass(frozen=True)
class MemorySearchIndex:
    """A SearchIndex of a MemoryIndex alone (dense retrieval, no keyword side)."""

    dense: DenseIndex
    keyword: KeywordSearch | None = None


def memory_retriever(*pages: Page) -> Retriever:
    """The real Retriever (dense mode) over pages held in memory, embedded by the HashingEncoder."""
    encoder = HashingEncoder()
    return Retriever(encoder, MemorySearchIndex(MemoryIndex(pages, encoder)), mode="dense")
