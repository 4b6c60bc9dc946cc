"""Watching a background response: its event log from a position, then live to its end.

A watch yields batches of wire payloads (see :mod:`stateway.core.journal`), each flagged
when it is the last. It reads from one of two places:

- :class:`LiveWatch`, the run in this process: its journal, in memory, from any position,
  following the run as it goes;
- :class:`StoredWatch`, the persisted log (a run that ended, or one another process
  runs): one query per read, then, while the response is unfinished, another read every
  ``poll`` seconds until its status says it finished (its last events are committed with
  that status, so the read that sees it also sees them);
- :class:`FollowedWatch`, a run another process runs, when processes share an
  :class:`~stateway.core.coordination.EventFanout` (Redis): the stored log, then the
  batches its owner publishes as it commits them, each event taken once by its sequence
  number. The store stays the source of truth: it is read again when a batch arrives
  ahead of the position (one was missed: it is committed, since batches are published
  only once stored), and whenever nothing arrived for ``quiet`` seconds (a message lost,
  or an owner that died: whoever failed its run stored the end).

A watcher following from past the stored log (events its owner sent live but had not
stored yet) whose owner then died, or could not store the run's end (its settler stores
it later), is past the terminal event appended since: it gets that terminal event, as a
watch started then would (:mod:`stateway.core.background`), rather than a stream that
ends without saying how the response ended.

A read of the stored log that fails (the database away for a moment) is tried again at
the next poll (``quiet`` read) rather than ending the stream: the run goes on meanwhile.

A response deleted while it is watched, with no word of it reaching its run (another
process runs it and the processes share no Redis, or Redis is away), leaves nothing to
read: the watch raises :class:`~stateway.core.errors.NotFound`, which its surface sends
as the protocol's error, rather than ending as if the stream were whole.

A watch of a run another process runs is not ended by a run's end here: known to this
process's :class:`~stateway.core.run_registry.RunRegistry` while it waits on that process (as an
answer relayed from elsewhere), it is ended with the runs when this process shuts down,
its wait interrupted and :class:`~stateway.core.errors.ServerShuttingDown` raised, which
its surface sends as the protocol's error: its client resumes from another process while
the run goes on (:mod:`stateway.core.foreign_waits`).

A watcher never holds up the run: the run appends to its log whatever the watchers do.
:meth:`Watch.behind` tells how far a watcher trails the run, so that its surface can drop
one that stopped reading (it resumes with ``starting_after``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from functools import partial
from typing import Final, Protocol

from stateway.core.coordination import EventFanout, Following, Published
from stateway.core.errors import NotFound, StorageError
from stateway.core.foreign_waits import ForeignWait
from stateway.core.journal import RunJournal
from stateway.core.ownership import sent_unstored
from stateway.core.ports import EventBatch, EventLog, ResponseStore
from stateway.core.response import UNFINISHED
from stateway.core.run_registry import RunRegistry
from stateway.core.runs import Run

log = logging.getLogger(__name__)

POLL_INTERVAL: Final = 0.25
"""Seconds between reads of the stored log of a response another process is running."""
QUIET_READ: Final = 1.0
"""Seconds a followed watch waits for a published batch before it reads the store anyway."""

Batches = AsyncIterator[tuple[list[bytes], bool]]
"""Wire payloads in log order, each batch flagged True when it is the last."""

_RESUME_ELSEWHERE: Final = (
    "The server is shutting down; the response goes on in the gateway process running "
    "it: resume the stream from another one with starting_after."
)


class Watch(Protocol):
    def batches(self) -> Batches: ...

    @property
    def position(self) -> int:
        """The sequence number of the next event this watch gives (past those of the
        batches given so far)."""
        ...

    def behind(self) -> int:
        """Bytes of the events logged that this watcher has not been given yet."""
        ...


class LiveWatch:
    def __init__(self, run: Run, journal: RunJournal, after: int = -1) -> None:
        self._run = run
        self._journal = journal
        self._after = after
        self._position = after + 1

    @property
    def position(self) -> int:
        return self._position

    async def batches(self) -> Batches:
        run = self._run
        async for first, events in run.subscribe_batches(self._after):
            end = first + len(events)
            self._position = end
            yield self._journal.encoded(first, end), run.closed and end == len(run.events)

    def behind(self) -> int:
        return self._journal.size(self._position, len(self._run.events))

    def keep(self) -> asyncio.Future[None] | None:
        """Have the run's log stored, for a watcher that leaves before it saw the end
        (:meth:`RunJournal.keep`)."""
        return self._journal.keep()


class StoredWatch:
    def __init__(
        self,
        store: ResponseStore,
        key: tuple[str, str],
        log: EventLog,
        after: int = -1,
        *,
        poll: float = POLL_INTERVAL,
        runs: RunRegistry | None = None,
    ) -> None:
        """``runs``: this process's runs, whose shutdown ends the watch while it waits
        for another process's run (:class:`~stateway.core.foreign_waits.ForeignWait`)."""
        self._store = store
        self._key = key
        self._log: EventLog | None = log
        self._after = after
        self._position = after + 1
        self._poll = poll
        self._stop = ForeignWait(runs, _RESUME_ELSEWHERE)

    @property
    def position(self) -> int:
        return self._position

    async def batches(self) -> Batches:
        log, self._log = self._log, None
        after = self._after
        try:
            while log is not None:
                finished = log.status not in UNFINISHED
                if log.events.payloads:
                    after = log.events.end - 1
                    self._position = log.events.end
                    yield log.events.payloads, finished
                elif finished and (missed := await _missed_end(self._store, self._key, log.last)):
                    self._position = log.last + 1
                    yield missed, True
                if finished:
                    return
                # another process runs it: no signal to wait on
                await self._stop.waited(partial(asyncio.sleep, self._poll))
                log = await _read(self._store, self._key, after)
                if log is None:
                    raise _deleted_meanwhile(self._key[1])
        finally:
            self._stop.close()

    def behind(self) -> int:
        return 0  # it reads at its own pace; nothing piles up for it


class FollowedWatch:
    def __init__(
        self,
        store: ResponseStore,
        fanout: EventFanout,
        key: tuple[str, str],
        log: EventLog,
        after: int = -1,
        *,
        quiet: float = QUIET_READ,
        runs: RunRegistry | None = None,
    ) -> None:
        """``runs``: this process's runs, whose shutdown ends the watch while it waits
        for another process's run (:class:`~stateway.core.foreign_waits.ForeignWait`)."""
        self._store = store
        self._fanout = fanout
        self._key = key
        self._log = log
        self._position = after + 1
        """The sequence number of the next event to give."""
        self._quiet = quiet
        self._following: Following | None = None
        self._stop = ForeignWait(runs, _RESUME_ELSEWHERE)

    @property
    def position(self) -> int:
        return self._position

    async def batches(self) -> Batches:
        log = self._log
        ended = log.status not in UNFINISHED
        if log.events.payloads:
            self._position = log.events.end
            yield log.events.payloads, ended
        if ended:
            return
        try:
            async with self._fanout.follow(*self._key) as following:
                self._following = following
                published: Published | None = None  # first: what was committed meanwhile
                while True:
                    if published is None or published.batch.first > self._position:
                        read = await _read(self._store, self._key, self._position - 1)
                        if read is None:
                            raise _deleted_meanwhile(self._key[1])
                        ended = read.status not in UNFINISHED
                        if read.events.payloads:
                            self._position = read.events.end
                            yield read.events.payloads, ended
                        elif ended and (missed := await self._missed_end(read.last)):
                            yield missed, True
                        if ended:
                            return
                    if published is not None:
                        batch = published.batch
                        if batch.first <= self._position < batch.end:
                            fresh = batch.payloads[self._position - batch.first :]
                            self._position = batch.end
                            yield fresh, published.last
                        elif published.last and (missed := await self._missed_end(batch.end - 1)):
                            yield missed, True
                        if published.last and self._position >= batch.end:
                            return
                    wait = partial(following.next, self._quiet)
                    published = await self._stop.waited(wait)
                    while published is not None and not published.batch.payloads:
                        published = await self._stop.waited(wait)  # a mark, for whoever asked
        finally:
            self._stop.close()

    def behind(self) -> int:
        return 0 if self._following is None else self._following.pending()

    async def _missed_end(self, last: int) -> list[bytes]:
        if self._position <= last:
            return []  # not past the end: the store has what this watcher still needs
        missed = await _missed_end(self._store, self._key, last)
        self._position = max(self._position, last + 1)
        return missed


def _deleted_meanwhile(response_id: str) -> NotFound:
    return NotFound(
        f"Response with id '{response_id}' was deleted while it was streamed.",
        param="response_id",
    )


async def _missed_end(store: ResponseStore, key: tuple[str, str], last: int) -> list[bytes]:
    """The terminal event (numbered ``last``) of a response whose process died while it
    ran, or whose end was stored late (:func:`sent_unstored`), for a watcher that ended
    up past it; nothing for any other response."""
    if not await sent_unstored(store, *key):
        return []
    log = await _read(store, key, last - 1)
    if log is None or log.status in UNFINISHED:
        return []
    return log.events.payloads


async def _read(store: ResponseStore, key: tuple[str, str], after: int) -> EventLog | None:
    """The stored log after ``after``; when the store cannot be read, a log with nothing
    new and still unfinished: the watcher reads again at its next poll."""
    try:
        return await store.read_events(*key, after)
    except StorageError as exc:
        log.warning("reading the event log of response %s failed; reading again: %s", key[1], exc)
        return EventLog(
            "in_progress", background=False, last=after, events=EventBatch(after + 1, [])
        )
