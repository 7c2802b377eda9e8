"""Chat sessions: a sign-in lasts RAG_SESSION_HOURS and ends when its user leaves RAG_UI_USERS, gets a new password
or signs out.

A session is Chainlit's token (a JWT signed with RAG_UI_AUTH_SECRET, sent as a cookie). At sign-in we put in it a
fingerprint of the user's password hash, keyed with the secret (never the hash itself), and the sign-in time; a
token is current while its sign-in is younger than RAG_SESSION_HOURS (Chainlit's `/auth/jwt` re-issues tokens
with a fresh expiry, but the sign-in time travels with them), the user is still configured with that same hash,
and they have not signed out since (SignOuts: a sign-out ends every session of that user signed in before it).
The chat's guard (ui.chat.guard) checks every request and socket handshake with `current_user`, the handlers
every message.
"""

from __future__ import annotations

import base64
import contextlib
import contextvars
import hashlib
import hmac
import json
import os
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jwt

from rag.core.errors import ConfigError
from ui.chat import state
from ui.chat.state import ChatContext
from ui.chat.texts import Language
from ui.serving.users import UiUser

MIN_SECRET_BYTES = 32  # HS256 keys: RFC 7518 asks for at least the hash size
# The signed-in user of the HTTP request being served under /chat, set by the guard ("" with no current session;
# unset outside a guarded request): Chainlit's REST routes pass no user to the data layer.
REQUEST_USER: contextvars.ContextVar[str | None] = contextvars.ContextVar("rag_chat_user", default=None)
SESSION_KEY = "session"  # the fingerprint's key in the token's user metadata
SIGNED_IN_KEY = "signed_in"  # the sign-in time (Unix seconds) in the token's user metadata
LEEWAY_S = 30  # clock skew allowed on the token's issue time
ENDED: dict[Language, str] = {
    "en": "Your session has ended (it expired, or your account changed). Reload the page to sign in again.",
    "zh": "您的会话已结束（已过期或账户已更改）。请刷新页面重新登录。",
}


def check_secret(secret: str) -> None:
    """Refuse a session secret too short to sign tokens safely."""
    if len(secret.encode()) < MIN_SECRET_BYTES:
        raise ConfigError(f"RAG_UI_AUTH_SECRET is {len(secret.encode())} bytes; the chat's session tokens need at "
                          f"least {MIN_SECRET_BYTES}: make one with `openssl rand -hex 32`")


def fingerprint(secret: str, user: UiUser) -> str:
    """What a token carries of the user's password hash: an HMAC of name and hash, useless without the secret."""
    message = f"rag-session\0{user.name}\0{user.password_hash}".encode()
    return base64.urlsafe_b64encode(hmac.new(secret.encode(), message, hashlib.sha256).digest()[:18]).decode()


def sign_in_metadata(secret: str, user: UiUser, now: float | None = None) -> dict[str, str | float]:
    """The metadata of a freshly signed-in Chainlit user (it goes into the session token)."""
    return {"provider": "credentials", SESSION_KEY: fingerprint(secret, user),
            SIGNED_IN_KEY: round(time.time() if now is None else now, 3)}  # a sign-in just after a sign-out counts


class SignOuts:
    """When each user last signed out, kept in a small JSON file under the data folder so that a sign-out outlives
    a restart; entries older than any session could be are dropped."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._at: dict[str, float] = {}
        with contextlib.suppress(FileNotFoundError, ValueError, OSError):
            loaded = json.loads(path.read_text(encoding="utf-8"))
            self._at = {str(name): float(at) for name, at in loaded.items()}

    def sign_out(self, name: str, session_hours: float, now: float | None = None) -> None:
        """End every session of `name` signed in until now."""
        now = time.time() if now is None else now
        with self._lock:
            self._at = {user: at for user, at in self._at.items() if now - at <= session_hours * 3600}
            self._at[name] = now
            self.path.parent.mkdir(parents=True, exist_ok=True)
            staged = self.path.with_name(f".{self.path.name}.{os.getpid()}")
            staged.write_text(json.dumps(self._at), encoding="utf-8")
            os.replace(staged, self.path)

    def ended(self, name: str, signed_in: float) -> bool:
        """Whether a session of `name` signed in at `signed_in` was ended by a sign-out."""
        with self._lock:
            return signed_in <= self._at.get(name, float("-inf"))


def token_claims(token: str, secret: str) -> dict[str, Any] | None:
    """The claims of a session token signed with `secret`; None for any other token."""
    try:
        return dict(jwt.decode(token, secret, algorithms=["HS256"], options={"require": ["exp", "iat"]}))
    except jwt.PyJWTError:
        return None


def current_user(token: str | None, context: ChatContext, now: float | None = None) -> UiUser | None:
    """The configured user a session token belongs to, if it is still current; None for any other token."""
    claims = token_claims(token, context.settings.ui_auth_secret) if token else None
    if claims is None:
        return None
    user = context.users.get(str(claims.get("identifier", "")))
    metadata = claims.get("metadata")
    if user is None or not isinstance(metadata, Mapping):
        return None
    if not hmac.compare_digest(str(metadata.get(SESSION_KEY, "")), fingerprint(context.settings.ui_auth_secret,
                                                                               user)):
        return None  # a new password hash since this sign-in
    signed_in = signed_in_at(claims)
    if context.sign_outs.ended(user.name, signed_in):
        return None
    age = (time.time() if now is None else now) - signed_in
    # The token's own expiry was set from RAG_SESSION_HOURS at sign-in; a lower setting applies to older tokens too.
    return user if -LEEWAY_S <= age <= context.settings.session_hours * 3600 else None


def signed_in_at(claims: Mapping[str, Any]) -> float:
    """When the session of these claims signed in: the metadata's time (kept by re-issued tokens), else `iat`."""
    metadata = claims.get("metadata")
    value = metadata.get(SIGNED_IN_KEY) if isinstance(metadata, Mapping) else None
    return float(value) if isinstance(value, int | float) else float(claims["iat"])


async def message_allowed(language: Language) -> bool:
    """Whether the socket's session is still current (an open socket outlives its sign-in otherwise); if not,
    say so and close the socket (its reconnection is refused by the guard)."""
    import chainlit as cl
    from chainlit.server import sio

    context, session = state.current(), cl.context.session
    if not context.settings.ui_auth or current_user(session.token, context) is not None:
        return True
    await cl.ErrorMessage(content=ENDED[language]).send()  # type: ignore[no-untyped-call]
    socket_id = getattr(session, "socket_id", None)
    if socket_id:
        await sio.disconnect(socket_id)
    return False
