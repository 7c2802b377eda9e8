"""Who is asking, from configuration: API keys (`RAG_API_KEYS`) and chat users' grants.

`RAG_API_KEYS="key1,key2:hr|finance,key3:*:admin"`: entries are comma-separated; after the key come its groups
(`|`-separated, `*` for every group) and its role (`reader`, the default, or `admin`). Keys are compared in
constant time and never logged.
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass, field

from rag.core.access import Principal, parse_grant
from rag.core.errors import ConfigError

MIN_KEY_CHARS = 16


@dataclass(frozen=True, slots=True)
class ApiKey:
    """One accepted key and the principal it stands for."""

    secret: str = field(repr=False)
    principal: Principal

    @property
    def groups(self) -> tuple[str, ...]:
        """The key's groups, sorted (`*` keys list none: they hold all)."""
        return tuple(sorted(self.principal.groups))


def grant(name: str, groups: str, role: str, who: str) -> Principal:
    """The principal for a configured key or user: name, groups (`a|b` or `*`) and role."""
    names, everything, checked = parse_grant(groups, role, who)
    return Principal(name, names, checked, everything)


def parse_api_keys(spec: str) -> list[ApiKey]:
    """Keys from the RAG_API_KEYS setting; a malformed entry is a ConfigError that does not show the key."""
    keys = []
    for number, entry in enumerate(filter(None, (part.strip() for part in spec.split(","))), start=1):
        secret, _, rest = entry.partition(":")
        groups, _, role = rest.partition(":")
        who = f"RAG_API_KEYS entry {number}"
        if len(secret) < MIN_KEY_CHARS:
            raise ConfigError(f"{who}: keys need at least {MIN_KEY_CHARS} characters (e.g. `openssl rand -hex 24`)")
        keys.append(ApiKey(secret, grant(f"key {number}", groups, role, who)))
    if len({key.secret for key in keys}) < len(keys):
        raise ConfigError("RAG_API_KEYS: the same key is listed twice")
    return keys


def match_key(presented: str, keys: list[ApiKey]) -> ApiKey | None:
    """The key equal to `presented`, comparing against every key in constant time (no early exit)."""
    found = None
    for key in keys:
        if hmac.compare_digest(presented.encode(), key.secret.encode()):
            found = key
    return found
