"""Feedback and chat history on SQLite and on a real PostgreSQL server: the core feedback store, and the chat's data
layer copying 👍/👎 there with question and sources."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import sqlalchemy as sa
from chainlit.types import Feedback as ChainlitFeedback

from rag.components.feedback import Feedback, FeedbackStore
from rag.config import Settings
from rag.wiring import build_feedback_store
from tests.conftest import PostgresServer
from ui.chat.data_layer import WITHHELD_ANSWER, ChatDataLayer, history_from_steps, redact_steps

SOURCES = [{"n": 1, "source": "hr/leave.md", "page": None, "snippet": "25 days"}]


@pytest.fixture(params=["sqlite", "postgres"])
def database_urls(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, str]:
    """(feedback URL, chat-history URL) on a fresh SQLite folder or a fresh PostgreSQL database."""
    if request.param == "postgres":
        server: PostgresServer = request.getfixturevalue("postgres_server")
        return server.database()
    return f"sqlite:///{tmp_path / 'feedback.db'}", f"sqlite+aiosqlite:///{tmp_path / 'sub' / 'chat.db'}"


def test_default_store_is_sqlite_under_the_data_dir(settings: Settings) -> None:
    build_feedback_store(settings)
    assert (settings.data_dir / "feedback.db").is_file()


def test_store_records_replaces_and_removes(database_urls: tuple[str, str], settings: Settings) -> None:
    store = build_feedback_store(settings.model_copy(update={"feedback_db_url": database_urls[0]}))
    store.record(Feedback("a1", -1, "How much leave?", "25 days [1].", SOURCES, "wrong year", "alice", "chat"))
    store.record(Feedback("a1", 1, "How much leave?", "25 days [1].", SOURCES, "", "alice", "chat"))
    store.record(Feedback("a2", 1, "VPN?", "WireGuard.", [], created_at="2000-01-01T00:00:00+00:00"))
    assert [(f.answer_id, f.rating) for f in store.recent()] == [("a1", 1), ("a2", 1)]
    assert store.get("a1") == Feedback("a1", 1, "How much leave?", "25 days [1].", SOURCES, "", "alice", "chat",
                                       store.get("a1").created_at)  # type: ignore[union-attr]
    assert store.remove("a1") and not store.remove("a1")
    assert store.get("a1") is None


def test_chat_feedback_is_stored_with_question_answer_and_sources(database_urls: tuple[str, str]) -> None:
    store = FeedbackStore(sa.create_engine(database_urls[0]))
    layer = ChatDataLayer(database_urls[1], store)

    async def scenario() -> None:
        await layer.update_thread("t1", name="How much leave?", metadata={})
        await layer.execute_sql('UPDATE threads SET "userIdentifier" = :user WHERE "id" = :id',
                                {"user": "alice", "id": "t1"})
        # As Chainlit stores a turn: a run step, and the answer message inside it (the rating names the run).
        await layer.execute_sql('INSERT INTO steps ("id", "name", "type", "threadId", "metadata") '
                                "VALUES ('r1', 'on_message', 'run', 't1', '{}')", {})
        await layer.execute_sql(
            'INSERT INTO steps ("id", "name", "type", "threadId", "parentId", "output", "metadata") '
            "VALUES (:id, 'Knowledge base', 'assistant_message', 't1', 'r1', :output, :metadata)",
            {"id": "m1", "output": "25 days [1].\n\n**Sources** …",
             "metadata": '{"question": "How much leave?", "answer": "25 days [1].", "sources": '
                         '[{"n": 1, "source": "hr/leave.md", "page": null, "snippet": "25 days"}]}'})
        feedback_id = await layer.upsert_feedback(ChainlitFeedback(forId="r1", value=0, threadId="t1",
                                                                   comment="outdated"))
        assert store.get("r1") == Feedback("r1", -1, "How much leave?", "25 days [1].", SOURCES, "outdated",
                                           "alice", "chat", store.get("r1").created_at)  # type: ignore[union-attr]
        assert await layer.delete_feedback(feedback_id)
        assert store.get("r1") is None
        # A rating of the message itself works as well.
        await layer.upsert_feedback(ChainlitFeedback(forId="m1", value=1, threadId="t1"))
        assert [(f.answer_id, f.rating, f.question) for f in store.recent()] == [("m1", 1, "How much leave?")]
        store.remove("m1")
        # Ratings of messages that are not answers (the welcome) are Chainlit's only.
        await layer.upsert_feedback(ChainlitFeedback(forId="welcome", value=1, threadId="t1"))
        assert store.recent() == []
        await layer.engine.dispose()

    asyncio.run(scenario())


def test_a_resumed_conversation_gives_back_its_history() -> None:
    steps = [
        {"type": "run", "metadata": "{}"},
        {"type": "assistant_message", "output": "Welcome", "metadata": "{}"},  # the greeting is not a turn
        {"type": "user_message", "output": "How much leave?", "metadata": '{"location": "x"}'},
        {"type": "assistant_message", "output": "25 days [1].\n\n**Sources** …",
         "metadata": '{"question": "How much leave?", "answer": "25 days [1]."}'},
        {"type": "user_message", "output": "And in the first year?", "metadata": None},
    ]
    assert history_from_steps(steps, turns=6) == [
        {"role": "user", "content": "How much leave?"}, {"role": "assistant", "content": "25 days [1]."},
        {"role": "user", "content": "And in the first year?"}]
    assert len(history_from_steps(steps, turns=2)) == 2


def test_stored_answers_from_documents_no_longer_visible_are_redacted() -> None:
    hr = '{"question": "Bonus?", "answer": "7,340,000 kroner [1].", "sources": [{"n": 1, "doc_id": "hr1"}]}'
    steps = [{"type": "user_message", "output": "Bonus?", "metadata": None},
             {"type": "retrieval", "output": "Searched for “retention bonus 7,340,000”", "metadata": None},
             {"type": "assistant_message", "output": "7,340,000 kroner [1].", "metadata": hr}]
    kept = [dict(step) for step in steps]
    redact_steps(kept, {"hr1"})
    assert kept == steps
    assert history_from_steps(steps, 6, {"hr1"}.__contains__)[-1]["content"] == "7,340,000 kroner [1]."
    assert history_from_steps(steps, 6, set().__contains__) == [{"role": "user", "content": "Bonus?"}]
    redact_steps(steps, set())
    assert "7,340,000" not in str(steps) and steps[2]["output"] == WITHHELD_ANSWER
