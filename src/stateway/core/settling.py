"""Ends that could not be stored, stored later: a failed run's row, retried until it lands.

A run's final save can fail (the database away for a moment). Its clients are told at
once (``response.failed``, "could not be stored"), but its row would stay ``in_progress``
for as long as its process lives: holding its conversation, leaving every watcher of its
event log waiting, since a living owner's lease never expires and no other process judges
it. So the :class:`Settler` writes the run's end, as failed, again and again with growing
pauses until the store takes it (:func:`store_failed`): its turn let go, and a journaled
run's log given the terminal event it lacks (published to followers elsewhere, as lease
judging publishes it). A row another process ended meanwhile (lease judging) is left as it
is. That terminal event is numbered after the last event stored, which may be below the
number this process's own clients saw it under: they were told the end already.

An outage passes; the database refusing the data itself (:class:`StorageRejected`: a
constraint, a value or row it cannot hold) does not, so such an end is not retried as it
is: it is written at once without its output (:func:`without_output`), and given up when
even that is refused (logged, the row left in progress, as when the process stops).

Until it lands, that end is still this process's answer for the response: a retrieve, a
cancel or a watch asks :meth:`Settler.pending` before it takes the in-progress row for a
run going on (here it has ended; elsewhere it would be judged running in another process).
"""

from __future__ import annotations

import asyncio
import copy
import logging
from dataclasses import dataclass
from typing import Final

from stateway.core.coordination import EventFanout
from stateway.core.errors import StorageError, StorageRejected
from stateway.core.events import ResponseFinished
from stateway.core.journal import EventDecoder, EventEncoder
from stateway.core.logged_output import logged_output
from stateway.core.ports import ConversationTurn, EventBatch, ResponseStore
from stateway.core.response import UNFINISHED, ResponseState, final_record

log = logging.getLogger(__name__)

FIRST_PAUSE: Final = 1.0
"""Seconds before the first retry; each failure doubles the pause."""
MAX_PAUSE: Final = 30.0
REFUSED_OUTPUT: Final = (
    "The response could not be stored: the database refused its output, which is left out."
)
"""The stored error's message of an end stored without its output (:func:`without_output`)."""


async def store_failed(
    store: ResponseStore,
    state: ResponseState,
    encode: EventEncoder | None,
    turn: ConversationTurn | None = None,
    decode: EventDecoder | None = None,
) -> EventBatch | None:
    """Write ``state`` (failed) as the end of its row, if the row is still unfinished: its
    ``turn`` let go, and the terminal event (made by ``encode``) appended to its event log
    when it has one (a background response's, or any run's that journaled events); return
    that event's batch. With ``decode`` (a run whose process died: ``state`` has no
    output), its output is first rebuilt from that log (:mod:`.logged_output`). A row
    another process ended, before the save or while it was made, is left as it is (None:
    no terminal event was stored); a deleted one is ended without its log (never
    read again). A save with a terminal event that fails is made once more after reading
    the log again: a process that died may have had its last events committed after the
    log was read (its commit already sent), taking the number the terminal event was
    given."""
    taken = False
    for retry in (False, True):
        current = await store.read_events(state.tenant_id, state.id, -1)
        if current is not None and current.status not in UNFINISHED:
            return None
        if decode is not None and current is not None:
            state.output = logged_output(current.events.payloads, decode)
        final = final_record(state)
        final.turn = turn
        logged = current is not None and (current.background or current.last >= 0)
        if encode is not None and current is not None and logged:
            final.events = terminal_batch(current.last, state, encode)
        try:
            taken = await store.finish(final)
        except StorageError:
            if final.events is None or retry:
                raise
            continue
        break
    return final.events if taken else None  # not taken: another process ended it first


def terminal_batch(last: int, state: ResponseState, encode: EventEncoder) -> EventBatch:
    """``state``'s terminal event, numbered after ``last``, the log's last event stored:
    as :func:`store_failed` stores it, and a watch gives it before it is stored."""
    return EventBatch(last + 1, [encode(last + 1, ResponseFinished(state))])


def without_output(state: ResponseState) -> ResponseState:
    """``state``'s end as stored once the database refused its data (:class:`StorageRejected`:
    sent again, refused again): without its output, the part a run's end adds that can
    be of any size or content, and with an error saying so (its code as its clients were
    told). ``state`` itself is left as they saw it."""
    stripped = copy.copy(state)
    stripped.output = []
    told = state.error or {"code": StorageRejected.code, "status": StorageRejected.status}
    stripped.error = {**told, "message": REFUSED_OUTPUT}
    return stripped


@dataclass(slots=True)
class _Pending:
    state: ResponseState
    """The end to store: the run's, or once its data was refused, that end without output."""
    stripped: bool = False


class Settler:
    """Retries, in tasks of its own, the failed ends whose save failed: for as long as the
    database is away (an outage), but not an end whose data it refuses
    (:class:`StorageRejected`): that end is stored at once without its output
    (:func:`without_output`), and given up when even that is refused (logged; the row left
    in progress, for start-up marking or another process's lease judging once this
    process stops)."""

    def __init__(
        self,
        store: ResponseStore,
        encode: EventEncoder | None = None,
        *,
        fanout: EventFanout | None = None,
        first_pause: float = FIRST_PAUSE,
        max_pause: float = MAX_PAUSE,
    ) -> None:
        self._store = store
        self._encode = encode
        self._fanout = fanout
        self._first = first_pause
        self._max = max_pause
        self._tasks: set[asyncio.Task[None]] = set()
        self._pending: dict[tuple[str, str], _Pending] = {}
        self._closed = False

    def pending(self, tenant_id: str, response_id: str) -> ResponseState | None:
        """The failed end of ``response_id`` given to be stored and not stored yet."""
        entry = self._pending.get((tenant_id, response_id))
        return None if entry is None else entry.state

    def settle(self, state: ResponseState, turn: ConversationTurn | None) -> None:
        """Store ``state``'s failed end (and let ``turn`` go) once the store takes it. Once
        closed, nothing is retried: start-up marking, or another process's lease judging,
        ends the row."""
        if self._closed:
            log.error("response %s is left in progress: the process is stopping", state.id)
            return
        key = (state.tenant_id, state.id)
        entry = self._pending[key] = _Pending(state)
        task = asyncio.get_running_loop().create_task(self._retry(entry, turn))
        task.add_done_callback(lambda _: self._forget(key, entry))
        self._tasks.add(task)
        task.add_done_callback(self._done)

    def _forget(self, key: tuple[str, str], entry: _Pending) -> None:
        if self._pending.get(key) is entry:
            del self._pending[key]

    def _done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("storing a failed end failed unexpectedly", exc_info=task.exception())

    async def _retry(self, entry: _Pending, turn: ConversationTurn | None) -> None:
        pause = self._first
        await asyncio.sleep(pause)
        while True:
            state = entry.state
            try:
                terminal = await store_failed(self._store, state, self._encode, turn)
            except StorageRejected as exc:
                exc.__traceback__ = None
                if entry.stripped:
                    log.error(
                        "the database refused the end of response %s even without its output:"
                        " it is left in progress (%s)",
                        state.id,
                        exc,
                    )
                    return
                log.error(
                    "the database refused the end of response %s (%s): storing it without"
                    " its output",
                    state.id,
                    exc,
                )
                entry.state, entry.stripped = without_output(state), True
                continue
            except StorageError as exc:
                exc.__traceback__ = None  # nothing kept past this attempt
                pause = min(pause * 2, self._max)
                log.warning(
                    "storing the failed end of response %s failed again (retrying in %g s): %s",
                    state.id,
                    pause,
                    exc,
                )
                await asyncio.sleep(pause)
                continue
            log.warning("stored the failed end of response %s at last", state.id)
            if terminal is not None and self._fanout is not None:
                self._fanout.publish(state.tenant_id, state.id, terminal, True)
            return

    async def settled(self) -> None:
        """Return once every end given so far is stored (none given meanwhile)."""
        while self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    async def aclose(self) -> None:
        """Give up the ends not stored yet (the process stops: start-up or another
        process's lease judging marks them)."""
        self._closed = True
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
