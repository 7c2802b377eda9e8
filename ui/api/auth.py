"""API keys: `RAG_API_KEYS="key1,key2"` or, with access groups, `"key1:hr|finance,key2"`; compared in constant time."""

from __future__ import annotations

import hmac
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ApiKey:
    """One accepted key and the document access groups it carries (empty: no group restriction yet)."""

    secret: str
    groups: tuple[str, ...] = ()


def parse_api_keys(spec: str) -> list[ApiKey]:
    """Keys from the RAG_API_KEYS setting; entries are comma-separated, groups follow a colon, split by |."""
    keys = []
    for entry in spec.split(","):
        secret, _, groups = entry.strip().partition(":")
        if secret:
            keys.append(ApiKey(secret, tuple(sorted(g.strip() for g in groups.split("|") if g.strip()))))
    return keys


def match_key(presented: str, keys: list[ApiKey]) -> ApiKey | None:
    """The key equal to `presented`, comparing against every key in constant time (no early exit)."""
    found = None
    for key in keys:
        if hmac.compare_digest(presented.encode(), key.secret.encode()):
            found = key
    return found
