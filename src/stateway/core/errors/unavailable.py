"""The gateway cannot serve now (503 ``server_error``): its own queue is full, its
database is unreachable or refuses writes, it is shutting down, or the process that ran
a response stopped.

Each says when to try again (``Retry-After``, :attr:`Unavailable.retry_after`): the
SDKs and Claude Code wait that out in place of their own back-off (which starts at half
a second, and Claude Code's grows to half a minute), so the wait fits what failed."""

from __future__ import annotations

from typing import Final

from stateway.core.errors.gateway_error import MAX_RETRY_WAIT, GatewayError

OUTAGE_RETRY_AFTER: Final = 5
"""Seconds an outage of what the gateway stores in (its database, Redis) asks a client to
wait: a failover or a restart takes seconds, so the SDKs' two retries span ten, where
their own back-off would spend them within two. Redis is probed again as often by the
limits it lets requests past meanwhile (``coordination/outage.py``)."""


class Unavailable(GatewayError):
    """The gateway's own 503: retryable, with ``Retry-After`` of :attr:`retry_after`
    seconds (the class's, or the wait given); told final (a retry would make again the
    MCP calls the gateway made for the request), it asks no wait. A wait longer than the
    SDKs retry after (:data:`MAX_RETRY_WAIT`: the ``anthropic`` SDK would sleep it
    through) is told with the answer not to retry, as a long rate limit's is."""

    status = 503
    type = "server_error"
    retry_after: int = 1
    """Seconds to wait before trying again, by default: one for what another process, or
    a slot freed in a moment, serves."""

    def __init__(self, message: str, *, retry_after: int | None = None) -> None:
        if retry_after is not None:
            self.retry_after = retry_after
        super().__init__(message)

    def told_retryable(self, retryable: bool) -> None:
        super().told_retryable(retryable and self.retry_after <= MAX_RETRY_WAIT)
        if retryable:
            self.headers["Retry-After"] = str(self.retry_after)
        else:
            self.headers.pop("Retry-After", None)


class Overloaded(Unavailable):
    """Too many requests are already waiting for a connection slot to the model server, or
    this one waited longer than ``pool_timeout``: refused early, with ``Retry-After``."""

    code = "overloaded"


class StorageError(Unavailable):
    """The database (or Redis, which keeps command outcomes) cannot be reached, did not
    answer in time, or failed what was asked of it."""

    code = "storage_unavailable"
    retry_after = OUTAGE_RETRY_AFTER
    reason: str | None = None
    """What the database said (the driver's own error, without SQL text or parameters):
    for the log lines, which show ``str(error)``; a client gets only :attr:`message`."""

    def __str__(self) -> str:
        return self.message if self.reason is None else f"{self.message} ({self.reason})"

    def restated(self, message: str) -> StorageError:
        """The same failure in other words (``message``): its kind, and so its code and
        the cause a :class:`StorageNotWritable` names, kept; its reason for the log too."""
        error = type(self)(message)
        error.reason = self.reason
        return error


class StorageRejected(StorageError):
    """The database refused the data itself, not for want of a database: a constraint
    broken (a duplicate key), a value it cannot hold, a row past its limits (too big for
    an index, out of range). The same data is refused again however often it is sent;
    other data is not, so the code stays ``storage_unavailable`` (a retry of the request
    makes its data anew)."""


class StorageNotWritable(StorageError):
    """The database answers but refuses every write, for a cause that outlasts the write
    (no space, a read-only server): it ends each message with :attr:`cause`, and fails
    the store's ping (readiness) until a write lands again."""

    cause: str = ""

    def __init__(self, message: str) -> None:
        super().__init__(f"{message} {self.cause}")


class StorageFull(StorageNotWritable):
    code = "storage_full"
    cause = "The database is out of space (its disk is full, or it reached its size limit)."


class StorageReadOnly(StorageNotWritable):
    code = "storage_read_only"
    cause = (
        "The database is read-only (a standby server, as after a failover, a database set"
        " read-only, or a database file, or the directory holding it, the gateway cannot"
        " write)."
    )


class StorageWriteFailed(StorageNotWritable):
    """The file system refused to write the database's files (SQLite's
    ``SQLITE_IOERR_WRITE``): a disk quota reached, the largest file allowed (a process's
    file size limit, the file system's), where a full disk would say ``SQLITE_FULL``; or a
    failing disk. Its code cannot tell them apart; each outlasts the write."""

    code = "storage_write_failed"
    cause = (
        "The database's files could not be written (the file system refused the write: a"
        " file size limit or disk quota reached, or a failing disk)."
    )


class StorageLocked(StorageNotWritable):
    """Another process holds the SQLite file's write lock, and a write waited for it past
    SQLite's busy timeout (``SQLITE_BUSY``): a shell or a program left in a transaction,
    a backup. Every write waits and fails alike until the lock is let go, so readiness
    fails meanwhile; the code stays ``storage_unavailable``, a wait and not the
    database's refusal."""

    cause = (
        "The database is locked by another process (a write waited for its lock past"
        " SQLite's busy timeout)."
    )


class StorageTableLocked(StorageLocked):
    """Another PostgreSQL session holds a lock that writes to a table of the gateway's
    wait for (``LOCK TABLE``; an ``ALTER TABLE``, a ``VACUUM FULL``, a ``CREATE INDEX``
    without ``CONCURRENTLY``): PostgreSQL's ``lock_not_available``, which the ping's own
    short wait for such a lock meets (``storage/sql/ping.py``); each write meanwhile
    waits ``database_timeout`` and fails."""

    cause = (
        "A table the gateway writes is locked by another database session (each write"
        " waits for the lock to be let go)."
    )


class ServerShuttingDown(Unavailable):
    """This process is stopping: another (or this one, started again) serves a retry."""

    code = "server_shutting_down"

    def __init__(
        self,
        message: str = "The server is shutting down; the response was ended before it finished.",
    ) -> None:
        super().__init__(message)


class ServerRestarted(Unavailable):
    """The response's process was judged stopped (it died, or was paused past its lease)
    and the response was marked failed: the same words for the store and the clients."""

    code = "server_restarted"

    def __init__(self) -> None:
        super().__init__("The server stopped before the response finished; it was not completed.")
