"""UI users from settings: `RAG_UI_USERS="alice:<hash>[:hr|finance[:admin]],bob:<hash>"`, hashes from
`rag hash-password`; after the hash come the user's groups (`|`-separated, `*` for all) and role (reader by default)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from dataclasses import dataclass, field

from rag.core.access import Principal
from rag.core.errors import ConfigError
from ui.serving.principals import grant

SCHEME = "pbkdf2_sha256"
ITERATIONS = 600_000  # OWASP's 2023 figure for PBKDF2-HMAC-SHA256


@dataclass(frozen=True, slots=True)
class UiUser:
    """A person who may sign in to the chat UI, with the document access groups they carry."""

    name: str
    password_hash: str = field(repr=False)
    principal: Principal

    @property
    def groups(self) -> tuple[str, ...]:
        """The user's groups, sorted (`*` users list none: they hold all)."""
        return tuple(sorted(self.principal.groups))


def hash_password(password: str, iterations: int = ITERATIONS) -> str:
    """A salted PBKDF2 hash, `pbkdf2_sha256$<iterations>$<salt>$<digest>`, for RAG_UI_USERS."""
    salt = secrets.token_urlsafe(16)
    digest = hashlib.pbkdf2_hmac("sha256", password.encode(), salt.encode(), iterations)
    return f"{SCHEME}${iterations}${salt}${base64.b64encode(digest).decode()}"


def verify_password(password: str, password_hash: str) -> bool:
    """Whether `password` matches the hash (constant-time comparison)."""
    try:
        scheme, iterations, salt, expected = password_hash.split("$")
        rounds = int(iterations)
    except ValueError:
        return False
    if scheme != SCHEME:
        return False
    digest = hashlib.pbkdf2_hmac("sha256", password.encode(), salt.encode(), rounds)
    return hmac.compare_digest(base64.b64encode(digest).decode(), expected)


def parse_users(spec: str) -> dict[str, UiUser]:
    """Users by name from the RAG_UI_USERS setting; a malformed entry is a ConfigError naming it."""
    users: dict[str, UiUser] = {}
    for entry in filter(None, (part.strip() for part in spec.split(","))):
        name, _, rest = entry.partition(":")
        password_hash, _, grants = rest.partition(":")
        groups, _, role = grants.partition(":")
        if not name or not password_hash.startswith(f"{SCHEME}$") or password_hash.count("$") != 3:
            raise ConfigError(f"RAG_UI_USERS: entry for {name or '?'!r} must be name:hash[:groups[:role]] with a "
                              "hash from `rag hash-password`")
        users[name] = UiUser(name, password_hash, grant(name, groups, role, f"RAG_UI_USERS entry for {name!r}"))
    return users


def authenticate(users: dict[str, UiUser], name: str, password: str) -> UiUser | None:
    """The user when name and password match; unknown names cost the same time as wrong passwords."""
    user = users.get(name)
    if user is None:
        verify_password(password, _DUMMY_HASH)
        return None
    return user if verify_password(password, user.password_hash) else None


_DUMMY_HASH = f"{SCHEME}${ITERATIONS}$timing-equaliser${base64.b64encode(bytes(32)).decode()}"
