"""What the Chainlit handlers share with the app that mounts them; installed by `mount_chat`, never built lazily."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from rag.config import Settings
from ui.chat.users import UiUser
from ui.serving.services import Services


@dataclass(frozen=True, slots=True)
class ChatContext:
    """Settings, the API's services (built at start-up, hence a callable) and the UI users."""

    settings: Settings
    services: Callable[[], Services]
    users: dict[str, UiUser]


_installed: list[ChatContext] = []


def install(context: ChatContext) -> None:
    """Make `context` the one the handlers use (Chainlit loads its handler module once per process)."""
    _installed[:] = [context]


def current() -> ChatContext:
    """The installed context; an error if the chat was not mounted through `mount_chat`."""
    if not _installed:
        raise RuntimeError("the chat UI is served through ui.chat.mount.mount_chat (rag serve)")
    return _installed[0]
