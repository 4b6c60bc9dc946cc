"""User URLs to async engines, SQLite pragmas, the start-up description, and what a failed
statement's error shows."""

from __future__ import annotations

import asyncio
import sqlite3
import traceback
from pathlib import Path
from types import SimpleNamespace
from typing import cast

import pytest
from sqlalchemy import event, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DisconnectionError, InvalidatePoolError
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.pool import QueuePool
from sqlalchemy.util import await_only

from stateway.core.errors import StorageError, StorageFull, StorageReadOnly
from stateway.storage.sql import engine as engine_module
from stateway.storage.sql.engine import (
    CONNECT_TIMEOUT,
    MAX_CONNECTIONS,
    SQLITE_PRAGMAS,
    Replacement,
    apply_sqlite_pragmas,
    async_url,
    create_engine,
    describe_url,
)
from stateway.storage.sql.errors import storage_errors
from stateway.storage.sql.writer import writer_for


@pytest.mark.parametrize(
    ("url", "driver", "database"),
    [
        ("sqlite:////abs/dir/x.db", "sqlite+aiosqlite", "/abs/dir/x.db"),
        ("sqlite+aiosqlite:////abs/x.db", "sqlite+aiosqlite", "/abs/x.db"),
        ("postgresql://u@db.example:6543/gw", "postgresql+asyncpg", "gw"),
        ("postgres://u@db.example:6543/gw", "postgresql+asyncpg", "gw"),
        ("postgresql+asyncpg://u@db.example:6543/gw", "postgresql+asyncpg", "gw"),
    ],
)
def test_urls_map_to_async_drivers(url: str, driver: str, database: str) -> None:
    mapped = async_url(url)

    assert (mapped.drivername, mapped.database) == (driver, database)


@pytest.mark.parametrize(
    ("url", "query"),
    [
        ("postgresql://u@h:65535/db", {}),
        ("postgresql://u@/db?host=h1:5432&host=h2:5433", {"host": ("h1:5432", "h2:5433")}),
    ],
    ids=["top-port", "several-hosts"],
)
def test_postgres_urls_at_the_edges_of_what_is_taken_are_taken(
    url: str, query: dict[str, object]
) -> None:
    assert dict(async_url(url).query) == query


def test_postgres_url_keeps_its_connection_details() -> None:
    mapped = async_url("postgres://alice:s3cret@db.example:6543/gw?ssl=require")

    assert (mapped.username, mapped.password, mapped.host, mapped.port) == (
        "alice",
        "s3cret",
        "db.example",
        6543,
    )
    assert dict(mapped.query) == {"ssl": "require"}


@pytest.mark.parametrize("mode", ["disable", "prefer", "require", "verify-ca", "verify-full"])
def test_a_postgres_urls_libpq_sslmode_is_asyncpgs_ssl(mode: str) -> None:
    """Managed databases hand out URLs with libpq's ``sslmode``; asyncpg's keyword is
    ``ssl`` (same modes), and given ``sslmode`` every connection failed (a TypeError)."""
    mapped = async_url(f"postgresql://u@db.example/gw?sslmode={mode}")

    assert dict(mapped.query) == {"ssl": mode}


@pytest.mark.parametrize(
    ("url", "complaint"),
    [
        ("postgresql://u:hunter2@h/db?sslmode=on", "sslmode must be one of disable, allow,"),
        ("postgresql://u:hunter2@h/db?ssl=yes", "ssl must be one of disable, allow,"),
        ("postgresql://u:hunter2@h/db?ssl=require&sslmode=require", "sslmode or ssl, not both"),
        (
            "postgresql://u:hunter2@h/db?application_name=gw",
            "parameter application_name is not supported; it takes sslmode, ssl,"
            " target_session_attrs, passfile, krbsrvname, prepared_statement_cache_size (e.g.",
        ),
        # Each of several hosts is SQLAlchemy's; the parameters after them are checked.
        (
            "postgresql://u:hunter2@/db?host=h1:5432&host=h2:5432&application_name=gw",
            "application_name",
        ),
        ("postgresql://u:hunter2@h/db?sslrootcert=/ca.pem", "PGSSLROOTCERT"),
        ("postgresql://u:hunter2@h:99999/db", "port 99999 is out of range"),
        ("postgresql://u:hunter2@h:0/db", "port 0 is out of range"),
        ("postgresql://u:hunter2@h:65536/db", "port 65536 is out of range (1 to 65535)"),
        ("postgresql://u:hunter2@h/db?passfile=a&passfile=b", "parameter passfile more than"),
        # Named as written, not as the driver's keyword it is passed as.
        ("postgresql://u:hunter2@h/db?sslmode=require&sslmode=disable", "sslmode more than"),
        ("postgresql://u:hunter2@h/db?ssl=require&ssl=disable", "parameter ssl more than"),
    ],
)
def test_postgres_urls_the_driver_would_refuse_are_refused_readably(
    url: str, complaint: str
) -> None:
    """Each passed ``check-config`` and failed serving with a traceback (a parameter
    asyncpg takes no keyword for) or "connection refused" (the port)."""
    with pytest.raises(ValueError, match="The database URL") as caught:
        async_url(url)

    assert complaint in str(caught.value)
    assert "hunter2" not in str(caught.value)


@pytest.mark.parametrize(
    ("url", "fix"),
    [
        ("postgresql://u:hunter2@/db?host=h1&host=h2", "?host=h1:5432&host=h2:5432"),
        ("postgresql://u:hunter2@/db?host=h1:5433&host=h2", "?host=h1:5433&host=h2:5432"),
        # Several in one parameter: SQLAlchemy then wants a port parameter, refused here.
        ("postgresql://u:hunter2@/db?host=h1,h2", "?host=h1:5432&host=h2:5432"),
        ("postgresql://u:hunter2@/db?host=h1:5433,h2:5434", "?host=h1:5433&host=h2:5434"),
        ("postgresql://u:hunter2@/db?host=h1,", "?host=h1:5432"),  # SQLAlchemy's h1 and ""
        # The authority's port is the one meant for the hosts without theirs.
        ("postgresql://u:hunter2@:6543/db?host=h1&host=h2", "?host=h1:6543&host=h2:6543"),
    ],
)
def test_several_hosts_without_a_port_each_are_refused_with_the_fix(url: str, fix: str) -> None:
    """SQLAlchemy's asyncpg dialect takes several hosts only each with its port, in a
    parameter of its own: any other way passed ``check-config`` and failed every command
    that connects with SQLAlchemy's traceback ("All ports are required to be present for
    asyncpg multiple host URL")."""
    with pytest.raises(ValueError, match="several hosts") as caught:
        async_url(url)

    assert str(caught.value) == (
        "The database URL names several hosts; give each its port, in a host parameter of"
        f" its own: {fix}"
    )


@pytest.mark.parametrize(
    ("query", "complaint"),
    [
        ("?host=h1:5432&host=h2:99999", "The database URL's port 99999 (of host h2) is out of"),
        ("?host=h1:5432&host=h2:0", "The database URL's port 0 (of host h2) is out of range"),
        ("?host=h1:5432&host=:5433", "The database URL's host ':5433' is not a host and its"),
        ("?host=h1:5432&host=h2:pg", "The database URL's host 'h2:pg' is not a host and its"),
        ("?host=h1:5432&host=::1:5433", "The database URL's host '::1:5433' is not a host"),
    ],
)
def test_several_hosts_each_must_be_a_host_and_its_port(query: str, complaint: str) -> None:
    """Each failed as it connected: SQLAlchemy's traceback ("All hosts are required",
    "Received non-integer port arguments"), or asyncpg's for a port out of range."""
    with pytest.raises(ValueError, match="The database URL's") as caught:
        async_url(f"postgresql://u:hunter2@/db{query}")

    assert str(caught.value).startswith(complaint)
    assert "hunter2" not in str(caught.value)


@pytest.mark.postgres
@pytest.mark.parametrize(
    "query",
    [
        {"sslmode": "prefer"},
        # SQLAlchemy's asyncpg dialect reads this one itself (0 behind a pooler in
        # transaction mode, as its docs advise): it stays accepted.
        {"prepared_statement_cache_size": "0"},
    ],
)
async def test_a_postgres_url_with_what_its_query_may_say_connects(
    postgres_url: str, query: dict[str, str]
) -> None:
    url = make_url(postgres_url).update_query_dict(query)
    engine = create_engine(url.render_as_string(hide_password=False))
    try:
        async with engine.connect() as connection:
            assert (await connection.execute(text("SELECT 1"))).scalar_one() == 1
    finally:
        await engine.dispose()


def test_relative_sqlite_paths_are_anchored_to_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)

    assert async_url("sqlite:///data/x.db").database == str(tmp_path / "data" / "x.db")


@pytest.mark.parametrize(
    ("url", "complaint"),
    [
        ("mysql://u@h/db", "Unsupported database URL scheme 'mysql'"),
        ("postgresql+psycopg2://u@h/db", "Unsupported database URL scheme"),
        ("redis://localhost", "Unsupported database URL scheme 'redis'"),
        ("not a url at all", "Could not parse the database URL"),
        ("", "Could not parse the database URL"),
        ("sqlite://", "In-memory SQLite is not supported (each connection would see"),
        ("sqlite:///", "In-memory SQLite is not supported (each connection would see"),
        ("sqlite:///:memory:", "In-memory SQLite is not supported (each connection would see"),
    ],
)
def test_unusable_urls_are_refused_readably(url: str, complaint: str) -> None:
    with pytest.raises(ValueError, match="sqlite:///") as caught:
        async_url(url)

    assert str(caught.value).startswith(complaint)


@pytest.mark.parametrize(
    ("url", "host"),
    [
        ("sqlite://relative.db", "relative.db"),  # was refused as in-memory
        ("sqlite://data/x.db", "data"),  # was served from ./x.db, the host dropped
        ("sqlite://u:hunter2@h:5/x.db", "h"),
    ],
)
def test_sqlite_urls_with_a_host_are_refused_with_the_slashes_to_write(url: str, host: str) -> None:
    with pytest.raises(ValueError, match=f"names the host {host!r}") as caught:
        async_url(url)

    assert str(caught.value).endswith(
        "; write three slashes before a relative path (sqlite:///relative/path.db)"
        " or four before an absolute one (sqlite:////absolute/path.db)"
    )
    assert "hunter2" not in str(caught.value)


def test_parse_errors_do_not_echo_passwords() -> None:
    with pytest.raises(ValueError, match="Could not parse") as caught:
        async_url("postgresql://u:hunter2@host:notaport/db")

    assert "hunter2" not in str(caught.value)


async def test_sqlite_connections_get_their_pragmas(tmp_path: Path) -> None:
    engine = create_engine(f"sqlite:///{tmp_path}/new/dir/x.db")
    assert (tmp_path / "new" / "dir").is_dir()  # created before any connection
    try:
        async with engine.connect() as connection:
            pragmas = {
                name: (await connection.execute(text(f"PRAGMA {name}"))).scalar_one()
                for name in ("journal_mode", "busy_timeout", "synchronous", "foreign_keys")
            }
    finally:
        await engine.dispose()

    # synchronous: 1 is NORMAL.
    assert pragmas == {
        "journal_mode": "wal",
        "busy_timeout": 5000,
        "synchronous": 1,
        "foreign_keys": 1,
    }


async def test_a_new_sqlite_database_is_readable_by_its_owner_only(tmp_path: Path) -> None:
    """It holds every tenant's stored state and the sealing key: another local user must
    not read it, nor its write-ahead log, whatever the umask."""
    engine = create_engine(f"sqlite:///{tmp_path}/data/x.db")
    try:
        async with engine.begin() as connection:
            await connection.execute(text("CREATE TABLE t (x TEXT)"))
            await connection.execute(text("INSERT INTO t VALUES ('secret')"))
            files = sorted(path.name for path in (tmp_path / "data").iterdir())
            modes = {name: (tmp_path / "data" / name).stat().st_mode & 0o777 for name in files}
    finally:
        await engine.dispose()

    assert files == ["x.db", "x.db-shm", "x.db-wal"]
    assert modes == dict.fromkeys(files, 0o600)
    assert (tmp_path / "data").stat().st_mode & 0o777 == 0o700


async def test_an_existing_sqlite_databases_permissions_are_left_alone(tmp_path: Path) -> None:
    """An operator's choice (a group of readers for backups) stands."""
    path = tmp_path / "x.db"
    sqlite3.connect(path).close()
    path.chmod(0o640)
    engine = create_engine(f"sqlite:///{path}")
    try:
        async with engine.connect() as connection:
            await connection.execute(text("SELECT 1"))
    finally:
        await engine.dispose()

    assert path.stat().st_mode & 0o777 == 0o640


@pytest.mark.postgres
async def test_postgres_engine_uses_asyncpg(postgres_url: str) -> None:
    engine = create_engine(postgres_url)
    try:
        async with engine.connect() as connection:
            assert (await connection.execute(text("SELECT 1"))).scalar_one() == 1
    finally:
        await engine.dispose()

    assert engine.dialect.driver == "asyncpg"


def test_descriptions_name_the_place_and_hide_the_password(tmp_path: Path) -> None:
    assert describe_url(f"sqlite:///{tmp_path}/x.db") == f"SQLite database at {tmp_path}/x.db"
    assert (
        describe_url("postgresql://alice:s3cret@db.example:6543/gw")
        == "PostgreSQL database gw on db.example:6543 as alice"
    )
    assert describe_url("postgres:///gw") == "PostgreSQL database gw on the default host"
    assert describe_url("postgresql://db.example") == "PostgreSQL database (default) on db.example"


@pytest.mark.parametrize(
    ("url", "where"),
    [
        ("/gw?host=db1:5433&host=db2:5434", "db1:5433, db2:5434"),  # several, each its port
        ("/gw?host=/run/postgresql", "/run/postgresql"),  # a Unix socket's directory
        (":6543/gw?host=/run/postgresql", "/run/postgresql, port 6543"),
        ("/gw?host=db1:5433&sslmode=require", "db1:5433"),
        ("other.example/gw?host=db1", "db1"),  # the parameter's host is the one connected to
    ],
)
def test_descriptions_name_the_hosts_a_url_gives_as_parameters(url: str, where: str) -> None:
    """Hosts given as ``host`` parameters (several of them, or a Unix socket's directory,
    which has no place in a URL's authority) are the ones connected to: named, as a host
    in the authority is (the password still hidden)."""
    described = describe_url(f"postgresql://alice:s3cret@{url}")
    assert described == f"PostgreSQL database gw on {where} as alice"


def test_a_locked_switch_to_wal_is_left_to_the_connection_doing_it() -> None:
    """On a new file, concurrent connections race to switch it to WAL; SQLite answers the
    losers "locked" at once. They must still connect (the mode lives in the file)."""
    executed: list[str] = []

    class Cursor:
        def execute(self, sql: str) -> None:
            if sql == "PRAGMA journal_mode=WAL":
                raise sqlite3.OperationalError("database is locked")
            executed.append(sql)

        def close(self) -> None:
            pass

    class Connection:
        def cursor(self) -> Cursor:
            return Cursor()

    apply_sqlite_pragmas(Connection(), None)  # type: ignore[arg-type]
    assert executed == [p for p in SQLITE_PRAGMAS if "journal_mode" not in p]


SECRET = "a-prompt-or-a-sealed-key-9c1d"


def _logged(error: BaseException) -> str:
    """What a log line with ``error`` attached shows (its chained causes included)."""
    return "".join(traceback.format_exception(error))


async def _failed_write(engine: AsyncEngine) -> StorageError:
    async with engine.connect() as connection:
        with pytest.raises(StorageError) as caught, storage_errors("saving a response"):
            await connection.execute(text("INSERT INTO missing VALUES (:v)"), {"v": SECRET})
    return caught.value


async def test_a_failed_statements_parameters_stay_out_of_its_error(tmp_path: Path) -> None:
    """A storage error logged with its traceback shows SQLAlchemy's error it was raised
    from, statement and all, but not the values bound to it (a prompt, a sealed key)."""
    engine = create_engine(f"sqlite:///{tmp_path / 'x.db'}")
    try:
        assert SECRET not in _logged(await _failed_write(engine))
    finally:
        await engine.dispose()


@pytest.mark.postgres
async def test_a_failed_postgres_statements_parameters_stay_out_of_its_error(
    fresh_postgres_url: str,
) -> None:
    engine = create_engine(fresh_postgres_url)
    try:
        assert SECRET not in _logged(await _failed_write(engine))
    finally:
        await engine.dispose()


async def test_the_sqlite_writers_failed_statements_keep_their_parameters_out_too(
    tmp_path: Path,
) -> None:
    engine = create_engine(f"sqlite:///{tmp_path / 'x.db'}")
    writer = writer_for(engine)
    statement = text("INSERT INTO missing VALUES (:v)")
    try:
        with pytest.raises(StorageError) as caught, storage_errors("saving a response"):
            await writer.write([(statement, [{"v": SECRET}])])
        assert SECRET not in _logged(caught.value)
    finally:
        await writer.aclose()
        await engine.dispose()


class _Clock:
    """``time.monotonic`` for :class:`Replacement`: one tick a call, so what happened
    first is always earlier (no two events of a test on one reading of the clock)."""

    def __init__(self) -> None:
        self.now = 100.0

    def monotonic(self) -> float:
        self.now += 1.0
        return self.now


class _Driver:
    """What :class:`Replacement` reads of asyncpg's connection, and the abort it calls."""

    def __init__(self) -> None:
        self.closed = False
        self.terminated = False

    def is_closed(self) -> bool:
        return self.closed

    def terminate(self) -> None:
        self.terminated = True


class _Pooled:
    """A pooled connection: the adapted connection and the pool's record of it."""

    def __init__(self, replacement: Replacement) -> None:
        self.driver = _Driver()
        self.connection = SimpleNamespace(driver_connection=self.driver)
        self.record = SimpleNamespace(info={})
        replacement.opened(self.connection, self.record)  # type: ignore[arg-type]

    def take(self, replacement: Replacement) -> None:
        replacement.taken(self.connection, self.record, None)  # type: ignore[arg-type]

    def close(self, replacement: Replacement) -> None:
        replacement.closing(self.connection, self.record)  # type: ignore[arg-type]


def _refused(pooled: _Pooled, replacement: Replacement) -> type[BaseException] | None:
    try:
        pooled.take(replacement)
    except DisconnectionError as refused:
        return type(refused)
    return None


@pytest.fixture
def replacement(monkeypatch: pytest.MonkeyPatch) -> Replacement:
    monkeypatch.setattr(engine_module, "time", _Clock())
    return Replacement()


def test_a_connection_the_driver_knows_closed_is_replaced_with_the_whole_pool(
    replacement: Replacement,
) -> None:
    """A server restart ends every pooled connection: the one found closed invalidates
    the pool (``InvalidatePoolError``), so those as old are replaced as they are taken."""
    ended, alive = _Pooled(replacement), _Pooled(replacement)
    ended.driver.closed = True

    assert _refused(ended, replacement) is InvalidatePoolError
    assert _refused(alive, replacement) is None


def test_connections_opened_before_a_statement_timed_out_are_replaced_and_aborted(
    replacement: Replacement,
) -> None:
    """The database went silent: every connection opened before the timeout most likely
    did too. Each is replaced as it is taken (itself alone: a disconnect, not the whole
    pool) and aborted as it is closed, not closed politely (which would wait as long
    again); one opened since is used and closed as any other."""
    timed_out, older = _Pooled(replacement), _Pooled(replacement)
    replacement.invalidated(timed_out.connection, timed_out.record, TimeoutError())  # type: ignore[arg-type]
    newer = _Pooled(replacement)

    assert _refused(older, replacement) is DisconnectionError
    assert _refused(timed_out, replacement) is DisconnectionError
    assert _refused(newer, replacement) is None
    for pooled in (timed_out, older, newer):
        pooled.close(replacement)
    assert (timed_out.driver.terminated, older.driver.terminated) == (True, True)
    assert not newer.driver.terminated


def test_connections_opened_before_one_was_found_read_only_are_replaced_politely(
    replacement: Replacement,
) -> None:
    """A failover to a standby: connections opened before one was found read-only stay
    read-only once a writable primary is back. Each is replaced as it is taken, and
    closed politely (the server answers); one opened since is used."""
    read_only, older = _Pooled(replacement), _Pooled(replacement)
    replacement.invalidated(read_only.connection, read_only.record, StorageReadOnly("x"))  # type: ignore[arg-type]
    newer = _Pooled(replacement)

    assert _refused(older, replacement) is DisconnectionError
    assert _refused(newer, replacement) is None
    older.close(replacement)
    assert not older.driver.terminated


@pytest.mark.parametrize(
    "failure",
    [None, StorageError("x"), StorageFull("x"), OSError("x")],
    ids=["none", "storage-error", "full", "os-error"],
)
def test_other_invalidations_replace_no_other_connection(
    replacement: Replacement, failure: BaseException | None
) -> None:
    """A connection invalidated for any other cause (a disconnect SQLAlchemy saw, the
    pool's own recycling, a full disk) says nothing of those opened before it."""
    first, second = _Pooled(replacement), _Pooled(replacement)
    replacement.invalidated(second.connection, second.record, failure)  # type: ignore[arg-type]

    assert _refused(first, replacement) is None
    first.close(replacement)
    assert not first.driver.terminated


def test_a_connection_never_stamped_counts_as_opened_before_anything(
    replacement: Replacement,
) -> None:
    """A pooled connection whose opening went unrecorded is treated as the oldest: it
    is replaced once the database went silent, rather than trusted."""
    unstamped = _Pooled(replacement)
    unstamped.record.info.clear()
    assert _refused(unstamped, replacement) is None

    replacement.invalidated(unstamped.connection, unstamped.record, TimeoutError())  # type: ignore[arg-type]

    assert _refused(unstamped, replacement) is DisconnectionError


@pytest.mark.parametrize(
    ("failure", "replaced"),
    [(StorageReadOnly("x"), True), (StorageFull("x"), False), (OSError("x"), False)],
    ids=["read-only", "full", "other"],
)
def test_a_write_refused_as_read_only_invalidates_its_connection_alone(
    failure: BaseException, replaced: bool
) -> None:
    """A lease's or a conversation's write a read-only server refused: its connection is
    handled as a disconnect (replaced, and those opened before it as they are taken),
    without invalidating the whole pool at once."""
    context = SimpleNamespace(
        original_exception=failure, is_disconnect=False, invalidate_pool_on_disconnect=True
    )

    engine_module._replace_read_only(context)  # type: ignore[arg-type]

    assert (context.is_disconnect, context.invalidate_pool_on_disconnect) == (
        replaced,
        not replaced,
    )


class _Asked(Exception):
    """Raised where a PostgreSQL connection would be opened: what it was asked with."""

    def __init__(self, params: dict[str, object]) -> None:
        super().__init__("no connection opened")
        self.params = params


def watched(
    url: str, max_connections: int = MAX_CONNECTIONS
) -> tuple[AsyncEngine, list[object], list[object]]:
    """An engine for ``url``, with the connections it opens and those it closes, in order."""
    engine = create_engine(url, timeout=5, max_connections=max_connections)
    opened: list[object] = []
    closed: list[object] = []
    event.listen(engine.sync_engine, "connect", lambda dbapi, _record: opened.append(dbapi))
    event.listen(engine.sync_engine, "close", lambda dbapi, _record: closed.append(dbapi))
    return engine, opened, closed


async def test_a_connection_out_while_its_engine_is_disposed_is_closed_as_it_comes_back(
    database_url: str,
) -> None:
    """The ping disposes of the engine to renew its connections (read-only ones: a
    standby's, a file SQLite opened read-only). One a request holds meanwhile comes back
    to a pool nothing takes from any more: it is closed then, not left open there for
    good (an open SQLite connection keeps the file's shared memory as it found it:
    read-only, for every connection the process opens)."""
    engine, opened, closed = watched(database_url)
    try:
        async with engine.connect() as held:
            await held.execute(text("SELECT 1"))
            await engine.dispose()
            assert closed == []  # its holder's until it lets it go
        assert closed == opened
        async with engine.connect() as renewed:  # the engine serves on, from its new pool
            assert await renewed.scalar(text("SELECT 2")) == 2
        assert len(opened) == 2
        assert closed == opened[:1]
    finally:
        await engine.dispose()


async def test_a_connection_being_opened_while_its_engine_is_disposed_is_closed_as_it_comes_back(
    database_url: str,
) -> None:
    """A connection whose opening is under way as the ping disposes of the engine (a
    request taking one from the old pool) was opened for that pool all the same: it is
    closed as it comes back, as one out at that moment is, not left open there for good."""
    engine = create_engine(database_url, timeout=5)
    opening = asyncio.Event()
    disposed = asyncio.Event()
    opened: list[object] = []
    closed: list[object] = []

    def held_open(dbapi: object, _record: object) -> None:
        opened.append(dbapi)
        opening.set()
        await_only(disposed.wait())  # on the pool's greenlet: the engine is disposed meanwhile

    event.listen(engine.sync_engine, "connect", held_open, insert=True)  # before all others
    event.listen(engine.sync_engine, "close", lambda dbapi, _record: closed.append(dbapi))

    async def use() -> None:
        async with engine.connect() as connection:
            await connection.execute(text("SELECT 1"))

    try:
        using = asyncio.create_task(use())
        await opening.wait()
        await engine.dispose()
        disposed.set()
        await using
        assert closed == opened
    finally:
        await engine.dispose()


@pytest.mark.postgres
async def test_a_connection_reopened_for_a_request_waiting_on_a_disposed_pool_is_closed_too(
    postgres_url: str,
) -> None:
    """A request waiting for a connection of a full pool as it is disposed is given the
    entry of one closed as it came back, and opens it anew, for the old pool still: it is
    closed as it comes back in its turn."""
    engine, opened, closed = watched(postgres_url, max_connections=1)

    async def wait_then_use() -> None:
        async with engine.connect() as connection:
            await connection.execute(text("SELECT 1"))

    try:
        async with engine.connect() as held:
            await held.execute(text("SELECT 1"))
            waiting = asyncio.create_task(wait_then_use())
            await asyncio.sleep(0)  # it asks the full pool, and waits for it
            await engine.dispose()
        await waiting
        assert len(opened) == 2
        assert closed == opened
    finally:
        await engine.dispose()


async def test_a_connection_of_the_pool_one_disposal_started_is_closed_after_the_next(
    database_url: str,
) -> None:
    """Every disposal counts: the ping renews the pool each time it finds writes refused,
    and a connection opened since the last renewal, out at the next, is closed as it
    comes back too."""
    engine, opened, closed = watched(database_url)
    try:
        await engine.dispose()  # a renewal before any connection
        async with engine.connect() as held:
            await held.execute(text("SELECT 1"))
            await engine.dispose()
        assert len(opened) == 1
        assert closed == opened
    finally:
        await engine.dispose()


@pytest.mark.parametrize(
    ("bound", "connecting", "statements"),
    [(None, CONNECT_TIMEOUT, None), (3.5, 3.5, 3.5), (30.0, CONNECT_TIMEOUT, 30.0)],
    ids=["none", "shorter", "longer"],
)
async def test_a_postgres_connection_is_opened_and_answered_within_its_bounds(
    bound: float | None, connecting: float, statements: float | None
) -> None:
    """A PostgreSQL gone silent must not hold a request for as long as TCP keeps its
    connection: each statement waits ``timeout`` at most (none for migrations), and
    opening a connection ``CONNECT_TIMEOUT`` or ``timeout`` when shorter. Read off
    asyncpg's ``connect`` arguments, no server reached."""
    engine = create_engine("postgresql://u@127.0.0.1:1/db", timeout=bound)

    def asked(_dialect: object, _record: object, _args: object, params: dict[str, object]) -> None:
        raise _Asked(params)

    event.listen(engine.sync_engine, "do_connect", asked)
    try:
        with pytest.raises(_Asked) as caught:
            await engine.connect()
    finally:
        await engine.dispose()

    assert (caught.value.params["timeout"], caught.value.params["command_timeout"]) == (
        connecting,
        statements,
    )


@pytest.mark.parametrize("scheme", ["sqlite", "postgresql"])
@pytest.mark.parametrize(("bound", "waited"), [(None, 30.0), (2.5, 2.5)], ids=["none", "set"])
def test_a_statement_waits_for_a_pooled_connection_its_timeout_at_most(
    tmp_path: Path, scheme: str, bound: float | None, waited: float
) -> None:
    """A statement finding every pooled connection taken waits ``timeout`` for one (the
    configured ``database_timeout``), on SQLite as on PostgreSQL; 30 s with none (the
    migrator's). Read off the pool, no connection opened."""
    url = f"sqlite:///{tmp_path / 'x.db'}" if scheme == "sqlite" else "postgresql://u@h/db"
    engine = create_engine(url, timeout=bound)

    assert cast(QueuePool, engine.pool).timeout() == waited


@pytest.mark.parametrize(
    ("place", "said"),
    [
        ("file/x.db", "cannot create its directory {d}/file (File exists: {d}/file)"),
        (
            "file/sub/x.db",
            "cannot create its directory {d}/file/sub (Not a directory: {d}/file/sub)",
        ),
        (f"{'n' * 300}.db", "cannot create it (File name too long: {d}/{n}.db)"),
    ],
    ids=["file-for-directory", "under-a-file", "name-too-long"],
)
def test_a_sqlite_file_that_cannot_be_made_is_named_with_what_the_system_said(
    tmp_path: Path, place: str, said: str
) -> None:
    """SQLite itself would say only "unable to open database file": the failure names
    the directory or the file, and the system's words for it (``stateway migrate``
    prints it; ``test_sqlite_file_errors.py`` runs that, in a process of its own)."""
    (tmp_path / "file").write_text("not a directory")

    with pytest.raises(StorageError) as caught:
        create_engine(f"sqlite:///{tmp_path}/{place}")

    assert caught.value.message == said.format(d=tmp_path, n="n" * 300)
