"""What ``GET /ready`` asks of the database: that it answers, and takes writes.

A database can answer every read while refusing every write: SQLite on a full disk
(``SQLITE_FULL``) or a file it may not write (``SQLITE_READONLY``), PostgreSQL read-only
(a hot standby after a failover, or a database set ``default_transaction_read_only``).
Stored traffic then fails, so the gateway must leave its load balancer, and come back by
itself once the cause is gone. Probes come every few seconds: while writes land, a ping
writes nothing.

- **Answering**: one statement within :data:`PING_TIMEOUT`. On PostgreSQL that statement
  asks whether the connection's transactions are read-only (:data:`.queries.READ_ONLY`):
  a replica that starts on a standby is never ready, before any save fails. A connection
  found read-only is replaced, as is every one opened before it
  (:class:`~stateway.storage.sql.engine.Replacement`), and the question asked again on a
  new one: a session opened on a read-only server stays read-only once a writable one is
  back, so only a new one tells. Read-only there too, the ping fails
  (:class:`StorageReadOnly`). Once the database is found writable again, the pool is
  renewed: sessions opened meanwhile (by requests under way) are not used again, and
  each is closed as its request lets it go (:mod:`~stateway.storage.sql.disposal`). The
  pool is renewed so on SQLite too, each time a write was last refused as read-only: a
  connection opened while the file could not be written keeps it read-only for the
  whole process, as long as it is open.
- **Taking writes**: a write the database refused for a lasting cause
  (:class:`StorageNotWritable`: a save, or any write of the store's; the store keeps the
  last one in its :class:`~stateway.storage.sql.refusals.WriteRefusals` until a save
  commits) fails every ping. Meanwhile no traffic comes to tell when writes land again,
  so each ping tries one through the same writer: a :data:`PROBE_BYTES` row written and
  deleted in one committed transaction. Committed, because a rolled-back write succeeds
  on a full disk (SQLite writes nothing of it); a page's worth, so it needs a page the
  file must grow by (a full file at its ``max_page_count`` refuses it). A free page left
  by deleted rows lets it land, as it lets a small save: a larger save then fails, and
  readiness with it, until a later probe or save lands. A probe that does not land
  within the ping's time (a lock another process holds: writes wait SQLite's busy
  timeout, 5 s, for it) fails the ping naming the refusal met before it.
- **Not locked against writes** (PostgreSQL): another session may hold a table the
  gateway writes locked (``LOCK TABLE``, an ``ALTER TABLE``, a ``VACUUM FULL``, a
  ``CREATE INDEX`` without ``CONCURRENTLY``) while every read answers: each write then
  waits ``database_timeout`` for it and fails, and no refusal is ever met. So each ping
  also takes the lock writes take (``ROW EXCLUSIVE``, which no writer, reader or
  autovacuum holds against it) on every table the store writes, waiting half its time
  at most (:data:`LOCK_WAIT`), in a transaction of its own that writes nothing and ends
  at once: a lock held against writes fails it (:class:`StorageTableLocked`). One round
  trip more than the read-only question, on ``GET /ready`` alone.
"""

from __future__ import annotations

import asyncio
import os
from typing import Final

from sqlalchemy import TextClause, text
from sqlalchemy.ext.asyncio import AsyncEngine

from stateway.core.errors import StorageError, StorageNotWritable, StorageReadOnly
from stateway.storage.sql import queries
from stateway.storage.sql.errors import storage_errors
from stateway.storage.sql.group_commit import GroupCommitter, Rows
from stateway.storage.sql.refusals import WriteRefusals
from stateway.storage.sql.schema import (
    conversation_items,
    conversations,
    items,
    response_events,
    responses,
    run_owners,
    write_probes,
)

PING_TIMEOUT: Final = 2.0
"""Seconds a ping waits for the database: one that stopped answering without closing (its
host lost, a partition) is reported down, not left to hold the probe until TCP gives up.
As long again for a write probe, when one is made."""

PROBE_BYTES: Final = 4096
"""A write probe's row: SQLite's page, of random bytes, which PostgreSQL cannot compress
(4 KiB of zeros it stores in 56 bytes, in a page it may already have)."""
_FAILED: Final = "Storage failed while checking the database."
LOCK_WAIT: Final = 0.5
"""The part of :data:`PING_TIMEOUT` the ping waits for the lock writes take (PostgreSQL):
a lock held against them longer is another session's, not a write's."""
WRITTEN: Final = (
    responses,
    items,
    response_events,
    conversations,
    conversation_items,
    run_owners,
    write_probes,
)
"""The tables the store writes (not ``api_keys``, written by ``stateway keys``, nor
``gateway_secrets``, at start-up)."""


def _write_locks() -> TextClause:
    """The lock writes take on every table the store writes, waited for
    ``LOCK_WAIT * PING_TIMEOUT`` at most (``lock_timeout``, local to the block's own
    transaction: the reader's connections run each statement in one)."""
    wait = max(1, int(PING_TIMEOUT * LOCK_WAIT * 1000))
    tables = ", ".join(table.name for table in WRITTEN)
    return text(
        f"DO $$BEGIN PERFORM set_config('lock_timeout', '{wait}', true); "
        f"LOCK TABLE {tables} IN ROW EXCLUSIVE MODE; END$$"
    )


def _probe() -> Rows:
    return {
        queries.INSERT_PROBE: [{"body": os.urandom(PROBE_BYTES)}],
        queries.CLEAR_PROBES: [{}],
    }


class Ping:
    def __init__(
        self,
        engine: AsyncEngine,
        reader: AsyncEngine,
        writes: GroupCommitter,
        refusals: WriteRefusals,
    ) -> None:
        self._engine = engine
        self._reader = reader
        self._postgres = engine.dialect.name == "postgresql"
        self._writes = writes
        self._refusals = refusals
        self._found_read_only = False
        """Whether a ping found PostgreSQL read-only, and none has found it writable since."""

    async def check(self) -> None:
        """Raise :class:`~stateway.core.errors.StorageError` unless the database answers
        and takes writes (see the module); within ``PING_TIMEOUT``, twice when a write is
        tried (and the 2 s SQLAlchemy's asyncpg dialect then gives a connection cut off
        mid-statement to close, before it aborts it: such a connection is never used
        again)."""
        with storage_errors("checking the database"):
            async with asyncio.timeout(PING_TIMEOUT):
                await self._answers()
        if self._found_read_only or isinstance(self._refusals.last, StorageReadOnly):
            self._found_read_only = False
            await self._engine.dispose()
        if self._refusals.last is not None:
            await self._write()

    async def _answers(self) -> None:
        for _ in range(2):  # a pooled connection, then a new one
            async with self._reader.connect() as connection:
                if not self._postgres:
                    await connection.execute(queries.PING)
                    return
                if not await connection.scalar(queries.READ_ONLY):
                    await connection.execute(_write_locks())
                    return
                self._found_read_only = True
                read_only = StorageReadOnly(_FAILED)
                await connection.invalidate(read_only)
        raise read_only

    async def _write(self) -> None:
        """A write probe; one that did not land in time leaves the refusal last met
        standing (a lock another process holds: SQLite's busy timeout outlasts the
        ping), named as it was."""
        standing = self._refusals.last
        try:
            with storage_errors("checking the database"):
                async with asyncio.timeout(PING_TIMEOUT):
                    await self._writes.write(_probe())
        except StorageNotWritable as refused:
            raise refused.restated(_FAILED) from None
        except StorageError as failed:
            if standing is None or not isinstance(failed.__cause__, TimeoutError):
                raise
            raise standing.restated(_FAILED) from None
