"""Fixtures for the SQL store, run against SQLite and PostgreSQL alike.

On PostgreSQL every test works in a tenant of its own (everything is tenant-scoped), so
tests share the migrated ``test`` database without cleaning up after each other.
"""

from __future__ import annotations

import asyncio
import resource
import uuid
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from stateway.core.items import Item
from stateway.core.ports import ResponseRecord
from stateway.storage.sql import SqlConversationStore, SqlResponseStore, migrate, open_store

RecordFactory = Callable[..., ResponseRecord]

_migrated: set[str] = set()


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path}/stateway.db"


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database_url(request: pytest.FixtureRequest, sqlite_url: str) -> str:
    if request.param == "sqlite":
        return sqlite_url
    url: str = request.getfixturevalue("postgres_url")
    return url


@pytest.fixture
async def store(database_url: str) -> AsyncIterator[SqlResponseStore]:
    if database_url not in _migrated:  # once per database: later runs would be no-ops
        await migrate(database_url)
        _migrated.add(database_url)
    sql_store = open_store(database_url)
    yield sql_store
    await sql_store.aclose()


@pytest.fixture
def tenant() -> str:
    return f"tenant-{uuid.uuid4().hex}"


@pytest.fixture
def record(tenant: str) -> RecordFactory:
    """``record(id, previous=None, inputs=(), outputs=(), tenant_id=tenant, body=None)``.

    Items given as strings become messages (inputs from the user, outputs from the
    assistant); dicts are used as they are.
    """

    def make(
        response_id: str,
        previous: str | None = None,
        inputs: Iterable[str | Item] = (),
        outputs: Iterable[str | Item] = (),
        *,
        tenant_id: str = tenant,
        body: dict[str, Any] | None = None,
    ) -> ResponseRecord:
        return ResponseRecord(
            tenant_id=tenant_id,
            id=response_id,
            previous_response_id=previous,
            status="completed",
            created_at=1_700_000_000.25,
            body=body if body is not None else {"id": response_id, "model": "m"},
            input_items=[_item(x, "user") for x in inputs],
            output_items=[_item(x, "assistant") for x in outputs],
        )

    return make


def _item(value: str | Item, role: str) -> Item:
    if isinstance(value, str):
        return {"type": "message", "role": role, "content": [{"type": "text", "text": value}]}
    return value


@pytest.fixture
def conversations(store: SqlResponseStore) -> SqlConversationStore:
    return SqlConversationStore(store)


@pytest.fixture
async def read_only(fresh_postgres_url: str) -> AsyncIterator[ReadOnly]:
    await migrate(fresh_postgres_url)
    admin = await asyncpg.connect(fresh_postgres_url, timeout=5)
    try:
        yield ReadOnly(admin)
    finally:
        await admin.close()


class ReadOnly:
    """Sets the test's database read-only and back, as a failover to a standby and back
    to a writable primary look to a client: connections opened meanwhile cannot write."""

    def __init__(self, admin: asyncpg.Connection) -> None:
        self._admin = admin

    async def on(self) -> None:
        await self._alter("SET default_transaction_read_only = on")
        # The failover ends every connection: the new ones reach a read-only server.
        # Gone before the test goes on: on a loaded machine a backend may outlive the
        # terminate's wait, and die in the middle of the test's next query.
        for _ in range(600):
            alive = await self._admin.fetchval(
                "SELECT count(*) FROM (SELECT pg_terminate_backend(pid, 5000)"
                " FROM pg_stat_activity"
                " WHERE datname = current_database() AND pid <> pg_backend_pid()) AS ended"
            )
            if not alive:
                return
            await asyncio.sleep(0.05)
        raise AssertionError("the database's other connections outlived 30 s of terminates")

    async def off(self) -> None:
        """Writable again; the connections opened meanwhile stay open (and read-only)."""
        await self._alter("RESET default_transaction_read_only")

    async def _alter(self, change: str) -> None:
        database = await self._admin.fetchval("SELECT current_database()")
        await self._admin.execute(f'ALTER DATABASE "{database}" {change}')


@pytest.fixture
async def pg_store(read_only: ReadOnly, fresh_postgres_url: str) -> AsyncIterator[SqlResponseStore]:
    store = open_store(fresh_postgres_url)
    yield store
    await store.aclose()


@contextmanager
def file_size_limit(size: int) -> Iterator[None]:
    """This process may not grow a file past ``size`` bytes meanwhile (its soft
    ``RLIMIT_FSIZE``; Python ignores the ``SIGXFSZ`` a write past it raises, so the write
    fails with ``EFBIG``), as a disk quota, or a file system's largest file, refuses it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (size, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
