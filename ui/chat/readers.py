"""The chat user behind a browser request outside Chainlit's app (a cited PDF at /v1/documents/{id}/file): the
signed-in user's current grant, read from the chat's session cookie, and only on a request from the app's own pages.

Chainlit's cookie is SameSite=lax, so a browser still sends it when another site links here (a top-level GET);
such a request carries the cookie but not the user's intent, and is treated as having no session."""

from __future__ import annotations

from starlette.requests import Request

from rag.core.access import ANONYMOUS, Principal
from ui.chat import state
from ui.chat.guard import session_token
from ui.chat.sessions import current_user
from ui.web_guards import is_cross_site


def session_principal(request: Request) -> Principal | None:
    """The principal of a current chat session (anyone is the anonymous reader when the chat has no sign-in);
    None without one, with an ended one, or for a request from another site's page."""
    context = state.current()
    if not context.settings.ui_auth:
        return ANONYMOUS  # the chat itself answers every visitor as the anonymous reader
    if is_cross_site(request.headers, ()):  # only the app's own pages, not even RAG_CORS_ORIGINS: no cookies there
        return None
    user = current_user(session_token(request.scope), context)
    return user.principal if user is not None else None
