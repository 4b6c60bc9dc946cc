"""A PostgreSQL table the gateway writes, locked by another session (``LOCK TABLE``; an
``ALTER TABLE`` or ``VACUUM FULL``, which take the same lock; a ``CREATE INDEX`` without
``CONCURRENTLY``, which lets reads pass but no write): reads answer, each write waits
``database_timeout`` and fails. The ping (``GET /ready``) then fails within its own time,
naming the lock, and passes again by itself once the lock is let go; a lock writes do not
wait for (a reader's, autovacuum's, another writer's) leaves it passing.

The locks are real ones, taken in another session's open transaction."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import asyncpg
import pytest

from stateway.core.errors import StorageError
from stateway.storage.sql import SqlResponseStore, migrate, open_store, ping
from tests.storage.test_unwritable_database import _record

pytestmark = pytest.mark.postgres


@pytest.fixture
async def pg_store(fresh_postgres_url: str) -> AsyncIterator[SqlResponseStore]:
    await migrate(fresh_postgres_url)
    store = open_store(fresh_postgres_url, timeout=30.0)
    yield store
    await store.aclose()


@asynccontextmanager
async def locked(url: str, table: str, mode: str) -> AsyncIterator[None]:
    """Another session holds ``table`` locked in ``mode`` meanwhile."""
    holder = await asyncpg.connect(url.replace("+asyncpg", ""), timeout=5)
    try:
        async with holder.transaction():
            await holder.execute(f"LOCK TABLE {table} IN {mode} MODE")
            yield
    finally:
        await holder.close()


@pytest.mark.parametrize(
    ("table", "mode"),
    [
        ("responses", "ACCESS EXCLUSIVE"),  # LOCK TABLE's default; ALTER TABLE, VACUUM FULL
        ("responses", "SHARE"),  # CREATE INDEX: reads pass, writes wait
        ("items", "EXCLUSIVE"),
        ("response_events", "SHARE ROW EXCLUSIVE"),
        ("conversation_items", "ACCESS EXCLUSIVE"),
        ("run_owners", "ACCESS EXCLUSIVE"),  # every lease's heartbeat waits
    ],
)
async def test_a_table_locked_against_writes_fails_the_ping_in_time_until_let_go(
    pg_store: SqlResponseStore, fresh_postgres_url: str, table: str, mode: str
) -> None:
    tenant = f"tenant-{uuid.uuid4().hex}"
    await pg_store.save(_record(tenant, "r1"))
    async with locked(fresh_postgres_url, table, mode):
        started = time.monotonic()
        with pytest.raises(StorageError) as probing:
            await pg_store.ping()
        assert time.monotonic() - started < ping.PING_TIMEOUT  # its own time, not 30 s
        assert (probing.value.status, probing.value.code) == (503, "storage_unavailable")
        assert "locked by another database session" in probing.value.message
        assert "lock timeout" in str(probing.value)  # the driver's words, for the log

    await pg_store.ping()
    await pg_store.save(_record(tenant, "r2"))  # the probe held nothing, wrote nothing
    assert await pg_store.get(tenant, "r2") is not None


@pytest.mark.parametrize(
    "mode",
    [
        "ACCESS SHARE",  # a reader (pg_dump)
        "ROW SHARE",  # SELECT ... FOR UPDATE
        "ROW EXCLUSIVE",  # another writer's open transaction (another replica's)
        "SHARE UPDATE EXCLUSIVE",  # autovacuum, ANALYZE, CREATE INDEX CONCURRENTLY
    ],
)
async def test_a_lock_writes_do_not_wait_for_leaves_the_ping_passing(
    pg_store: SqlResponseStore, fresh_postgres_url: str, mode: str
) -> None:
    tenant = f"tenant-{uuid.uuid4().hex}"
    async with locked(fresh_postgres_url, "responses", mode):
        await pg_store.ping()
        async with asyncio.timeout(5):
            await pg_store.save(_record(tenant, "r1"))


async def test_a_lock_let_go_while_the_ping_waits_for_it_leaves_the_ping_passing(
    pg_store: SqlResponseStore, fresh_postgres_url: str
) -> None:
    """The ping waits for the lock writes take for half its time (``LOCK_WAIT``), as a
    write would wait for it: a lock held against writes for a moment (a quick ``ALTER
    TABLE``) and let go meanwhile is no reason to leave the load balancer."""
    holder = await asyncpg.connect(fresh_postgres_url.replace("+asyncpg", ""), timeout=5)
    try:
        transaction = holder.transaction()
        await transaction.start()
        await holder.execute("LOCK TABLE responses IN ACCESS EXCLUSIVE MODE")
        pinging = asyncio.create_task(pg_store.ping())
        deadline = time.monotonic() + 5
        while not pinging.done() and not await holder.fetchval(
            "SELECT count(*) FROM pg_locks WHERE relation = 'responses'::regclass AND NOT granted"
        ):
            assert time.monotonic() < deadline, "the ping never waited for the lock"
            await asyncio.sleep(0.01)
        await transaction.rollback()  # let go while the ping waits for it
        await pinging
    finally:
        await holder.close()
