"""Feedback on answers (👍/👎 and a comment), stored with the question, the answer and its sources."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

import sqlalchemy as sa
from sqlalchemy.exc import SQLAlchemyError

from rag.core.errors import StoreUnavailable

_metadata = sa.MetaData()
feedback_table = sa.Table(
    "rag_feedback", _metadata,
    sa.Column("answer_id", sa.String(64), primary_key=True),
    sa.Column("rating", sa.Integer, nullable=False),
    sa.Column("comment", sa.Text, nullable=False, default=""),
    sa.Column("question", sa.Text, nullable=False),
    sa.Column("answer", sa.Text, nullable=False),
    sa.Column("sources", sa.Text, nullable=False),  # JSON list, as the API lists sources
    sa.Column("user", sa.String(200), nullable=False, default=""),
    sa.Column("channel", sa.String(20), nullable=False, default=""),
    sa.Column("created_at", sa.String(40), nullable=False),
)


@dataclass(frozen=True, slots=True)
class Feedback:
    """One rating of one answer: +1 helpful, -1 not helpful."""

    answer_id: str
    rating: int
    question: str
    answer: str
    sources: Sequence[dict[str, object]] = ()
    comment: str = ""
    user: str = ""
    channel: str = ""
    created_at: str = field(default_factory=lambda: datetime.now(UTC).isoformat(timespec="seconds"))


class FeedbackStore:
    """Feedback rows in any SQLAlchemy database (SQLite by default, PostgreSQL in production)."""

    def __init__(self, engine: sa.Engine) -> None:
        self._engine = engine
        try:
            _metadata.create_all(engine)
        except SQLAlchemyError as exc:
            raise StoreUnavailable(f"cannot open the feedback database: {exc}") from exc

    def record(self, feedback: Feedback) -> None:
        """Store a rating; a second rating of the same answer replaces the first."""
        row = {
            "answer_id": feedback.answer_id, "rating": feedback.rating, "comment": feedback.comment,
            "question": feedback.question, "answer": feedback.answer,
            "sources": json.dumps(list(feedback.sources), ensure_ascii=False),
            "user": feedback.user, "channel": feedback.channel, "created_at": feedback.created_at,
        }
        with self._engine.begin() as connection:
            connection.execute(sa.delete(feedback_table).where(feedback_table.c.answer_id == feedback.answer_id))
            connection.execute(sa.insert(feedback_table).values(row))

    def remove(self, answer_id: str) -> bool:
        """Forget the rating of an answer; False when there was none."""
        with self._engine.begin() as connection:
            result = connection.execute(sa.delete(feedback_table).where(feedback_table.c.answer_id == answer_id))
        return bool(result.rowcount)

    def recent(self, limit: int = 50) -> list[Feedback]:
        """The newest ratings first."""
        query = sa.select(feedback_table).order_by(feedback_table.c.created_at.desc()).limit(limit)
        with self._engine.connect() as connection:
            return [_from_row(row._mapping) for row in connection.execute(query)]

    def rated_down(self, created_after: str | None = None) -> list[Feedback]:
        """The ratings of -1 given at or after a timestamp (UTC ISO 8601), oldest first; all without one."""
        query = sa.select(feedback_table).where(feedback_table.c.rating < 0).order_by(feedback_table.c.created_at)
        if created_after is not None:
            query = query.where(feedback_table.c.created_at >= created_after)
        with self._engine.connect() as connection:
            return [_from_row(row._mapping) for row in connection.execute(query)]

    def get(self, answer_id: str) -> Feedback | None:
        """The rating of one answer, if any."""
        query = sa.select(feedback_table).where(feedback_table.c.answer_id == answer_id)
        with self._engine.connect() as connection:
            row = connection.execute(query).first()
        return _from_row(row._mapping) if row else None


def _from_row(row: sa.RowMapping) -> Feedback:
    values = dict(row)
    values["sources"] = json.loads(values["sources"])
    return Feedback(**values)
