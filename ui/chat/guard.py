"""The chat's gate in front of Chainlit (an ASGI middleware of its app): ended sessions, foreign origins on the
socket, and the sign-in throttle.

- Socket (`/chat/ws/…`, polling and websocket alike): refused when a browser sends an Origin other than the app's
  own (the host of the request) or one of RAG_CORS_ORIGINS: Chainlit creates its socket.io server with
  origin checks off, so any web page could otherwise drive a signed-in user's chat. A handshake carrying a session
  that ended (ui.chat.sessions) is refused too.
- Other requests: a session that ended is taken out of the request (Chainlit then answers 401 where a sign-in is
  needed, and pages still load so one can sign in again) and its cookie is deleted.
- `POST /chat/login` goes through the LoginLimiter (ui.chat.login); `POST /chat/logout` ends the user's sessions
  (ui.chat.sessions.SignOuts), not only this browser's cookie.
- Over https (the request's scheme, or RAG_HTTPS behind a TLS proxy) session cookies are marked `Secure`.
- Thread sharing is off at the route (`/chat/project/share/…`, `PUT /chat/project/thread/share` answer 404):
  Chainlit serves shared threads to anyone, unredacted, whatever `allow_thread_sharing` says.
- The request's signed-in user is handed to the data layer (ui.chat.sessions.REQUEST_USER), which rates and
  un-rates only answers of the user's own threads.
- `POST /chat/project/file` (a file dropped into the chat) is refused before a byte is read unless the session is
  a current admin's: Chainlit stores any signed-in user's file in the session's folder (ui.chat.uploads), and it
  parses the whole multipart body (up to the upload cap, to disk) before it checks the sign-in at all.
"""

from __future__ import annotations

import logging
import os

from chainlit.auth.cookie import get_token_from_cookies
from starlette.datastructures import Headers
from starlette.requests import cookie_parser
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ui.chat import state
from ui.chat.login import LoginLimiter, reply
from ui.chat.sessions import REQUEST_USER, current_user
from ui.chat.state import ChatContext
from ui.web_guards import is_cross_site

log = logging.getLogger("rag.chat")
SOCKET_PREFIX = "/ws/"
LOGIN_PATH = "/login"
LOGOUT_PATH = "/logout"
UPLOAD_PATH = "/project/file"
SHARING_PATHS = ("/project/share/", "/project/thread/share")
ADMINS_ONLY = "Only administrators can add documents to the knowledge base."
SIGN_IN_FIRST = "Sign in first."
# Chainlit's session cookie: this name, or name_0, name_1… when the token is split (chainlit.auth.cookie).
COOKIE_NAME = os.environ.get("CHAINLIT_AUTH_COOKIE_NAME", "access_token")


class ChatGuard:
    """ASGI middleware for the mounted Chainlit app; reads the installed chat context on every request."""

    def __init__(self, app: ASGIApp, login: LoginLimiter) -> None:
        self.app = app
        self.login = login

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        context, route = state.current(), _route_path(scope)
        if route.startswith(SOCKET_PREFIX):
            refusal = _socket_refusal(scope, context)
            if refusal is not None:
                await _refuse(scope, send, *refusal)
                return
        elif context.settings.ui_auth and _has_stale_session(scope, context):
            scope, send = _without_session(scope), _deleting_cookies(send, _session_cookies(scope))
        if scope["type"] == "http" and (context.settings.https or scope.get("scheme") == "https"):
            send = _secure_cookies(send)
        posted = scope["type"] == "http" and scope["method"] == "POST"
        if context.settings.ui_auth and posted and route == LOGOUT_PATH:
            _sign_out(scope, context)
        if context.settings.ui_auth and posted and route == LOGIN_PATH:
            await self.login(self.app, scope, receive, send)
            return
        if posted and route == UPLOAD_PATH and (refusal := _upload_refusal(scope, context)) is not None:
            await reply(send, *refusal)
            return
        if scope["type"] == "http" and route.startswith(SHARING_PATHS):
            await reply(send, 404, "thread sharing is off")
            return
        user = current_user(session_token(scope), context) if context.settings.ui_auth else None
        handed = REQUEST_USER.set(None if not context.settings.ui_auth else user.name if user else "")
        try:
            await self.app(scope, receive, send)
        finally:
            REQUEST_USER.reset(handed)


def _route_path(scope: Scope) -> str:
    """The path below the mount point (Starlette keeps the full path in the scope and the mount in root_path)."""
    path, root = str(scope["path"]), str(scope.get("root_path", ""))
    return path[len(root):] if root and path.startswith(root) else path


def _header(scope: Scope, name: bytes) -> str | None:
    values = [value for key, value in scope["headers"] if key == name]
    return values[0].decode("latin-1") if values else None


def _socket_refusal(scope: Scope, context: ChatContext) -> tuple[int, str] | None:
    if is_cross_site(Headers(scope=scope), context.settings.cors_origin_list):  # the API's own definition
        log.warning("chat socket refused: origin %r is not this server's (host %r) nor in RAG_CORS_ORIGINS",
                    _header(scope, b"origin"), _header(scope, b"host"))
        return 403, "origin not allowed"
    if context.settings.ui_auth and _has_stale_session(scope, context):
        return 401, "session ended"
    return None


def session_token(scope: Scope) -> str | None:
    """The session token of a request: Chainlit's cookie, else an `Authorization: Bearer` header."""
    cookies = cookie_parser(_header(scope, b"cookie") or "")
    if token := get_token_from_cookies(cookies):
        return token
    scheme, _, token = (_header(scope, b"authorization") or "").partition(" ")
    if scheme.lower() != "bearer":
        return None
    return token.strip() or None


def _upload_refusal(scope: Scope, context: ChatContext) -> tuple[int, str] | None:
    """Why an upload is refused before its body is read (status, message); None for a current admin's session.
    Without sign-in everyone is an anonymous reader; a request without a current session (an ended one was taken
    out of the request above) is told to sign in."""
    if not context.settings.ui_auth:
        return 403, ADMINS_ONLY
    token = session_token(scope)
    user = current_user(token, context) if token is not None else None
    if user is None:
        return 401, SIGN_IN_FIRST
    return None if user.principal.is_admin else (403, ADMINS_ONLY)


def _sign_out(scope: Scope, context: ChatContext) -> None:
    """End every session of the signing-out user (their other browsers too): a copied token is useless after."""
    user = current_user(session_token(scope), context)
    if user is not None:
        context.sign_outs.sign_out(user.name, context.settings.session_hours)
        log.info("chat sign-out: sessions of %r ended", user.name)


def _secure_cookies(send: Send) -> Send:
    """`send` with the session cookies it sets marked Secure (never sent over plain http)."""

    async def sending(message: Message) -> None:
        if message["type"] == "http.response.start":
            headers = [(key, _secured(value) if key.lower() == b"set-cookie" else value)
                       for key, value in message.get("headers", [])]
            message = {**message, "headers": headers}
        await send(message)

    return sending


def _secured(cookie: bytes) -> bytes:
    name = cookie.split(b"=", 1)[0].strip().decode("latin-1")
    if not _is_session_cookie(name) or b"secure" in [part.strip().lower() for part in cookie.split(b";")]:
        return cookie
    return cookie + b"; Secure"


def _has_stale_session(scope: Scope, context: ChatContext) -> bool:
    token = session_token(scope)
    return token is not None and current_user(token, context) is None


def _is_session_cookie(name: str) -> bool:
    return name == COOKIE_NAME or name.startswith(f"{COOKIE_NAME}_")


def _session_cookies(scope: Scope) -> list[str]:
    return [name for name in cookie_parser(_header(scope, b"cookie") or "") if _is_session_cookie(name)]


def _without_session(scope: Scope) -> Scope:
    """The request without its session token (cookies and a bearer header)."""
    headers = []
    for key, value in scope["headers"]:
        if key == b"authorization":
            continue
        if key == b"cookie":
            kept = [part for part in value.decode("latin-1").split(";")
                    if not _is_session_cookie(part.split("=", 1)[0].strip())]
            value = ";".join(kept).strip().encode("latin-1")
        headers.append((key, value))
    return {**scope, "headers": headers}


def _deleting_cookies(send: Send, names: list[str]) -> Send:
    """`send` with Set-Cookie headers that delete the ended session's cookies from the browser, except those the
    response sets anew (a sign-in over an ended session)."""

    async def sending(message: Message) -> None:
        if message["type"] == "http.response.start":
            headers = list(message.get("headers", []))
            fresh = {value.split(b"=", 1)[0].strip().decode("latin-1") for key, value in headers
                     if key.lower() == b"set-cookie"}
            headers += [(b"set-cookie", f'{name}=""; expires=Thu, 01 Jan 1970 00:00:00 GMT; Max-Age=0; Path=/; '
                                        "HttpOnly; SameSite=lax".encode()) for name in names if name not in fresh]
            message = {**message, "headers": headers}
        await send(message)

    return sending


async def _refuse(scope: Scope, send: Send, status: int, detail: str) -> None:
    if scope["type"] == "websocket":
        await send({"type": "websocket.close", "code": 1008, "reason": detail})  # uvicorn answers the upgrade 403
        return
    await reply(send, status, detail)
