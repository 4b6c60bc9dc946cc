"""``SqlKeyStore`` on SQLite and PostgreSQL: add, find by digest, list, revoke."""

from __future__ import annotations

import uuid

import pytest

from stateway.core.errors import StorageError
from stateway.identity.keys import ApiKey
from stateway.storage.sql import SqlResponseStore
from stateway.storage.sql.api_keys import SqlKeyStore


def key(name: str | None = None, expires_at: float | None = None) -> ApiKey:
    unique = uuid.uuid4().hex
    return ApiKey(f"key_{unique}", "acme", name, f"digest-{unique}", 1000.5, expires_at)


async def test_a_key_is_found_by_its_digest_only(store: SqlResponseStore) -> None:
    keys = SqlKeyStore(store.engine)
    added = key("ci", expires_at=2000.25)
    await keys.add(added)

    assert await keys.find(added.digest) == added
    assert await keys.find("digest-" + uuid.uuid4().hex) is None
    assert added in await keys.list()


async def test_revoking_keeps_the_first_revocation_time(store: SqlResponseStore) -> None:
    keys = SqlKeyStore(store.engine)
    added = key()
    await keys.add(added)

    revoked = await keys.revoke(added.id, 1500.0)
    again = await keys.revoke(added.id, 1600.0)

    assert revoked is not None
    assert revoked.revoked_at == 1500.0
    assert again is not None
    assert again.revoked_at == 1500.0
    assert (await keys.find(added.digest)) == revoked
    assert await keys.revoke("key_" + uuid.uuid4().hex, 1.0) is None


async def test_a_digest_is_stored_once(store: SqlResponseStore) -> None:
    keys = SqlKeyStore(store.engine)
    added = key()
    await keys.add(added)

    with pytest.raises(StorageError):
        await keys.add(ApiKey("key_" + uuid.uuid4().hex, "other", None, added.digest, 1.0))


async def test_the_list_is_oldest_first(store: SqlResponseStore) -> None:
    keys = SqlKeyStore(store.engine)
    later = ApiKey(f"key_{uuid.uuid4().hex}", "t", None, uuid.uuid4().hex, 9e9 + 2)
    earlier = ApiKey(f"key_{uuid.uuid4().hex}", "t", None, uuid.uuid4().hex, 9e9 + 1)
    await keys.add(later)
    await keys.add(earlier)

    listed = await keys.list()

    assert listed.index(earlier) < listed.index(later)
