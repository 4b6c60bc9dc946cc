"""Where database failures become :class:`~stateway.core.errors.StorageError`.

The store and the migrator wrap their database work in :func:`storage_errors`; nothing
above them sees a SQLAlchemy or driver exception. The exceptions caught are the
families a database can raise: SQLAlchemy's own (which wrap most driver errors), OS-level
connection failures (refused, unreachable, timed out: ``TimeoutError`` is an ``OSError``),
and the drivers' base classes for the errors raised outside SQLAlchemy's wrapping, such as
while a pooled connection is being opened.

The client-facing message is fixed and generic. The log lines get the driver's own error
too (:attr:`StorageError.reason`, in ``str(error)``: "connection refused", "database is
locked", a missing database), never SQLAlchemy's text, which carries the statement. A
line that attaches the error's traceback shows SQLAlchemy's error it was raised from, whose
engine leaves out the values bound to the statement (a prompt, a sealed secret:
``HIDE_PARAMETERS`` in :mod:`~stateway.storage.sql.engine`).

A database that refuses the data itself (a duplicate key, a broken constraint, a value
or a row it cannot hold: :func:`rejected`) raises :class:`StorageRejected`: the same data
is refused again, which an outage's retry must not wait for.

A database that refuses writes for a cause that outlasts the write is named, by the
driver's structured code (:func:`refusal`): out of space (SQLite's ``SQLITE_FULL``, a full
disk or the file at its ``max_page_count``; PostgreSQL's ``disk_full``) is
:class:`StorageFull`, read-only :class:`StorageReadOnly`: PostgreSQL's
``read_only_sql_transaction`` (a hot standby, or a database set read-only), SQLite's
``SQLITE_READONLY`` with each of its extended codes (a file opened read-only, as SQLite
opens one it may not write; the file moved away, ``SQLITE_READONLY_DBMOVED``; its WAL
index or journal not writable); a write the file system refused, :class:`StorageWriteFailed`
(SQLite's ``SQLITE_IOERR_WRITE``: it says ``SQLITE_FULL`` for a full disk's ``ENOSPC``
only; a disk quota's ``EDQUOT``, a file size limit's ``EFBIG``, a failing disk's ``EIO``
are this); a write that waited for another process's lock past SQLite's busy timeout,
:class:`StorageLocked` (``SQLITE_BUSY``: every write after it waits and fails alike
until the lock is let go); on PostgreSQL, a wait for a table's lock past a
``lock_timeout`` (``lock_not_available``: the ping's, or one an operator set),
:class:`StorageTableLocked`. The client's message then says so.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Final

import asyncpg  # type: ignore[import-untyped]  # asyncpg ships no type information
from sqlalchemy.exc import (
    ArgumentError,
    CompileError,
    DataError,
    DBAPIError,
    IntegrityError,
    SQLAlchemyError,
    StatementError,
)

from stateway.core.errors import (
    StorageError,
    StorageFull,
    StorageLocked,
    StorageNotWritable,
    StorageReadOnly,
    StorageRejected,
    StorageTableLocked,
    StorageWriteFailed,
)
from stateway.storage.sql.refusals import WriteRefusals

DATABASE_ERRORS: Final[tuple[type[Exception], ...]] = (
    SQLAlchemyError,
    OSError,
    asyncpg.PostgresError,
    asyncpg.InterfaceError,
    sqlite3.Error,  # aiosqlite re-exports sqlite3's exception classes
)

REJECTIONS: Final[tuple[type[Exception], ...]] = (
    IntegrityError,
    DataError,
    sqlite3.IntegrityError,  # the writers run their statements on the drivers themselves
    sqlite3.DataError,
    asyncpg.IntegrityConstraintViolationError,
    asyncpg.DataError,
)
"""The database refused the data (a duplicate key, a broken constraint, a value it cannot
hold), not a failure: :class:`StorageRejected`."""

_REJECTED_CLASSES: Final = frozenset({"22", "23", "54"})
"""PostgreSQL's SQLSTATE classes of data refused: ``data_exception`` (a value out of range,
a character it cannot hold), ``integrity_constraint_violation``, ``program_limit_exceeded``
(a row too big for an index): by their first two characters."""
_REJECTED_SQLITE: Final = frozenset(
    {sqlite3.SQLITE_CONSTRAINT, sqlite3.SQLITE_TOOBIG, sqlite3.SQLITE_MISMATCH}
)
"""SQLite's primary result codes of data refused."""

_MAX_REASON = 300

_SQLSTATES: Final[dict[str, type[StorageNotWritable]]] = {
    "53100": StorageFull,  # disk_full
    "25006": StorageReadOnly,  # read_only_sql_transaction
    "55P03": StorageTableLocked,  # lock_not_available: a lock_timeout passed
}
_SQLITE_CODES: Final[dict[int, type[StorageNotWritable]]] = {
    sqlite3.SQLITE_FULL: StorageFull,
    sqlite3.SQLITE_READONLY: StorageReadOnly,
    sqlite3.SQLITE_IOERR_WRITE: StorageWriteFailed,
    sqlite3.SQLITE_BUSY: StorageLocked,
}
"""By extended result code, which is what the driver gives, else by its primary code: its
low byte (``SQLITE_READONLY_DBMOVED`` is ``SQLITE_READONLY | 4 << 8``). Of the I/O
errors only a write's is named: a read's or a lock's (``SQLITE_IOERR_LOCK``, the file
system failing a lock) says nothing of writes to come."""
_PRIMARY_CODE: Final = 0xFF


@contextmanager
def storage_errors(action: str, refusals: WriteRefusals | None = None) -> Iterator[None]:
    """Re-raise database failures inside the block as :class:`StorageError`.

    ``action`` names what was being done ("saving a response"), for the message. A write
    passes its store's ``refusals``, which keep a lasting refusal it meets for the ping
    (:mod:`~stateway.storage.sql.refusals`).
    """
    try:
        yield
    except (CompileError, ArgumentError):
        raise  # a bug in a statement, not a storage failure
    except DATABASE_ERRORS as exc:
        if rejected(exc):
            message = f"Storage rejected the data while {action}."
            raise _failed(message, exc, StorageRejected) from exc
        kind = refusal(exc) or StorageError
        failed = _failed(f"Storage failed while {action}.", exc, kind)
        if refusals is not None and isinstance(failed, StorageNotWritable):
            refusals.refused(failed)
        raise failed from exc


def refusal(failure: BaseException) -> type[StorageNotWritable] | None:
    """The kind of lasting write refusal ``failure`` is, by the driver's code (its words
    are never read), or the store's own finding; None for any other failure."""
    if isinstance(failure, StorageNotWritable):
        return type(failure)
    driver = failure.orig if isinstance(failure, DBAPIError) else failure
    code = getattr(driver, "sqlite_errorcode", None)
    if isinstance(code, int):
        return _SQLITE_CODES.get(code) or _SQLITE_CODES.get(code & _PRIMARY_CODE)
    state = getattr(driver, "sqlstate", None)  # asyncpg's, and SQLAlchemy's adapted ones
    return _SQLSTATES.get(state) if isinstance(state, str) else None


def rejected(failure: BaseException) -> bool:
    """Whether ``failure`` is the database refusing the data itself (sent again, refused
    again), by its class or the driver's code: not an outage."""
    if isinstance(failure, REJECTIONS):
        return True
    driver = failure.orig if isinstance(failure, DBAPIError) else failure
    code = getattr(driver, "sqlite_errorcode", None)
    if isinstance(code, int):
        return code & _PRIMARY_CODE in _REJECTED_SQLITE
    state = getattr(driver, "sqlstate", None)
    return isinstance(state, str) and state[:2] in _REJECTED_CLASSES


def _failed(
    message: str, cause: Exception, kind: type[StorageError] = StorageError
) -> StorageError:
    error = kind(message)
    error.reason = reason(cause)
    return error


def reason(failure: Exception) -> str:
    """A database failure in one short line for the log: the driver's error (SQLAlchemy
    wraps it as ``orig``: its own text adds the statement and its parameters), else the
    exception's first line."""
    if isinstance(failure, StatementError):
        if not isinstance(failure.orig, Exception):
            return type(failure).__name__  # its text is the statement's
        failure = failure.orig
    first = str(failure).strip().split("\n", 1)[0][:_MAX_REASON]
    name = type(failure).__name__
    return f"{name}: {first}" if first else name
