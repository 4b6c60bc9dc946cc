"""A PostgreSQL gone silent (a network partition, a frozen host: connections open, no
answer ever): reads and writes fail within the statement timeout instead of waiting for
ever, write nothing, and the pool serves again as soon as the database answers."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from stateway.core.errors import StorageError
from stateway.storage.sql import SqlResponseStore, migrate, open_store
from tests.storage.conftest import RecordFactory
from tests.support.switch import Switch

pytestmark = pytest.mark.postgres

TIMEOUT = 0.5
"""Seconds a statement waits for its answer here."""
BOUND = 30.0
"""Seconds a failure is given to come: one waiting longer hangs, and fails its test."""


@pytest.fixture
async def switch(postgres_url: str) -> AsyncIterator[Switch]:
    await migrate(postgres_url)
    async with Switch(postgres_url) as switch:
        yield switch


@pytest.fixture
async def store(switch: Switch) -> AsyncIterator[SqlResponseStore]:
    store = open_store(switch.url, timeout=TIMEOUT)
    yield store
    await store.aclose()


async def test_reads_and_writes_fail_in_time_then_heal(
    switch: Switch, store: SqlResponseStore, tenant: str, record: RecordFactory
) -> None:
    # Pooled connections, open when the database falls silent: the reads' and the writer's.
    await asyncio.gather(*(store.get(tenant, "none") for _ in range(4)))
    await store.save(record("before"))
    switch.silence()

    async with asyncio.timeout(BOUND):
        with pytest.raises(StorageError, match="saving a response") as save:
            await store.save(record("during"))
        with pytest.raises(StorageError, match="reading a response") as read:
            await store.get(tenant, "before")
        with pytest.raises(StorageError, match="checking the database"):
            await store.ping()
    assert (save.value.status, read.value.status) == (503, 503)
    assert save.value.reason == "TimeoutError"

    switch.on()  # the connections open meanwhile stay silent: none is taken again
    async with asyncio.timeout(BOUND):
        await store.save(record("after"))
        assert await store.get(tenant, "before") is not None
        assert await store.get(tenant, "after") is not None
        assert await store.get(tenant, "during") is None  # nothing of it was written


async def test_a_write_that_times_out_leaves_its_connection_behind(
    switch: Switch, store: SqlResponseStore, tenant: str, record: RecordFactory
) -> None:
    """The writer runs on the driver's connection itself: the one whose statement timed
    out (its cancel may still be under way) is never handed to the next write."""
    await store.save(record("before"))  # the pool's one connection
    switch.silence()
    async with asyncio.timeout(BOUND):
        with pytest.raises(StorageError, match="saving a response"):
            await store.save(record("during"))
    switch.on()

    async with asyncio.timeout(BOUND):
        await store.save(record("after"))
    assert await store.get(tenant, "after") is not None
