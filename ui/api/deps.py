"""FastAPI dependencies, as Annotated aliases: the shared services and the caller's API key."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from ui.api.auth import ApiKey, match_key
from ui.api.errors import ApiError
from ui.api.services import Services


def get_services(request: Request) -> Services:
    """The services built at start-up."""
    services: Services = request.app.state.services
    return services


def require_key(request: Request, services: Annotated[Services, Depends(get_services)]) -> ApiKey | None:
    """With RAG_API_KEYS set: 401 without a bearer key, 403 with a wrong one. The key is never logged."""
    if not services.keys:
        return None
    scheme, _, presented = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not presented.strip():
        raise ApiError(401, "unauthorized", "missing API key: send `Authorization: Bearer <key>`",
                       headers={"WWW-Authenticate": "Bearer"})
    key = match_key(presented.strip(), services.keys)
    if key is None:
        raise ApiError(403, "forbidden", "invalid API key")
    return key


ServicesDep = Annotated[Services, Depends(get_services)]
KeyDep = Annotated[ApiKey | None, Depends(require_key)]
