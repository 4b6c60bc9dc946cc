"""The PostgreSQL connections a gateway process holds: ``[storage] max_connections`` at
most (each replica's count against the server's own ``max_connections``), a statement
finding them all taken waiting ``database_timeout`` for one, then failing as storage
fails (a 503), not holding its request for SQLAlchemy's 30 s."""

from __future__ import annotations

import asyncio
from contextlib import AsyncExitStack

import pytest

from stateway.app import compile_generation, open_gateway
from stateway.config import Overrides
from stateway.core.errors import StorageError
from stateway.storage.sql import migrate

pytestmark = pytest.mark.postgres


async def test_a_process_holds_max_connections_then_waits_database_timeout_for_one(
    fresh_postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STATEWAY_DATABASE_MAX_CONNECTIONS", "12")
    monkeypatch.setenv("STATEWAY_DATABASE_TIMEOUT", "0.5")
    flags = Overrides(database=fresh_postgres_url, upstream="http://127.0.0.1:9/v1")
    await migrate(fresh_postgres_url)
    parts = await open_gateway(compile_generation(flags), flags)
    try:
        async with AsyncExitStack() as held:
            for _ in range(12):  # ten kept open, two more opened as needed
                await held.enter_async_context(parts.store.engine.connect())
            assert parts.store.engine.pool.checkedout() == 12  # type: ignore[attr-defined]

            with pytest.raises(StorageError):
                # Bounded well past database_timeout: SQLAlchemy's own 30 s fails it.
                await asyncio.wait_for(parts.store.get("t", "resp_none"), 10)
        assert parts.store.engine.pool.size() == 10  # type: ignore[attr-defined]
    finally:
        await parts.store.aclose()


def test_fewer_connections_than_the_pool_keeps_are_all_kept() -> None:
    """A ``max_connections`` under ten: that many kept open, none opened beyond."""
    from stateway.storage.sql.engine import create_engine

    engine = create_engine("postgresql://u@127.0.0.1:1/db", max_connections=3)

    assert (engine.pool.size(), engine.pool._max_overflow) == (3, 0)  # type: ignore[attr-defined]
