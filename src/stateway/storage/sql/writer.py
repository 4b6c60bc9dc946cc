"""Writers: one batch of statements, one transaction, at the least cost per database.

The group committer (:mod:`~stateway.storage.sql.group_commit`) hands a writer a batch: an
ordered list of statements, each with its parameter rows. The writer runs them in one
transaction and returns once it is committed.

- **SQLite** (:class:`ThreadWriter`): aiosqlite sends every driver call (cursor, execute,
  fetch, close, commit, ...) to its thread and back, seven round trips for a save. Here a
  thread of the writer's own holds a plain ``sqlite3`` connection and runs the whole
  transaction in one hand-off. It is the only connection that writes, so writers never
  queue on SQLite's lock inside this process; readers keep using the async engine (WAL:
  they never block the writer, nor it them).
- **PostgreSQL** (:class:`AsyncWriter`): asyncpg is asynchronous already; the batch runs
  on a pooled connection of the async engine, each statement's rows as one
  ``executemany``.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

from sqlalchemy import Engine, event, pool
from sqlalchemy import create_engine as create_sync_engine
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.sql import Executable

from stateway.storage.sql.engine import SQLITE_SYNC_DRIVER, apply_sqlite_pragmas, is_sqlite

Statements = list[tuple[Executable, list[dict[str, Any]]]]
"""A batch: statements in order, each with its parameter rows (a statement without rows is
skipped)."""


class Writer(Protocol):
    @property
    def engine(self) -> Engine:
        """The engine whose connections run the writes (tests watch its statements)."""
        ...

    async def write(self, statements: Statements) -> None:
        """Run ``statements`` in one transaction; return once committed. Database errors
        leave as the driver's or SQLAlchemy's exceptions."""
        ...

    async def aclose(self) -> None: ...


def writer_for(engine: AsyncEngine) -> Writer:
    """The writer for ``engine``'s database."""
    if is_sqlite(engine.url):
        return ThreadWriter(engine)
    return AsyncWriter(engine)


class AsyncWriter:
    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

    @property
    def engine(self) -> Engine:
        return self._engine.sync_engine

    async def write(self, statements: Statements) -> None:
        async with self._engine.begin() as connection:
            for statement, rows in statements:
                if rows:
                    await connection.execute(statement, rows)

    async def aclose(self) -> None:
        return None


class ThreadWriter:
    def __init__(self, engine: AsyncEngine) -> None:
        url = engine.url.set(drivername=SQLITE_SYNC_DRIVER)
        # One connection, opened and used only on the writer's thread.
        self._engine = create_sync_engine(url, poolclass=pool.StaticPool)
        event.listen(self._engine, "connect", apply_sqlite_pragmas)
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="stateway-writer")

    @property
    def engine(self) -> Engine:
        return self._engine

    async def write(self, statements: Statements) -> None:
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._thread, self._write, statements)

    def _write(self, statements: Statements) -> None:
        with self._engine.begin() as connection:
            for statement, rows in statements:
                if rows:
                    connection.execute(statement, rows)

    async def aclose(self) -> None:
        """Close the connection on its own thread (``sqlite3`` refuses any other), then
        stop the thread. The engine reconnects if a write comes after all."""
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._thread, self._engine.dispose)
