"""The FastAPI app: routes, error bodies, metrics; services are built once at start-up (ui.server adds the chat)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio.to_thread
from fastapi import FastAPI

from rag.config import Settings
from rag.wiring import App
from ui.api import routes_ask, routes_documents, routes_files, routes_gaps, routes_health, routes_openai
from ui.api.errors import install_error_handlers
from ui.api.metrics import RequestMetrics
from ui.headers import SecurityHeaders
from ui.serving.limits import BodyLimit
from ui.serving.metrics import Metrics
from ui.serving.services import Services, build_services
from ui.web_guards import install_web_guards

DESCRIPTION = """Ask the company's documents and act on the answer.

* `POST /v1/ask`: answer, sources, `confidence` and `escalate` (hand over to a human); `stream: true` for
  Server-Sent Events (`sources`, `token`…, `done`, or `error`).
* `POST /v1/chat/completions`, `GET /v1/models`: OpenAI-compatible (openai SDK, LangChain's ChatOpenAI).
* `/v1/documents`, `/v1/sync`, `/v1/feedback`, `/v1/gaps`: list what you may see; upload, delete, re-sync, read
  feedback and the knowledge-gap report (what the documents fail to answer) with an admin key.
* With `RAG_API_KEYS` set, every `/v1` route needs `Authorization: Bearer <key>`; answers, sources and listings
  hold only documents of the key's groups. Without keys, callers see public documents and change nothing.
"""


def create_app(settings: Settings, services: Services | None = None) -> FastAPI:
    """The API; `services` may be passed in (tests), else they are built from settings at start-up."""

    metrics = services.metrics if services else Metrics()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        app.state.services = services or build_services(App(settings), metrics=metrics)
        # Generations run in threads (the engine is synchronous): allow one per slot, plus headroom.
        anyio.to_thread.current_default_thread_limiter().total_tokens = settings.max_concurrent_generations + 16
        yield

    app = FastAPI(title="rag-kb", version="0.1.0", description=DESCRIPTION, lifespan=lifespan)
    install_error_handlers(app)
    # Body caps before routing, so before any key check or parsing; the chat mounted later is covered too.
    app.add_middleware(BodyLimit, body_limit=settings.max_body_kb * 1024,
                       upload_limit=int(settings.max_upload_mb * 2**20))
    if services is not None:
        app.state.services = services
    app.add_middleware(RequestMetrics, metrics=metrics)
    for module in (routes_ask, routes_openai, routes_documents, routes_gaps, routes_files, routes_health):
        app.include_router(module.router)
    install_web_guards(app, settings)  # trusted hosts, CORS, cross-site guard: for the chat mounted later too
    app.add_middleware(SecurityHeaders, docs_paths=(app.docs_url, app.redoc_url),  # outermost: on every response
                       https=settings.https)
    return app
