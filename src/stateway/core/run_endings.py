"""How a run ends: its state as a cancel or a failure leaves it, and its final save.

A run's end is written *before* its terminal event is emitted, whatever the ending:
completed, incomplete (length, content filter, client gone), cancelled (deleted, or
cancelled by its client) or failed (including the server shutting down). A response whose
final save fails reports no ``completed_at`` and tells its client it was not stored (its
in-progress row ended later by the :class:`~stateway.core.settling.Settler`). A
background run's final save also stores the rest of its event log, terminal event
included (:mod:`.journal`). Before both, :attr:`Run.before_end
<stateway.core.runs.Run.before_end>` is awaited (the run's concurrent slot freed).
"""

from __future__ import annotations

import logging
import time
from typing import TypeVar

from stateway.core import events as ev
from stateway.core.errors import GatewayError, ServerRestarted, ServerShuttingDown, StorageError
from stateway.core.hidden import visible
from stateway.core.ownership import end_as_stored
from stateway.core.ports import ResponseRecord, ResponseStore
from stateway.core.response import (
    CLIENT_LEFT,
    INTERRUPTED_REASON,
    ResponseState,
    final_record,
    turn_end,
)
from stateway.core.run_row import Row, announce, durable, written
from stateway.core.runs import CancelReason, Run
from stateway.core.settling import Settler
from stateway.core.tools.mcp import ran_writes
from stateway.core.usage import Usage

log = logging.getLogger(__name__)

E = TypeVar("E", bound=BaseException)

_MAX_CHAIN = 16


async def finish(run: Run, row: Row | None, store: ResponseStore, settler: Settler) -> None:
    """Update the in-progress row to the run's end, then emit the terminal event. A
    run that ends before its first output is announced here, once its row is durable;
    one whose row could not be written is not announced at all."""
    run.finishing = True  # nothing is noted between the events the final save stores
    if run.before_end is not None:  # its slot freed before anyone can learn of the end
        await run.ending()
    state = run.state
    if state.status == "completed":
        state.completed_at = time.time()
    if state.store:
        try:
            if row is None:
                await store.save(final_record(state, run.stored_input))
            else:
                await durable(row)
                announce(run)
                if run.queued is not None:  # its update to in_progress lands first
                    await run.queued.settled()
                record = final_record(state)
                record.turn = turn_end(state, run.input_items)
                if not await store.finish(await _with_log(run, record)):
                    # Ended elsewhere first (this process's lease lapsed, and another
                    # failed the row): nothing of it was stored, its end is the stored one.
                    log.error("response %s was ended by another process first", state.id)
                    stored = await store.get(state.tenant_id, state.id)
                    run.error = end_as_stored(state, stored)
                elif run.journal is not None:
                    run.journal.sealed()
        except StorageError as exc:
            detached(exc)  # the save may keep it (in a future): its frames hold the run
            if run.journal is not None:
                await run.journal.stop()
            log.error("persisting response %s failed: %s", state.id, exc)
            # Not stored: nothing may claim it completed, and every client is told
            # (why too, when the database refuses writes: out of space, read-only).
            unstored = exc.restated("The response could not be stored.")
            state.completed_at = None
            state.status, state.incomplete_reason = "failed", None
            state.error = {
                "code": unstored.code,
                "message": unstored.message,
                "status": unstored.status,
            }
            run.error = answered(run.state, unstored)
            if written(row):  # its in-progress row: ended (and its turn let go) later
                settler.settle(state, turn_end(state, run.input_items))
    run.emit(ev.ResponseFinished(state))
    run.close()


async def _with_log(run: Run, record: ResponseRecord) -> ResponseRecord:
    """A background run's final save also stores the rest of its event log, up to the
    terminal event about to be emitted."""
    if run.journal is not None:
        record.events = await run.journal.close(ev.ResponseFinished(run.state))
    return record


def answered(state: ResponseState, error: GatewayError) -> GatewayError:
    """``error`` as a client is answered it in place of the response (an HTTP error):
    not retryable once the gateway ran an MCP call for the request that may have changed
    something (:func:`~stateway.core.tools.mcp.ran_writes`): the SDKs retry a 5xx by
    themselves, and the same request sent again would make that call again."""
    if ran_writes(state.output):
        error.told_retryable(False)
    return error


def shown(run: Run, round_started: bool) -> bool:
    """Whether the run's client was shown any output (a hidden-rounds client only sees
    :func:`~stateway.core.hidden.visible` items)."""
    if run.hidden_rounds:
        return any(visible(item) for item in run.state.output)
    return round_started or bool(run.state.output)


def end_cancelled(run: Run) -> None:
    """``run``'s end for the reason it was cancelled (:class:`CancelReason`)."""
    state = run.state
    match run.cancel_reason:
        case CancelReason.SHUTTING_DOWN:
            run.error = ServerShuttingDown()
            state.fail(run.error)
        case CancelReason.LEASE_LOST:
            run.error = ServerRestarted()
            state.fail(run.error)
        case CancelReason.DELETED | CancelReason.CANCELLED:
            state.status = "cancelled"
        case CancelReason.INTERRUPTED:
            state.status, state.incomplete_reason = "incomplete", INTERRUPTED_REASON
        case _:
            state.status, state.incomplete_reason = "incomplete", CLIENT_LEFT


def detached(error: E) -> E:
    """``error`` without the tracebacks of it and its causes. An error kept past the frames
    it went through (on the run, for the client) would keep their locals alive in cycles
    only the garbage collector frees: the run itself, upstream responses and streams."""
    current: BaseException | None = error
    for _ in range(_MAX_CHAIN):
        if current is None:
            break
        current.__traceback__ = None
        current = current.__cause__ or current.__context__
    return error


def counted(usage: Usage) -> Usage | None:
    """The usage of a run that ended early (failed, cancelled): what upstreams counted
    (:func:`~.rounds.one_round`); None when they counted nothing (a Chat or Responses
    upstream counts at its answer's end): unknown, as a dead process's response's."""
    return usage if usage != Usage() else None
