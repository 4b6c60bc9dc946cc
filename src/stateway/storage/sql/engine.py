"""Database URLs and async engines.

Users write plain URLs; this module maps them to SQLAlchemy's async drivers:

    sqlite:///relative/path.db    -> sqlite+aiosqlite, relative to the working directory
    sqlite:////abs/path.db        -> sqlite+aiosqlite
    postgresql://user@host:port/db
    postgres://user@host:port/db  -> postgresql+asyncpg

Anything else raises :class:`ValueError` with a message meant for a human; so does a
SQLite URL with two slashes (``sqlite://data/x.db``), which names a host (``data``) that
SQLite would drop; so does a PostgreSQL URL whose port is out of range or whose query
has a parameter asyncpg takes no keyword for (libpq's ``sslmode`` is passed as asyncpg's
``ssl``: :func:`_asyncpg_url`), or several hosts not each with its port
(:mod:`~stateway.storage.sql.postgres_hosts`). SQLite paths are made absolute (so a later ``chdir``
cannot move the database) and their parent directory is created. In-memory SQLite is
refused: every pooled connection would see its own empty database.

A new SQLite database is created readable by its owner only (``0600``, in a directory
made ``0700``), whatever the umask: it holds every tenant's stored state and the sealing
key, and SQLite gives its write-ahead log and shared-memory files the database file's
permissions. An existing file's permissions are left as the operator set them.

Every SQLite connection gets its pragmas when it is opened: a 5 s busy timeout (set first,
so that the switch to WAL waits for other processes instead of failing), write-ahead
logging (readers never block the writer), ``synchronous=NORMAL`` (durable at checkpoints,
safe with WAL) and enforced foreign keys.

A pooled PostgreSQL connection the driver knows closed is replaced as it is taken
(:class:`Replacement`): a server restart fails no request that takes a connection once
the driver has seen the server close it.

A PostgreSQL that stops answering without closing (a network partition, a frozen host, a
NAT or firewall that forgot the connection) would hold each statement for as long as TCP
keeps the connection, for ever on an idle one. So every statement waits ``timeout``
seconds at most for its answer (asyncpg's ``command_timeout``: past it the statement is
cancelled, and ``TimeoutError`` raised), and opening a connection ``CONNECT_TIMEOUT``, or
``timeout`` when shorter. A connection whose statement timed out is never used again,
and neither is any opened before it: each is replaced as it is next taken, without the
round trip it would take to find it silent too (:class:`Replacement`).

A connection found read-only (a write refused as ``read_only_sql_transaction``, or the
ping finding its transactions read-only) is replaced too, and so is every one opened
before it: a failover to a standby, or a database set read-only, leaves connections that
stay read-only once a writable primary is back (a session keeps the default it began
with), and a new one reaches that primary. A write through the engine itself (a
lease's, a conversation's) refused so invalidates its connection
(:func:`_replace_read_only`), as the writer does its own, so such writes heal by
themselves, no probe nor save between.

A process holds ``max_connections`` PostgreSQL connections at most (``POOL_SIZE`` kept
open, the rest opened as needed and closed once let go): with several replicas, each
counts against the server's own ``max_connections``. A statement finding all of them
taken waits for one, ``timeout`` seconds at most (a 503 after, as for a statement gone
silent). So does one finding SQLite's 15 reading connections taken.
"""

from __future__ import annotations

import math
import os
import sqlite3
import time
from pathlib import Path
from typing import Any, Final, cast

from sqlalchemy import event
from sqlalchemy.engine import URL, ExceptionContext, make_url
from sqlalchemy.engine.interfaces import AdaptedConnection, DBAPIConnection
from sqlalchemy.exc import ArgumentError, DisconnectionError, InvalidatePoolError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.pool import ConnectionPoolEntry

from stateway.core.errors import StorageError, StorageReadOnly
from stateway.storage.sql.disposal import close_when_returned
from stateway.storage.sql.errors import refusal
from stateway.storage.sql.postgres_hosts import check_hosts, listed_hosts

SQLITE_DRIVER: Final = "sqlite+aiosqlite"
SQLITE_SYNC_DRIVER: Final = "sqlite+pysqlite"
"""The SQLite writer's driver (see :mod:`~stateway.storage.sql.writer`)."""
POSTGRES_DRIVER: Final = "postgresql+asyncpg"

HIDE_PARAMETERS: Final = True
"""SQLAlchemy's errors leave out the values bound to their statement (a prompt, an
answer, the sealing key): a storage error is raised from one, and a log line with its
traceback attached shows the chain."""

_SQLITE_SCHEMES: Final = frozenset({"sqlite", SQLITE_DRIVER})
_POSTGRES_SCHEMES: Final = frozenset({"postgresql", "postgres", POSTGRES_DRIVER})

SQLITE_PRAGMAS: Final = (
    "PRAGMA busy_timeout=5000",
    "PRAGMA journal_mode=WAL",
    "PRAGMA synchronous=NORMAL",
    "PRAGMA foreign_keys=ON",
)
_WAL = "PRAGMA journal_mode=WAL"

CONNECT_TIMEOUT: Final = 10.0
"""Seconds opening a PostgreSQL connection may take (or the statement ``timeout``, when
shorter)."""

MAX_CONNECTIONS: Final = 30
"""PostgreSQL connections a process holds at most, by default."""
POOL_SIZE: Final = 10
"""PostgreSQL connections a process keeps open (fewer when ``max_connections`` is)."""

_POOL_TIMEOUT: Final = 30.0
"""Seconds a statement waits for a pooled connection, with no ``timeout`` (SQLAlchemy's
default)."""

_SQLITE_EXAMPLE: Final = "sqlite:///path/to/stateway.db"
_EXAMPLES: Final = f"{_SQLITE_EXAMPLE} or postgresql://user@host:5432/dbname"
_POSTGRES_EXAMPLE: Final = "postgresql://user@host:5432/dbname?sslmode=require"

_SSL_MODES: Final = ("disable", "allow", "prefer", "require", "verify-ca", "verify-full")
"""libpq's ``sslmode`` values, which asyncpg's ``ssl`` takes too."""
_POSTGRES_PARAMETERS: Final = (
    "sslmode",
    "ssl",
    "target_session_attrs",
    "passfile",
    "krbsrvname",
    "prepared_statement_cache_size",
)
"""The query parameters of a PostgreSQL URL: those asyncpg's ``connect`` takes as strings
(``ssl`` as libpq's ``sslmode``, too), and the one SQLAlchemy's asyncpg dialect reads
itself (``prepared_statement_cache_size``, an integer it converts)."""
_PGSSL_FILES: Final = {
    "sslrootcert": "PGSSLROOTCERT",
    "sslcert": "PGSSLCERT",
    "sslkey": "PGSSLKEY",
    "sslcrl": "PGSSLCRL",
}
"""libpq's certificate parameters, which asyncpg reads from these variables instead."""


def async_url(url: str) -> URL:
    """The SQLAlchemy URL, with its async driver, for a user-supplied database URL."""
    parsed = _parse(url)
    scheme = parsed.drivername
    if scheme in _SQLITE_SCHEMES:
        if parsed.host:  # sqlite://data/x.db: "data" read as a host, and dropped
            raise ValueError(
                f"The SQLite URL names the host {parsed.host!r}, which SQLite has none of; "
                "write three slashes before a relative path (sqlite:///relative/path.db) "
                "or four before an absolute one (sqlite:////absolute/path.db)"
            )
        if parsed.database in (None, "", ":memory:"):
            raise ValueError(
                "In-memory SQLite is not supported (each connection would see its own empty "
                f"database); give a file path, e.g. {_SQLITE_EXAMPLE}"
            )
        path = Path(str(parsed.database)).absolute()
        return parsed.set(drivername=SQLITE_DRIVER, database=str(path))
    if scheme in _POSTGRES_SCHEMES:
        return _asyncpg_url(parsed.set(drivername=POSTGRES_DRIVER))
    raise ValueError(f"Unsupported database URL scheme {scheme!r}; use {_EXAMPLES}")


def _asyncpg_url(url: URL) -> URL:
    """``url`` as asyncpg takes it, every parameter of its query passed to ``connect`` as a
    keyword: libpq's ``sslmode`` as asyncpg's ``ssl`` (the same modes), which it has no
    keyword for. A parameter it has no keyword for either, a mode it does not know, a
    port out of range and several hosts not each with its port (:func:`check_hosts`) are
    refused here, not by a traceback as serving starts (nor as "connection refused"). No
    message shows the URL: it may hold a password."""
    if url.port is not None and not 0 < url.port <= 65535:
        raise ValueError(
            f"The database URL's port {url.port} is out of range (1 to 65535); expected "
            f"{_POSTGRES_EXAMPLE}"
        )
    query = dict(url.query)
    if "sslmode" in query:
        if "ssl" in query:
            raise ValueError(
                f"The database URL sets sslmode or ssl, not both; e.g. {_POSTGRES_EXAMPLE}"
            )
        query["ssl"] = query.pop("sslmode")
        mode_name = "sslmode"
    else:
        mode_name = "ssl"
    for name, value in query.items():
        if name == "host":  # SQLAlchemy's, each host of several (host=h1:5432&host=h2:5432)
            check_hosts(value, url.port)
            continue
        if name in _PGSSL_FILES:
            raise ValueError(
                f"The database URL's parameter {name} is not supported; set the "
                f"{_PGSSL_FILES[name]} environment variable instead"
            )
        if name not in _POSTGRES_PARAMETERS:
            raise ValueError(
                f"The database URL's parameter {name} is not supported; it takes "
                f"{', '.join(_POSTGRES_PARAMETERS)} (e.g. {_POSTGRES_EXAMPLE})"
            )
        if not isinstance(value, str):
            written = mode_name if name == "ssl" else name  # sslmode, as the URL spells it
            raise ValueError(f"The database URL gives its parameter {written} more than once")
    if "ssl" in query and query["ssl"] not in _SSL_MODES:
        raise ValueError(
            f"The database URL's {mode_name} must be one of {', '.join(_SSL_MODES)} "
            f"(e.g. {_POSTGRES_EXAMPLE})"
        )
    return url.set(query=query)


def is_sqlite(url: URL) -> bool:
    return url.get_backend_name() == "sqlite"


def _create_private(path: Path) -> None:
    """Create the SQLite file at ``path`` (SQLite takes an empty file as an empty
    database) and its directory, for their owner only, unless they exist. A directory
    or a file that cannot be made (a file in the directory's place, no permission, a
    read-only file system) is a :class:`StorageError` naming it and what the system said
    (SQLite would only say "unable to open database file"). Something already in the
    file's place is left as it is (one SQLite cannot open is refused as it is opened:
    :func:`~stateway.storage.sql.migrator.migrate`)."""
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        raise StorageError(f"cannot create its directory {path.parent} ({_cause(exc)})") from None
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except OSError as exc:
        if isinstance(exc, FileExistsError) or os.path.exists(path):
            return  # there already: left as it is
        raise StorageError(f"cannot create it ({_cause(exc)})") from None


def _cause(exc: OSError) -> str:
    said = exc.strerror or type(exc).__name__
    return said if exc.filename is None else f"{said}: {exc.filename}"


def create_engine(
    url: str, *, timeout: float | None = None, max_connections: int = MAX_CONNECTIONS
) -> AsyncEngine:
    """An async engine for ``url``, with pragmas (SQLite) and pool settings applied.
    ``timeout``: the seconds a statement may wait for a pooled connection (None:
    ``_POOL_TIMEOUT``), and on PostgreSQL for its answer too (None: as long as it takes,
    as migrations may). ``max_connections``: PostgreSQL only, the connections held at
    most.

    Creating the SQLite file (empty, owner-only: the module's doc) and its parent directory
    is the only I/O done here; connections are opened lazily.
    """
    target = async_url(url)
    if is_sqlite(target):
        _create_private(Path(str(target.database)))
        # These connections read (WAL: concurrently); writes go through the writer's own
        # connection (storage/sql/writer.py). Every statement is a round trip to
        # aiosqlite's thread. Transactions are always
        # ended by SQLAlchemy's Connection itself (commit, or rollback on close), so the
        # pool's extra ROLLBACK on return would be a round trip that does nothing.
        engine = create_async_engine(
            target,
            pool_size=5,
            max_overflow=10,
            pool_timeout=_POOL_TIMEOUT if timeout is None else timeout,
            pool_reset_on_return=None,
            hide_parameters=HIDE_PARAMETERS,
        )
        event.listen(engine.sync_engine, "connect", apply_sqlite_pragmas)
        close_when_returned(engine)
        return engine
    kept = min(POOL_SIZE, max_connections)
    engine = create_async_engine(
        target,
        pool_size=kept,
        max_overflow=max_connections - kept,
        pool_timeout=_POOL_TIMEOUT if timeout is None else timeout,
        # No pool_pre_ping: with asyncpg it costs three round trips (BEGIN, ping, ROLLBACK)
        # on every checkout, i.e. every request. A connection the server ended is replaced
        # as it is taken instead (Replacement); one found dead only as it is used fails
        # its one request (one gone silent: after ``timeout``, and those as old are
        # replaced). Recycling keeps connections younger than typical idle-killing proxy
        # timeouts.
        pool_recycle=600,
        hide_parameters=HIDE_PARAMETERS,
        connect_args={
            "timeout": CONNECT_TIMEOUT if timeout is None else min(CONNECT_TIMEOUT, timeout),
            "command_timeout": timeout,
        },
    )
    replacement = Replacement()
    event.listen(engine.sync_engine, "connect", replacement.opened)
    event.listen(engine.sync_engine, "invalidate", replacement.invalidated)
    event.listen(engine.sync_engine, "checkout", replacement.taken)
    event.listen(engine.sync_engine, "close", replacement.closing)
    event.listen(engine.sync_engine, "handle_error", _replace_read_only)
    close_when_returned(engine)
    return engine


def _replace_read_only(context: ExceptionContext) -> None:
    """A statement refused as read-only (``read_only_sql_transaction``): its connection
    is invalidated, as a disconnect's is, and :class:`Replacement` then replaces every
    connection opened before it as it is taken."""
    if refusal(context.original_exception) is StorageReadOnly:
        context.is_disconnect = True
        context.invalidate_pool_on_disconnect = False


class Replacement:
    """Which pooled asyncpg connections are replaced as they are taken, each judged
    without a round trip (a flag the driver keeps, a time): this covers the writer too,
    which runs its statements on the driver's connection itself and so never reaches
    SQLAlchemy's own handling of a disconnect.

    - One the driver knows closed (a server restart, an administrator's
      ``pg_terminate_backend``, a proxy ending it): the pool opens another in its place
      and replaces every connection as old when it is next taken, as a server restart
      has ended them too.
    - One opened before a statement last timed out (the database gone silent): it most
      likely went silent too. It is replaced as it is taken, and aborted as it is closed
      (the one that timed out included) rather than closed politely, which would wait
      for an answer as long again: for a whole pool's worth at shutdown. A slow
      statement, rather than a silent database, costs the pool new connections, no
      more.
    - One opened before a connection was last found read-only: it most likely reached
      the read-only server too, and would stay read-only once a writable one is back.
      It is replaced as it is taken (closed politely: the server answers)."""

    def __init__(self) -> None:
        self._silent_since = -math.inf
        """When a statement last timed out."""
        self._read_only_since = -math.inf
        """When a connection was last found read-only."""

    def opened(self, _dbapi_connection: DBAPIConnection, record: ConnectionPoolEntry) -> None:
        record.info["opened"] = time.monotonic()

    def invalidated(
        self,
        _dbapi_connection: DBAPIConnection,
        _record: ConnectionPoolEntry,
        failure: BaseException | None,
    ) -> None:
        """The connection of a statement that timed out is invalidated (by SQLAlchemy;
        by the writer itself), as is one found read-only (by the writer; by the ping)."""
        if isinstance(failure, TimeoutError):
            self._silent_since = time.monotonic()
        elif failure is not None and refusal(failure) is StorageReadOnly:
            self._read_only_since = time.monotonic()

    def taken(
        self, dbapi_connection: DBAPIConnection, record: ConnectionPoolEntry, _proxy: object
    ) -> None:
        if _driver(dbapi_connection).is_closed():
            raise InvalidatePoolError("the server closed this pooled connection")
        if self._suspect(record):
            raise DisconnectionError("opened before the database went silent")
        if _opened(record) < self._read_only_since:
            raise DisconnectionError("opened before a connection was found read-only")

    def closing(self, dbapi_connection: DBAPIConnection, record: ConnectionPoolEntry) -> None:
        if self._suspect(record):
            _driver(dbapi_connection).terminate()

    def _suspect(self, record: ConnectionPoolEntry) -> bool:
        return _opened(record) < self._silent_since


def _opened(record: ConnectionPoolEntry) -> float:
    opened: float = record.info.get("opened", -math.inf)
    return opened


def _driver(dbapi_connection: DBAPIConnection) -> Any:
    """asyncpg's connection (no type information)."""
    return cast(AdaptedConnection, dbapi_connection).driver_connection


def apply_sqlite_pragmas(dbapi_connection: DBAPIConnection, _record: ConnectionPoolEntry) -> None:
    cursor = dbapi_connection.cursor()
    try:
        for pragma in SQLITE_PRAGMAS:
            try:
                cursor.execute(pragma)
            except sqlite3.OperationalError:
                # Switching a new file to WAL needs it to itself, and SQLite answers "locked"
                # at once (no busy wait) while another connection is switching it. The mode
                # is stored in the file, so that other connection's switch serves this one.
                if pragma != _WAL:
                    raise
    finally:
        cursor.close()


def describe_url(url: str) -> str:
    """Where the data lives, for the start-up banner; never includes a password. A
    PostgreSQL URL's hosts are its ``host`` parameters when it has any (several, or a Unix
    socket's directory: the ones connected to), else its authority's."""
    target = async_url(url)
    if is_sqlite(target):
        return f"SQLite database at {target.database}"
    hosts = listed_hosts(target.query.get("host", ()))
    if hosts:
        where = ", ".join(hosts) + (f", port {target.port}" if target.port else "")
    else:
        where = (target.host or "the default host") + (f":{target.port}" if target.port else "")
    user = f" as {target.username}" if target.username else ""
    return f"PostgreSQL database {target.database or '(default)'!s} on {where}{user}"


def _parse(url: str) -> URL:
    try:
        return make_url(url)
    except (ArgumentError, ValueError):  # ValueError: a non-numeric port
        # SQLAlchemy's message echoes the URL, password included: say what we expected.
        raise ValueError(f"Could not parse the database URL; expected {_EXAMPLES}") from None
