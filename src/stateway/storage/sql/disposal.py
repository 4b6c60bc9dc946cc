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

So each connection is stamped, as it is opened, with how many times its engine had been
disposed; one stamped before the last disposal is closed as it comes back, before its old
pool takes it.
"""

from __future__ import annotations

from sqlalchemy import Engine, event
from sqlalchemy.engine.interfaces import DBAPIConnection
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.pool import ConnectionPoolEntry

_STAMP = "disposals"


class Disposals:
    """How many times an engine was disposed, and what that means for a connection."""

    def __init__(self) -> None:
        self._count = 0

    def opened(self, _dbapi_connection: DBAPIConnection, record: ConnectionPoolEntry) -> None:
        record.info[_STAMP] = self._count

    def disposed(self, _engine: Engine) -> None:
        self._count += 1

    def returned(
        self, dbapi_connection: DBAPIConnection | None, record: ConnectionPoolEntry
    ) -> None:
        """Close ``record``'s connection if it was opened before the engine was last
        disposed (none: SQLAlchemy dropped it already)."""
        if dbapi_connection is not None and record.info.get(_STAMP, self._count) < self._count:
            record.invalidate()


def close_when_returned(engine: AsyncEngine) -> None:
    """Have ``engine`` close each connection that comes back after it was disposed."""
    disposals = Disposals()
    event.listen(engine.sync_engine, "connect", disposals.opened)
    event.listen(engine.sync_engine, "engine_disposed", disposals.disposed)
    event.listen(engine.sync_engine, "checkin", disposals.returned)
