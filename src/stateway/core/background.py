"""Background responses: the checks on creating one, cancelling one, watching one.

``Gateway.execute`` hands ``CancelResponse`` and ``WatchResponse`` here. A background run
of this process is reached through the run registry; anything else through the store
(a run of another process, or one that ended). A background response that another
process runs is cancelled through :class:`~stateway.core.coordination.CancelSignals`
when they are shared (Redis): the owner cancels it, and the answer waits until the
stored response says it ended; without shared signals it is a 409 (ADR 0008, ADR 0011).
A retried streamed create (``WatchResponse.replay``) streams its journal whether or not
it is a background response. A response another process runs is watched from the store,
then followed through the shared :class:`~stateway.core.coordination.EventFanout` when
there is one (Redis), else by reading the store every ``POLL_INTERVAL``.

A watch from past the end of a stored log is refused (and one from its terminal event,
when the watcher asks: a WebSocket resume); one from past the stored log of a run another
process runs is judged by how far that process has logged, which it is asked through the
fan-out (:mod:`stateway.core.owner_position`). But for a response whose process died while
it ran (``server_restarted``), or whose end could not be stored (a storage error, stored
later by the settler: its batches may have failed too): watchers of its own process were
sent events not stored (the log is written in batches), numbered from the terminal event
appended later on, so a watch from that event or past it gets that terminal event: how
the response ended (a watch following it from another process too, see
:mod:`stateway.core.watch`; :func:`~stateway.core.ownership.sent_unstored` tells them).
"""

from __future__ import annotations

import asyncio
import time
from contextlib import suppress
from dataclasses import dataclass
from functools import partial
from typing import Final

from stateway.core.cancel_signals import CANCEL_WAIT, RESEND_INTERVAL
from stateway.core.commands import CreateResponse, WatchResponse
from stateway.core.coordination import CancelSignals, EventFanout
from stateway.core.errors import InvalidRequest, ResponseNotFound, StorageError
from stateway.core.foreign_waits import ForeignWait
from stateway.core.journal import EventEncoder
from stateway.core.owner_position import beyond_log, judged
from stateway.core.ownership import sent_unstored
from stateway.core.ports import EventBatch, EventLog, ResponseStore
from stateway.core.principal import Principal
from stateway.core.response import UNFINISHED, ResponseState, load_state
from stateway.core.run_registry import RunRegistry
from stateway.core.runs import CancelReason, Run
from stateway.core.settling import Settler, terminal_batch
from stateway.core.watch import POLL_INTERVAL, FollowedWatch, LiveWatch, StoredWatch, Watch

_CANCEL_SENT: Final = (
    "The server is shutting down; the cancel was sent to the gateway process running it, "
    "which ends the response unless it has ended: read it, or cancel it again, from "
    "another process."
)
"""What a cancel waiting on another process is answered when this process shuts down."""


def check_background(command: CreateResponse, encoder: EventEncoder | None) -> None:
    """Refuse a background request that cannot run as one (before anything starts)."""
    if encoder is None:
        raise InvalidRequest(
            "Background responses are not available on this gateway.",
            param="background",
            code="unsupported_parameter",
        )
    if not command.store:
        raise InvalidRequest(
            "Background responses must be stored: 'background': true requires 'store': true.",
            param="background",
            code="invalid_value",
        )


async def cancel(
    store: ResponseStore,
    runs: RunRegistry,
    principal: Principal,
    response_id: str,
    signals: CancelSignals | None = None,
    settler: Settler | None = None,
) -> ResponseState:
    """Cancel a running background response and return it once it ended (one that already
    finished is returned as it is); one another process runs is reached by ``signals``.
    ``settler`` holds the ends of this process's runs whose save failed, not stored yet."""
    # The run is looked for before its row is read: a run leaves the registry only once
    # its end is stored (or, its save failed, given to ``settler``), so a row read after
    # it was not found here is its end, not the in-progress row of a run ending meanwhile,
    # which read first would be taken for another process's run. An end given to the
    # settler is looked for before the row is read too: its row stays in progress until
    # the retry lands, and an end found is the answer while the row still says so.
    run = _live(runs, principal, response_id)
    unsaved = None if settler is None else settler.pending(principal.tenant_id, response_id)
    record = await store.get(principal.tenant_id, response_id)
    if record is None:
        raise ResponseNotFound(response_id)
    if run is not None:
        if not run.state.background:
            raise _not_cancellable()
        run.cancel(CancelReason.CANCELLED)  # one that is finishing ends as it would have
        await run.wait()
        return run.state
    state = load_state(record.tenant_id, record.body, record.output_items)
    if unsaved is not None and state.status in UNFINISHED:
        state = unsaved
    if not state.background:
        raise _not_cancellable()
    if state.status in UNFINISHED:
        if signals is None or not signals.shared:
            raise _running_elsewhere(response_id, "it can only be cancelled there.")
        await signals.send(principal.tenant_id, response_id)
        return await _ended_elsewhere(store, signals, principal, response_id, runs)
    return state


async def _ended_elsewhere(
    store: ResponseStore,
    signals: CancelSignals,
    principal: Principal,
    response_id: str,
    runs: RunRegistry,
) -> ResponseState:
    """The response once the process running it has ended it (read every POLL_INTERVAL:
    its end is a committed row, and no signal crosses back), the signal sent again every
    RESEND_INTERVAL meanwhile (an owner cancels a cancelled run no further). This process
    shutting down ends the wait (``runs``: :mod:`.foreign_waits`)."""
    waiting = ForeignWait(runs, _CANCEL_SENT)
    try:
        return await _polled_end(store, signals, principal, response_id, waiting)
    finally:
        waiting.close()


async def _polled_end(
    store: ResponseStore,
    signals: CancelSignals,
    principal: Principal,
    response_id: str,
    waiting: ForeignWait,
) -> ResponseState:
    now = time.monotonic()
    deadline, resend = now + CANCEL_WAIT, now + RESEND_INTERVAL
    while True:
        await waiting.waited(partial(asyncio.sleep, POLL_INTERVAL))
        record = await store.get(principal.tenant_id, response_id)
        if record is None:
            raise ResponseNotFound(response_id)  # deleted meanwhile
        if record.status not in UNFINISHED:
            return load_state(record.tenant_id, record.body, record.output_items)
        now = time.monotonic()
        if now > deadline:
            raise _running_elsewhere(
                response_id, f"it did not end within {CANCEL_WAIT:g} seconds of the cancel."
            )
        if now >= resend:
            resend = now + RESEND_INTERVAL
            with suppress(StorageError):  # Redis away for now (logged): the next one may go
                await signals.send(principal.tenant_id, response_id)


async def watch(
    store: ResponseStore,
    runs: RunRegistry,
    principal: Principal,
    command: WatchResponse,
    fanout: EventFanout | None = None,
    ended: EndedHere | None = None,
) -> Watch:
    """A watch of the response's event log after ``starting_after``: live from its run
    here, else from the stored log (followed through ``fanout`` while another process
    runs it). A run here whose end could not be stored yet (``ended``) is watched to
    that end. Refusals are raised here, before anything streams."""
    response_id = command.response_id
    after = -1 if command.starting_after is None else command.starting_after
    run = _live(runs, principal, response_id, unstored=command.replay)
    unsaved = None if ended is None else ended.settler.pending(principal.tenant_id, response_id)
    if run is not None:
        if run.state.store and await store.get(principal.tenant_id, response_id) is None:
            raise ResponseNotFound(response_id)  # deleted while it runs
        if run.journal is None or not (run.state.background or command.replay):
            raise not_streamable(response_id, command.replay)
        if after >= len(run.events):
            raise beyond_log(after, len(run.events) - 1)
        if command.refuse_at_end and run.closed and after == len(run.events) - 1:
            raise _at_end(response_id, after, run.state.status)
        return LiveWatch(run, run.journal, after)
    await runs.log_stored(principal.tenant_id, response_id)  # kept as its run ended
    log = await store.read_events(principal.tenant_id, response_id, after)
    if log is None:
        raise ResponseNotFound(response_id)
    if not (log.background or command.replay) or (log.last < 0 and log.status not in UNFINISHED):
        # a response that ended with no log was never journaled
        raise not_streamable(response_id, command.replay)
    key = (principal.tenant_id, response_id)
    if unsaved is not None and ended is not None and log.status in UNFINISHED:
        return StoredWatch(store, key, _to_end(log, unsaved, ended.encode, after), after)
    if fanout is not None and log.status in UNFINISHED and after > log.last:
        log = await judged(store, fanout, key, log, after)  # past what is stored of it
        if log is None:
            raise ResponseNotFound(response_id)
    if after >= log.last and log.status not in UNFINISHED:
        # At or past its end. A response whose process died while it ran, or whose end
        # could not be stored, may have had events sent that were never stored, numbered
        # from its terminal event's number on: such a watcher gets the terminal event (it
        # saw another event by that number), all it can be told now. Past the end of any
        # other log is refused.
        if await sent_unstored(store, principal.tenant_id, response_id):
            after = log.last - 1
            log = await store.read_events(principal.tenant_id, response_id, after)
            if log is None:
                raise ResponseNotFound(response_id)
        elif after > log.last:
            raise beyond_log(after, log.last)
        elif command.refuse_at_end:
            raise _at_end(response_id, after, log.status)
    if fanout is not None and log.status in UNFINISHED:
        return FollowedWatch(store, fanout, key, log, after, runs=runs)
    return StoredWatch(store, key, log, after, runs=runs)


@dataclass(frozen=True, slots=True)
class EndedHere:
    """What a watch needs of the runs that ended here but whose end is not stored yet."""

    settler: Settler
    encode: EventEncoder


def _to_end(log: EventLog, unsaved: ResponseState, encode: EventEncoder, after: int) -> EventLog:
    """``log`` (read after ``after``) ended by ``unsaved``'s terminal event, numbered as
    the settler will store it: after the last event stored. A watcher past that (it saw
    events live that were never stored) gets the terminal event alone, all it can be
    told, as a watcher of a run that died is."""
    terminal = terminal_batch(log.last, unsaved, encode)
    if after < log.last:  # the events stored after ``after``, then it
        terminal = EventBatch(log.events.first, [*log.events.payloads, *terminal.payloads])
    return EventLog(unsaved.status, log.background, log.last + 1, terminal)


def _live(
    runs: RunRegistry, principal: Principal, response_id: str, *, unstored: bool = False
) -> Run | None:
    """The stored response's run (or ``unstored`` one's), when this process runs it for
    ``principal``."""
    run = runs.of(principal.tenant_id, response_id)
    return run if run is not None and (run.state.store or unstored) else None


def _running_elsewhere(response_id: str, why: str) -> InvalidRequest:
    return InvalidRequest(
        f"Response with id '{response_id}' is running in another gateway process; {why}",
        param="response_id",
        code="response_running_elsewhere",
        status=409,
    )


def _not_cancellable() -> InvalidRequest:
    return InvalidRequest(
        "Only responses created with background=true can be cancelled.",
        param="response_id",
        code="invalid_request",
    )


def not_streamable(response_id: str, replay: bool) -> InvalidRequest:
    """A watch of a response without an event log refused: over HTTP (``GET ?stream=true``)
    only a background response has one; a ``replay`` (a WebSocket ``response.resume``, a
    command id's retry) also finds the log of a command id's stream or of one a closed
    WebSocket was streaming. A resume that followed another process's run whose log was
    never stored (its socket there streamed it to its end) is told so at the run's end
    (:mod:`stateway.surfaces.websocket.lane_requests`)."""
    if replay:
        message = (
            f"Response '{response_id}' has no event log to resume: only a background "
            "response, a stream created with a command id, or one whose WebSocket closed "
            f"while streaming it has one. Read it with GET /v1/responses/{response_id}."
        )
    else:
        message = (
            "Only a response created with background=true can be streamed; read this one "
            f"with GET /v1/responses/{response_id} without 'stream'."
        )
    return InvalidRequest(message, param="stream", code="unsupported_parameter")


def _at_end(response_id: str, after: int, status: str) -> InvalidRequest:
    """A watch from the terminal event of a response that ended, refused
    (``WatchResponse.refuse_at_end``): its watcher has seen how it ended."""
    return InvalidRequest(
        f"Invalid 'starting_after': {after} is the last event of response '{response_id}', "
        f"which has ended ({status}); nothing follows it. Read the response with "
        f"GET /v1/responses/{response_id}.",
        param="starting_after",
        code="invalid_value",
    )
