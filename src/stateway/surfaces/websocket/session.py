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
``response.interrupt``, which stops the response it names at once (an
``InterruptResponse``), if this connection runs it (one that has ended, or another's, is
left as it is: nothing is answered): the response
ends ``incomplete`` (``interrupted``) with what it had completed, which a later frame
continues as it would a completed response; and a ``response.processed`` (Codex's
acknowledgement of a turn it read): no answer (these two are taken while shutting down).

A ``response.create`` or a ``response.resume`` is run and streamed on its lane as
:mod:`.lane_requests` runs it (a create journaled, its log kept for a retry or a resume,
a checkpoint continued, a steered response's successor run next on the lane). Runs go on
when the connection closes, whoever closed it (ADR 0010).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import MutableMapping
from contextlib import suppress
from typing import TYPE_CHECKING, Any, Final

import orjson

from stateway.core.commands import InterruptResponse
from stateway.core.errors import (
    CredentialRevoked,
    GatewayError,
    InternalError,
    InvalidRequest,
    ServerShuttingDown,
)
from stateway.core.exactly_once import fingerprint
from stateway.core.watch import LiveWatch
from stateway.protocols.responses.frames import (
    ANSWERLESS,
    CreateFrame,
    InterruptFrame,
    ProcessedFrame,
    SteerFrame,
    decode_frame,
    encode_error_frame,
    peek_frame,
    stream_id_of,
)
from stateway.surfaces.auth.authenticator import current_principal
from stateway.surfaces.auth.revocation import RevocationWatch
from stateway.surfaces.websocket.kept_logs import KeptLogs
from stateway.surfaces.websocket.lane_requests import LaneRequests, Request
from stateway.surfaces.websocket.lanes import Checkpoints, Lanes
from stateway.surfaces.websocket.outbox import Outbox
from stateway.surfaces.websocket.steering import NOT_INHERITED, Steering

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


class Session:
    __slots__ = (
        "_closer",
        "_closing",
        "_logs",
        "_requests",
        "_scope",
        "_send",
        "_surface",
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
        self.checkpoints = Checkpoints(config.max_checkpoint_bytes)
        lanes = config.max_lanes + 1  # the named lanes and the default one
        self.steering = Steering(surface.gateway, config.max_pending_steers, lanes, self.outbox.put)
        self._closing = False
        self._closer: asyncio.Task[None] | None = None
        self._logs = KeptLogs(self.outbox)
        self._requests = LaneRequests(
            surface, scope, self.outbox, self.checkpoints, self.steering, self._logs, self._refuse
        )
        self.lanes: Lanes[Request] = Lanes(config, self._requests.serve)

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
            raise ServerShuttingDown(
                "The server is shutting down; send this request on a new connection."
            )
        try:
            frame = decode_frame(kind, fields, max_input_items=self._surface.max_input_items)
        except GatewayError:
            if kind == "response.create":
                self._forget_continued(fields)
            raise
        if isinstance(frame, SteerFrame):
            await self.steering.steer(frame)
            return
        if isinstance(frame, ProcessedFrame):  # Codex's acknowledgement: no answer
            return
        if isinstance(frame, InterruptFrame):  # a response this connection runs
            if frame.response_id in self._requests.running:
                interrupt = InterruptResponse(frame.response_id)
                await self._surface.gateway.execute(principal, interrupt)
            return
        request = Request(frame, principal)
        if isinstance(frame, CreateFrame):
            request.settings = {k: v for k, v in fields.items() if k not in NOT_INHERITED}
            if frame.command_id is not None:
                fingerprinted = {k: v for k, v in fields.items() if k not in _ENVELOPE}
                body = orjson.dumps(fingerprinted, option=orjson.OPT_SORT_KEYS)
                request.digest = fingerprint(b"websocket", b"response.create", body)
        self.lanes.admit(frame.stream_id, request, size)

    def _forget_continued(self, fields: dict[str, Any]) -> None:
        """A create refused for its body is a continuation that failed, as one whose run
        failed is: the response it names is forgotten if it is the lane's own (hosted
        evicts the parent of a same-lane continuation answered with any 4xx or 5xx; a
        fork from another lane leaves it to its lane)."""
        previous = fields.get("previous_response_id")
        lane = stream_id_of(fields)
        if isinstance(previous, str) and (lane is not None or fields.get("stream_id") is None):
            self.checkpoints.evict(previous, lane)

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
        return sum(streaming.behind() for streaming in self._requests.watches.values())

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
        watches = self._requests.watches.values()
        self._logs.keep(s.watch for s in watches if isinstance(s.watch, LiveWatch))

    async def _send_close(self, message: dict[str, Any]) -> None:
        # A client that reconnects on the close resumes from a log that is stored by then.
        with suppress(TimeoutError):  # a write that hangs holds the close no longer
            await asyncio.wait_for(self._logs.stored(), LOG_WAIT)
        with suppress(OSError):  # gone already
            await self._send(message)
