"""Connections out while their engine is disposed: closed as they come back.

Disposing of an engine (``AsyncEngine.dispose``) closes the connections its pool holds
and starts a new pool. One a request holds meanwhile goes back, once let go, to the old
pool, which nothing takes from any more: SQLAlchemy leaves it open there, for as long as
the process lives (an aiosqlite connection's thread keeps it from being collected). The
ping disposes of the engine to renew connections that stay read-only
(:mod:`~stateway.storage.sql.ping`), each time it finds writes refused as read-only:
each connection out at that moment would be one open for good, and on SQLite one such
connection keeps the database read-only for the whole process once it is writable again
(SQLite keeps a file's shared memory once per process, as the first connection opening
it found it, until every connection to the file is closed).

So each pool entry is stamped, as its first connection begins to open, with how many
times its engine had been disposed; a connection whose entry was stamped before the last
disposal is closed as it comes back, before its old pool takes it. Stamped as the opening
begins, not once it is done: a request opening a connection as the engine is disposed
takes it for the old pool all the same. Stamped once for the entry's life, which it lives
in one pool: an old pool's entry reopened (a request waiting on that pool, given an
entry whose connection was closed as it came back) belongs to the old pool too.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine, event
from sqlalchemy.engine.interfaces import DBAPIConnection, Dialect
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.pool import ConnectionPoolEntry

_STAMP = "disposals"


class Disposals:
    """How many times an engine was disposed, and what that means for a connection."""

    def __init__(self) -> None:
        self._count = 0

    def opening(
        self, _dialect: Dialect, record: ConnectionPoolEntry, _args: Any, _params: Any
    ) -> None:
        """Stamp ``record`` as its pool opens its first connection (none returned: the
        dialect opens it as usual)."""
        if record.record_info is not None:
            record.record_info.setdefault(_STAMP, self._count)

    def disposed(self, _engine: Engine) -> None:
        self._count += 1

    def returned(
        self, dbapi_connection: DBAPIConnection | None, record: ConnectionPoolEntry
    ) -> None:
        """Close ``record``'s connection if its entry was stamped before the engine was
        last disposed (none: SQLAlchemy dropped it already)."""
        stamp = (record.record_info or {}).get(_STAMP, self._count)
        if dbapi_connection is not None and stamp < self._count:
            record.invalidate()


def close_when_returned(engine: AsyncEngine) -> None:
    """Have ``engine`` close each connection that comes back after it was disposed."""
    disposals = Disposals()
    event.listen(engine.sync_engine, "do_connect", disposals.opening)
    event.listen(engine.sync_engine, "engine_disposed", disposals.disposed)
    event.listen(engine.sync_engine, "checkin", disposals.returned)
