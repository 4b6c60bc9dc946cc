"""The journal of a background run: its event log in wire form, shared and persisted.

A background run's events are encoded once, by the protocol's encoder given to the core
from the outside (the core knows no wire: see ADR 0008), into ``wire``: every watcher of
the run reads its frames from there, and the same bytes are what is stored, so a replay,
from this process or another one, after the run ended or after a restart, is byte for byte
what live watchers were sent.

Events are persisted in batches by one task per run: it waits for events, lets a batch
grow for ``interval`` seconds, writes it (one shared transaction), and repeats. The rest,
with the terminal event, goes with the run's final save (:meth:`RunJournal.close`), in its
transaction, before the terminal event is emitted. A batch that fails to be written is
retried with the next one. A streamed create sent with a command id is journaled too, so
that a retry can replay it (a response that is not stored keeps its journal in memory
only). A ``deferred`` journal (WebSocket mode's creates) stores nothing unless
:meth:`RunJournal.keep` is called before the run's end: then its writer starts from the
first event, as if it had been running all along. Kept once the final save has begun, its
whole log is written after that save; the run's registry (its gateway's) holds that write
until it is done (:meth:`~stateway.core.run_registry.RunRegistry.storing_log`), since the
run may leave meanwhile and a resume of its stored response, which shows no log yet, must
wait for it rather than be refused. Other runs have no journal and pay nothing.

With an :class:`~stateway.core.coordination.EventFanout` (Redis), each batch is also
published once it is committed, and the last one (the terminal event with it) once the
final save is: processes following the run from the outside are sent exactly the stored
log, never an event a crash could leave unstored (ADR 0014).

Encoding may happen after an event was logged (when a watcher or the writer first needs
it), exactly as for live encoding: events are immutable, and the response they carry is
rendered as a snapshot until its terminal event, which is emitted only once the response
is final.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Final

from stateway.core import events as ev
from stateway.core.coordination import EventFanout
from stateway.core.errors import StorageError
from stateway.core.ports import EventBatch, ResponseStore
from stateway.core.run_registry import RunRegistry
from stateway.core.runs import Run

log = logging.getLogger(__name__)

EventEncoder = Callable[[int, ev.Event], bytes]
"""A protocol's wire payload of the event at a sequence number (JSON, for Responses)."""

EventDecoder = Callable[[bytes], ev.Event | None]
"""A logged payload read back as the event it was encoded from, for the events a run's
output is rebuilt from (its items and their deltas: :mod:`stateway.core.logged_output`);
None for any other."""

FLUSH_INTERVAL: Final = 0.2
"""Seconds a batch of events may wait before it is written: a few writes per second per
run, whatever its rate of events."""


class RunJournal:
    __slots__ = (
        "_deferred",
        "_encode",
        "_events",
        "_fanout",
        "_interval",
        "_key",
        "_last",
        "_late",
        "_run",
        "_runs",
        "_sealed",
        "_stored",
        "_task",
        "_terminal",
        "_writing",
        "persisted",
        "wire",
    )

    def __init__(
        self,
        run: Run,
        store: ResponseStore | None,
        encode: EventEncoder,
        *,
        interval: float = FLUSH_INTERVAL,
        fanout: EventFanout | None = None,
        deferred: RunRegistry | None = None,
    ) -> None:
        """``deferred`` (the registry of the run): store nothing until :meth:`keep`
        (``store`` None: never); the registry holds a log kept too late to go with the
        final save while it is stored (:meth:`RunRegistry.storing_log`)."""
        self._events = run.events  # the list itself, not the run: no reference cycle
        self._key = (run.state.tenant_id, run.id)
        self._encode = encode
        self._interval = interval
        self._fanout = fanout if store is not None else None
        self._terminal: bytes | None = None
        self._last: EventBatch | None = None
        """What the final save appends (terminal event included), published once sealed."""
        self.wire: list[bytes] = []
        """Payloads of the events encoded so far, by sequence number."""
        self.persisted = 0
        """How many events (from the first) are stored."""
        self._writing: tuple[asyncio.Future[None], EventBatch] | None = None
        """The batch write under way, and the batch."""
        self._task: asyncio.Task[None] | None = None
        self._sealed = False
        self._deferred: ResponseStore | None = None
        """Deferred: where :meth:`keep` stores the log."""
        self._run: Run | None = None
        """Deferred: the run :meth:`keep` starts the writer over, until it closes. The run
        holds its journal: held past its end, every deferred journal nobody kept (each
        WebSocket create streamed to its end) would keep its run, and the whole context
        with it, in a reference cycle until the collector ran."""
        self._late: ResponseStore | None = None
        """Kept once the final save had begun: the whole log is stored once sealed."""
        self._stored: asyncio.Future[None] | None = None
        """That late write, done once the log is readable (or once it is known that
        nothing will be stored: :meth:`ended`)."""
        self._runs = deferred
        if store is None:  # a response that is not stored keeps its log in memory
            self._fanout = None
        elif deferred is not None:
            self._deferred, self._run = store, run
        else:
            self._task = asyncio.create_task(self._write_batches(run, store))

    def keep(self) -> asyncio.Future[None] | None:
        """Store a deferred journal's log after all: from its first event, the rest with
        the run's final save; once that save has begun, the whole log after it, in one
        batch, whose write is returned (done once the log is readable; a failed write is
        logged, not raised; done at once, nothing written, when that save failed: see
        :meth:`ended`). Idempotent."""
        store, self._deferred = self._deferred, None
        run, self._run = self._run, None
        if store is None:
            return self._stored
        if run is not None:  # not closing yet
            self._task = asyncio.create_task(self._write_batches(run, store))
            return None
        self._late = store
        self._stored = asyncio.get_running_loop().create_future()
        if self._runs is not None:  # its run may leave before the log is readable
            self._runs.storing_log(*self._key, self._stored)
        if self._sealed:  # the terminal event is logged by now
            self._store_late(self.encoded(0, len(self._events)))
        return self._stored

    def _store_late(self, payloads: list[bytes]) -> None:
        store, self._late = self._late, None
        if store is None:
            return
        write = asyncio.ensure_future(store.append_events(*self._key, EventBatch(0, payloads)))
        if self._runs is not None:
            self._runs.writing_log(write)
        write.add_done_callback(self._stored_late)

    def _stored_late(self, write: asyncio.Future[None]) -> None:
        if not write.cancelled() and write.exception() is not None:
            log.warning(
                "storing the event log of response %s failed: %s",
                self._key[1],
                write.exception(),
            )
        if self._stored is not None and not self._stored.done():
            self._stored.set_result(None)

    def encoded(self, start: int, end: int) -> list[bytes]:
        """The payloads of events ``start`` to ``end`` (excluded), all logged already."""
        wire = self.wire
        events = self._events
        encode = self._encode
        for seq in range(len(wire), end):
            wire.append(encode(seq, events[seq]))
        return wire[start:end]

    def size(self, start: int, end: int) -> int:
        """Bytes of the payloads of events ``start`` to ``end`` (excluded)."""
        return sum(map(len, self.encoded(start, end)))

    async def close(self, terminal: ev.ResponseFinished) -> EventBatch | None:
        """Stop writing batches and return what the final save must append: every event
        not stored yet, then ``terminal`` (not emitted yet); None when the log is not
        stored (a deferred journal nobody kept). Call :meth:`sealed` once that save
        succeeded, just before emitting ``terminal``."""
        self._run = None  # a keep from now on stores the log after the final save
        stored = self._task is not None
        await self.stop()
        end = len(self._events)
        self._terminal = self._encode(end, terminal)
        if not stored:
            return None
        unstored = self.encoded(self.persisted, end)
        unstored.append(self._terminal)
        self._last = EventBatch(self.persisted, unstored)
        return self._last

    def sealed(self) -> None:
        """The final save stored the terminal event: watchers get the very same bytes."""
        terminal, self._terminal = self._terminal, None
        if terminal is not None and len(self.wire) == len(self._events):
            self.wire.append(terminal)
        self._sealed = True
        last, self._last = self._last, None
        if last is not None and self._fanout is not None:
            self._fanout.publish(*self._key, last, True)
        if self._late is not None and terminal is not None:  # kept during the final save
            self._store_late([*self.encoded(0, len(self._events)), terminal])

    async def ended(self) -> None:
        """The run is over (its task ends): the batch writer stops, and a log whose final
        save stored no terminal event (it failed: the settler stores the end) is stored
        no more, kept or not: whoever waits for that is let go."""
        await self.stop()
        if self._sealed:
            return
        self._deferred = self._run = self._late = None
        if self._stored is not None and not self._stored.done():
            self._stored.set_result(None)

    async def stop(self) -> None:
        """End the batch writer, waiting for a write under way (it may store events the
        final save must not repeat). Idempotent."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.wait([task])
            if not task.cancelled() and task.exception() is not None:
                log.error(
                    "the event writer of response %s failed",
                    self._key[1],
                    exc_info=task.exception(),
                )
        writing, self._writing = self._writing, None
        if writing is not None:
            await self._settle(*writing)

    async def _write_batches(self, run: Run, store: ResponseStore) -> None:
        async for _ in run.subscribe_batches(self.persisted - 1):
            await asyncio.sleep(self._interval)  # let the batch grow
            end = len(self._events)
            if end <= self.persisted or run.closed:
                continue
            batch = EventBatch(self.persisted, self.encoded(self.persisted, end))
            write = asyncio.ensure_future(store.append_events(*self._key, batch))
            self._writing = (write, batch)
            await asyncio.wait([write])  # not cancelled with this task: stop() awaits it
            self._writing = None
            await self._settle(write, batch)

    async def _settle(self, write: asyncio.Future[None], batch: EventBatch) -> None:
        if not write.done():
            await asyncio.wait([write])
        if write.cancelled():
            return
        error = write.exception()
        if error is None:
            self.persisted = max(self.persisted, batch.end)
            if self._fanout is not None:
                self._fanout.publish(*self._key, batch, False)
        elif isinstance(error, StorageError):  # retried with the next batch or the end
            log.warning("writing events of response %s failed: %s", self._key[1], error)
        else:
            log.error("writing events of response %s failed", self._key[1], exc_info=error)
