"""rag.components.sentence_cache: the quote ranking's sentence vectors, remembered by text."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from itertools import pairwise
from pathlib import Path

import numpy as np
import pytest

from ingest import service
from rag.components.sentence_cache import RememberedSentences, SentenceVectorFile, keep_chunk_sentences
from rag.config import Settings
from rag.core.access import LOCAL_OPERATOR
from rag.core.extract import passage_sentences
from rag.core.ports import Embedder, Vectors, sentence_encoder
from rag.core.prompt import REFUSAL
from rag.core.types import Chunk
from rag.wiring import build_engine, build_store
from tests.conftest import CountingEmbedder
from tests.fakes import HashingEncoder, ScriptedChatModel

LEAVE_QUESTION = "How many days of annual leave do staff get?"


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


def test_the_file_keeps_vectors_by_space_and_text_and_never_overwrites(tmp_path: Path) -> None:
    path = tmp_path / "index" / "quote-vectors.sqlite3"
    kept = SentenceVectorFile(path, "minilm|auto|auto")
    rows = HashingEncoder().embed_documents(["alpha beta", "gamma"])
    kept.put({"alpha beta": rows[0], "gamma": rows[1]})
    got = SentenceVectorFile(path, "minilm|auto|auto").get(["gamma", "alpha beta", "unseen"])  # another process
    assert set(got) == {"gamma", "alpha beta"} and np.array_equal(got["gamma"], rows[1])
    assert got["gamma"].dtype == np.float32
    assert SentenceVectorFile(path, "e5|auto|auto").get(["gamma"]) == {}  # another model's space reads none
    kept.put({"gamma": rows[0]})  # a row already kept stays as it is
    assert np.array_equal(kept.get(["gamma"])["gamma"], rows[1])
    many = [f"sentence {n}" for n in range(1200)]  # more keys than one SELECT takes
    kept.put(dict(zip(many, HashingEncoder().embed_documents(many), strict=True)))
    assert len(kept.get(many)) == 1200


def test_an_unusable_file_makes_vectors_per_answer_and_is_left_alone(tmp_path: Path,
                                                                    caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "quote-vectors.sqlite3"
    path.write_bytes(b"not a database " * 100)
    kept = SentenceVectorFile(path, "hashing")
    assert not kept.usable and "removed" in caplog.text
    kept.put({"a b": HashingEncoder().embed_query("a b")})
    model = Counting()
    rows = RememberedSentences(model, kept=kept).embed_documents(["a b", "c d"])
    assert np.array_equal(rows, HashingEncoder().embed_documents(["a b", "c d"])) and model.embedded == ["a b", "c d"]
    assert path.read_bytes() == b"not a database " * 100  # nothing of it touched


def test_a_sentence_kept_by_one_worker_is_not_embedded_again_by_another(tmp_path: Path) -> None:
    path = tmp_path / "quote-vectors.sqlite3"
    first, second = Counting(), Counting()
    RememberedSentences(first, kept=SentenceVectorFile(path, "hashing")).embed_documents(["a b", "c d"])
    rows = RememberedSentences(second, kept=SentenceVectorFile(path, "hashing")).embed_documents(["c d", "e f", "a b"])
    assert np.array_equal(rows, HashingEncoder().embed_documents(["c d", "e f", "a b"]))
    assert sorted(first.embedded) == ["a b", "c d"] and second.embedded == ["e f"]


def test_ingest_keeps_every_quotable_sentence_of_its_chunks_once(tmp_path: Path) -> None:
    text = ("Setup > Install\nTo install the package, run the installer as root. The installer asks for a folder.\n\n"
            "Next\nShort.")
    chunks = [Chunk("c1", text, "a.md", "d", "h", 0, headings=("Setup", "Install")),
              Chunk("c2", "The installer asks for a folder. It never writes outside it.", "a.md", "d", "h", 1)]
    kept, model = SentenceVectorFile(tmp_path / "q.sqlite3", "hashing"), Counting()
    assert keep_chunk_sentences(chunks, model, kept) == 3
    assert sorted(model.embedded) == ["It never writes outside it.", "The installer asks for a folder.",
                                      "To install the package, run the installer as root."]
    assert len(model.calls) == 1  # one call: the embedder sorts and batches them itself
    assert keep_chunk_sentences(chunks, model, kept) == 0 and len(model.calls) == 1  # a re-run embeds nothing
    # What the quote ranking asks for is what ingest kept: the heading line is not a sentence of the passage.
    asked = [sentence.text for sentence in passage_sentences(text.split("\n", 1)[1])]
    assert set(kept.get(asked)) == set(asked)


def test_a_failed_write_is_skipped_and_the_answer_goes_on(tmp_path: Path) -> None:
    path = tmp_path / "q.sqlite3"
    kept = SentenceVectorFile(path, "hashing")
    blocker = sqlite3.connect(path, timeout=0)
    blocker.execute("BEGIN EXCLUSIVE")  # another process holds the file
    try:
        rows = RememberedSentences(Counting(), kept=kept).embed_documents(["a b"])
    finally:
        blocker.rollback()
    assert np.array_equal(rows, HashingEncoder().embed_documents(["a b"])) and kept.get(["a b"]) == {}


def _quoted(settings: Settings, embedder: CountingEmbedder) -> tuple[str, int]:
    """An answer quoted after the model declined, and the sentences the model embedded for it."""
    engine = build_engine(settings, embedder, build_store(settings), ScriptedChatModel(REFUSAL))
    before = embedder.embedded
    answer = engine.ask(LEAVE_QUESTION, principal=LOCAL_OPERATOR)
    assert answer.mode == "extracted", answer.text
    return answer.text, embedder.embedded - before


def test_an_ingested_folder_is_quoted_without_embedding_its_sentences_again(
        docs: Path, write: Callable[[str, str | bytes], Path], settings: Settings, real_embedder: Embedder) -> None:
    # The quote model alone (a pair's first), counted: the engine ranks sentences with it as it would in a pair.
    embedder = CountingEmbedder(sentence_encoder(real_embedder))
    write("hr/leave.md", "# Leave\nStaff get 25 days of annual leave per year. Unused days may be carried over to "
                         "the next year. Requests go to your manager through the HR portal.")
    settings = settings.model_copy(update={"quote_vectors_at_ingest": True})
    service.sync([docs], settings, embedder=embedder)
    assert (settings.index_dir / "quote-vectors.sqlite3").exists()
    quoted, embedded = _quoted(settings, embedder)
    assert "25 days of annual leave" in quoted and embedded == 0
    # The same folder without the vectors made at ingest: the same quote, the sentences embedded at the question.
    later = settings.model_copy(update={"data_dir": settings.data_dir.parent / "other",
                                        "quote_vectors_at_ingest": False})
    service.sync([docs], later, embedder=embedder)
    assert not (later.index_dir / "quote-vectors.sqlite3").exists()
    again, embedded = _quoted(later, embedder)
    assert again == quoted and embedded > 0
    assert _quoted(later, embedder) == (quoted, 0)  # kept by the first answer
