"""Liveness, readiness (vLLM, Chroma, a non-empty index) and Prometheus metrics."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.concurrency import run_in_threadpool

from rag.core.errors import RagError
from rag.tools.llm_server import is_healthy
from ui.api.deps import PrincipalDep, ServicesDep, admin_or_open
from ui.api.routes_ask import ADMIN_ERRORS
from ui.serving.documents import require_admin
from ui.serving.services import Services

router = APIRouter(tags=["health"])


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    """The process is alive."""
    return {"status": "ok"}


@router.get("/readyz")
async def readyz(services: ServicesDep, detailed: Annotated[bool, Depends(admin_or_open)]) -> JSONResponse:
    """200 when vLLM, Chroma and a non-empty index are all there; else 503 naming what failed. With API keys set,
    only an admin key reads each check's detail (the LLM's address, the chunk count, the error)."""
    checks = await run_in_threadpool(_checks, services)
    ready = all(ok for ok, _ in checks.values())
    body: dict[str, object] = {"status": "ready" if ready else "not ready", "checks": {
        name: {"ok": ok, "detail": detail} if detailed else {"ok": ok} for name, (ok, detail) in checks.items()}}
    if not ready:
        failed = ", ".join(name for name, (ok, _) in checks.items() if not ok)
        body["error"] = {"type": "not_ready", "message": f"not ready: {failed}"}
    return JSONResponse(body, status_code=200 if ready else 503)


def _checks(services: Services) -> dict[str, tuple[bool, str]]:
    url = services.settings.llm_base_url
    llm = (True, url) if is_healthy(url) else (False, f"{url} does not answer /health (RAG_LLM_BASE_URL)")
    try:
        services.store.heartbeat()
        chunks = services.store.count()
    except RagError as exc:
        return {"llm": llm, "chroma": (False, str(exc)), "index": (False, "unknown")}
    index = (True, f"{chunks} chunks") if chunks else (False, "the collection is empty: run rag-ingest")
    return {"llm": llm, "chroma": (True, "ok"), "index": index}


@router.get("/metrics", responses=ADMIN_ERRORS)
async def metrics(services: ServicesDep, principal: PrincipalDep) -> Response:
    """Prometheus text format (with API keys set: for an admin key, e.g. Prometheus' `authorization` setting)."""
    if services.keys:
        require_admin(principal, "reading metrics")
    return Response(generate_latest(services.metrics.registry), media_type=CONTENT_TYPE_LATEST)
