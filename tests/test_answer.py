"""The query path over real retrieval (MiniLM + embedded Chroma or a Chroma server) and a fake LLM (openai SDK)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from ingest import service
from rag.answer import Done, QueryEngine, Retrieved, Token
from rag.config import Settings
from rag.errors import EmptyIndex, LLMUnavailable
from rag.prompt import CONDENSE_PROMPT, REFUSAL, SYSTEM_PROMPT, Message
from rag.retrieve import Retriever
from rag.wiring import build_llm, build_store
from tests.conftest import STORE_MODES, CountingEmbedder
from tests.fake_llm import FakeLLMServer

pytestmark = STORE_MODES

Write = Callable[[str, str | bytes], Path]


@pytest.fixture
def retriever(docs: Path, write: Write, settings: Settings, embedder: CountingEmbedder) -> Retriever:
    write("hr/leave.md", "# Leave\nStaff get 25 days of annual leave per year.")
    write("it/vpn.md", "# VPN\nInstall WireGuard and import the company profile to reach the intranet.")
    service.sync([docs], settings, embedder=embedder)
    return Retriever(embedder, build_store(settings))


def test_answer_streams_tokens_and_maps_citations(retriever: Retriever) -> None:
    server = FakeLLMServer(lambda messages: "Staff get 25 days [1].")
    engine = QueryEngine(retriever, server.llm(), top_k=2, refusal_threshold=0.1)
    events = list(engine.stream("How many days of annual leave do staff get?"))
    assert isinstance(events[0], Retrieved)
    assert "".join(e.text for e in events if isinstance(e, Token)) == "Staff get 25 days [1]."
    answer = events[-1].answer if isinstance(events[-1], Done) else None
    assert answer is not None and answer.answerable and answer.cited
    assert [(s.n, s.hit.source, s.cited) for s in answer.sources] == [(1, "hr/leave.md", True), (2, "it/vpn.md", False)]
    assert answer.usage.prompt_tokens == 100
    sent = server.requests[0]
    assert sent["model"] == "fake-model" and sent["stream"] is True
    assert sent["messages"][0] == {"role": "system", "content": SYSTEM_PROMPT}  # type: ignore[index]
    assert "[1] hr/leave.md, section: Leave" in sent["messages"][1]["content"]  # type: ignore[index]
    json_out = answer.as_json()
    assert json_out["sources"][0] == {"n": 1, "source": "hr/leave.md", "page": None,  # type: ignore[index]
                                      "score": answer.sources[0].hit.score, "chunk_id": answer.sources[0].hit.chunk_id,
                                      "cited": True}
    assert set(json_out["timings"]) == {"retrieve_ms", "first_token_ms", "total_ms"}  # type: ignore[arg-type]


def test_low_retrieval_score_refuses_without_calling_the_llm(retriever: Retriever) -> None:
    server = FakeLLMServer(lambda messages: "should not be called")
    engine = QueryEngine(retriever, server.llm(), top_k=2, refusal_threshold=0.99)
    answer = engine.ask("What is the boiling point of mercury?")
    assert (answer.text, answer.answerable, answer.sources) == (REFUSAL, False, [])
    assert server.requests == []


def test_uncited_answer_is_flagged_and_model_refusal_is_not_answerable(retriever: Retriever) -> None:
    uncited = QueryEngine(retriever, FakeLLMServer(lambda m: "Twenty-five days.").llm(), 2, 0.0)
    answer = uncited.ask("How many leave days?")
    assert (answer.answerable, answer.cited) == (True, False)
    refusing = QueryEngine(retriever, FakeLLMServer(lambda m: REFUSAL).llm(), 2, 0.0)
    assert refusing.ask("How many leave days?").answerable is False


def test_follow_up_is_condensed_for_retrieval_and_answered_with_history(retriever: Retriever) -> None:
    def reply(messages: list[dict[str, str]]) -> str:
        if messages[0]["content"] == CONDENSE_PROMPT:
            return '"How do I connect to the VPN?"'
        return "Install WireGuard [1]."

    server = FakeLLMServer(reply)
    history: list[Message] = [{"role": "user", "content": "Tell me about the VPN."},
                              {"role": "assistant", "content": "It gives access to the intranet [1]."}]
    answer = QueryEngine(retriever, server.llm(), 1, 0.0).ask("How do I connect to it?", history)
    assert answer.standalone_question == "How do I connect to the VPN?"
    assert answer.sources[0].hit.source == "it/vpn.md"
    final = server.requests[1]["messages"]
    assert [m["role"] for m in final] == ["system", "user", "assistant", "user"]  # type: ignore[union-attr]
    assert final[-1]["content"].endswith("Question: How do I connect to it?")  # type: ignore[index]


def test_unreachable_llm_names_the_base_url(retriever: Retriever, settings: Settings) -> None:
    dead = settings.model_copy(update={"llm_base_url": "http://127.0.0.1:9/v1", "llm_connect_timeout_s": 1.0})
    engine = QueryEngine(retriever, build_llm(dead), 2, 0.0)
    with pytest.raises(LLMUnavailable, match=r"http://127.0.0.1:9/v1.*RAG_LLM_BASE_URL"):
        engine.ask("How many leave days?")


def test_empty_index_says_to_ingest(settings: Settings, embedder: CountingEmbedder) -> None:
    engine = QueryEngine(Retriever(embedder, build_store(settings)), FakeLLMServer(lambda m: "").llm())
    with pytest.raises(EmptyIndex, match="rag-ingest"):
        engine.ask("anything")
