"""How far the log of a run another process runs is: asked of that process, to judge a
watch from past what is stored of it (ADR 0014).

A watch from past the end of a log is refused. On the process running the response the
end is what it has logged so far (:func:`stateway.core.background.watch`); another process
reads only what is stored, which trails that by up to a journal batch (0.2 s and its
commit). A position past the stored log may then be an event the owner already sent live
(its client resuming here after a stream there), or one it has not logged. So the process
asks (:meth:`~stateway.core.coordination.EventFanout.ask`), following the run's channel
first, and the owner answers with a mark: how many events it had logged when asked
(:func:`answer`). The position is judged by that count as the owner judges it, at an
instant between the watch's arrival and its answer; so is it by the stored log read when
nothing answered for ``ASK_AGAIN`` seconds (a run that ended is then judged as any stored
log is). The question is asked again then: an answer lost (Redis restarting), an owner
that runs no such code, or one that died, is waited for ``ASK_WAIT`` seconds at most; then
the watch is taken, and follows the run (one whose owner died gets its terminal event,
:mod:`stateway.core.watch`).

Every follower of the run receives every mark, so a watch's questions (asked again, too)
carry an id of its own, and only a mark naming it may refuse the watch. Another watch's
mark (or one naming none: an older process's, :mod:`stateway.coordination.event_fanout`)
may have been counted before this watch came, then published after it followed: refusing
by it could refuse a position the owner had logged when this watch came. Such a mark, as
a batch published meanwhile, still says which events the owner had logged by then: one
reaching the position takes the watch.

Only a watch past the stored log of an unfinished run asks anything; the run's own
process never does (it judges by its run), and a process without the fan-out (no Redis)
cannot: there such a watch is taken.
"""

from __future__ import annotations

import secrets
import time
from typing import Final

from stateway.core.coordination import EventFanout
from stateway.core.errors import InvalidRequest
from stateway.core.ports import EventLog, ResponseStore
from stateway.core.response import UNFINISHED
from stateway.core.run_registry import RunRegistry

ASK_AGAIN: Final = 1.0
"""Seconds without an answer before the store is read and the question asked again."""
ASK_WAIT: Final = 3.0
"""Seconds without an answer before a watch past the stored log is taken unjudged."""


def answer(
    runs: RunRegistry, fanout: EventFanout, tenant_id: str, response_id: str, question: str | None
) -> None:
    """The owner's side: answer ``question`` with a mark of how many events the journaled
    run of ``response_id`` has logged, when it runs here (any other process stays silent)."""
    run = runs.of(tenant_id, response_id)
    if run is None or run.journal is None:
        return
    fanout.mark(tenant_id, response_id, len(run.events), question)


async def judged(
    store: ResponseStore, fanout: EventFanout, key: tuple[str, str], log: EventLog, after: int
) -> EventLog | None:
    """The log to watch ``key``'s run from after ``after``, past its stored ``log`` while
    another process runs it: ``log`` or a later read of it (one that ended meanwhile is
    then judged as a finished log); None when it was deleted meanwhile.
    Raises :func:`beyond_log` when its owner had not logged event ``after``."""
    question = secrets.token_hex(8)
    async with fanout.follow(*key) as following:
        fanout.ask(*key, question)
        now = time.monotonic()
        deadline, again = now + ASK_WAIT, now + ASK_AGAIN
        while True:
            published = await following.next(max(0.0, again - time.monotonic()))
            at_last = False  # told that event `after` is the last logged (the terminal one?)
            if published is not None:
                batch = published.batch
                if not batch.payloads:  # a mark: the owner had logged batch.first events
                    if after < batch.first - 1:
                        return log
                    if after == batch.first - 1:
                        at_last = True
                    elif published.question == question:
                        raise beyond_log(after, batch.first - 1)
                    elif time.monotonic() < again:
                        continue  # another watch's answer, maybe counted before this came
                elif after < batch.end - 1 or (after == batch.end - 1 and not published.last):
                    return log
                elif published.last:  # it ended: its end is stored by now
                    at_last = True
                elif time.monotonic() < again:
                    continue  # events before it: the answer is still to come
            # At the last event logged, past the run's last batch, or nothing told for a
            # while: the store tells whether the run ended (a read that fails is a 503,
            # as the watch's first one).
            read = await store.read_events(*key, after)
            if read is None or read.status not in UNFINISHED:
                return read
            if at_last or read.last >= after:
                return read  # the last event logged (not the end), or stored by now
            now = time.monotonic()
            if now >= deadline:
                return log
            fanout.ask(*key, question)
            again = now + ASK_AGAIN


def beyond_log(after: int, last: int) -> InvalidRequest:
    return InvalidRequest(
        f"Invalid 'starting_after': {after} is past the last event of the response "
        f"(sequence number {last}).",
        param="starting_after",
        code="invalid_value",
    )
