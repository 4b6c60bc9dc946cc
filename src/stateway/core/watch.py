"""Watching a background response: its event log from a position, then live to its end.

A watch yields batches of wire payloads (see :mod:`stateway.core.journal`), each flagged
when it is the last. It reads from one of two places:

- :class:`LiveWatch`, the run in this process: its journal, in memory, from any position,
  following the run as it goes;
- :class:`StoredWatch`, the persisted log (a run that ended, or one another process
  runs): one query per read, then, while the response is unfinished, another read every
  ``poll`` seconds until its status says it finished (its last events are committed with
  that status, so the read that sees it also sees them).

A watcher never holds up the run: the run appends to its log whatever the watchers do.
:meth:`Watch.behind` tells how far a watcher trails the run, so that its surface can drop
one that stopped reading (it resumes with ``starting_after``).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Final, Protocol

from stateway.core.journal import RunJournal
from stateway.core.ports import EventLog, ResponseStore
from stateway.core.response import UNFINISHED
from stateway.core.runs import Run

POLL_INTERVAL: Final = 0.25
"""Seconds between reads of the stored log of a response another process is running."""

Batches = AsyncIterator[tuple[list[bytes], bool]]
"""Wire payloads in log order, each batch flagged True when it is the last."""


class Watch(Protocol):
    def batches(self) -> Batches: ...

    def behind(self) -> int:
        """Bytes of the events logged that this watcher has not been given yet."""
        ...


class LiveWatch:
    def __init__(self, run: Run, journal: RunJournal, after: int = -1) -> None:
        self._run = run
        self._journal = journal
        self._after = after
        self._position = after + 1

    async def batches(self) -> Batches:
        run = self._run
        async for first, events in run.subscribe_batches(self._after):
            end = first + len(events)
            self._position = end
            yield self._journal.encoded(first, end), run.closed and end == len(run.events)

    def behind(self) -> int:
        return self._journal.size(self._position, len(self._run.events))


class StoredWatch:
    def __init__(
        self,
        store: ResponseStore,
        key: tuple[str, str],
        log: EventLog,
        after: int = -1,
        *,
        poll: float = POLL_INTERVAL,
    ) -> None:
        self._store = store
        self._key = key
        self._log: EventLog | None = log
        self._after = after
        self._poll = poll

    async def batches(self) -> Batches:
        log, self._log = self._log, None
        after = self._after
        while log is not None:
            finished = log.status not in UNFINISHED
            if log.events.payloads:
                after = log.events.end - 1
                yield log.events.payloads, finished
            if finished:
                return
            await asyncio.sleep(self._poll)  # another process runs it: no signal to wait on
            log = await self._store.read_events(*self._key, after)

    def behind(self) -> int:
        return 0  # it reads at its own pace; nothing piles up for it
