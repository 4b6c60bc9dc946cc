"""Each tenant's ``cache_salt``: derived from the server key under a sub-key of its own,
stable, unguessable, and telling nothing of the tenant."""

from __future__ import annotations

import base64
import hashlib
import hmac
import re

import pytest

from stateway.sealing import TenantCacheSalts
from stateway.sealing.cache_salts import REMEMBERED

KEY = bytes(range(32))
OTHER_KEY = bytes(range(1, 33))
URL_SAFE = re.compile(r"[A-Za-z0-9_-]{43}")


def test_a_salt_is_43_url_safe_characters_256_bits() -> None:
    salt = TenantCacheSalts(KEY).salt("acme")
    assert URL_SAFE.fullmatch(salt), salt
    assert len(base64.urlsafe_b64decode(salt + "=")) == 32


def test_the_same_tenant_gets_the_same_salt_from_every_process_with_the_key() -> None:
    """Replicas and restarts agree: the salt depends on the key and the tenant alone."""
    assert TenantCacheSalts(KEY).salt("acme") == TenantCacheSalts(bytes(KEY)).salt("acme")


def test_the_derivation_is_hkdf_then_hmac() -> None:
    """RFC 5869's HKDF-SHA256 (no salt, the label as its info) makes the sub-key; the
    salt is the unpadded base64url of HMAC-SHA256(sub-key, tenant id). Written out here by
    hand: changing it empties every tenant's prefix cache once, so only on purpose."""
    extracted = hmac.digest(bytes(32), KEY, hashlib.sha256)
    sub_key = hmac.digest(extracted, b"stateway cache_salt v1" + b"\x01", hashlib.sha256)
    expected = hmac.digest(sub_key, b"acme", hashlib.sha256)
    assert TenantCacheSalts(KEY).salt("acme") == (
        base64.urlsafe_b64encode(expected).rstrip(b"=").decode()
    )


def test_tenants_get_different_salts() -> None:
    salts = TenantCacheSalts(KEY)
    tenants = ["acme", "globex", "default", "acme.", "Acme", "acm", "acme-1"]
    assert len({salts.salt(tenant) for tenant in tenants}) == len(tenants)


def test_another_server_key_gives_other_salts() -> None:
    assert TenantCacheSalts(KEY).salt("acme") != TenantCacheSalts(OTHER_KEY).salt("acme")


def test_the_salt_is_keyed_by_a_sub_key_not_the_sealing_key_itself() -> None:
    """An HMAC keyed with the sealing key directly would be that key's use elsewhere."""
    direct = hmac.digest(KEY, b"acme", hashlib.sha256)
    unkeyed = hashlib.sha256(b"acme").digest()
    salt = base64.urlsafe_b64decode(TenantCacheSalts(KEY).salt("acme") + "=")
    assert salt not in (direct, unkeyed)


def test_the_salt_does_not_show_the_tenant() -> None:
    salt = TenantCacheSalts(KEY).salt("acme-corporation")
    assert "acme" not in salt.lower()
    assert b"acme" not in base64.urlsafe_b64decode(salt + "=")


def test_a_key_of_another_length_is_refused() -> None:
    with pytest.raises(ValueError, match="32 bytes"):
        TenantCacheSalts(bytes(16))


def test_salts_are_remembered_up_to_a_bound_and_stay_the_same_past_it() -> None:
    salts = TenantCacheSalts(KEY)
    first = salts.salt("acme")
    assert salts.salt("acme") is first  # computed once: a lookup per request after that
    for n in range(REMEMBERED):
        salts.salt(f"t{n}")
    assert len(salts._salts) <= REMEMBERED
    assert salts.salt("acme") == first
