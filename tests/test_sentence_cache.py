"""rag.components.sentence_cache: the quote ranking's sentence vectors, remembered by text."""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from itertools import pairwise

import numpy as np

from rag.components.sentence_cache import RememberedSentences
from rag.core.ports import Vectors
from tests.fakes import HashingEncoder


class Counting(HashingEncoder):
    """Records the texts the model was run on."""

    def __init__(self) -> None:
        self.embedded: list[str] = []
        self.calls: list[list[str]] = []

    def embed_documents(self, texts: Sequence[str]) -> Vectors:
        self.embedded += texts
        self.calls.append(list(texts))
        return super().embed_documents(texts)


def test_rows_equal_the_models_and_only_new_sentences_are_embedded() -> None:
    model = Counting()
    remembered = RememberedSentences(model, size=3)
    first = remembered.embed_documents(["a b", "c d", "a b"])
    assert np.array_equal(first, HashingEncoder().embed_documents(["a b", "c d", "a b"]))
    assert sorted(model.embedded) == ["a b", "c d"]  # a repeated sentence is embedded once
    again = remembered.embed_documents(["c d", "e f", "a b"])
    assert np.array_equal(again, HashingEncoder().embed_documents(["c d", "e f", "a b"]))
    assert sorted(model.embedded) == ["a b", "c d", "e f"]
    remembered.embed_documents(["g h"])  # the least recently used ("c d") goes: 3 at most
    remembered.embed_documents(["c d", "a b"])
    assert sorted(model.embedded[3:]) == ["c d", "g h"]
    assert np.array_equal(remembered.embed_query("a b"), HashingEncoder().embed_query("a b"))
    assert remembered.embed_documents([]).shape == (0, HashingEncoder.dimension)  # the model's own empty answer


def test_many_threads_get_their_own_rows() -> None:
    remembered = RememberedSentences(Counting(), size=50)
    batches = [[f"word{n % 70} other{n % 13}", f"word{n % 11}"] for n in range(400)]
    with ThreadPoolExecutor(8) as pool:
        rows = list(pool.map(remembered.embed_documents, batches))
    for batch, got in zip(batches, rows, strict=True):
        assert np.array_equal(got, HashingEncoder().embed_documents(batch))


def test_sentences_of_similar_length_go_through_the_model_together() -> None:
    # A call pads each sentence to its longest: a paragraph in a call of short sentences multiplies their cost.
    model = Counting()
    sentences = ["one two", "a much longer sentence " * 8, "three four five", "x y", "a paragraph " * 30,
                 "six seven eight nine", "ten", "eleven twelve " * 5, "thirteen fourteen"]
    rows = RememberedSentences(model).embed_documents(sentences)
    assert np.array_equal(rows, HashingEncoder().embed_documents(sentences))  # in the order asked
    assert [len(call) for call in model.calls] == [4, 4, 1]
    lengths = [[len(text) for text in call] for call in model.calls]
    assert all(max(a) <= min(b) for a, b in pairwise(lengths))  # each call's longest <= the next's shortest
