"""Database failures leave the store as StorageError, and only those."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

import asyncpg
import pytest
from sqlalchemy import text
from sqlalchemy.exc import CompileError, DataError, IntegrityError, OperationalError

from stateway.core.errors import StorageError, StorageRejected
from stateway.core.ports import ResponseRecord
from stateway.storage.sql import SqlConversationStore, SqlResponseStore, migrate, open_store
from stateway.storage.sql import ping as ping_module
from stateway.storage.sql.errors import storage_errors
from tests.storage.conftest import file_size_limit
from tests.support.switch import Switch

UNREACHABLE_POSTGRES = "postgresql://postgres@127.0.0.1:1/test"  # nothing listens on port 1


@pytest.mark.parametrize(
    "failure",
    [
        OperationalError("SELECT secret FROM t", {"p": "v"}, Exception("server closed")),
        ConnectionRefusedError(111, "Connection refused"),
        TimeoutError(),
        sqlite3.OperationalError("database is locked"),
        asyncpg.PostgresError("boom"),
        asyncpg.InterfaceError("connection is closed"),
    ],
)
def test_database_failures_become_storage_errors(failure: Exception) -> None:
    with (
        pytest.raises(StorageError, match="failed while doing things") as caught,
        storage_errors("doing things"),
    ):
        raise failure

    assert caught.value.__cause__ is failure
    assert "SELECT" not in caught.value.message
    assert caught.value.status == 503


@pytest.mark.parametrize(
    ("failure", "said"),
    [
        (
            OperationalError("SELECT secret FROM t", {"p": "prompt"}, Exception("server closed")),
            "Exception: server closed",
        ),
        (ConnectionRefusedError(111, "Connection refused"), "[Errno 111] Connection refused"),
        (sqlite3.OperationalError("database is locked"), "OperationalError: database is locked"),
        (TimeoutError(), "TimeoutError"),
    ],
)
def test_the_log_line_says_what_the_database_said_and_the_client_does_not(
    failure: Exception, said: str
) -> None:
    """``str(error)`` (what log lines show) carries the driver's error, never the statement
    or its parameters; ``message`` (what a client gets) stays generic."""
    with pytest.raises(StorageError) as caught, storage_errors("doing things"):
        raise failure

    assert said in str(caught.value)
    assert str(caught.value).startswith("Storage failed while doing things. (")
    assert caught.value.message == "Storage failed while doing things."
    assert "SELECT" not in str(caught.value)
    assert "prompt" not in str(caught.value)


@pytest.mark.parametrize(
    ("failure", "said"),
    [
        (TimeoutError(), "TimeoutError"),
        (sqlite3.OperationalError("  \n"), "OperationalError"),
        (
            sqlite3.OperationalError("disk I/O error\nat page 4\nof the file"),
            "OperationalError: disk I/O error",
        ),
        (sqlite3.OperationalError("x" * 400), "OperationalError: " + "x" * 300),
        (
            OperationalError("SELECT secret FROM t", {"p": "prompt"}, Exception("gone\nto lunch")),
            "Exception: gone",
        ),
        (OperationalError("SELECT secret FROM t", {"p": "prompt"}, None), "OperationalError"),
    ],
)
def test_the_reason_is_the_first_line_of_the_drivers_error_or_its_class(
    failure: Exception, said: str
) -> None:
    """An error without text is named by its class alone; a SQLAlchemy error without a
    driver error under it by its own class (its text is the statement's)."""
    with pytest.raises(StorageError) as caught, storage_errors("doing things"):
        raise failure

    assert caught.value.reason == said


@pytest.mark.parametrize(
    "failure",
    [
        IntegrityError("INSERT INTO t", {}, Exception("duplicate key")),
        sqlite3.IntegrityError("UNIQUE constraint failed: t.id"),  # the writers' own
        asyncpg.UniqueViolationError("duplicate key value violates unique constraint"),
    ],
)
def test_rejected_writes_say_so(failure: Exception) -> None:
    with (
        pytest.raises(StorageRejected, match="rejected the data while saving"),
        storage_errors("saving"),
    ):
        raise failure


def _sqlite_error(code: int) -> sqlite3.Error:
    error = sqlite3.OperationalError("refused")
    error.sqlite_errorcode = code
    return error


@pytest.mark.parametrize(
    "failure",
    [
        DataError("UPDATE t", {}, Exception("value out of range")),
        asyncpg.NumericValueOutOfRangeError("integer out of range"),
        asyncpg.UntranslatableCharacterError("unsupported Unicode escape sequence"),
        asyncpg.ProgramLimitExceededError("index row size 3000 exceeds btree maximum"),
        sqlite3.DataError("string or blob too big"),
        _sqlite_error(sqlite3.SQLITE_TOOBIG),
        _sqlite_error(sqlite3.SQLITE_CONSTRAINT_CHECK),
        _sqlite_error(sqlite3.SQLITE_MISMATCH),
        # the driver's code read through SQLAlchemy's wrapper of another class
        OperationalError("INSERT", {}, _sqlite_error(sqlite3.SQLITE_TOOBIG)),
        OperationalError("INSERT", {}, asyncpg.ProgramLimitExceededError("index row size")),
    ],
)
def test_data_the_database_cannot_hold_is_rejected_not_an_outage(failure: Exception) -> None:
    """A value out of range, a row past the database's limits: sent again, refused again."""
    with (
        pytest.raises(StorageRejected, match="rejected the data while saving"),
        storage_errors("saving"),
    ):
        raise failure


@pytest.mark.parametrize(
    "failure",
    [
        OperationalError("UPDATE t", {}, Exception("server closed")),
        asyncpg.ConnectionDoesNotExistError("connection was closed"),
        asyncpg.QueryCanceledError("canceling statement due to statement timeout"),
        asyncpg.SerializationError("could not serialize access"),
        asyncpg.DiskFullError("could not extend file"),
        _sqlite_error(sqlite3.SQLITE_BUSY),
        _sqlite_error(sqlite3.SQLITE_IOERR),
    ],
)
def test_an_outage_is_not_a_rejection(failure: Exception) -> None:
    with pytest.raises(StorageError) as caught, storage_errors("saving"):
        raise failure
    assert not isinstance(caught.value, StorageRejected)


@pytest.mark.parametrize("bug", [CompileError("bad statement"), ValueError("bad value")])
def test_bugs_are_not_disguised_as_outages(bug: Exception) -> None:
    with pytest.raises(type(bug)), storage_errors("doing things"):
        raise bug


async def test_ping_reports_an_unreachable_postgres() -> None:
    store = open_store(UNREACHABLE_POSTGRES)
    try:
        with pytest.raises(StorageError, match="checking the database"):
            await store.ping()
    finally:
        await store.aclose()


async def test_ping_reports_a_corrupt_sqlite_file(tmp_path: Path) -> None:
    # Not a file SQLite cannot open at all: aiosqlite then leaves a worker thread behind
    # (omnilib/aiosqlite#241-style "Event loop is closed" noise after the test).
    (tmp_path / "garbage.db").write_bytes(b"this is not a database" * 100)
    store = open_store(f"sqlite:///{tmp_path}/garbage.db")
    try:
        with pytest.raises(StorageError):
            await store.ping()
    finally:
        await store.aclose()


async def test_migrate_reports_an_unreachable_database() -> None:
    with pytest.raises(StorageError, match="migrating"):
        await migrate(UNREACHABLE_POSTGRES)


async def test_reads_report_failures_too(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path}/never_migrated.db")  # no tables
    try:
        with pytest.raises(StorageError, match="loading a previous_response_id chain"):
            await store.load_context("t", "r")
    finally:
        await store.aclose()


async def test_a_conversations_failed_reads_say_what_they_were_doing(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path}/never_migrated.db")  # no tables
    conversations = SqlConversationStore(store)
    reads: dict[str, Callable[[], Awaitable[object]]] = {
        "reading a conversation": lambda: conversations.get("t", "c"),
        "reading a conversation item": lambda: conversations.get_item("t", "c", "i"),
        "loading a conversation": lambda: conversations.load_items("t", "c"),
        "listing conversation items": lambda: conversations.list_items(
            "t", "c", after=None, limit=2, order="asc"
        ),
    }
    try:
        for action, read in reads.items():
            with pytest.raises(StorageError) as failed:
                await read()
            assert failed.value.message == f"Storage failed while {action}."
    finally:
        await store.aclose()


async def _terminate_pooled(store: SqlResponseStore, admin: asyncpg.Connection, count: int) -> None:
    """Fill ``store``'s pool with ``count`` connections, then have the server end them all
    (as a PostgreSQL restart, or a proxy recycling its connections, does)."""
    connections = [await store.engine.connect() for _ in range(count)]
    pids = [await connection.scalar(text("SELECT pg_backend_pid()")) for connection in connections]
    drivers = [
        (await connection.get_raw_connection()).driver_connection for connection in connections
    ]
    for connection in connections:
        await connection.close()  # back to the pool, alive
    for pid in pids:  # waits (server-side) until each backend is gone
        assert await admin.fetchval("SELECT pg_terminate_backend($1, 5000)", pid)
    # The backend leaves the server's process list before its socket closes: wait until
    # the driver has read each end, as it would have long before an idle one is next taken.
    deadline = time.monotonic() + 10
    while not all(driver.is_closed() for driver in drivers):
        assert time.monotonic() < deadline, "the driver never saw the server end them"
        await asyncio.sleep(0.01)


@pytest.mark.postgres
async def test_connections_the_server_ended_are_replaced_before_any_read_uses_them(
    postgres_url: str,
) -> None:
    """The driver sees the server end an idle connection: the pool replaces it (and every
    connection as old) when it is next taken, so no read fails on it."""
    await migrate(postgres_url)  # the ping reads the schema: a database never migrated fails it
    store = open_store(postgres_url)
    admin = await asyncpg.connect(postgres_url, timeout=5)
    try:
        await _terminate_pooled(store, admin, 4)

        for _ in range(5):
            await store.ping()
    finally:
        await admin.close()
        await store.aclose()


@pytest.mark.postgres
async def test_connections_the_server_ended_are_replaced_before_any_write_uses_them(
    postgres_url: str,
) -> None:
    """The writer runs its statements on the driver's connection itself, bypassing
    SQLAlchemy's own handling of a disconnect: every pooled connection the server ended
    must still be replaced, not fail one save each (a restarted server would otherwise
    fail as many saves in a row as the pool held connections)."""
    await migrate(postgres_url)
    store = open_store(postgres_url)
    admin = await asyncpg.connect(postgres_url, timeout=5)
    tenant = f"tenant-{uuid.uuid4().hex}"
    try:
        await _terminate_pooled(store, admin, 4)

        for index in range(5):
            await store.save(_record(tenant, f"r{index}"))
        assert await store.get(tenant, "r4") is not None
    finally:
        await admin.close()
        await store.aclose()


@pytest.mark.postgres
async def test_a_connection_ended_during_a_write_fails_that_write_then_heals(
    postgres_url: str,
) -> None:
    """A connection the server ends while a save runs on it fails that save (the pool could
    not know); it must leave the pool, or every later save would fail on it."""
    await migrate(postgres_url)
    store = open_store(postgres_url)
    tenant = f"tenant-{uuid.uuid4().hex}"
    async with store.engine.connect() as connection:  # the pool's only connection
        pid = await connection.scalar(text("SELECT pg_backend_pid()"))

    def end_it(_sql: str) -> None:  # before the first statement, its transaction begun
        store.write_watchers.remove(end_it)
        thread = threading.Thread(target=asyncio.run, args=(_terminate(postgres_url, pid),))
        thread.start()
        thread.join()  # the writer's loop waits: the driver learns of it only as it writes

    try:
        store.write_watchers.append(end_it)
        with pytest.raises(StorageError, match="failed while saving"):
            await store.save(_record(tenant, "r1"))
        await store.save(_record(tenant, "r2"))
        assert await store.get(tenant, "r2") is not None
        assert await store.get(tenant, "r1") is None
    finally:
        await store.aclose()


async def _terminate(postgres_url: str, pid: int) -> None:
    admin = await asyncpg.connect(postgres_url, timeout=5)
    try:
        assert await admin.fetchval("SELECT pg_terminate_backend($1, 5000)", pid)
    finally:
        await admin.close()


@pytest.mark.postgres
async def test_a_ping_of_a_database_gone_silent_fails_within_its_bound(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A PostgreSQL that stops answering without closing (its host lost without a word, a
    network partition) must not hold ``GET /ready``: the ping fails within its bound, and
    the connection it waited on, whose answer may yet come, is never used again."""
    bound = ping_module.PING_TIMEOUT
    async with Switch(postgres_url) as switch:
        store = open_store(switch.url)
        try:
            await store.ping()  # the pool's only connection, through the switch
            switch.freeze()
            # Shortened for the silent ping alone: opening a connection on a loaded
            # machine (mutation testing's) outlasted 0.2 s, failing the pings around it.
            monkeypatch.setattr(ping_module, "PING_TIMEOUT", 0.2)
            started = time.monotonic()
            with pytest.raises(StorageError, match="checking the database"):
                await asyncio.wait_for(store.ping(), 10)
            assert time.monotonic() - started < 5  # the bound, and 2 s to close it
            monkeypatch.setattr(ping_module, "PING_TIMEOUT", bound)
            await asyncio.wait_for(store.ping(), 10)  # on a new connection
        finally:
            await store.aclose()


def _record(tenant: str, response_id: str) -> ResponseRecord:
    return ResponseRecord(
        tenant_id=tenant,
        id=response_id,
        previous_response_id=None,
        status="completed",
        created_at=1.0,
        body={"id": response_id},
        input_items=[],
        output_items=[],
    )


def _sqlite_full(tmp_path: Path) -> sqlite3.Error:
    """The error SQLite gives a write that needs a full file to grow."""
    connection = sqlite3.connect(tmp_path / "full.db")
    try:
        connection.execute("CREATE TABLE t (body BLOB)")
        connection.execute("PRAGMA max_page_count = 1")  # raised to the file's size
        with pytest.raises(sqlite3.Error) as caught:
            connection.execute("INSERT INTO t VALUES (zeroblob(65536))")
        return caught.value
    finally:
        connection.close()


def test_a_full_sqlite_is_named_by_its_error_code_not_its_words(tmp_path: Path) -> None:
    full = _sqlite_full(tmp_path)
    with pytest.raises(StorageError) as caught, storage_errors("doing things"):
        raise OperationalError("INSERT INTO t", {}, full)  # as aiosqlite's are wrapped

    assert (caught.value.status, caught.value.code) == (503, "storage_full")
    assert caught.value.message == (
        "Storage failed while doing things. The database is out of space (its disk is full,"
        " or it reached its size limit)."
    )
    assert caught.value.reason == "OperationalError: database or disk is full"

    words = sqlite3.OperationalError(str(full))  # the same words, without SQLite's code
    with pytest.raises(StorageError) as unnamed, storage_errors("doing things"):
        raise words
    assert unnamed.value.code == "storage_unavailable"


WRITE_FAILED = (
    "The database's files could not be written (the file system refused the write: a file"
    " size limit or disk quota reached, or a failing disk)."
)


def _file_size_limited(tmp_path: Path) -> sqlite3.Error:
    """What SQLite says to a write the file system refuses (``EFBIG`` past this process's
    file size limit; a disk quota's ``EDQUOT`` alike): ``SQLITE_IOERR_WRITE``."""
    connection = sqlite3.connect(tmp_path / "limited.db", isolation_level=None)
    try:
        connection.execute("CREATE TABLE t (body BLOB)")
        with file_size_limit(64 * 1024), pytest.raises(sqlite3.Error) as caught:
            connection.execute("INSERT INTO t VALUES (zeroblob(1024 * 1024))")
        return caught.value
    finally:
        connection.close()


def test_a_write_the_file_system_refuses_is_named_by_its_error_code_not_its_words(
    tmp_path: Path,
) -> None:
    failure = _file_size_limited(tmp_path)
    assert failure.sqlite_errorcode == sqlite3.SQLITE_IOERR_WRITE
    for raised in (failure, OperationalError("INSERT INTO t", {}, failure)):
        with pytest.raises(StorageError) as caught, storage_errors("doing things"):
            raise raised
        assert (caught.value.status, caught.value.code) == (503, "storage_write_failed")
        assert caught.value.message == f"Storage failed while doing things. {WRITE_FAILED}"
        assert caught.value.reason == "OperationalError: disk I/O error"

    words = sqlite3.OperationalError(str(failure))  # the same words, without SQLite's code
    with pytest.raises(StorageError) as unnamed, storage_errors("doing things"):
        raise words
    assert unnamed.value.code == "storage_unavailable"


def _read_only_file(tmp_path: Path) -> sqlite3.Error:
    """What SQLite says to a write on a file it opened read-only (as it opens one it may
    not write: its permissions, its directory's, a read-only mount)."""
    path = tmp_path / "read-only.db"
    sqlite3.connect(path).close()
    connection = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        with pytest.raises(sqlite3.Error) as caught:
            connection.execute("CREATE TABLE t (body BLOB)")
        return caught.value
    finally:
        connection.close()


def _query_only(tmp_path: Path) -> sqlite3.Error:
    """What SQLite says to a write on a connection set ``query_only``."""
    connection = sqlite3.connect(tmp_path / "query-only.db")
    try:
        connection.execute("PRAGMA query_only = 1")
        with pytest.raises(sqlite3.Error) as caught:
            connection.execute("CREATE TABLE t (body BLOB)")
        return caught.value
    finally:
        connection.close()


def _moved_file(tmp_path: Path) -> sqlite3.Error:
    """What SQLite says to a write once the file it opened was moved away (with a rollback
    journal: its extended code, ``SQLITE_READONLY_DBMOVED``)."""
    path = tmp_path / "moved.db"
    connection = sqlite3.connect(path, isolation_level=None)
    try:
        connection.execute("CREATE TABLE t (body BLOB)")
        path.rename(tmp_path / "elsewhere.db")
        with pytest.raises(sqlite3.Error) as caught:
            connection.execute("INSERT INTO t VALUES (1)")
        return caught.value
    finally:
        connection.close()


@pytest.mark.parametrize(
    ("make", "extended"),
    [
        (_read_only_file, sqlite3.SQLITE_READONLY),
        (_query_only, sqlite3.SQLITE_READONLY),
        (_moved_file, sqlite3.SQLITE_READONLY_DBMOVED),
    ],
)
def test_a_read_only_sqlite_is_named_by_its_error_code_not_its_words(
    tmp_path: Path, make: Callable[[Path], sqlite3.Error], extended: int
) -> None:
    failure = make(tmp_path)
    assert failure.sqlite_errorcode == extended
    for raised in (failure, OperationalError("INSERT INTO t", {}, failure)):
        with pytest.raises(StorageError) as caught, storage_errors("doing things"):
            raise raised
        assert (caught.value.status, caught.value.code) == (503, "storage_read_only")
        assert caught.value.message == f"Storage failed while doing things. {READ_ONLY}"

    words = sqlite3.OperationalError(str(failure))  # the same words, without SQLite's code
    with pytest.raises(StorageError) as unnamed, storage_errors("doing things"):
        raise words
    assert unnamed.value.code == "storage_unavailable"


READ_ONLY = (
    "The database is read-only (a standby server, as after a failover, a database set"
    " read-only, or a database file, or the directory holding it, the gateway cannot"
    " write)."
)


@pytest.mark.parametrize(
    ("failure", "code", "cause"),
    [
        (
            asyncpg.ReadOnlySQLTransactionError("cannot execute INSERT in a read-only transaction"),
            "storage_read_only",
            READ_ONLY,
        ),
        (
            asyncpg.DiskFullError("could not extend file: No space left on device"),
            "storage_full",
            "The database is out of space (its disk is full, or it reached its size limit).",
        ),
    ],
)
def test_postgres_refusing_writes_is_named_by_its_sqlstate(
    failure: Exception, code: str, cause: str
) -> None:
    for raised in (failure, OperationalError("INSERT INTO t", {}, failure)):
        with pytest.raises(StorageError) as caught, storage_errors("saving a response"):
            raise raised
        assert (caught.value.status, caught.value.code) == (503, code)
        assert caught.value.message == f"Storage failed while saving a response. {cause}"
        assert caught.value.__cause__ is raised
