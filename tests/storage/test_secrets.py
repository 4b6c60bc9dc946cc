"""Gateway secrets on SQLite and PostgreSQL: insert if absent, read back, agree when
processes start together."""

from __future__ import annotations

import asyncio
import uuid

from stateway.sealing import AesGcmSealer, load_sealing_key
from stateway.storage.sql import SqlResponseStore, open_store
from stateway.storage.sql.secrets import SqlSecrets


async def test_first_value_stays(store: SqlResponseStore) -> None:
    secrets = SqlSecrets(store.engine)
    name = f"test-{uuid.uuid4().hex}"
    assert await secrets.put_if_absent(name, "first") == "first"
    assert await secrets.put_if_absent(name, "second") == "first"


async def test_concurrent_first_starts_agree(store: SqlResponseStore, database_url: str) -> None:
    name = f"test-{uuid.uuid4().hex}"
    others = [open_store(database_url) for _ in range(3)]  # separate processes' pools
    try:
        values = await asyncio.gather(
            *(
                SqlSecrets(each.engine).put_if_absent(name, f"value-{index}")
                for index, each in enumerate([store, *others])
            )
        )
    finally:
        for other in others:
            await other.aclose()
    assert len(set(values)) == 1
    assert values[0].startswith("value-")


async def test_generated_sealing_key_is_shared_through_the_database(
    store: SqlResponseStore, database_url: str
) -> None:
    other = open_store(database_url)
    try:
        first = await load_sealing_key(None, SqlSecrets(store.engine))
        second = await load_sealing_key(None, SqlSecrets(other.engine))
    finally:
        await other.aclose()
    assert first == second
    sealed = AesGcmSealer(first).seal("compaction", "t", b"shared")
    assert AesGcmSealer(second).unseal("compaction", "t", sealed) == b"shared"
