"""Contract suites: every implementation of a core port (rag.core.ports) passes the same tests, the fakes the answer
logic runs on (tests/fakes.py) included, so that what holds on a fake holds on the real part.

- KeywordStore: the embedded SQLite index and the PostgreSQL one.
- DenseIndex: embedded Chroma, a Chroma server and the in-memory fake.
- Embedder: the served embedder (the bundled pair on ONNX Runtime), MiniLM alone and the hashing fake.
- ChatModel: the openai-SDK client against a fake server and against the real vLLM, and the scripted fake."""

from __future__ import annotations

import functools
import threading
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from rag.components.keyword import KeywordIndex
from rag.components.keyword_pg import PgKeywordIndex
from rag.components.store import ChromaStore
from rag.config import Settings
from rag.core.access import LOCAL_OPERATOR, AccessPolicy, DocAccess, Principal
from rag.core.ports import ChatModel, DenseIndex, Embedder, KeywordStore, Stop, Stopped, sentence_encoder
from rag.core.prompt import Message
from rag.core.types import Chunk
from rag.wiring import build_chroma_client, build_llm
from tests.conftest import LLMServer, PostgresServer
from tests.fake_llm import FakeLLMServer
from tests.fakes import HashingEncoder, MemoryIndex, ScriptedChatModel

HR, ENG = DocAccess(("hr",)), DocAccess(("eng",))
HR_READER = Principal("hr reader", frozenset({"hr"}))
POLICY = AccessPolicy()


def chunk(chunk_id: str, text: str, access: DocAccess = DocAccess()) -> Chunk:
    """A one-chunk document."""
    return Chunk(chunk_id, text, f"{chunk_id}.md", chunk_id, "h", 0, headings=("Notes",), access=access)


CHUNKS = [chunk("vpn", "Reset the VPN token in the self-service portal."),
          chunk("leave", "Staff get 25 days of annual leave per year.", HR),
          chunk("printer", "Printers use toner cartridges from the supply room.", ENG),
          chunk("apt", "使用 apt-mark hold 阻止软件包被升级。")]


# --- KeywordStore ---------------------------------------------------------------------------------------------------

@pytest.fixture(params=["sqlite", "postgres"])
def keyword_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[KeywordStore]:
    if request.param == "sqlite":
        yield KeywordIndex(tmp_path / "keyword.sqlite3")
        return
    server: PostgresServer = request.getfixturevalue("postgres_server")
    index = PgKeywordIndex(server.database()[0], "docs")
    yield index
    index.close()


def test_keyword_store_finds_by_words_best_first_with_coverage(keyword_store: KeywordStore) -> None:
    keyword_store.add(CHUNKS)
    hits = keyword_store.search("How do I reset my VPN token?", 5)
    assert [hit.chunk_id for hit in hits] == ["vpn"]
    assert 0 < hits[0].coverage <= 1 and hits[0].score > 0
    assert keyword_store.search("zyzzyva", 5) == []
    named = keyword_store.search("VPN token", 5, include=["printer"])
    assert [(hit.chunk_id, hit.score) for hit in named][-1] == ("printer", 0.0)
    assert [hit.chunk_id for hit in keyword_store.search("软件包 升级", 5)] == ["apt"]


def test_keyword_store_replaces_deletes_and_lists(keyword_store: KeywordStore) -> None:
    keyword_store.add(CHUNKS)
    keyword_store.add([chunk("vpn", "The cafeteria opens at noon.")])
    assert keyword_store.search("VPN token", 5) == []
    keyword_store.delete(["printer", "unknown"])
    assert keyword_store.ids() == {"vpn", "leave", "apt"}
    assert keyword_store.unlabelled() == []


def test_keyword_store_never_shows_a_reader_what_their_groups_do_not_hold(keyword_store: KeywordStore) -> None:
    keyword_store.add(CHUNKS)
    admits = functools.partial(POLICY.label_allows, HR_READER)
    assert {hit.chunk_id for hit in keyword_store.search("toner printers leave days", 5, admits=admits)} == {"leave"}
    share, likely = keyword_store.visibility(admits)
    assert share == pytest.approx(3 / 4)  # the open chunks and HR's
    assert (likely("leave"), likely("printer"), likely("unknown")) == (True, False, False)
    keyword_store.set_access(["printer"], HR)
    assert {hit.chunk_id for hit in keyword_store.search("toner printers", 5, admits=admits)} == {"printer"}
    assert keyword_store.languages()[HR.label] == (2, 0)
    assert keyword_store.languages()[DocAccess().label] == (2, 1)


# --- DenseIndex -----------------------------------------------------------------------------------------------------

@pytest.fixture(params=["memory", "embedded", "server"])
def dense_index(request: pytest.FixtureRequest, tmp_path: Path) -> DenseIndex:
    if request.param == "memory":
        index = MemoryIndex()
    else:
        url = request.getfixturevalue("chroma_server").url if request.param == "server" else ""
        settings = Settings(data_dir=tmp_path / "data", chroma_url=url, _env_file=None)  # type: ignore[call-arg]
        index = ChromaStore(build_chroma_client(settings), f"t{uuid.uuid4().hex[:12]}", "hashing")  # type: ignore[assignment]
    index.upsert(CHUNKS, HashingEncoder().embed_documents([c.text for c in CHUNKS]))  # type: ignore[attr-defined]
    return index


def test_dense_index_returns_the_nearest_with_their_cosines(dense_index: DenseIndex) -> None:
    encoder = HashingEncoder()
    query = encoder.embed_query("reset the VPN token")
    hits = dense_index.search(query, 2)
    assert hits[0].chunk_id == "vpn" and len(hits) == 2
    assert hits[0].score == pytest.approx(float(encoder.embed_documents([CHUNKS[0].text])[0] @ query), abs=1e-4)
    assert hits[0].score >= hits[1].score
    vpn = hits[0]
    assert (vpn.source, vpn.doc_id, vpn.headings, vpn.page, vpn.access) == ("vpn.md", "vpn", "Notes", None, "open")
    assert dense_index.count() == 4


def test_dense_index_filters_by_access_and_fetches_by_id(dense_index: DenseIndex) -> None:
    query = HashingEncoder().embed_query("toner printers and annual leave days")
    visible = POLICY.visible_to(HR_READER)
    assert visible is not None and POLICY.visible_to(LOCAL_OPERATOR) is None
    seen = dense_index.search(query, 4, visible)
    assert "printer" not in {hit.chunk_id for hit in seen} and "leave" in {hit.chunk_id for hit in seen}
    assert len(dense_index.search(query, 4)) == 4
    admits = visible.admits
    fetched = dense_index.fetch(["printer", "leave"], query, admits)
    assert [hit.chunk_id for hit in fetched] == ["leave"] and fetched[0].score > 0


def test_dense_index_reads_a_look_ahead_and_named_chunks_together(dense_index: DenseIndex) -> None:
    query = HashingEncoder().embed_query("toner printers and annual leave days")
    visible = POLICY.visible_to(HR_READER)
    assert visible is not None
    ahead = dense_index.nearest(query, 1, 4, lambda chunk_id: chunk_id != "printer")  # the label copy's rule
    assert len(ahead.picked) == 1 and set(ahead.distances) == {chunk.chunk_id for chunk in CHUNKS}
    named = [chunk_id for chunk_id in ("printer", "leave", "vpn") if chunk_id not in ahead.picked]
    dense, extra = dense_index.read(ahead, named, query, visible, visible.admits)
    assert [hit.chunk_id for hit in dense] == [hit.chunk_id for hit in dense_index.search(query, 1, visible)]
    fetched = {hit.chunk_id: hit.score for hit in dense_index.fetch(named, query, visible.admits)}
    assert "printer" not in fetched  # the hidden chunk stays out of the named ones too
    assert {hit.chunk_id: pytest.approx(hit.score, abs=1e-5) for hit in extra} == fetched


def test_chroma_reads_a_look_ahead_and_named_chunks_in_two_calls(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path / "data", _env_file=None)  # type: ignore[call-arg]
    index = ChromaStore(build_chroma_client(settings), "calls", "hashing")
    index.upsert(CHUNKS, HashingEncoder().embed_documents([c.text for c in CHUNKS]))
    calls: list[str] = []
    collection = index._collection
    for name in ("query", "get"):
        method = getattr(collection, name)
        setattr(collection, name, lambda *a, _m=method, _n=name, **k: calls.append(_n) or _m(*a, **k))
    visible = POLICY.visible_to(HR_READER)
    assert visible is not None
    query = HashingEncoder().embed_query("annual leave days")
    ahead = index.nearest(query, 1, 4, lambda _chunk_id: True)
    dense, extra = index.read(ahead, [i for i in ("vpn", "leave") if i not in ahead.picked], query, visible,
                              visible.admits)
    assert calls == ["query", "get"]  # one look-ahead query, one read of both sides' rows (three before)
    assert len(dense) == 1 and {hit.chunk_id for hit in dense + extra} == {"vpn", "leave"}


# --- Embedder -------------------------------------------------------------------------------------------------------

@pytest.fixture(params=["served", "first", "hashing"])
def any_embedder(request: pytest.FixtureRequest) -> Embedder:
    if request.param == "hashing":
        return HashingEncoder()  # type: ignore[return-value]
    served: Embedder = request.getfixturevalue("real_embedder")
    return served if request.param == "served" else sentence_encoder(served)


def test_embedder_gives_normalized_rows_of_its_dimension(any_embedder: Embedder) -> None:
    texts = ["Staff get 25 days of annual leave per year.", "员工每年有二十五天年假。"]
    rows = any_embedder.embed_documents(texts)
    assert rows.shape == (2, any_embedder.dimension) and rows.dtype == np.float32
    # bf16 (the torch embedder on CPUs with native bf16) keeps 8 bits of mantissa: norms within 2^-8, not 1e-3.
    assert np.linalg.norm(rows, axis=1) == pytest.approx([1.0, 1.0], abs=4e-3)
    query = any_embedder.embed_query("How many days of leave?")
    assert query.shape == (any_embedder.dimension,) and float(np.linalg.norm(query)) == pytest.approx(1.0, abs=4e-3)
    assert np.allclose(any_embedder.embed_documents(texts[:1]), rows[:1], atol=1e-4)  # alone or batched: the same
    assert any_embedder.max_tokens > 0 and any_embedder.name


def test_embedder_gives_questions_asked_at_once_the_vectors_they_get_alone(any_embedder: Embedder) -> None:
    questions = ["How many days of leave?", "年假有几天？", "How do I replace the toner?", "Who approves travel?",
                 "打印机的碳粉怎么换？", "Where is the VPN guide?"]
    alone = [any_embedder.embed_query(question) for question in questions]
    start = threading.Barrier(len(questions))

    def asked(question: str) -> np.ndarray:
        start.wait()
        return any_embedder.embed_query(question)

    with ThreadPoolExecutor(len(questions)) as pool:
        together = list(pool.map(asked, questions))
    for one, other in zip(alone, together, strict=True):  # padded to the longest: float noise, no more
        cosine = float(one @ other / np.linalg.norm(one) / np.linalg.norm(other))
        assert cosine >= 0.9999, (cosine, float(np.abs(one - other).max()))


def test_embedder_ranks_the_passage_about_the_question_first(any_embedder: Embedder) -> None:
    rows = any_embedder.embed_documents([c.text for c in CHUNKS[:3]])
    scores = rows @ any_embedder.embed_query("How many days of annual leave do staff get?")
    assert int(np.argmax(scores)) == 1


# --- ChatModel ------------------------------------------------------------------------------------------------------

HELLO: list[Message] = [{"role": "user", "content": "Say hello."}]


@pytest.fixture(params=["scripted", "openai-sdk", pytest.param("vllm", marks=pytest.mark.integration)])
def chat_model(request: pytest.FixtureRequest) -> ChatModel:
    if request.param == "scripted":
        return ScriptedChatModel("Hello there, friend.")
    if request.param == "openai-sdk":
        return FakeLLMServer(lambda messages: "Hello there, friend.").llm()
    server: LLMServer = request.getfixturevalue("llm_server")
    return build_llm(server.settings)


def test_chat_model_streams_text_then_its_usage(chat_model: ChatModel) -> None:
    deltas = list(chat_model.stream(HELLO, max_tokens=16))
    text = "".join(delta.text for delta in deltas)
    assert text.strip() and deltas[-1].usage is not None and deltas[-1].text == ""
    assert deltas[-1].usage.prompt_tokens > 0 and deltas[-1].usage.completion_tokens > 0
    if not isinstance(chat_model, ScriptedChatModel) and "fake" not in chat_model.model:
        return  # a real model's words are its own
    assert text == "Hello there, friend."


def test_chat_model_completes_at_once(chat_model: ChatModel) -> None:
    assert chat_model.complete(HELLO, max_tokens=16).strip()


def test_chat_model_stream_ends_with_stopped_once_stopped(chat_model: ChatModel) -> None:
    stop = Stop()
    stream = chat_model.stream(HELLO, max_tokens=16, stop=stop)
    stop.set()
    with pytest.raises(Stopped):
        list(stream)
