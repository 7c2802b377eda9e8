"""rag.components.sentence_cache: the quote ranking's sentence vectors, remembered by text."""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from rag.components.sentence_cache import RememberedSentences
from rag.core.ports import Vectors
from tests.fakes import HashingEncoder


class Counting(HashingEncoder):
    """Records the texts the model was run on."""

    def __init__(self) -> None:
        self.embedded: list[str] = []

    def embed_documents(self, texts: Sequence[str]) -> Vectors:
        self.embedded += texts
        return super().embed_documents(texts)


def test_rows_equal_the_models_and_only_new_sentences_are_embedded() -> None:
    model = Counting()
    remembered = RememberedSentences(model, size=3)
    first = remembered.embed_documents(["a b", "c d", "a b"])
    assert np.array_equal(first, HashingEncoder().embed_documents(["a b", "c d", "a b"]))
    assert model.embedded == ["a b", "c d"]  # a repeated sentence is embedded once
    again = remembered.embed_documents(["c d", "e f", "a b"])
    assert np.array_equal(again, HashingEncoder().embed_documents(["c d", "e f", "a b"]))
    assert model.embedded == ["a b", "c d", "e f"]
    remembered.embed_documents(["g h"])  # the least recently used ("c d") goes: 3 at most
    remembered.embed_documents(["c d", "a b"])
    assert model.embedded == ["a b", "c d", "e f", "g h", "c d"]
    assert np.array_equal(remembered.embed_query("a b"), HashingEncoder().embed_query("a b"))
    assert remembered.embed_documents([]).shape == (0, HashingEncoder.dimension)  # the model's own empty answer


def test_many_threads_get_their_own_rows() -> None:
    remembered = RememberedSentences(Counting(), size=50)
    batches = [[f"word{n % 70} other{n % 13}", f"word{n % 11}"] for n in range(400)]
    with ThreadPoolExecutor(8) as pool:
        rows = list(pool.map(remembered.embed_documents, batches))
    for batch, got in zip(batches, rows, strict=True):
        assert np.array_equal(got, HashingEncoder().embed_documents(batch))
