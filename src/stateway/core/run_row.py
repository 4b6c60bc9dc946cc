"""A stored run's in-progress row, and the announcement that waits for it.

A stream's ``response.created`` hands its client an id: the row must exist by then. The
row's write runs while the first round's upstream request starts (:class:`Row`), and the
run is announced once it is committed, or at the first output or the end, whichever
comes first, each of them waiting for the row.

A background run goes through ``queued`` first, as hosted: its row is written queued, it
is announced ``response.created`` (queued) then ``response.queued``, and it turns
``in_progress`` once it starts working (:class:`QueuedStart`): ``response.in_progress``, and its
row updated. One that ends before it started ends from ``queued``.
"""

from __future__ import annotations

import asyncio
import logging

from stateway.core import events as ev
from stateway.core.errors import StorageError
from stateway.core.ports import ResponseRecord, ResponseStore
from stateway.core.response import started_record
from stateway.core.runs import Run

log = logging.getLogger(__name__)

Row = asyncio.Future[None]
"""The write of a stored run's in-progress row (with its input), under way while the first
round's upstream request starts; ``response.created`` waits for it."""


async def durable(row: Row | None) -> None:
    """Wait for the in-progress row (shielded: a cancelled run still needs it written)."""
    if row is not None:
        await asyncio.shield(row)


def written(row: Row | None) -> bool:
    """Whether the in-progress row is in the store (its write done and committed)."""
    return row is not None and row.done() and not row.cancelled() and row.exception() is None


def announce(run: Run) -> None:
    """Emit ``response.created`` and ``response.in_progress``, once; a background run's
    ``response.queued`` between them, and its ``response.in_progress`` only once it started
    (:meth:`QueuedStart.start`)."""
    if not run.events:
        run.emit(ev.ResponseCreated(run.state))
        queued = run.queued
        if queued is not None:
            run.emit(ev.ResponseQueued(run.state))
            if not queued.started:
                return
        run.emit(ev.ResponseInProgress(run.state))


def announce_once_durable(run: Run, row: Row) -> None:
    """Announce the run as soon as its row is committed, while the upstream works; the
    first output or the end announces it instead if they come first."""
    if not row.cancelled() and row.exception() is None:
        announce(run)


class QueuedStart:
    """A background run's wait to start. It is ``queued`` from its create until it starts
    working: its first upstream call takes a connection slot (past the backend's waiting
    room, :mod:`stateway.backends.admission`, told by the attempt's
    :class:`~stateway.core.deadline.FirstOutput`), or its loop begins other work first
    (gateway tools prepared, a compaction, a prewarm's check). :meth:`start` then makes it
    ``in_progress``: ``response.in_progress`` logged (at once when the run is announced,
    else with its announcement) and its row updated, once written, while the run goes on
    (:attr:`stored`: its final save waits for it, so the two land in order)."""

    __slots__ = ("_owner", "_run", "_store", "row", "started", "stored")

    def __init__(self, run: Run, store: ResponseStore, owner: str) -> None:
        self._run = run
        self.row: Row | None = None
        """Its row's write (set by the loop, once it began; None: no row to update)."""
        self._store = store
        self._owner = owner
        self.started = False
        self.stored: asyncio.Future[None] | None = None
        """The row's update to ``in_progress``, once started (it never raises)."""

    def start(self) -> None:
        """The run starts working: ``in_progress`` from now on (once; nothing once it is
        finishing, ended from ``queued``)."""
        run = self._run
        if self.started or run.finishing:
            return
        self.started = True
        run.state.status = "in_progress"
        if run.events:  # announced already: else its announcement says it
            run.emit(ev.ResponseInProgress(run.state))
        if self.row is not None:  # as it is now: the run may end before the write
            record = started_record(run.state, [], self._owner)
            self.stored = asyncio.ensure_future(self._store_started(record))

    async def _store_started(self, record: ResponseRecord) -> None:
        try:
            await durable(self.row)
            await self._store.finish(record)  # an update of its unfinished row
        except StorageError as exc:  # the row stays queued until the run's end is stored
            log.warning("marking response %s in progress failed: %s", self._run.id, exc)

    async def settled(self) -> None:
        """Return once the row's update to ``in_progress`` is done, if one was started
        (raising nothing: the run's end is stored whatever it did)."""
        stored = self.stored
        if stored is None:
            return
        await asyncio.wait([stored])
        if not stored.cancelled() and stored.exception() is not None:
            log.error(
                "marking response %s in progress failed", self._run.id, exc_info=stored.exception()
            )
