"""The quote ranking's sentence vectors, remembered: a server quotes from the same popular chunks again and again.

The extractive ranking (rag.core.extract) embeds the best ten sentences of an answer's excerpts whenever it quotes
them; that was the largest share of a worker's CPU in benchmarks.app_cost (a third of it, for the third of answers
that were quoted). A sentence's vector depends on its text alone, so the last SENTENCES of them are kept, keyed by
text (1.5 KiB each for MiniLM: 6 MiB in all).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from rag.components.recent import Recent
from rag.core.extract import Encoder
from rag.core.ports import Vectors

SENTENCES = 4096
# A model call pads every sentence to the longest one in it, and the quote ranking's ten sentences run from a few
# words to a paragraph: one call spent 2.2x the tokens it needed on benchmarks.app_cost's quoted answers. Calls of
# this many sentences of similar length: 56 -> 36 CPU ms per quoted answer (MiniLM, bf16, one thread; docs).
SIMILAR_LENGTHS = 4


class RememberedSentences:
    """An Encoder whose `embed_documents` runs the model only on sentences it has not seen lately; safe from many
    threads (two threads may embed the same new sentence once each: the model is the slow part, not the memory)."""

    def __init__(self, encoder: Encoder, size: int = SENTENCES) -> None:
        self._encoder = encoder
        self._vectors: Recent[str, Vectors] = Recent(size)

    def embed_query(self, text: str) -> Vectors:
        """The encoder's question vector (its own embedder remembers recent questions)."""
        return self._encoder.embed_query(text)

    def embed_documents(self, texts: Sequence[str]) -> Vectors:
        """One normalized row per text, from memory where the text was embedded lately."""
        if not texts:
            return self._encoder.embed_documents(texts)
        known = {text: vector for text in texts if (vector := self._vectors.get(text)) is not None}
        missing = list(dict.fromkeys(text for text in texts if text not in known))
        if missing:
            fresh = {text: vector for group in _by_length(missing, SIMILAR_LENGTHS)
                     for text, vector in zip(group, self._encoder.embed_documents(group), strict=True)}
            for text, vector in fresh.items():
                self._vectors.put(text, vector)
            known |= fresh
        return np.stack([known[text] for text in texts]).astype(np.float32, copy=False)


def _by_length(texts: Sequence[str], size: int) -> list[list[str]]:
    """The texts shortest first, in groups of `size` (characters stand in for tokens)."""
    ordered = sorted(texts, key=len)
    return [ordered[start:start + size] for start in range(0, len(ordered), size)]
