"""A database that answers but refuses every write: SQLite on a full disk or read-only,
PostgreSQL read-only (a hot standby after a failover, or a database set read-only). Saves
fail naming the cause, the ping (``GET /ready``) fails naming it too, and both pass again
by themselves once the database takes writes.

The full disk is SQLite's own cap on the file's size (``PRAGMA max_page_count``, which
fails a write that needs the file to grow with the error a full disk gives,
``SQLITE_FULL``), set as each connection to the file opens; the space is freed by
deleting what an uncapped connection stored before. A read-only SQLite file is each
connection opened to it meanwhile set ``query_only``, which refuses a write as a
connection that could open the file only for reading does (``SQLITE_READONLY``): a file
whose permissions forbid writing is opened so, but tests may run as root, whom no
permission stops."""

from __future__ import annotations

import sqlite3
import uuid
import zlib
from collections.abc import Iterator
from contextlib import AbstractContextManager, closing, contextmanager
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from sqlalchemy import event
from sqlalchemy.pool import Pool

from stateway.core.errors import StorageError, StorageReadOnly
from stateway.core.ports import ResponseRecord
from stateway.storage.sql import SqlResponseStore, migrate, open_store, ping, queries
from stateway.storage.sql.leases import SqlOwnerLeases
from tests.storage.conftest import ReadOnly, file_size_limit

BIG = "x" * 64 * 1024
"""An input needing some sixteen new pages of a full file."""


def _record(tenant: str, response_id: str, text: str = "hi") -> ResponseRecord:
    return ResponseRecord(
        tenant_id=tenant,
        id=response_id,
        previous_response_id=None,
        status="completed",
        created_at=1.0,
        body={"id": response_id},
        input_items=[{"type": "message", "role": "user", "content": text}],
        output_items=[],
    )


def full_disk(path: Path) -> AbstractContextManager[None]:
    """Each connection SQLAlchemy opens to ``path`` meanwhile (the reads' pool and the
    writer's own) may not grow the file past the size it has as it opens."""
    return _opened_with(path, "PRAGMA max_page_count = 1")  # raised to the file's size


def read_only_file(path: Path) -> AbstractContextManager[None]:
    """Each connection SQLAlchemy opens to ``path`` meanwhile may not write it, and stays
    so afterwards, as one that found the file read-only as it opened it."""
    return _opened_with(path, "PRAGMA query_only = 1")


@contextmanager
def _opened_with(path: Path, pragma: str) -> Iterator[None]:
    """``pragma`` run on each connection SQLAlchemy opens to ``path`` meanwhile."""

    def apply(dbapi_connection: Any, _record: Any) -> None:
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute("PRAGMA database_list")
            if any(row[2] == str(path) for row in cursor.fetchall()):
                cursor.execute(pragma)
        finally:
            cursor.close()

    event.listen(Pool, "connect", apply)
    try:
        yield
    finally:
        event.remove(Pool, "connect", apply)


async def ballasted(path: Path) -> None:
    """A migrated database at ``path`` whose ``ballast`` table holds 256 KiB, and no free
    page; no connection open to it, so its WAL is checkpointed and gone (one ``sqlite3``
    opened and not closed lives on until the garbage collector's next pass, its WAL's
    frames with it)."""
    await migrate(f"sqlite:///{path}")
    with closing(sqlite3.connect(path, isolation_level=None)) as connection:
        connection.execute("CREATE TABLE ballast (body BLOB)")
        connection.execute("INSERT INTO ballast VALUES (zeroblob(256 * 1024))")
        connection.execute("VACUUM")


@pytest.fixture
async def sqlite_file(tmp_path: Path) -> Path:
    path = tmp_path / "stateway.db"
    await ballasted(path)
    return path


def probes(path: Path) -> int:
    """The write probes' rows left in the database at ``path``."""
    with closing(sqlite3.connect(path)) as connection:
        [(count,)] = connection.execute("SELECT count(*) FROM write_probes").fetchall()
    return int(count)


def free_space(path: Path) -> None:
    """The operator frees space: the ballast goes."""
    with closing(sqlite3.connect(path, isolation_level=None)) as connection:
        connection.execute("DELETE FROM ballast")


async def test_a_full_sqlite_fails_saves_and_the_ping_naming_it_until_space_is_freed(
    sqlite_file: Path,
) -> None:
    tenant = f"tenant-{uuid.uuid4().hex}"
    with full_disk(sqlite_file):
        store = open_store(f"sqlite:///{sqlite_file}")
        try:
            await store.ping()  # reads answer, and no write failed yet
            with pytest.raises(StorageError) as saving:
                await store.save(_record(tenant, "r1", BIG))
            assert (saving.value.status, saving.value.code) == (503, "storage_full")
            assert "saving a response" in saving.value.message
            assert "out of space" in saving.value.message
            assert "database or disk is full" in str(saving.value)  # for the log

            for _ in range(2):  # still full: every probe says so
                with pytest.raises(StorageError) as probing:
                    await store.ping()
                assert probing.value.code == "storage_full"
                assert "out of space" in probing.value.message

            free_space(sqlite_file)
            await store.ping()
            assert probes(sqlite_file) == 0  # written and deleted again, in one transaction
            await store.save(_record(tenant, "r2", BIG))
            assert await store.get(tenant, "r2") is not None
            assert await store.get(tenant, "r1") is None
        finally:
            await store.aclose()


async def test_a_save_that_lands_marks_the_store_writable_again(sqlite_file: Path) -> None:
    """Space freed and a save landing (no probe between): pings only read again, as they
    do while writes land (probes come every few seconds)."""
    tenant = f"tenant-{uuid.uuid4().hex}"
    with full_disk(sqlite_file):
        store = open_store(f"sqlite:///{sqlite_file}")
        try:
            with pytest.raises(StorageError) as saving:
                await store.save(_record(tenant, "r1", BIG))
            assert saving.value.code == "storage_full"
            free_space(sqlite_file)
            await store.save(_record(tenant, "r2", BIG))
            written: list[str] = []
            store.write_watchers.append(written.append)
            for _ in range(3):
                await store.ping()
            assert written == []
        finally:
            await store.aclose()


async def test_a_write_the_file_system_refuses_fails_the_ping_until_one_lands(
    sqlite_file: Path,
) -> None:
    """A disk quota reached, or a file size limit: SQLite's ``SQLITE_IOERR_WRITE``, a
    refusal lasting as a full disk's, which every ping then probes until writes land."""
    tenant = f"tenant-{uuid.uuid4().hex}"
    store = open_store(f"sqlite:///{sqlite_file}")
    try:
        await store.ping()  # opened before the limit: reads answer
        with file_size_limit(4096):  # its WAL, empty, may not take one page
            with pytest.raises(StorageError) as saving:
                await store.save(_record(tenant, "r1", BIG))
            assert (saving.value.status, saving.value.code) == (503, "storage_write_failed")
            assert "saving a response" in saving.value.message
            assert "disk I/O error" in str(saving.value)  # for the log
            for _ in range(2):  # still refused: every probe says so
                with pytest.raises(StorageError) as probing:
                    await store.ping()
                assert probing.value.code == "storage_write_failed"

        await store.ping()
        assert probes(sqlite_file) == 0
        await store.save(_record(tenant, "r2", BIG))
        assert await store.get(tenant, "r2") is not None
        assert await store.get(tenant, "r1") is None
    finally:
        await store.aclose()


async def test_a_read_only_sqlite_fails_saves_and_the_ping_naming_it_until_writable_again(
    sqlite_file: Path,
) -> None:
    """The store opened while its file could not be written (its permissions, a read-only
    mount): once it can, new connections write it, the writer's too, by themselves."""
    tenant = f"tenant-{uuid.uuid4().hex}"
    store = open_store(f"sqlite:///{sqlite_file}")
    try:
        with read_only_file(sqlite_file):
            await store.ping()  # reads answer, and no write failed yet
            with pytest.raises(StorageError) as saving:
                await store.save(_record(tenant, "r1"))
            assert (saving.value.status, saving.value.code) == (503, "storage_read_only")
            assert "saving a response" in saving.value.message
            assert "read-only" in saving.value.message
            assert "readonly database" in str(saving.value)  # for the log
            for _ in range(2):  # still read-only: every probe says so
                with pytest.raises(StorageError) as probing:
                    await store.ping()
                assert probing.value.code == "storage_read_only"

        await store.ping()
        assert probes(sqlite_file) == 0
        await store.save(_record(tenant, "r2"))
        assert await store.get(tenant, "r2") is not None
    finally:
        await store.aclose()


async def test_saves_heal_by_themselves_once_sqlite_is_writable_again(sqlite_file: Path) -> None:
    """No probe between (readiness not configured): the writer's connection, which
    found the file read-only, is replaced."""
    tenant = f"tenant-{uuid.uuid4().hex}"
    store = open_store(f"sqlite:///{sqlite_file}")
    try:
        with read_only_file(sqlite_file), pytest.raises(StorageError, match="read-only"):
            await store.save(_record(tenant, "r1"))
        await store.save(_record(tenant, "r2"))
    finally:
        await store.aclose()


READ_ONLY = StorageReadOnly.cause


@pytest.mark.postgres
async def test_a_read_only_postgres_fails_the_ping_and_saves_until_writable_again(
    read_only: ReadOnly, pg_store: SqlResponseStore
) -> None:
    tenant = f"tenant-{uuid.uuid4().hex}"
    await pg_store.save(_record(tenant, "r1"))
    await read_only.on()

    # Told before any save fails: a replica that starts on a standby is never ready.
    with pytest.raises(StorageError) as probing:
        await pg_store.ping()
    assert (probing.value.status, probing.value.code) == (503, "storage_read_only")
    assert probing.value.message == f"Storage failed while checking the database. {READ_ONLY}"
    with pytest.raises(StorageError) as saving:
        await pg_store.save(_record(tenant, "r2"))
    assert saving.value.code == "storage_read_only"
    assert "saving a response" in saving.value.message
    assert "read-only" in saving.value.message
    assert await pg_store.get(tenant, "r1") is not None  # reads still answer
    with pytest.raises(StorageError, match="read-only"):
        await pg_store.ping()  # still: the refused save changes nothing

    await read_only.off()
    await pg_store.ping()
    await pg_store.save(_record(tenant, "r2"))


@pytest.mark.postgres
async def test_saves_heal_by_themselves_once_postgres_is_writable_again(
    read_only: ReadOnly, pg_store: SqlResponseStore
) -> None:
    """No probe between (readiness not configured): the connection a save found
    read-only is replaced, with every one opened before it."""
    tenant = f"tenant-{uuid.uuid4().hex}"
    await read_only.on()
    await _pool(pg_store, 4)  # read-only sessions, pooled
    with pytest.raises(StorageError, match="read-only"):
        await pg_store.save(_record(tenant, "r1"))

    await read_only.off()
    for index in range(5):
        await pg_store.save(_record(tenant, f"r{index}"))


@pytest.mark.postgres
async def test_a_leases_writes_heal_by_themselves_once_postgres_is_writable_again(
    read_only: ReadOnly, pg_store: SqlResponseStore
) -> None:
    """Writes on the store's own connections (a lease's registration and beats, as a
    conversation's changes), no probe nor save between (a gateway started on a standby,
    no load balancer probing it): the connection a write found read-only is replaced, with
    every one opened before it, as the writer's is. (SQLite's are, by the ping.)"""
    await read_only.on()
    await _pool(pg_store, 4)  # read-only sessions, pooled
    leases = SqlOwnerLeases(pg_store)
    owner = f"host-{uuid.uuid4().hex} 1 1"
    with pytest.raises(StorageError, match="read-only"):
        await leases.register(owner, 10.0)

    await read_only.off()
    await leases.register(owner, 10.0)
    for _ in range(5):
        assert await leases.renew(owner)


@pytest.mark.postgres
async def test_the_ping_asks_a_new_connection_before_saying_read_only(
    read_only: ReadOnly, pg_store: SqlResponseStore
) -> None:
    """Sessions opened while the database was read-only stay so once it is writable: a
    ping finding one asks again on a new connection."""
    await read_only.on()
    with pytest.raises(StorageError, match="read-only"):
        await pg_store.ping()
    await _pool(pg_store, 4)  # read-only sessions opened since, pooled

    await read_only.off()
    await pg_store.ping()


@pytest.mark.postgres
async def test_the_pool_is_renewed_once_postgres_is_writable_again(
    read_only: ReadOnly, pg_store: SqlResponseStore
) -> None:
    """Read-only sessions busy while a ping finds the database writable again (requests
    under way) are not pooled again afterwards, to fail saves."""
    tenant = f"tenant-{uuid.uuid4().hex}"
    await read_only.on()
    with pytest.raises(StorageError, match="read-only"):
        await pg_store.ping()
    busy = [await pg_store.engine.connect() for _ in range(4)]

    await read_only.off()
    await pg_store.ping()  # on a new connection: the busy ones are out of the pool
    for connection in busy:
        await connection.close()
    for index in range(5):
        await pg_store.save(_record(tenant, f"r{index}"))


@pytest.mark.postgres
async def test_a_probe_lands_on_a_database_publishing_every_table(
    read_only: ReadOnly, pg_store: SqlResponseStore, fresh_postgres_url: str
) -> None:
    """A publication of every table (change data capture: Debezium, AWS DMS) refuses a
    DELETE from a table PostgreSQL cannot identify a row of: the probe, written and deleted
    again, must still land once the database takes writes."""
    admin = await asyncpg.connect(fresh_postgres_url, timeout=5)
    try:
        await admin.execute("CREATE PUBLICATION everything FOR ALL TABLES")
    finally:
        await admin.close()
    tenant = f"tenant-{uuid.uuid4().hex}"
    await read_only.on()
    with pytest.raises(StorageError, match="read-only"):
        await pg_store.save(_record(tenant, "r1"))

    await read_only.off()
    await pg_store.ping()
    await pg_store.save(_record(tenant, "r2"))


async def _pool(store: SqlResponseStore, count: int) -> None:
    """``count`` connections opened at once, then pooled."""
    connections = [await store.engine.connect() for _ in range(count)]
    for connection in connections:
        await connection.close()


def test_a_probe_row_takes_its_size_in_pages_even_compressed() -> None:
    """PostgreSQL compresses a large value (pglz): 4 KiB of zeros took 56 bytes, in a page
    the table may already have, so a probe landed on a full disk. Random bytes do not
    compress."""
    first, second = (ping._probe()[queries.INSERT_PROBE][0]["body"] for _ in range(2))
    assert len(zlib.compress(first)) >= ping.PROBE_BYTES
    assert first != second
