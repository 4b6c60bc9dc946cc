"""Starting a socket's ``response.create``: once, and past the socket closing.

A closed socket cancels nothing (ADR 0010), not even a create its lane took up and is
still admitting (its frame and the close in one read, or a close while a
``previous_response_id`` is read): :func:`started` runs the start in a task of its own,
shielded. When the lane is stopped meanwhile it waits for the start to end (so does the
connection), and the run it started goes on unwatched with its log kept for a resume
from another connection. A create with a ``command_id`` starts once per credential
(``Gateway.once``): a retry gets the first one's log replayed.
"""

from __future__ import annotations

import asyncio
import logging

from stateway.core.commands import WatchResponse
from stateway.core.errors import GatewayError, IdempotencyKeyReused
from stateway.core.gateway import Gateway
from stateway.core.principal import Principal
from stateway.core.runs import Run
from stateway.core.watch import Watch
from stateway.protocols.responses.frames import CreateFrame
from stateway.surfaces.websocket.streaming import live_watch

log = logging.getLogger(__name__)

Started = tuple[Run | None, Watch]
"""The run and its watch; for a retried command id, None and its log replayed."""


async def started(
    gateway: Gateway, principal: Principal, frame: CreateFrame, digest: str | None
) -> Started:
    """``frame``'s run and watch, started whether or not its connection closes meanwhile
    (``digest``: the frame's fingerprint, when it carries a ``command_id``)."""
    starting = asyncio.ensure_future(_start(gateway, principal, frame, digest))
    try:
        return await asyncio.shield(starting)
    except asyncio.CancelledError:
        if starting.done():  # the start itself was cancelled (the loop closing)
            raise
        starting.add_done_callback(_left_running)
        await asyncio.wait([starting])
        raise


async def _start(
    gateway: Gateway, principal: Principal, frame: CreateFrame, digest: str | None
) -> Started:
    if frame.command_id is None or digest is None:
        run = await gateway.execute(principal, frame.command)
        return run, live_watch(run)
    async with gateway.once(principal, frame.command_id, digest, param="command_id") as once:
        if once.outcome is None:
            run = await gateway.execute(principal, frame.command)
            await run.announced()  # a retry elsewhere must find it stored
            once.remember(response_id=run.id)
            return run, live_watch(run)
        outcome = once.outcome
    if outcome.response_id is None:  # the id answered something else (an HTTP request)
        raise IdempotencyKeyReused("command_id")
    replay = WatchResponse(outcome.response_id, replay=True)
    return None, await gateway.execute(principal, replay)


def _left_running(starting: asyncio.Future[Started]) -> None:
    """A create started after its connection closed: its run goes on unwatched, its log
    kept for a resume from another connection; a start that failed has no one to tell."""
    if starting.cancelled():
        return
    error = starting.exception()
    if error is None:
        run, _ = starting.result()
        if run is not None and run.journal is not None:
            run.journal.keep()
    elif not isinstance(error, GatewayError):
        log.error("websocket: a request failed after its connection closed", exc_info=error)
