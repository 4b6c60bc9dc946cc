"""A gateway starting on a PostgreSQL that takes no writes (a hot standby, as during a
failover), its sealing key stored by an earlier start: it starts without a write, is not
ready until the database is writable again, then is ready and registers its lease by
itself. (SQLite's read-only file, through ``stateway serve``: tests/e2e.)"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import asyncpg
import pytest

from stateway.app import GatewayParts, build_app, compile_generation, open_gateway
from stateway.config import Overrides
from stateway.core.commands import CreateResponse
from stateway.core.errors import StorageReadOnly
from stateway.core.principal import Principal
from stateway.storage.sql import migrate
from tests.storage.conftest import ReadOnly

pytestmark = pytest.mark.postgres


async def owners(database_url: str) -> int:
    connection = await asyncpg.connect(database_url, timeout=5)
    try:
        count: int = await connection.fetchval("SELECT count(*) FROM run_owners")
    finally:
        await connection.close()
    return count


@asynccontextmanager
async def started_read_only(database_url: str) -> AsyncIterator[tuple[GatewayParts, ReadOnly]]:
    """A gateway started on ``database_url`` made read-only, its key stored by an earlier
    start, serving (its lifespan entered); the database is writable again on exit."""
    flags = Overrides(database=database_url, upstream="http://127.0.0.1:9/v1")
    await migrate(database_url)
    first = await open_gateway(compile_generation(flags), flags)  # stores the key
    await first.store.aclose()

    admin = await asyncpg.connect(database_url, timeout=5)
    read_only = ReadOnly(admin)
    await read_only.on()
    parts = await open_gateway(compile_generation(flags), flags)
    app = build_app(parts)
    try:
        async with app.router.lifespan_context(app):
            yield parts, read_only
    finally:
        await parts.store.aclose()
        await read_only.off()
        await admin.close()


async def test_a_read_only_postgres_with_its_key_starts_not_ready_then_recovers(
    fresh_postgres_url: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("STATEWAY_LEASE_TIMEOUT", "0.3")
    with caplog.at_level(logging.ERROR):
        async with started_read_only(fresh_postgres_url) as (parts, read_only):
            with pytest.raises(StorageReadOnly):
                await parts.store.ping()
            assert await owners(fresh_postgres_url) == 0

            await read_only.off()
            await parts.store.ping()  # a probe: ready again
            for _ in range(200):  # the next beat registers this process's lease
                if await owners(fresh_postgres_url):
                    break
                await asyncio.sleep(0.05)
            assert await owners(fresh_postgres_url) == 1
    assert "the database takes no writes: Storage failed while registering a run owner." in (
        caplog.text
    )


async def test_a_run_stored_before_the_first_beat_registers_the_lease_first(
    fresh_postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The database writable again, a stored run comes before any beat: this process's
    lease is registered before the run's row naming it is stored, so that a survivor can
    judge it should it die before its first beat."""
    monkeypatch.setenv("STATEWAY_LEASE_TIMEOUT", "3600")  # no beat within the test
    async with started_read_only(fresh_postgres_url) as (parts, read_only):
        await read_only.off()
        command = CreateResponse(model="m", input=[], stream=True)
        run = await parts.gateway.execute(Principal(), command)
        await run.wait()  # its upstream refused: failed, once its row was stored
        assert run.state.status == "failed"
        assert await owners(fresh_postgres_url) == 1
