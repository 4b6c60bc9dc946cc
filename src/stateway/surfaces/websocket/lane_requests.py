"""The requests a WebSocket connection's lanes run (:mod:`.lanes`): each request frame
admitted to one, with who sent it (:class:`Request`), run and streamed on it.

A ``response.create`` runs as the HTTP route's streamed create does (with its
``command_id`` through ``Gateway.once``), journaled, and the lane streams the journal's
payloads with its ``stream_id`` (a stored response's log is stored for a command id's
retry, or when the connection closes before all of it went out, for a resume:
:mod:`.kept_logs`): the same JSON as the SSE stream's ``data:`` lines, from
``response.created`` at sequence number 0. A frame whose ``previous_response_id`` names
a response this connection keeps (a checkpoint) runs on those items, stored or not. A
``response.resume`` streams a run's log from a sequence number (``WatchResponse``); one
whose watch ends without the terminal event (another process's run, followed through a
log its socket there never stored, as it streamed the run to its end) gets the error frame
of a response with no log to resume, as a socket has no end of stream to tell it that
nothing follows. A
create's response is its lane's steering target; steered, it may be followed on its lane
by a successor, which starts as a request frame would: the credential checked again. A
request's failure is its error frame on the lane (and a revoked or expired credential's
the connection's end); the lane's next requests still run.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator, Callable
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from stateway.core.background import not_streamable
from stateway.core.errors import GatewayError, InternalError, RateLimited
from stateway.core.principal import Principal
from stateway.core.response import continuable
from stateway.core.watch import LiveWatch, Watch
from stateway.protocols.responses.frames import CreateFrame, ResumeFrame, with_stream_id
from stateway.surfaces.auth.authenticator import current_principal
from stateway.surfaces.websocket.kept_logs import KeptLogs
from stateway.surfaces.websocket.lanes import Checkpoints, LaneKey
from stateway.surfaces.websocket.outbox import Outbox
from stateway.surfaces.websocket.starts import started
from stateway.surfaces.websocket.steering import Commit, Steering, Successor
from stateway.surfaces.websocket.streaming import Streaming

if TYPE_CHECKING:
    from starlette.types import Scope

    from stateway.surfaces.websocket.endpoint import WebSocketResponses

log = logging.getLogger(__name__)

Refuse = Callable[[GatewayError, str | None], None]
"""The connection's answer to a request that failed: an error frame on its lane."""


@dataclass(slots=True)
class Request:
    """A request frame admitted to a lane, with who sent it."""

    frame: CreateFrame | ResumeFrame
    principal: Principal
    digest: str | None = None
    """A create's fingerprint, when it carries a ``command_id``."""
    settings: dict[str, Any] = field(default_factory=dict)
    """A create's fields that the successors of its response inherit."""


class LaneRequests:
    """The requests of one connection's lanes: what they run and stream now."""

    __slots__ = (
        "_checkpoints",
        "_logs",
        "_outbox",
        "_refuse",
        "_scope",
        "_steering",
        "_surface",
        "running",
        "watches",
    )

    def __init__(
        self,
        surface: WebSocketResponses,
        scope: Scope,
        outbox: Outbox,
        checkpoints: Checkpoints,
        steering: Steering,
        logs: KeptLogs,
        refuse: Refuse,
    ) -> None:
        """``scope``: the upgrade's, with the identity its credential proved."""
        self._surface = surface
        self._scope = scope
        self._outbox = outbox
        self._checkpoints = checkpoints
        self._steering = steering
        self._logs = logs
        self._refuse = refuse
        self.running: set[str] = set()
        """The ids of the responses the lanes run now: what a ``response.interrupt`` may
        stop."""
        self.watches: dict[LaneKey, Streaming] = {}
        """What each lane streams now: how far it trails is what piles up for the client."""

    async def serve(self, lane: LaneKey, request: Request) -> None:
        """Run ``request`` on ``lane`` (the lanes' work): a resume streamed, a create and
        its successors run and streamed; a failure is the lane's error frame."""
        try:
            frame = request.frame
            if isinstance(frame, ResumeFrame):
                await self._steering.begin(lane, None)
                gateway = self._surface.gateway
                watch = frame.watch
                if not await self._stream(lane, await gateway.execute(request.principal, watch)):
                    raise not_streamable(watch.response_id, replay=True)  # it ended unseen
                return
            successor = await self._create(lane, frame, request)
            while successor is not None:  # steered: the next response, on this lane
                principal = await self._successor_principal(successor)
                request = Request(successor.frame, principal)
                request.settings = successor.settings
                successor = await self._create(lane, successor.frame, request, successor.commit)
        except GatewayError as error:
            self._refuse(error, lane)
        except Exception:  # the lane's boundary: its next requests still run
            log.exception("websocket: a request failed")
            self._refuse(InternalError(), lane)

    async def _successor_principal(self, successor: Successor) -> Principal:
        """Who a successor acts for: checked again, as for a request frame (an expired
        or revoked credential fails its steers, then the lane's 401 error frame ends the
        connection)."""
        try:
            return await current_principal(self._scope)
        except GatewayError:
            await self._steering.uncommitted(successor.commit)
            raise

    async def _create(
        self, lane: LaneKey, frame: CreateFrame, request: Request, commit: Commit | None = None
    ) -> Successor | None:
        """Run and stream one create; steered, the successor to run next on the lane.
        ``commit``: the steers whose input a successor's command carries."""
        command = frame.command
        # A continuation takes its steers.
        commit = await self._steering.begin(lane, command) or commit
        previous = command.previous_response_id
        continued = None if previous is None else self._checkpoints.find(previous)
        if continued is not None:
            command.prior = continued.items
            command.prior_stored = continued.stored  # else a stored run stores them
        # Journaled: streamed from its log, resumable; a command id's is stored for a
        # retry, any other's only if this lane stops streaming before its end (below).
        command.journaled = True
        command.replayable = frame.command_id is not None
        try:
            run, watch = await started(
                self._surface.gateway, request.principal, frame, request.digest
            )
        except GatewayError as error:
            # A failed continuation is forgotten (on its lane); one the rate limits refused
            # ran nothing, as one the connection's caps refuse: the retry its Retry-After
            # asks for goes on from the same response.
            if continued is not None and not isinstance(error, RateLimited):
                self._checkpoints.evict(continued.response_id, lane)
            if commit is not None:
                await self._steering.uncommitted(commit)
            raise
        if run is None:
            await self._stream(lane, watch)
            return None
        target = await self._steering.track(lane, run, request.settings, command, request.principal)
        self.running.add(run.id)
        try:
            await self._stream(lane, watch)
        finally:
            self.running.discard(run.id)  # a command id's retry may stream it too
            # Stopped before the end, or the connection closing with the last frames
            # perhaps unsent (4429, the client gone): resumable after the end too.
            if run.journal is not None:
                if not run.closed or self._outbox.closed:
                    run.journal.keep()
                else:  # streamed to its end: its last frames may still wait to go out
                    self._logs.streamed(run.journal)
        if not run.closed or self._outbox.closed:
            return None
        state = run.state
        if continuable(state) and state.conversation_id is None:
            self._checkpoints.keep(lane, run.id, run.context + state.output, stored=state.store)
        elif continued is not None:
            self._checkpoints.evict(continued.response_id, lane)
        return await self._steering.finished(target, draining=self._surface.draining)

    async def _stream(self, lane: LaneKey, watch: Watch) -> bool:
        """Stream ``watch`` on ``lane``; whether it ended as it should: with its terminal
        event put, or the connection closed meanwhile."""
        outbox = self._outbox
        streaming = self.watches[lane] = Streaming(watch, isinstance(watch, LiveWatch))
        ended = False
        try:
            batches = cast(AsyncGenerator[tuple[list[bytes], bool], None], watch.batches())
            async with aclosing(batches):
                async for payloads, last in batches:
                    streaming.held = sum(map(len, payloads))
                    for payload in payloads:
                        await outbox.room()
                        if outbox.closed:
                            return True
                        outbox.put(with_stream_id(payload, lane))
                        streaming.held -= len(payload)
                    ended = ended or (last and bool(payloads))
        finally:
            del self.watches[lane]
        return ended or outbox.closed
