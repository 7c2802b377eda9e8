"""Questions the documents did not answer (refused or escalated), stored beside the feedback so that `rag gaps` can
tell what to write next. Only the question and its best-matching document are kept, never the answer."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import sqlalchemy as sa
from sqlalchemy.exc import SQLAlchemyError

from rag.components.feedback import Feedback, FeedbackStore
from rag.core.errors import StoreUnavailable
from rag.core.gaps import Asked, without_repeats

_metadata = sa.MetaData()
unanswered_table = sa.Table(
    "rag_unanswered", _metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("question", sa.Text, nullable=False),
    sa.Column("reason", sa.String(20), nullable=False),  # refused | escalated
    sa.Column("user", sa.String(200), nullable=False, default=""),
    sa.Column("channel", sa.String(20), nullable=False, default=""),  # api | chat
    sa.Column("source", sa.Text, nullable=False, default=""),
    sa.Column("doc_id", sa.String(200), nullable=False, default=""),
    sa.Column("created_at", sa.String(40), nullable=False, index=True),
    sa.Column("asker_groups", sa.Text, nullable=True),  # the asker's groups: who else may read the question
)
KEEP_DAYS = 180  # older questions are deleted as new ones are recorded: the table does not grow without bound
MAX_ROWS = 20_000  # the newest questions a report reads at most


class UnansweredStore:
    """Unanswered questions in any SQLAlchemy database (the feedback database: SQLite by default, PostgreSQL in
    production)."""

    def __init__(self, engine: sa.Engine) -> None:
        self._engine = engine
        try:
            _metadata.create_all(engine)
            if "asker_groups" not in {column["name"] for column in sa.inspect(engine).get_columns("rag_unanswered")}:
                with engine.begin() as connection:  # a table from before the asker's groups were kept
                    connection.execute(sa.text("ALTER TABLE rag_unanswered ADD COLUMN asker_groups TEXT"))
        except SQLAlchemyError as exc:
            raise StoreUnavailable(f"cannot open the unanswered-questions table: {exc}") from exc

    def record(self, asked: Asked) -> None:
        """Store one unanswered question; those older than KEEP_DAYS go."""
        row = {"question": asked.question, "reason": asked.reason, "user": asked.user, "channel": asked.channel,
               "source": asked.source, "doc_id": asked.doc_id, "created_at": asked.created_at,
               "asker_groups": asked.groups}
        cutoff = (datetime.now(UTC) - timedelta(days=KEEP_DAYS)).isoformat(timespec="seconds")
        with self._engine.begin() as connection:
            connection.execute(sa.insert(unanswered_table).values(row))
            connection.execute(sa.delete(unanswered_table).where(unanswered_table.c.created_at < cutoff))

    def since(self, created_after: str | None = None) -> list[Asked]:
        """The questions recorded at or after a timestamp (UTC ISO 8601), oldest first, the newest MAX_ROWS of
        them; all kept without one."""
        newest = sa.select(unanswered_table).order_by(unanswered_table.c.created_at.desc(),
                                                      unanswered_table.c.id.desc()).limit(MAX_ROWS)
        if created_after is not None:
            newest = newest.where(unanswered_table.c.created_at >= created_after)
        rows_of = newest.subquery()
        query = sa.select(rows_of).order_by(rows_of.c.created_at, rows_of.c.id)
        try:
            with self._engine.connect() as connection:
                rows = [row._mapping for row in connection.execute(query)]
        except SQLAlchemyError as exc:
            raise StoreUnavailable(f"cannot read the unanswered questions: {exc}") from exc
        return [Asked(question=row["question"], reason=row["reason"], user=row["user"], channel=row["channel"],
                      source=row["source"], doc_id=row["doc_id"], created_at=row["created_at"],
                      groups=row["asker_groups"]) for row in rows]


def load_asked(unanswered: UnansweredStore | None, feedback: FeedbackStore, created_after: str | None) -> list[Asked]:
    """What the gap report groups: recorded refusals and escalations (unless recording is off: None) and 👎
    ratings, a rating of an answer already recorded counted once."""
    recorded = unanswered.since(created_after) if unanswered is not None else []
    try:
        rated = [_rated_down(rating) for rating in feedback.rated_down(created_after)]
    except SQLAlchemyError as exc:
        raise StoreUnavailable(f"cannot read the feedback: {exc}") from exc
    return without_repeats(recorded, rated)


def _rated_down(rating: Feedback) -> Asked:
    top = rating.sources[0] if rating.sources else {}
    return Asked(question=rating.question, reason="thumbs_down", user=rating.user, channel=rating.channel,
                 source=str(top.get("source") or ""), doc_id=str(top.get("doc_id") or ""),
                 created_at=rating.created_at)
