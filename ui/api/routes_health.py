"""Liveness, readiness (vLLM, Chroma, a non-empty index) and Prometheus metrics."""

from __future__ import annotations

from fastapi import APIRouter, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.concurrency import run_in_threadpool

from rag.errors import RagError
from rag.llm_server import is_healthy
from ui.api.deps import ServicesDep
from ui.serving.services import Services

router = APIRouter(tags=["health"])


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    """The process is alive."""
    return {"status": "ok"}


@router.get("/readyz")
async def readyz(services: ServicesDep) -> JSONResponse:
    """200 when vLLM, Chroma and a non-empty index are all there; else 503 naming what failed."""
    checks = await run_in_threadpool(_checks, services)
    ready = all(ok for ok, _ in checks.values())
    body: dict[str, object] = {"status": "ready" if ready else "not ready",
            "checks": {name: {"ok": ok, "detail": detail} for name, (ok, detail) in checks.items()}}
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


@router.get("/metrics")
async def metrics(services: ServicesDep) -> Response:
    """Prometheus text format."""
    return Response(generate_latest(services.metrics.registry), media_type=CONTENT_TYPE_LATEST)
