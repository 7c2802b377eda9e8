"""FastAPI dependencies, as Annotated aliases: the shared services and the principal behind the request."""

from __future__ import annotations

from typing import Annotated

import anyio.to_thread
from fastapi import Depends, Request

from rag.core.access import ANONYMOUS, Principal
from ui.api.errors import ApiError
from ui.serving.principals import match_key
from ui.serving.services import Services


# Both run on the event loop (async): FastAPI runs a plain `def` dependency in a worker thread, a thread hand-over
# each way for a check of microseconds.
async def get_services(request: Request) -> Services:
    """The services built at start-up, on the collection's current generation (loaded in a thread after a
    re-embed)."""
    services: Services = request.app.state.services
    if services.on_current_generation():
        return services
    return await anyio.to_thread.run_sync(services.follow_generation)


async def get_principal(request: Request, services: Annotated[Services, Depends(get_services)]) -> Principal:
    """Who is asking (`key_principal`)."""
    return key_principal(request, services)


def key_principal(request: Request, services: Services) -> Principal:
    """Who is asking. With RAG_API_KEYS set: 401 without a bearer key, 403 with a wrong one, else the key's
    principal. Without keys: an anonymous reader who sees only public documents. The key is never logged."""
    if not services.keys:
        return ANONYMOUS
    scheme, _, presented = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not presented.strip():
        raise ApiError(401, "unauthorized", "missing API key: send `Authorization: Bearer <key>`",
                       headers={"WWW-Authenticate": "Bearer"})
    key = match_key(presented.strip(), services.keys)
    if key is None:
        raise ApiError(403, "forbidden", "invalid API key")
    return key.principal


def admin_or_open(request: Request, services: Annotated[Services, Depends(get_services)]) -> bool:
    """Whether the caller may read the server's internals (LLM address, counts, errors): an admin key, or any
    caller when no keys are configured (the loopback default). Never an error: a probe without a key gets less."""
    if not services.keys:
        return True
    scheme, _, presented = request.headers.get("authorization", "").partition(" ")
    key = match_key(presented.strip(), services.keys) if scheme.lower() == "bearer" and presented.strip() else None
    return key is not None and key.principal.is_admin


ServicesDep = Annotated[Services, Depends(get_services)]
PrincipalDep = Annotated[Principal, Depends(get_principal)]
