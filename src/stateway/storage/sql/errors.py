"""Where database failures become :class:`~stateway.core.errors.StorageError`.

The store and the migrator wrap their database work in :func:`storage_errors`; nothing
above them sees a SQLAlchemy or driver exception. The exceptions caught are the
families a database can raise: SQLAlchemy's own (which wrap most driver errors), OS-level
connection failures (refused, unreachable, timed out: ``TimeoutError`` is an ``OSError``),
and the drivers' base classes for the errors raised outside SQLAlchemy's wrapping, such as
while a pooled connection is being opened.

The client-facing message is fixed and generic. The log lines get the driver's own error
too (:attr:`StorageError.reason`, in ``str(error)``: "connection refused", "database is
locked", a missing database), never SQLAlchemy's text, which carries the statement and its
parameters (a prompt, a sealed secret).
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
    IntegrityError,
    SQLAlchemyError,
    StatementError,
)

from stateway.core.errors import StorageError

DATABASE_ERRORS: Final[tuple[type[Exception], ...]] = (
    SQLAlchemyError,
    OSError,
    asyncpg.PostgresError,
    asyncpg.InterfaceError,
    sqlite3.Error,  # aiosqlite re-exports sqlite3's exception classes
)

REJECTIONS: Final[tuple[type[Exception], ...]] = (
    IntegrityError,
    sqlite3.IntegrityError,  # the writers run their statements on the drivers themselves
    asyncpg.IntegrityConstraintViolationError,
)
"""The database refused the data (a duplicate key, a broken constraint), not a failure."""

_MAX_REASON = 300


@contextmanager
def storage_errors(action: str) -> Iterator[None]:
    """Re-raise database failures inside the block as :class:`StorageError`.

    ``action`` names what was being done ("saving a response"), for the message.
    """
    try:
        yield
    except (CompileError, ArgumentError):
        raise  # a bug in a statement, not a storage failure
    except REJECTIONS as exc:
        raise _failed(f"Storage rejected the data while {action}.", exc) from exc
    except DATABASE_ERRORS as exc:
        raise _failed(f"Storage failed while {action}.", exc) from exc


def _failed(message: str, cause: Exception) -> StorageError:
    error = StorageError(message)
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
