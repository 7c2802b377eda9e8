"""What the Chainlit handlers share with the app that mounts them; installed by `mount_chat`, never built lazily."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from rag.config import Settings
from ui.serving.services import Services
from ui.serving.users import UiUser

if TYPE_CHECKING:
    from ui.chat.sessions import SignOuts


@dataclass(frozen=True, slots=True)
class ChatContext:
    """Settings, the API's services (built at start-up, hence a callable), the UI users and their sign-outs."""

    settings: Settings
    services: Callable[[], Services]
    users: dict[str, UiUser]
    sign_outs: SignOuts = field(init=False)

    def __post_init__(self) -> None:
        from ui.chat.sessions import SignOuts

        # Sign-outs end sessions: kept beside the data, for every context built over it (a restart, new users).
        object.__setattr__(self, "sign_outs", SignOuts(self.settings.data_dir / "ui" / "sign-outs.json"))


_installed: list[ChatContext] = []


def install(context: ChatContext) -> None:
    """Make `context` the one the handlers use (Chainlit loads its handler module once per process)."""
    _installed[:] = [context]


def current() -> ChatContext:
    """The installed context; an error if the chat was not mounted through `mount_chat`."""
    if not _installed:
        raise RuntimeError("the chat UI is served through ui.chat.mount.mount_chat (rag serve)")
    return _installed[0]
