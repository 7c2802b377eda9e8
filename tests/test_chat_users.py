"""UI users: salted PBKDF2 hashes from settings; malformed entries are clear errors."""

from __future__ import annotations

import pytest

from rag.core.errors import ConfigError
from ui.serving.users import authenticate, hash_password, parse_users, verify_password


def test_hash_verifies_only_its_password() -> None:
    hashed = hash_password("correct horse", iterations=1000)
    assert hashed.startswith("pbkdf2_sha256$1000$")
    assert verify_password("correct horse", hashed)
    assert not verify_password("correct horsE", hashed)
    assert hash_password("correct horse", iterations=1000) != hashed  # salted
    assert not verify_password("x", "not-a-hash")


def test_users_from_settings_with_groups() -> None:
    alice, bob = hash_password("a", 1000), hash_password("b", 1000)
    users = parse_users(f"alice:{alice}:hr|finance, bob:{bob}")
    assert users["alice"].groups == ("finance", "hr") and users["bob"].groups == ()
    assert authenticate(users, "alice", "a") == users["alice"]
    assert authenticate(users, "alice", "b") is None
    assert authenticate(users, "carol", "a") is None


@pytest.mark.parametrize("spec", ["alice", "alice:plaintext", ":pbkdf2_sha256$1$s$d", "alice:pbkdf2_sha256$1$s"])
def test_malformed_users_are_config_errors(spec: str) -> None:
    with pytest.raises(ConfigError, match="RAG_UI_USERS"):
        parse_users(spec)
