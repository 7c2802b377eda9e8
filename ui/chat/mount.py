"""Mounting the Chainlit chat into the FastAPI app, with sign-in, sessions and its guard set up from settings."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from fastapi import FastAPI
from starlette.staticfiles import StaticFiles

from rag.config import Settings
from rag.core.errors import ConfigError
from ui.chat import CHAT_DIR, state
from ui.chat.sessions import check_secret
from ui.serving.services import Services
from ui.serving.users import parse_users

CHAT_PATH = "/chat"


def mount_chat(app: FastAPI, settings: Settings, services: Callable[[], Services]) -> None:
    """Serve the chat at /chat; with RAG_UI_AUTH on, a secret of 32 bytes or more and at least one user are
    required. Once per process: Chainlit's app and configuration are global."""
    users = parse_users(settings.ui_users)
    if settings.ui_auth:
        if not settings.ui_auth_secret:
            raise ConfigError("RAG_UI_AUTH_SECRET must be set for the chat's sign-in (e.g. `openssl rand -hex 32`); "
                              "or RAG_UI_AUTH=false for local use without sign-in")
        check_secret(settings.ui_auth_secret)
        if not users:
            raise ConfigError("RAG_UI_USERS names no user (name:hash entries, hashes from `rag hash-password`); "
                              "or RAG_UI_AUTH=false for local use without sign-in")
        os.environ["CHAINLIT_AUTH_SECRET"] = settings.ui_auth_secret
    state.install(state.ChatContext(settings, services, users))
    import chainlit
    from chainlit.config import config
    from chainlit.server import app as chainlit_app
    from chainlit.utils import mount_chainlit

    from ui.chat import uploads
    from ui.chat.guard import ChatGuard
    from ui.chat.login import LoginLimiter

    # Chainlit reads it for the token's expiry and the cookie's max-age at each sign-in.
    config.project.user_session_timeout = round(settings.session_hours * 3600)
    config.project.allow_origins[:] = settings.cors_origin_list  # in place: Chainlit's CORS layer holds this list
    uploads.configure(config, settings)  # files dropped into the chat: our types and RAG_MAX_UPLOAD_MB
    _serve_main_script(app)
    mount_chainlit(app, target=str(CHAT_DIR / "handlers.py"), path=CHAT_PATH)
    limiter = LoginLimiter(settings.login_max_failures, settings.login_window_s, settings.login_concurrency)
    chainlit_app.add_middleware(ChatGuard, login=limiter)  # outermost of Chainlit's app: sees every /chat request
    app.state.chat_login = limiter
    # The PDF viewer asks for its worker at /assets/… even when Chainlit is mounted below a path (Chainlit 2.12):
    # without this, PDF sources fail to open.
    assets = Path(chainlit.__file__).parent / "frontend" / "dist" / "assets"
    app.mount("/assets", StaticFiles(directory=assets), name="chainlit-assets")


def _serve_main_script(app: FastAPI) -> None:
    """Chainlit's main script without the source panels' auto-open (ui.chat.frontend), at Chainlit's own path and
    at /assets; added before Chainlit is mounted, so these routes answer first."""
    from ui.chat.frontend import main_script

    script = main_script()
    if script is not None:
        for prefix in (CHAT_PATH, ""):
            app.add_route(f"{prefix}/assets/{script.name}", script.serve, methods=["GET", "HEAD"],
                          include_in_schema=False)
