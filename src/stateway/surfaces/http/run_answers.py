"""What the routes that start a run share when answering it over HTTP."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from functools import partial

from starlette.requests import ClientDisconnect
from starlette.types import Receive

from stateway.core.commands import CreateResponse
from stateway.core.errors import GatewayError, UpstreamError
from stateway.core.events import Event
from stateway.core.gateway import Gateway
from stateway.core.principal import Principal
from stateway.core.response import ResponseState
from stateway.core.run_endings import answered
from stateway.core.runs import CancelReason, Run
from stateway.surfaces.http.transport import DisconnectWatch


async def wait_for_output(run: Run, shows: Callable[[Event], bool] | None = None) -> None:
    """Wait until the run has output beyond ``response.created``/``in_progress`` (that
    ``shows`` its client, when given), or has ended; a run that failed before any output
    is answered with its HTTP error."""
    async for _, batch in run.subscribe_batches(1):  # any event after in_progress (number 1)
        if shows is None or any(shows(event) for event in batch):
            break
    if run.error is not None:
        raise run.error


def ended_state(run: Run) -> ResponseState:
    """An ended run's response, for a protocol answering it whole that has no way to show
    partial output (Chat Completions, Messages): raises the run's error, or the failure
    after its output (:func:`failure_after_output`)."""
    if run.error is not None:
        raise run.error
    if run.state.status == "failed":
        raise failure_after_output(run.state)
    return run.state


def failure_after_output(state: ResponseState) -> GatewayError:
    """The error of a response that failed after some output, for a protocol that has no
    way to show partial output (Chat Completions, Messages): not retryable once the
    gateway ran a call for it (:func:`~stateway.core.run_endings.answered`)."""
    error = state.error or {}
    failure = UpstreamError(
        str(error.get("message") or "The response failed."),
        status=int(error.get("status") or 502),
        code=error.get("code"),
    )
    return answered(state, failure)


async def started(
    gateway: Gateway, principal: Principal, command: CreateResponse, receive: Receive
) -> Run:
    """``command``'s run; one not streamed is driven to its end by this request's task
    (:class:`AttachedWatch`), and a client that left meanwhile is
    :class:`ClientDisconnect` (nobody to answer)."""
    watch = None if command.stream else AttachedWatch(receive)
    command.attach = watch
    try:
        run = await gateway.execute(principal, command)
    finally:
        left = watch is not None and watch.stop()
    if left:
        raise ClientDisconnect
    return run


class AttachedWatch:
    """Given as :attr:`CreateResponse.attach <stateway.core.commands.CreateResponse.attach>`
    for a non-streamed answer: the request's own task drives the run, and from the run's
    start a :class:`DisconnectWatch` turns its client leaving into
    ``run.cancel(CLIENT_GONE)``, which interrupts generating but never the final save.
    :meth:`stop` (always, once ``execute`` is over) tells whether the client left."""

    __slots__ = ("_receive", "_watch")

    def __init__(self, receive: Receive) -> None:
        self._receive = receive
        self._watch: DisconnectWatch | None = None

    def __call__(self, run: Run) -> None:
        leave = partial(run.cancel, CancelReason.CLIENT_GONE)
        self._watch = DisconnectWatch(self._receive, leave=leave)

    def stop(self) -> bool:
        """Stop watching; whether the client left (then nobody is left to answer)."""
        watch, self._watch = self._watch, None
        return watch is not None and watch.stop()


def handed_over(watch: DisconnectWatch) -> Callable[[Run], None]:
    """An ``attach`` for a request ``watch`` already watches (cancelling its task, until
    then): from the run's start, its client leaving cancels the run instead."""

    def attach(run: Run) -> None:
        watch.calling(partial(run.cancel, CancelReason.CLIENT_GONE))

    return attach


async def wait_watched(run: Run, receive: Receive, on_disconnect: Callable[[], None]) -> None:
    """Wait for ``run`` to end, or for its client to leave (``on_disconnect`` is called and
    :class:`ClientDisconnect` raised): watched by a :class:`DisconnectWatch`, whose timer
    spares a watcher task for answers done within its first interval."""
    if run.closed:  # an attached run: over by now
        return
    watch = DisconnectWatch(receive)
    try:
        await run.wait()
    except asyncio.CancelledError:
        if not watch.left():
            raise
        on_disconnect()
        raise ClientDisconnect from None
    finally:
        watch.stop()
