"""Chat history and feedback through Chainlit's SQLAlchemy data layer, on SQLite by default (PostgreSQL by URL).

Chainlit leaves creating its tables to the application; the types below suit both SQLite and PostgreSQL.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from chainlit.data.sql_alchemy import SQLAlchemyDataLayer
from chainlit.types import Feedback as ChainlitFeedback
from chainlit.types import ThreadDict
from sqlalchemy import text
from sqlalchemy.engine import make_url

from rag.components.feedback import Feedback, FeedbackStore
from rag.core.prompt import Message
from ui.chat.sessions import REQUEST_USER

SCHEMA = (
    """CREATE TABLE IF NOT EXISTS users ("id" TEXT PRIMARY KEY, "identifier" TEXT NOT NULL UNIQUE,
        "metadata" TEXT NOT NULL, "createdAt" TEXT)""",
    """CREATE TABLE IF NOT EXISTS threads ("id" TEXT PRIMARY KEY, "createdAt" TEXT, "name" TEXT, "userId" TEXT,
        "userIdentifier" TEXT, "tags" TEXT, "metadata" TEXT)""",
    """CREATE TABLE IF NOT EXISTS steps ("id" TEXT PRIMARY KEY, "name" TEXT NOT NULL, "type" TEXT NOT NULL,
        "threadId" TEXT NOT NULL, "parentId" TEXT, "command" TEXT, "streaming" BOOLEAN, "waitForAnswer" BOOLEAN,
        "isError" BOOLEAN, "metadata" TEXT, "tags" TEXT, "input" TEXT, "output" TEXT, "createdAt" TEXT,
        "start" TEXT, "end" TEXT, "generation" TEXT, "showInput" TEXT, "language" TEXT, "indent" INTEGER,
        "defaultOpen" BOOLEAN, "autoCollapse" BOOLEAN, "icon" TEXT)""",
    """CREATE INDEX IF NOT EXISTS steps_thread ON steps ("threadId")""",
    """CREATE TABLE IF NOT EXISTS elements ("id" TEXT PRIMARY KEY, "threadId" TEXT, "type" TEXT, "url" TEXT,
        "chainlitKey" TEXT, "name" TEXT NOT NULL, "display" TEXT, "objectKey" TEXT, "size" TEXT, "page" INTEGER,
        "language" TEXT, "forId" TEXT, "mime" TEXT, "props" TEXT, "autoPlay" BOOLEAN, "playerConfig" TEXT)""",
    """CREATE TABLE IF NOT EXISTS feedbacks ("id" TEXT PRIMARY KEY, "forId" TEXT NOT NULL, "threadId" TEXT,
        "value" INTEGER NOT NULL, "comment" TEXT)""",
)


def prepare_sqlite_folder(url: str) -> None:
    """Create the folder of a SQLite database file (SQLite creates the file, not its folder)."""
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite" and parsed.database not in (None, "", ":memory:"):
        Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)


class ChatDataLayer(SQLAlchemyDataLayer):
    """Chainlit's SQL data layer that creates its tables on first use and copies ratings to the FeedbackStore."""

    def __init__(self, url: str, feedback: FeedbackStore,
                 visible_docs: Callable[[str], set[str]] = lambda user: set()) -> None:
        prepare_sqlite_folder(url)
        super().__init__(conninfo=url)
        self._feedback = feedback
        self._visible_docs = visible_docs  # a user's name → the doc ids they may see now
        self._schema_ready = False

    async def get_all_user_threads(self, user_id: str | None = None,
                                   thread_id: str | None = None) -> list[ThreadDict] | None:
        """Stored threads (listing, reading, resuming), with answers from documents their author may no longer
        see replaced by a notice."""
        threads: list[ThreadDict] | None = await super().get_all_user_threads(user_id, thread_id)
        for thread in threads or []:
            visible = await asyncio.to_thread(self._visible_docs, str(thread.get("userIdentifier") or ""))
            redact_steps(thread.get("steps") or [], visible)  # type: ignore[arg-type]
        return threads

    async def execute_sql(self, query: str, parameters: dict[str, Any]) -> list[dict[str, Any]] | int | None:
        """Run one statement, creating the tables before the first."""
        if not self._schema_ready:
            async with self.engine.begin() as connection:
                for statement in SCHEMA:
                    await connection.execute(text(statement))
            self._schema_ready = True
        result: list[dict[str, Any]] | int | None = await super().execute_sql(query, parameters)
        return result

    async def create_element(self, element: Any) -> None:
        """Source panels are not stored: the message keeps the source list, and a file store is not worth it here."""

    async def upsert_feedback(self, feedback: ChainlitFeedback) -> str:
        """Store the rating for Chainlit, and with its question, answer and sources for the helpdesk; only of an
        answer in the signed-in user's own thread (Chainlit's route checks no ownership)."""
        await self._check_owner(feedback.forId, "rate")
        if feedback.id:
            await self._check_owner(await self._rated_step(feedback.id), "rate")
        feedback_id: str = await super().upsert_feedback(feedback)
        record = await self._feedback_record(feedback)
        if record is not None:
            await asyncio.to_thread(self._feedback.record, record)
        return feedback_id

    async def delete_feedback(self, feedback_id: str) -> bool:
        """Forget a rating in both stores (the signed-in user's own only)."""
        await self._check_owner(await self._rated_step(feedback_id), "remove a rating of")
        rows = await self.execute_sql('SELECT "forId" FROM feedbacks WHERE "id" = :id', {"id": feedback_id})
        deleted: bool = await super().delete_feedback(feedback_id)
        if isinstance(rows, list) and rows:
            await asyncio.to_thread(self._feedback.remove, str(rows[0]["forId"]))
        return deleted

    async def _rated_step(self, feedback_id: str) -> str | None:
        rows = await self.execute_sql('SELECT "forId" FROM feedbacks WHERE "id" = :id', {"id": feedback_id})
        return str(rows[0]["forId"]) if isinstance(rows, list) and rows else None

    async def _check_owner(self, step_id: str | None, action: str) -> None:
        """PermissionError unless the step (if any) is in a thread of the request's signed-in user; without sign-in
        (RAG_UI_AUTH=false) there is one anonymous user."""
        user = REQUEST_USER.get()
        if user is None or step_id is None:  # not a request through the guard (sign-in off, or our own calls)
            return
        if not user:
            raise PermissionError("sign in first")
        rows = await self.execute_sql('SELECT t."userIdentifier" AS user FROM steps s JOIN threads t '
                                      'ON t."id" = s."threadId" WHERE s."id" = :id', {"id": step_id})
        owner = rows[0]["user"] if isinstance(rows, list) and rows else None
        if owner is not None and owner != user:
            raise PermissionError(f"you can {action} answers of your own conversations only")

    async def _feedback_record(self, feedback: ChainlitFeedback) -> Feedback | None:
        # Chainlit rates the run step of a turn; the answer is that step's assistant message (or the step itself).
        query = """SELECT s."metadata" AS metadata, t."userIdentifier" AS user FROM steps s
                   LEFT JOIN threads t ON t."id" = s."threadId"
                   WHERE s."id" = :id OR (s."parentId" = :id AND s."type" = 'assistant_message')
                   ORDER BY s."createdAt" """
        rows = await self.execute_sql(query, {"id": feedback.forId})
        answers = [(step_metadata(row["metadata"]), row["user"]) for row in rows] if isinstance(rows, list) else []
        answers = [(meta, user) for meta, user in answers if "question" in meta]
        if not answers:
            return None  # not an answer (e.g. the welcome message)
        meta, user = answers[-1]
        return Feedback(answer_id=feedback.forId, rating=1 if feedback.value else -1, question=meta["question"],
                        answer=meta.get("answer", ""), sources=meta.get("sources", []),
                        comment=feedback.comment or "", user=user or "", channel="chat")


def step_metadata(value: object) -> dict[str, Any]:
    """A stored step's metadata: a JSON string on SQLite, already a dict on some drivers."""
    loaded = json.loads(value) if isinstance(value, str) and value else value
    return loaded if isinstance(loaded, dict) else {}


WITHHELD_ANSWER = "(This answer cited documents you can no longer see.)"


def redact_steps(steps: list[dict[str, Any]], visible: set[str]) -> None:
    """Replace, in place, each stored answer citing a document outside `visible`, and if any was, the searched-for
    lines too (a condensed question can carry an answer's words)."""
    redacted = False
    for step in steps:
        metadata = step_metadata(step.get("metadata"))
        sources = metadata.get("sources") or []
        if step.get("type") == "assistant_message" and not all(
                isinstance(s, dict) and str(s.get("doc_id", "")) in visible for s in sources):
            step["output"], step["metadata"], redacted = WITHHELD_ANSWER, {}, True
    for step in steps if redacted else []:
        if step.get("type") == "retrieval":
            step["output"] = ""


def history_from_steps(steps: Iterable[Mapping[str, Any]], turns: int,
                       may_see: Callable[[str], bool] = lambda doc_id: True) -> list[Message]:
    """The chat history of a stored conversation: its questions and our answers (without the source lists).
    An answer citing a document that `may_see` now rejects (the user's groups changed) is left out, so that it
    cannot flow into the condensed follow-up question."""
    history: list[Message] = []
    for step in steps:
        metadata = step_metadata(step.get("metadata"))
        if step.get("type") == "user_message":
            history.append({"role": "user", "content": str(step.get("output") or "")})
        elif step.get("type") == "assistant_message" and "question" in metadata:
            sources = metadata.get("sources") or []
            if all(isinstance(s, dict) and may_see(str(s.get("doc_id", ""))) for s in sources):
                history.append({"role": "assistant", "content": str(metadata.get("answer", ""))})
    return history[-turns:]
