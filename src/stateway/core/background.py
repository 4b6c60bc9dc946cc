"""Background responses: the checks on creating one, cancelling one, watching one.

``Gateway.execute`` hands ``CancelResponse`` and ``WatchResponse`` here. A background run
of this process is reached through the run registry; anything else through the store
(a run of another process, or one that ended). Cancel reaches runs of this process only:
a background response another process runs is a 409 until cancel signals cross
processes (ADR 0008).
"""

from __future__ import annotations

from stateway.core.commands import CreateResponse, Principal, WatchResponse
from stateway.core.errors import InvalidRequest, NotFound
from stateway.core.journal import EventEncoder
from stateway.core.ports import ResponseStore
from stateway.core.response import UNFINISHED, ResponseState, load_state
from stateway.core.runs import CancelReason, Run, RunRegistry
from stateway.core.watch import LiveWatch, StoredWatch, Watch


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
    store: ResponseStore, runs: RunRegistry, principal: Principal, response_id: str
) -> ResponseState:
    """Cancel a running background response and return it once it ended (one that already
    finished is returned as it is)."""
    record = await store.get(principal.tenant_id, response_id)
    if record is None:
        raise _not_found(response_id)
    run = _live(runs, principal, response_id)
    if run is not None:
        if not run.state.background:
            raise _not_cancellable()
        run.cancel(CancelReason.CANCELLED)  # one that is finishing ends as it would have
        await run.wait()
        return run.state
    state = load_state(record.tenant_id, record.body, record.output_items)
    if not state.background:
        raise _not_cancellable()
    if state.status in UNFINISHED:
        raise InvalidRequest(
            f"Response with id '{response_id}' is running in another gateway process; "
            "it can only be cancelled there.",
            param="response_id",
            code="response_running_elsewhere",
            status=409,
        )
    return state


async def watch(
    store: ResponseStore, runs: RunRegistry, principal: Principal, command: WatchResponse
) -> Watch:
    """A watch of the response's event log after ``starting_after``: live from its run
    here, else from the stored log. Refusals are raised here, before anything streams."""
    response_id = command.response_id
    after = -1 if command.starting_after is None else command.starting_after
    run = _live(runs, principal, response_id)
    if run is not None:
        if await store.get(principal.tenant_id, response_id) is None:
            raise _not_found(response_id)  # deleted while it runs
        if run.journal is None:
            raise _not_streamable()
        if after >= len(run.events):
            raise _beyond_log(after, len(run.events) - 1)
        return LiveWatch(run, run.journal, after)
    log = await store.read_events(principal.tenant_id, response_id, after)
    if log is None:
        raise _not_found(response_id)
    if not log.background:
        raise _not_streamable()
    if after > log.last and log.status not in UNFINISHED:
        raise _beyond_log(after, log.last)
    return StoredWatch(store, (principal.tenant_id, response_id), log, after)


def _live(runs: RunRegistry, principal: Principal, response_id: str) -> Run | None:
    """The stored response's run, when this process runs it for ``principal``."""
    run = runs.get(response_id)
    if run is None or not run.state.store or run.state.tenant_id != principal.tenant_id:
        return None
    return run


def _not_found(response_id: str) -> NotFound:
    return NotFound(f"Response with id '{response_id}' not found.", param="response_id")


def _not_cancellable() -> InvalidRequest:
    return InvalidRequest(
        "Only responses created with background=true can be cancelled.",
        param="response_id",
        code="invalid_request",
    )


def _not_streamable() -> InvalidRequest:
    return InvalidRequest(
        "Streaming a stored response is only possible for background responses.",
        param="stream",
        code="unsupported_parameter",
    )


def _beyond_log(after: int, last: int) -> InvalidRequest:
    return InvalidRequest(
        f"Invalid 'starting_after': {after} is past the last event of the response "
        f"(sequence number {last}).",
        param="starting_after",
        code="invalid_value",
    )
