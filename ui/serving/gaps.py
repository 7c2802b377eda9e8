"""The knowledge-gap report for an admin: questions the documents did not answer, grouped into topics."""

from __future__ import annotations

from datetime import datetime

from rag.components.unanswered import load_asked
from rag.core.access import Principal, asked_within
from rag.core.gaps import Asked, GapReport, find_gaps, since_iso
from ui.serving.documents import require_admin, visible_documents
from ui.serving.services import Services


def gap_report(services: Services, principal: Principal, since: datetime | None, min_count: int = 1) -> GapReport:
    """Topics of the questions asked since `since` that were refused, escalated or rated down (admins; questions
    whose best-matching document the admin may not see are left out, as their ratings are, and so are questions
    asked by someone holding groups the admin lacks)."""
    require_admin(principal, "reading the gap report")
    created_after = since_iso(since)
    asked = load_asked(services.unanswered, services.feedback, created_after)
    if not principal.all_groups:
        asked = _visible(services, principal, asked)
    return find_gaps(asked, services.embedder, created_after, min_count)


def _visible(services: Services, principal: Principal, asked: list[Asked]) -> list[Asked]:
    entries = visible_documents(services, principal)
    doc_ids, sources = {entry.doc_id for entry in entries}, {entry.source for entry in entries}
    # A question that matched no document at all tells of no document: it stays.
    return [item for item in asked if (item.doc_id in doc_ids if item.doc_id else
                                       not item.source or item.source in sources)
            and (item.reason == "thumbs_down" or asked_within(item.groups, principal))]
