"""Writers: one batch of statements, one transaction, at the least cost per database.

The group committer (:mod:`~stateway.storage.sql.group_commit`) hands a writer a batch: an
ordered list of statements, each with its parameter rows. The writer runs them in one
transaction and returns once it is committed.

- **SQLite** (:class:`ThreadWriter`): aiosqlite sends every driver call (cursor, execute,
  fetch, close, commit, ...) to its thread and back, seven round trips for a save. Here a
  thread of the writer's own holds a plain ``sqlite3`` connection and runs the whole
  transaction in one hand-off: a queue to the thread, and the loop woken once with the
  outcome. It is the only connection that writes, so writers never queue on SQLite's lock
  inside this process; readers keep using the async engine (WAL: they never block the
  writer, nor it them). Statements run as :mod:`~stateway.storage.sql.prepared` SQL
  through the driver's ``executemany``: SQLAlchemy's execution machinery would cost more
  instructions than SQLite's own work for a save. A write refused as read-only
  (``SQLITE_READONLY``) ends the connection, and the next write opens the file again: a
  connection that opened it while it could not be written stays read-only once it can,
  and one whose file was moved away never reaches the file now at its path.
- **PostgreSQL** (:class:`AsyncWriter`): asyncpg is asynchronous already; the batch runs
  in one transaction on a pooled connection of the async engine, each statement's rows
  as one ``executemany`` of its prepared SQL on the asyncpg connection itself (through
  SQLAlchemy's asyncio layer a save cost a fifth more instructions). A connection found
  closed after a failure, whose statement timed out, or found read-only (see
  :mod:`~stateway.storage.sql.engine`), is invalidated, so the pool does not hand it out
  again.

Both tell their :attr:`~Writer.watchers` each statement's SQL before it runs (tests count
statements and inject failures there); a watcher that raises fails the statement.

A statement may be *guarded*: each of its rows must change one row (a run's end, over a
row still in progress), or the whole transaction is rolled back and :class:`Unmatched`
raised; the group committer then tells which save's guard failed by writing them alone.
SQLite sums an ``executemany``'s changes in the cursor's ``rowcount``; asyncpg's
``executemany`` reports nothing, so a guarded statement runs there with ``RETURNING``
through ``fetchmany`` (the same pipelined round trip) and its returned rows are counted.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Collection
from contextlib import suppress
from queue import SimpleQueue
from typing import Any, Final, Protocol

from sqlalchemy import URL, Integer, event, literal_column, pool
from sqlalchemy import create_engine as create_sync_engine
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.sql import Executable
from sqlalchemy.sql.dml import UpdateBase

from stateway.core.errors import StorageReadOnly
from stateway.storage.sql.engine import (
    HIDE_PARAMETERS,
    SQLITE_SYNC_DRIVER,
    apply_sqlite_pragmas,
    is_sqlite,
)
from stateway.storage.sql.errors import refusal
from stateway.storage.sql.prepared import PreparedStatements

Statements = list[tuple[Executable, list[dict[str, Any]]]]
"""A batch: statements in order, each with its parameter rows (a statement without rows is
skipped)."""

Watcher = Callable[[str], None]
"""Told a statement's SQL before it runs."""


class Unmatched(Exception):
    """A guarded statement changed fewer rows than it was given: nothing was written."""


class Writer(Protocol):
    watchers: list[Watcher]

    async def write(self, statements: Statements, guarded: Collection[Executable] = ()) -> None:
        """Run ``statements`` in one transaction; return once committed. A statement of
        ``guarded`` whose rows change fewer rows than they are rolls it back and raises
        :class:`Unmatched`. Database errors leave as the driver's or SQLAlchemy's
        exceptions."""
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
        self.watchers: list[Watcher] = []
        self._prepared = PreparedStatements(engine.dialect)
        self._counted: dict[Executable, Executable] = {}

    async def write(self, statements: Statements, guarded: Collection[Executable] = ()) -> None:
        async with self._engine.connect() as connection:
            pooled = await connection.get_raw_connection()
            driver: Any = pooled.driver_connection  # asyncpg's Connection (no type information)
            try:
                async with driver.transaction():
                    for statement, rows in statements:
                        if not rows:
                            continue
                        counted = statement in guarded
                        if counted:
                            statement = self._returning(statement)
                        prepared = self._prepared.get(statement, rows[0])
                        for watch in self.watchers:
                            watch(prepared.sql)
                        values = list(map(prepared.bind, rows))
                        if not counted:
                            await driver.executemany(prepared.sql, values)
                        elif len(await driver.fetchmany(prepared.sql, values)) < len(rows):
                            raise Unmatched()
            except BaseException as failure:
                # Gone (a server restart), silent past its timeout (the answer may yet
                # come), or read-only (a standby: a new one may reach the primary): the
                # pool must not hand it out again.
                if (
                    driver.is_closed()
                    or isinstance(failure, TimeoutError)
                    or refusal(failure) is StorageReadOnly
                ):
                    await connection.invalidate(failure)
                raise

    def _returning(self, statement: Executable) -> Executable:
        """``statement`` returning a row per row it changes (built once)."""
        counted = self._counted.get(statement)
        if counted is None:
            if not isinstance(statement, UpdateBase):
                raise TypeError(f"only a DML statement can be guarded: {statement}")
            counted = statement.returning(literal_column("1", Integer))
            self._counted[statement] = counted
        return counted

    async def aclose(self) -> None:
        return None


_Job = tuple[Statements, Collection[Executable], asyncio.AbstractEventLoop, "asyncio.Future[None]"]
_THREAD: Final = "stateway-writer"


class _Serving:
    """One writer thread and what is its alone: its queue, and the engine of its one
    connection (opened on it). A thread started while another is told to end (a write
    coming as the writer is closed) shares neither: it must not take the other's end
    from a shared queue, leaving it serving for ever and its close waiting for ever, nor
    close its connection under it."""

    def __init__(self, url: URL, serve: Callable[[_Serving], None]) -> None:
        # Opens the thread's one connection (pragmas applied), on the thread.
        self.engine = create_sync_engine(
            url, poolclass=pool.StaticPool, hide_parameters=HIDE_PARAMETERS
        )
        event.listen(self.engine, "connect", apply_sqlite_pragmas)
        self.jobs: SimpleQueue[_Job | None] = SimpleQueue()
        self.thread = threading.Thread(target=serve, args=(self,), name=_THREAD, daemon=True)
        self.thread.start()


class ThreadWriter:
    def __init__(self, engine: AsyncEngine) -> None:
        self._url = engine.url.set(drivername=SQLITE_SYNC_DRIVER)
        self.watchers: list[Watcher] = []
        self._serving: _Serving | None = None
        self._prepared = PreparedStatements(create_sync_engine(self._url).dialect)

    async def write(self, statements: Statements, guarded: Collection[Executable] = ()) -> None:
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()
        if self._serving is None:
            self._serving = _Serving(self._url, self._serve)
        self._serving.jobs.put((statements, guarded, loop, done))
        await done

    async def aclose(self) -> None:
        """Let the thread finish what it was given, close the connection on it
        (``sqlite3`` refuses any other thread), and stop it. A later write starts a new
        thread and connection (one coming meanwhile too: :class:`_Serving`)."""
        serving, self._serving = self._serving, None
        if serving is None:
            return
        serving.jobs.put(None)
        await asyncio.to_thread(serving.thread.join)

    def _serve(self, serving: _Serving) -> None:
        connection = None
        try:
            while (job := serving.jobs.get()) is not None:
                statements, guarded, loop, done = job
                error: BaseException | None = None
                try:
                    if connection is None:
                        connection = serving.engine.raw_connection()
                    self._run(connection.driver_connection, statements, guarded)
                except BaseException as exc:  # noqa: BLE001  # every outcome goes back to the loop
                    error = exc
                    if connection is not None and refusal(exc) is StorageReadOnly:
                        connection.invalidate(exc)  # the next write opens the file anew
                        connection = None
                _answer(loop, done, error)
        finally:
            if connection is not None:
                connection.close()
            serving.engine.dispose()

    def _run(
        self, connection: Any, statements: Statements, guarded: Collection[Executable]
    ) -> None:
        """One transaction: ``sqlite3`` opens it before the first write."""
        cursor = connection.cursor()
        try:
            for statement, rows in statements:
                if not rows:
                    continue
                prepared = self._prepared.get(statement, rows[0])
                for watch in self.watchers:
                    watch(prepared.sql)
                cursor.executemany(prepared.sql, map(prepared.bind, rows))
                if statement in guarded and cursor.rowcount < len(rows):
                    raise Unmatched()
            connection.commit()
        except BaseException:
            with suppress(Exception):  # the statement's own error is the one to report
                connection.rollback()
            raise
        finally:
            cursor.close()


def _answer(
    loop: asyncio.AbstractEventLoop, done: asyncio.Future[None], error: BaseException | None
) -> None:
    with suppress(RuntimeError):  # the loop closed meanwhile: nobody is waiting any more
        loop.call_soon_threadsafe(_settle, done, error)


def _settle(done: asyncio.Future[None], error: BaseException | None) -> None:
    if done.done():  # its writer was cancelled
        return
    if error is None:
        done.set_result(None)
    else:
        done.set_exception(error)
