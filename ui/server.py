"""The served process: the HTTP API with the chat UI mounted beside it, both on one set of services."""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.responses import RedirectResponse

from rag.config import Settings
from ui.api.app import create_app
from ui.serving.services import Services


def create_server(settings: Settings, services: Services | None = None, chat: bool = True) -> FastAPI:
    """The API, and with `chat` the Chainlit UI at /chat (once per process: Chainlit keeps global state)."""
    app = create_app(settings, services)
    if chat:
        from ui.chat.mount import CHAT_PATH, mount_chat

        app.add_api_route("/", lambda: RedirectResponse(CHAT_PATH), include_in_schema=False)
        mount_chat(app, settings, lambda: app.state.services.follow_generation())
        from ui.chat.readers import session_principal

        app.state.session_principal = session_principal  # the chat's sign-in also reads its cited PDFs (routes_files)
    return app
