"""One WebSocket connection: its receive loop, and each request's run on its lane.

The receive loop reads one frame at a time and answers what is wrong with it at once,
with an error frame (the connection and its lanes go on): a binary or oversize frame, one
that is not JSON or of no known type, a shutdown under way, a cap. A credential that no
longer holds ends the connection instead (the upgrade was authenticated; each request
frame checks the credential again: its expiry, and an API key's revocation through the key
cache, also checked every 5 s while no frame comes, and the connection is ended at the
credential's expiry): its error frame goes out after what was queued, then the close
(1008). A good frame becomes work on its lane (:mod:`.lanes`), but a ``response.steer``,
answered at once by :mod:`.steering` (its input goes to the response it names), and a
``response.interrupt``, which stops the response it names at once, if this connection runs
it (one that has ended, or another's, is left as it is: nothing is answered): the response
ends ``incomplete`` (``interrupted``) with what it had completed, which a later frame
continues as it would a completed response; and a ``response.processed`` (Codex's
acknowledgement of a turn it read): no answer (these two are taken while shutting down).

A ``response.create`` runs as the HTTP route's streamed create does (with its
``command_id`` through ``Gateway.once``), journaled, and the lane streams the journal's
payloads with its ``stream_id`` (a stored response's log is stored for a command id's
retry, or when the connection closes before all of it went out, for a resume:
:mod:`.kept_logs`): the
same JSON as the SSE stream's ``data:`` lines, from ``response.created`` at sequence
number 0. A frame whose ``previous_response_id`` names
a response this connection keeps (a checkpoint) runs on those items, stored or not. A
``response.resume`` streams a run's log from a sequence number (``WatchResponse``). Runs
go on when the connection closes, whoever closed it (ADR 0010). A create's response is
its lane's steering target; steered, it may be followed on its lane by a successor, which
starts as a request frame would: the credential checked again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, MutableMapping
from contextlib import aclosing, suppress
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, cast

import orjson

from stateway.core.errors import (
    CredentialRevoked,
    GatewayError,
    InternalError,
    InvalidRequest,
)
from stateway.core.exactly_once import fingerprint
from stateway.core.principal import Principal
from stateway.core.response import continuable
from stateway.core.runs import CancelReason, Run
from stateway.core.watch import LiveWatch, Watch
from stateway.protocols.responses.frames import (
    ANSWERLESS,
    CreateFrame,
    InterruptFrame,
    ProcessedFrame,
    ResumeFrame,
    SteerFrame,
    decode_frame,
    encode_error_frame,
    peek_frame,
    stream_id_of,
    with_stream_id,
)
from stateway.surfaces.auth.authenticator import current_principal
from stateway.surfaces.auth.revocation import RevocationWatch
from stateway.surfaces.websocket.kept_logs import KeptLogs
from stateway.surfaces.websocket.lanes import Checkpoints, LaneKey, Lanes
from stateway.surfaces.websocket.outbox import Outbox
from stateway.surfaces.websocket.starts import started
from stateway.surfaces.websocket.steering import NOT_INHERITED, Commit, Steering, Successor
from stateway.surfaces.websocket.streaming import Streaming

if TYPE_CHECKING:
    from starlette.types import Receive, Scope, Send

    from stateway.surfaces.websocket.endpoint import WebSocketResponses

log = logging.getLogger(__name__)

INLINE_DECODE_BYTES: Final = 1024 * 1024
"""Frames up to this size are decoded on the event loop, larger ones in a worker thread."""
SLOW_CLIENT: Final = 4429
"""The close code of a client that stopped reading while its runs went on."""
GOING_AWAY: Final = 1001
POLICY_VIOLATION: Final = 1008
"""The close code of a connection whose credential was revoked or expired."""
LOG_WAIT: Final = 10.0
"""Seconds a close frame waits at most for the logs of runs that had ended to be written,
and for the frames queued before a revoked or expired credential's close to be sent."""
_ENVELOPE: Final = frozenset({"stream_id", "command_id"})
"""Fields of a create frame that are not part of what a command id fingerprints."""


@dataclass(slots=True)
class Request:
    """A request frame admitted to a lane, with who sent it."""

    frame: CreateFrame | ResumeFrame
    principal: Principal
    digest: str | None = None
    """A create's fingerprint, when it carries a ``command_id``."""
    settings: dict[str, Any] = field(default_factory=dict)
    """A create's fields that the successors of its response inherit."""


class Session:
    __slots__ = (
        "_closer",
        "_closing",
        "_logs",
        "_running",
        "_scope",
        "_send",
        "_surface",
        "_watches",
        "checkpoints",
        "lanes",
        "outbox",
        "steering",
    )

    def __init__(self, surface: WebSocketResponses, scope: Scope, send: Send) -> None:
        """``scope``: the upgrade's, with the identity its credential proved."""
        self._surface = surface
        self._scope = scope
        self._send = send
        config = surface.config
        self.outbox = Outbox(self._send_text, config.outbox_bytes, self._behind, self._slow)
        self.lanes: Lanes[Request] = Lanes(config, self._serve)
        self.checkpoints = Checkpoints(config.max_checkpoint_bytes)
        self.steering = Steering(config.max_pending_steers, config.max_lanes, self.outbox.put)
        self._running: dict[str, Run] = {}
        """The responses this connection's lanes run now, by id (``response.interrupt``)."""
        self._watches: dict[LaneKey, Streaming] = {}
        """What each lane streams now: how far it trails is what piles up for the client."""
        self._closing = False
        self._closer: asyncio.Task[None] | None = None
        self._logs = KeptLogs(self.outbox)

    async def serve(self, receive: Receive) -> None:
        """The receive loop, until the client is gone; a revoked API key's or an expired
        credential's connection is ended (:class:`RevocationWatch`) even while no frame
        comes. Then the lanes stop, and it returns once the creates they were starting
        have started (:func:`~stateway.surfaces.websocket.starts.started`)."""
        revocation = RevocationWatch.start(self._scope, self._refuse)
        try:
            while True:
                message = await receive()
                if message["type"] == "websocket.disconnect":
                    break
                if message["type"] == "websocket.receive" and not self._closing:
                    await self._receive(message)
        finally:
            if revocation is not None:
                revocation.stop()
            self._closing = True
            self._keep_logs()
            self.lanes.cancel()
            self.outbox.close()
        # The creates being started as the client left are started all the same (ADR
        # 0010); the connection lasts until they are, as an HTTP request lasts through
        # its admission (so the shutdown drain waits for them).
        await self.lanes.idle()

    async def drain(self) -> None:
        """Shutting down: let the requests in flight end, send what they left, close."""
        await self.lanes.idle()
        await self.outbox.flushed()
        self._close(GOING_AWAY, "The server is shutting down.")
        if self._closer is not None:
            await asyncio.wait([self._closer])

    async def _receive(self, message: MutableMapping[str, Any]) -> None:
        text = message.get("text")
        if text is None:
            self._refuse(
                InvalidRequest(
                    "Binary frames are not supported: send each frame as JSON text.",
                    code="unsupported_frame",
                )
            )
            return
        size = len(text) if text.isascii() else len(text.encode())
        limit = self._surface.max_frame_bytes
        if size > limit:
            self._refuse(
                InvalidRequest(
                    f"The frame is {size} bytes, more than the limit of {limit} bytes.",
                    code="frame_too_large",
                    status=413,
                )
            )
            return
        stream_id = None
        try:
            if size <= INLINE_DECODE_BYTES:
                kind, fields = peek_frame(text)
            else:
                kind, fields = await asyncio.to_thread(peek_frame, text)
            stream_id = stream_id_of(fields)
            await self._admit(kind, fields, size)
        except GatewayError as error:
            self._refuse(error, stream_id)
        except Exception:  # a frame's error boundary, as a route's (logged, no details)
            log.exception("websocket: a request frame failed")
            self._refuse(InternalError(), stream_id)

    async def _admit(self, kind: str, fields: dict[str, Any], size: int) -> None:
        principal = await current_principal(self._scope)
        if self._surface.draining and kind not in ANSWERLESS:
            raise GatewayError(
                "The server is shutting down; send this request on a new connection.",
                code="server_shutting_down",
                status=503,
            )
        frame = decode_frame(kind, fields, max_input_items=self._surface.max_input_items)
        if isinstance(frame, SteerFrame):
            self.steering.steer(frame)
            return
        if isinstance(frame, ProcessedFrame):  # Codex's acknowledgement: no answer
            return
        if isinstance(frame, InterruptFrame):
            running = self._running.get(frame.response_id)
            if running is not None:
                running.cancel(CancelReason.INTERRUPTED)
            return
        request = Request(frame, principal)
        if isinstance(frame, CreateFrame):
            request.settings = {k: v for k, v in fields.items() if k not in NOT_INHERITED}
            if frame.command_id is not None:
                fingerprinted = {k: v for k, v in fields.items() if k not in _ENVELOPE}
                body = orjson.dumps(fingerprinted, option=orjson.OPT_SORT_KEYS)
                request.digest = fingerprint(b"websocket", b"response.create", body)
        self.lanes.admit(frame.stream_id, request, size)

    async def _serve(self, lane: LaneKey, request: Request) -> None:
        try:
            frame = request.frame
            if isinstance(frame, ResumeFrame):
                self.steering.begin(lane, None)
                gateway = self._surface.gateway
                await self._stream(lane, await gateway.execute(request.principal, frame.watch))
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
            self.steering.uncommitted(successor.commit)
            raise

    async def _create(
        self, lane: LaneKey, frame: CreateFrame, request: Request, commit: Commit | None = None
    ) -> Successor | None:
        """Run and stream one create; steered, the successor to run next on the lane.
        ``commit``: the steers whose input a successor's command carries."""
        command = frame.command
        commit = self.steering.begin(lane, command) or commit  # a continuation takes its steers
        previous = command.previous_response_id
        continued = None if previous is None else self.checkpoints.find(previous)
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
        except GatewayError:
            if continued is not None:  # a failed continuation is forgotten (on its lane)
                self.checkpoints.evict(continued.response_id, lane)
            if commit is not None:
                self.steering.uncommitted(commit)
            raise
        if run is None:
            await self._stream(lane, watch)
            return None
        target = self.steering.track(lane, run, request.settings, command)
        self._running[run.id] = run
        try:
            await self._stream(lane, watch)
        finally:
            self._running.pop(run.id, None)  # a command id's retry may stream it too
            # Stopped before the end, or the connection closing with the last frames
            # perhaps unsent (4429, the client gone): resumable after the end too.
            if run.journal is not None:
                if not run.closed or self.outbox.closed:
                    run.journal.keep()
                else:  # streamed to its end: its last frames may still wait to go out
                    self._logs.streamed(run.journal)
        if not run.closed or self.outbox.closed:
            return None
        state = run.state
        if continuable(state) and state.conversation_id is None:
            self.checkpoints.keep(lane, run.id, run.context + state.output, stored=state.store)
        elif continued is not None:
            self.checkpoints.evict(continued.response_id, lane)
        return self.steering.finished(target, draining=self._surface.draining)

    async def _stream(self, lane: LaneKey, watch: Watch) -> None:
        outbox = self.outbox
        streaming = self._watches[lane] = Streaming(watch, isinstance(watch, LiveWatch))
        try:
            batches = cast(AsyncGenerator[tuple[list[bytes], bool], None], watch.batches())
            async with aclosing(batches):
                async for payloads, _ in batches:
                    streaming.held = sum(map(len, payloads))
                    for payload in payloads:
                        await outbox.room()
                        if outbox.closed:
                            return
                        outbox.put(with_stream_id(payload, lane))
                        streaming.held -= len(payload)
        finally:
            del self._watches[lane]

    def _refuse(self, error: GatewayError, stream_id: str | None = None) -> None:
        frame = encode_error_frame(error, stream_id)
        if isinstance(error, CredentialRevoked):
            self._end(frame, error.message)
        else:
            self.outbox.put(frame)

    def _end(self, frame: bytes, reason: str) -> None:
        """The connection's credential was revoked or expired: nothing more is read or
        streamed (the lanes stop, their runs go on, their logs kept for a resume with a
        valid credential), the frames already put and then ``frame`` go out, and the
        connection is closed with 1008, as an upgrade with that credential would be
        refused."""
        if self._closer is not None:
            return
        self._closing = True
        self._keep_logs()
        self.lanes.cancel()
        self.outbox.put(frame)
        message = {"type": "websocket.close", "code": POLICY_VIOLATION, "reason": reason}
        self._closer = asyncio.get_running_loop().create_task(self._close_when_sent(message))

    async def _close_when_sent(self, message: dict[str, Any]) -> None:
        with suppress(TimeoutError):  # a client that does not read is closed all the same
            await asyncio.wait_for(self.outbox.flushed(), LOG_WAIT)
        if self.outbox.closed:  # the client went away meanwhile
            return
        self.outbox.close()
        await self._send_close(message)

    async def _send_text(self, frame: bytes) -> None:
        await self._send({"type": "websocket.send", "text": frame.decode()})

    def _behind(self) -> int:
        return sum(streaming.behind() for streaming in self._watches.values())

    def _slow(self) -> None:
        log.warning(
            "closing a WebSocket connection (%d) whose client stopped reading while its "
            "runs went on; it can resume them with response.resume",
            SLOW_CLIENT,
        )
        self._close(SLOW_CLIENT, "The client did not read its events fast enough.")

    def _close(self, code: int, reason: str) -> None:
        if self._closer is not None:
            return
        self._closing = True
        self._keep_logs()
        self.lanes.cancel()
        self.outbox.close()
        message = {"type": "websocket.close", "code": code, "reason": reason}
        self._closer = asyncio.get_running_loop().create_task(self._send_close(message))

    def _keep_logs(self) -> None:
        """The connection is closing: the logs its client may not have had all of are
        stored (:mod:`.kept_logs`), so that they can be resumed after their end too."""
        self._logs.keep(s.watch for s in self._watches.values() if isinstance(s.watch, LiveWatch))

    async def _send_close(self, message: dict[str, Any]) -> None:
        # A client that reconnects on the close resumes from a log that is stored by then.
        with suppress(TimeoutError):  # a write that hangs holds the close no longer
            await asyncio.wait_for(self._logs.stored(), LOG_WAIT)
        with suppress(OSError):  # gone already
            await self._send(message)
