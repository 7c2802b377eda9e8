"""GET /v1/gaps: the questions the documents fail to answer, grouped into topics (admins)."""

from __future__ import annotations

from fastapi import APIRouter, Query
from starlette.concurrency import run_in_threadpool

from rag.core.gaps import parse_since
from ui.api.deps import PrincipalDep, ServicesDep
from ui.api.errors import ApiError
from ui.api.routes_ask import ADMIN_ERRORS
from ui.api.schemas import GapReportOut
from ui.serving.documents import require_admin
from ui.serving.gaps import gap_report

router = APIRouter(prefix="/v1", tags=["feedback"])


@router.get("/gaps", response_model=GapReportOut, responses=ADMIN_ERRORS)
async def gaps(services: ServicesDep, principal: PrincipalDep,
               since: str = Query("30d", description="an age (7d, 12h, 2w), a date (2026-11-01) or `all`"),
               min_count: int = Query(1, ge=1, le=100_000, description="leave out topics asked fewer times")
               ) -> GapReportOut:
    """Refused, escalated and 👎-rated questions since `since`, grouped by meaning into topics with counts, reasons
    and the most central examples, largest first: what to write next (admins)."""
    require_admin(principal, "reading the gap report")  # before the arguments say anything
    try:
        moment = parse_since(since)
    except ValueError as exc:
        raise ApiError(422, "invalid_request", f"since: {exc}") from exc
    report = await run_in_threadpool(gap_report, services, principal, moment, min_count)
    return GapReportOut.model_validate(report.as_json())
