"""Group commit: concurrent saves share one transaction.

Each stored response is written twice: its in-progress row with its input before its run
starts (before ``response.created``), and its final state with its output at the end,
before the terminal event; each time its run waits for the commit. Under load many runs
start and end together; writing each in its own transaction makes SQLite's pooled
connections queue on its single write lock (in the busy handler's sleeps) and costs every
save the driver round trips of its own ``BEGIN``/``COMMIT``. Here one writer task drains
all saves waiting at that moment into a single transaction, so only one connection ever
writes and the round trips are shared; the transaction is handed to a
:class:`~stateway.storage.sql.writer.Writer` as one batch of statements (on SQLite, one
hand-off to the writer's thread).

A save is still atomic and still awaited: its caller resumes only once its rows are
committed. When a shared transaction fails, its saves are retried one by one, so one bad
record (a duplicate id) fails alone instead of taking its neighbours with it.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any, Final

from stateway.core.errors import StorageError
from stateway.storage.sql import queries
from stateway.storage.sql.errors import storage_errors
from stateway.storage.sql.writer import Writer

log = logging.getLogger(__name__)

MAX_BATCH: Final = 128
"""Saves in one transaction at most; the rest wait for the next one."""


@dataclass(slots=True)
class PendingSave:
    response_row: dict[str, Any]
    """A row to insert, or the values of :data:`~.queries.FINISH_RESPONSE` to update one."""
    item_rows: list[dict[str, Any]]
    done: asyncio.Future[None]
    finish: bool = False


class GroupCommitter:
    def __init__(self, writer: Writer) -> None:
        self.writer = writer
        self._pending: list[PendingSave] = []
        self._writer: asyncio.Task[None] | None = None

    async def save(self, response_row: dict[str, Any], item_rows: list[dict[str, Any]]) -> None:
        """Insert one response and its items; return once committed."""
        await self._enqueue(response_row, item_rows, finish=False)

    async def finish(self, update: dict[str, Any], item_rows: list[dict[str, Any]]) -> None:
        """Update an in-progress response to its final state and add its (output) items;
        return once committed."""
        await self._enqueue(update, item_rows, finish=True)

    async def _enqueue(
        self, response_row: dict[str, Any], item_rows: list[dict[str, Any]], *, finish: bool
    ) -> None:
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._pending.append(PendingSave(response_row, item_rows, done, finish))
        if self._writer is None or self._writer.done():
            self._writer = asyncio.create_task(self._drain())
        await done

    async def aclose(self) -> None:
        if self._writer is not None:
            await asyncio.gather(self._writer, return_exceptions=True)
        await self.writer.aclose()

    async def _drain(self) -> None:
        while self._pending:
            batch = self._pending[:MAX_BATCH]
            del self._pending[:MAX_BATCH]
            try:
                await self._commit(batch)
            except Exception:  # the top of the writer task: a bug must not strand the batch
                log.exception("writing %d responses failed", len(batch))
                _fail(batch)
            except BaseException:  # cancelled: answer the waiting runs, then stop
                _fail(batch)
                raise

    async def _commit(self, batch: list[PendingSave]) -> None:
        """Write ``batch`` together; if that fails, write its saves one by one."""
        try:
            await self._write(batch)
        except StorageError as exc:
            if len(batch) == 1:
                _settle(batch[0], exc)
                return
            for save in batch:
                try:
                    await self._write([save])
                except StorageError as single:
                    _settle(save, single)
                else:
                    _settle(save, None)
        else:
            for save in batch:
                _settle(save, None)

    async def _write(self, batch: list[PendingSave]) -> None:
        inserts = [save.response_row for save in batch if not save.finish]
        updates = [save.response_row for save in batch if save.finish]
        items = [row for save in batch for row in save.item_rows]
        with storage_errors("saving a response"):
            await self.writer.write(
                [
                    (queries.INSERT_RESPONSE, inserts),
                    (queries.FINISH_RESPONSE, updates),
                    (queries.INSERT_ITEMS, items),
                ]
            )


def _fail(batch: list[PendingSave]) -> None:
    for save in batch:
        _settle(save, StorageError("Storage failed while saving a response."))


def _settle(save: PendingSave, error: StorageError | None) -> None:
    if save.done.done():  # its caller was cancelled; the outcome is still the same
        return
    if error is None:
        save.done.set_result(None)
    else:
        save.done.set_exception(error)
