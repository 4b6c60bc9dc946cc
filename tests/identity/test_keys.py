"""The API key format, its digest, and tenant ids."""

from __future__ import annotations

import hashlib

import pytest

from stateway.identity.keys import (
    KEY_LENGTH,
    KEY_PREFIX,
    ApiKey,
    checked_tenant,
    key_digest,
    looks_like_key,
    new_key,
)


def test_a_key_is_the_prefix_and_256_random_bits() -> None:
    keys = {new_key() for _ in range(100)}

    assert len(keys) == 100
    for key in keys:
        assert key.startswith(KEY_PREFIX)
        assert len(key) == KEY_LENGTH
        assert looks_like_key(key)


def test_the_digest_is_the_sha256_of_the_key() -> None:
    key = new_key()

    assert key_digest(key) == hashlib.sha256(key.encode()).hexdigest()
    assert key not in key_digest(key)


@pytest.mark.parametrize(
    "credential",
    [
        "",
        "sk-test",
        KEY_PREFIX,
        KEY_PREFIX + "x" * 42,
        "sk-xx-" + "x" * 43,
        KEY_PREFIX + "x" * 42 + "=",
        KEY_PREFIX + "x" * 42 + "\u00e9",
        KEY_PREFIX + "x" * 21 + " " + "x" * 21,
    ],
)
def test_other_credentials_do_not_look_like_keys(credential: str) -> None:
    assert not looks_like_key(credential)


@pytest.mark.parametrize("tenant", ["default", "acme", "Team_1", "org.example-2", "a" * 128])
def test_usable_tenants(tenant: str) -> None:
    assert checked_tenant(tenant) == tenant


@pytest.mark.parametrize("tenant", ["", "-lead", "a/b", "a b", "é", "a\x1fb", "a" * 129])
def test_unusable_tenants_are_refused_naming_the_rule(tenant: str) -> None:
    with pytest.raises(ValueError, match="not a valid tenant id") as refused:
        checked_tenant(tenant)

    assert str(refused.value) == (
        f"tenant {tenant!r} is not a valid tenant id: 1 to 128 letters, digits, "
        "'.', '_' or '-', starting with a letter or digit"
    )


def test_a_key_expires_at_its_expiry() -> None:
    key = ApiKey("key_1", "t", None, "d", 1.0, expires_at=10.0)

    assert not key.expired(9.9)
    assert key.expired(10.0)
    assert not ApiKey("key_2", "t", None, "d", 1.0).expired(1e12)
