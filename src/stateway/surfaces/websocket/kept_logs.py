"""The logs a connection stores as it closes, so that its client can resume its runs.

A create's log is deferred (:class:`~stateway.core.journal.RunJournal`): stored only when
its client may not have had all of it. That is so when the connection closes (4429, the
client gone, a credential revoked) while a lane still streams the run, and also when the
lane streamed it to its end but its last frames still wait in the outbox: a short
response ends within milliseconds of ``response.created``, its frames queued behind it,
and a client gone meanwhile would find no log to resume. A journal is let go as soon as
its last frames went out (the outbox tells when it drains), so an idle connection holds
no finished run's log.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Iterable
from typing import Protocol

from stateway.core.journal import RunJournal
from stateway.surfaces.websocket.outbox import Outbox


class Keepable(Protocol):
    def keep(self) -> asyncio.Future[None] | None: ...


class KeptLogs:
    __slots__ = ("_outbox", "_storing", "_unsent")

    def __init__(self, outbox: Outbox) -> None:
        self._outbox = outbox
        self._unsent: deque[tuple[int, RunJournal]] = deque()
        """The journals of runs streamed to their end, each with the outbox's mark of
        its last frame: kept if the connection closes before that frame went out."""
        self._storing: list[asyncio.Future[None]] = []
        """Logs kept after their run's end, being written (the close frame waits)."""
        outbox.drained = self._let_go  # an idle connection holds no finished run's log

    def _let_go(self) -> None:
        """Drop the journals whose last frames went out."""
        unsent, outbox = self._unsent, self._outbox
        while unsent and outbox.sent(unsent[0][0]):
            unsent.popleft()

    def streamed(self, journal: RunJournal) -> None:
        """A run was streamed to its end: ``journal`` is kept should the connection
        close before the last frame put so far goes out."""
        self._let_go()
        mark = self._outbox.put_count
        if not self._outbox.sent(mark):  # else its frames are out: nothing to keep
            self._unsent.append((mark, journal))

    def keep(self, streaming: Iterable[Keepable]) -> None:
        """The connection is closing: the logs of the runs still ``streaming``, and of
        those whose last frames did not go out, are stored."""
        unsent, self._unsent = self._unsent, deque()
        waiting = [journal for mark, journal in unsent if not self._outbox.sent(mark)]
        for log in [*streaming, *waiting]:
            stored = log.keep()
            if stored is not None:  # after the run's end: the close frame waits for it
                self._storing.append(stored)

    async def stored(self) -> None:
        """Return once the logs kept after their run's end are written: a client
        reconnecting on the close resumes from them."""
        if self._storing:
            await asyncio.wait(self._storing)
