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
record (a duplicate id) fails alone instead of taking its neighbours with it. A
transaction the database refused for a lasting cause (out of space, read-only) is kept in
the store's :class:`~stateway.storage.sql.refusals.WriteRefusals` until one commits: its
readiness reads it.

A save is a set of parameter rows per statement (:data:`Rows`); a batch runs each
statement once, over the rows of all its saves, in the order the committer was given
(the store's :data:`~stateway.storage.sql.store.WRITE_ORDER`). Statements whose effect
depends on earlier ones (a conversation turn's claim, then its row inserted only if the
claim took) are written to need no answer in between.

A run's end is *guarded* (:mod:`~stateway.storage.sql.writer`): it updates its row only
while the row is in progress, and when it finds the row ended (another process failed it,
its lease judged lapsed) it must write nothing else either, neither output items nor log
events nor its conversation turn. A batch where a guard matched nothing is rolled back and
its saves written one by one, like a batch that failed: the save whose guard failed alone
is told so (:meth:`GroupCommitter.write` returns False), the others commit.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any, Final

from sqlalchemy.sql import Executable

from stateway.core.errors import StorageError
from stateway.storage.sql.errors import storage_errors
from stateway.storage.sql.refusals import WriteRefusals
from stateway.storage.sql.writer import Unmatched, Writer

log = logging.getLogger(__name__)

MAX_BATCH: Final = 128
"""Saves in one transaction at most; the rest wait for the next one."""


Rows = dict[Executable, list[dict[str, Any]]]
"""One save: the parameter rows it adds to each statement of the batch."""


@dataclass(slots=True)
class PendingSave:
    rows: Rows
    done: asyncio.Future[bool]


class GroupCommitter:
    def __init__(
        self,
        writer: Writer,
        order: Sequence[Executable],
        refusals: WriteRefusals,
        guarded: Collection[Executable] = (),
    ) -> None:
        """``order``: every statement a save may use, in the order a batch runs them;
        ``refusals``: where a transaction's lasting refusal is kept, until one commits;
        ``guarded``: the statements each of whose rows must change one row, or their
        save writes nothing."""
        self.writer = writer
        self._order = tuple(order)
        self._guarded = frozenset(guarded)
        self._known = frozenset(order)
        self._refusals = refusals
        self._pending: list[PendingSave] = []
        self._writer: asyncio.Task[None] | None = None

    async def write(self, rows: Rows) -> bool:
        """Write one save's rows (atomically, with whatever batch it joins); return once
        committed: True, or False when one of its guarded statements matched nothing (and
        nothing of it was written)."""
        if not self._known.issuperset(rows):
            unknown = rows.keys() - self._known
            raise ValueError(f"statements missing from the write order: {unknown}")
        done: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._pending.append(PendingSave(rows, done))
        if self._writer is None or self._writer.done():
            self._writer = asyncio.create_task(self._drain())
        return await done

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
        """Write ``batch`` together; if that fails, or a guard matched nothing, write its
        saves one by one."""
        try:
            await self._write(batch)
        except (StorageError, Unmatched) as exc:
            if len(batch) == 1:
                _settle(batch[0], exc)
                return
            for save in batch:
                try:
                    await self._write([save])
                except (StorageError, Unmatched) as single:
                    _settle(save, single)
                else:
                    _settle(save, None)
        else:
            for save in batch:
                _settle(save, None)

    async def _write(self, batch: list[PendingSave]) -> None:
        if len(batch) == 1:  # the usual batch when requests come one at a time
            rows = batch[0].rows
            statements = [(s, rows[s]) for s in self._order if s in rows]
        else:
            statements = [
                (statement, [row for save in batch for row in save.rows.get(statement, ())])
                for statement in self._order
            ]
        with storage_errors("saving a response", self._refusals):
            await self.writer.write(statements, self._guarded)
        self._refusals.landed()


def _fail(batch: list[PendingSave]) -> None:
    for save in batch:
        _settle(save, StorageError("Storage failed while saving a response."))


def _settle(save: PendingSave, error: StorageError | Unmatched | None) -> None:
    """Answer ``save``: written (True), its guard unmatched (False), or failed."""
    if save.done.done():  # its caller was cancelled; the outcome is still the same
        return
    if error is None or isinstance(error, Unmatched):
        save.done.set_result(error is None)
    else:
        save.done.set_exception(error)
