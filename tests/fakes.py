"""Fakes of the core's ports (rag.core.ports) for tests of the answer logic that need no model, index or server."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Generator, Sequence

import numpy as np

from rag.core.access import Principal
from rag.core.ports import Delta, Stop, Stopped, Usage, Vectors
from rag.core.prompt import Message
from rag.core.types import Hit

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
    """Replies with the scripted texts in turn (the last one repeats); records every request's messages."""

    model = "scripted"
    base_url = "http://scripted.invalid/v1"

    def __init__(self, *replies: str) -> None:
        self.replies = list(replies)
        self.requests: list[list[Message]] = []

    def _next(self, messages: Sequence[Message]) -> str:
        self.requests.append(list(messages))
        return self.replies[min(len(self.requests), len(self.replies)) - 1]

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
