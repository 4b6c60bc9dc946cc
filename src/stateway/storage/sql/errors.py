"""Where database failures become :class:`~stateway.core.errors.StorageError`.

The store and the migrator wrap their database work in :func:`storage_errors`; nothing
above them sees a SQLAlchemy or driver exception. The exceptions caught are the
families a database can raise: SQLAlchemy's own (which wrap most driver errors), OS-level
connection failures (refused, unreachable, timed out: ``TimeoutError`` is an ``OSError``),
and the drivers' base classes for the errors raised outside SQLAlchemy's wrapping, such as
while a pooled connection is being opened.

The client-facing message is fixed and generic: SQLAlchemy's messages carry SQL text and
parameters, which belong in the logs (via the chained ``__cause__``), not in a response.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Final

import asyncpg  # type: ignore[import-untyped]  # asyncpg ships no type information
from sqlalchemy.exc import ArgumentError, CompileError, IntegrityError, SQLAlchemyError

from stateway.core.errors import StorageError

DATABASE_ERRORS: Final[tuple[type[Exception], ...]] = (
    SQLAlchemyError,
    OSError,
    asyncpg.PostgresError,
    asyncpg.InterfaceError,
    sqlite3.Error,  # aiosqlite re-exports sqlite3's exception classes
)


@contextmanager
def storage_errors(action: str) -> Iterator[None]:
    """Re-raise database failures inside the block as :class:`StorageError`.

    ``action`` names what was being done ("saving a response"), for the message.
    """
    try:
        yield
    except (CompileError, ArgumentError):
        raise  # a bug in a statement, not a storage failure
    except IntegrityError as exc:
        raise StorageError(f"Storage rejected the data while {action}.") from exc
    except DATABASE_ERRORS as exc:
        raise StorageError(f"Storage failed while {action}.") from exc
