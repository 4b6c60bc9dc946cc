"""Gateway secrets on SQLite and PostgreSQL: insert if absent, read back, agree when
processes start together; a value stored already is read without a write."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest

from stateway.core.errors import StorageReadOnly
from stateway.sealing import AesGcmSealer, load_sealing_key
from stateway.storage.sql import SqlResponseStore, migrate, open_store
from stateway.storage.sql.secrets import SqlSecrets
from tests.storage.conftest import ReadOnly
from tests.storage.test_unwritable_database import read_only_file


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


async def test_a_stored_value_is_read_from_a_read_only_sqlite_without_a_write(
    tmp_path: Path,
) -> None:
    """A gateway starting on a database it may not write, its key stored already, needs
    no write for it; a value not stored yet is refused naming why."""
    path = tmp_path / "stateway.db"
    await migrate(f"sqlite:///{path}")
    writable = open_store(f"sqlite:///{path}")
    try:
        assert await SqlSecrets(writable.engine).put_if_absent("kept", "first") == "first"
    finally:
        await writable.aclose()
    with read_only_file(path):
        store = open_store(f"sqlite:///{path}")
        try:
            assert await SqlSecrets(store.engine).put_if_absent("kept", "second") == "first"
            with pytest.raises(StorageReadOnly) as refused:
                await SqlSecrets(store.engine).put_if_absent("missing", "value")
            assert refused.value.message.startswith(
                "Storage failed while storing a gateway secret. The database is read-only"
            )
        finally:
            await store.aclose()


@pytest.mark.postgres
async def test_a_stored_value_is_read_from_a_read_only_postgres_without_a_write(
    read_only: ReadOnly, fresh_postgres_url: str
) -> None:
    writable = open_store(fresh_postgres_url)
    try:
        assert await SqlSecrets(writable.engine).put_if_absent("kept", "first") == "first"
    finally:
        await writable.aclose()
    await read_only.on()
    store = open_store(fresh_postgres_url)
    try:
        assert await SqlSecrets(store.engine).put_if_absent("kept", "second") == "first"
        with pytest.raises(StorageReadOnly):
            await SqlSecrets(store.engine).put_if_absent("missing", "value")
    finally:
        await store.aclose()
        await read_only.off()
