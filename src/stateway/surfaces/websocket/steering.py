"""A connection's steering (``response.steer``): the responses it may steer, the input
queued for each, and where that input goes.

A lane's *target* is the last response created on it, from its start until the lane's
next request; only targets can be steered (another id fails ``response_not_found``). A
steer is checked, given an id, queued on its target and acknowledged
(``response.steer.accepted``). When the target has streamed to its end:

- completed, waiting for nothing from its client: its queued input becomes an automatic
  successor, a ``response.create`` with the target's own settings, continuing it
  (``previous_response_id``) with that input in submission order, on the same lane (the
  session starts it as a request frame: with the credential checked again, refused
  past its expiry);
- completed with client-owned calls or approvals open: each queued steer is told
  ``response.steer.pending`` with the stubs of that input, and stays queued until the
  lane's next ``response.create`` continuing the target, whose input it is prepended to;
- ended otherwise, or let go unused (the lane's next request continues something else):
  each queued steer fails (``response.steer.failed``, returning its input).

Every notice about a target takes the next sequence number of the target's stream: while
it runs the core logs it with it (a :class:`~stateway.core.commands.SteerResponse`, which
also stops the run at its next safe boundary when a steer was accepted: streamed in order,
replayed by ``response.resume``, stored with the log when it is); once it is finishing,
notices wait for its stream's end and are numbered on from its terminal event, on its
lane, like those that follow it (these are the connection's only). A failure without a
target is numbered 0. A ``SteerResponse`` is the core's at once (it waits for nothing),
so a connection's steering is never interleaved with itself.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

from stateway.core import events as ev
from stateway.core.commands import CreateResponse, SteerResponse
from stateway.core.errors import GatewayError, InvalidRequest
from stateway.core.gateway import Gateway
from stateway.core.ids import new_id
from stateway.core.items import Item
from stateway.core.principal import Principal
from stateway.core.response import ended_steered
from stateway.core.runs import Run
from stateway.protocols.responses.frames import (
    CreateFrame,
    SteerFrame,
    decode_frame,
    with_stream_id,
)
from stateway.protocols.responses.steering import (
    decode_steer_input,
    required_inputs,
    steer_accepted,
    steer_failed,
    steer_pending,
)
from stateway.protocols.responses.stream import encode_event_json
from stateway.surfaces.websocket.lanes import LaneKey, limit_exceeded

NOT_INHERITED: Final = frozenset(
    {"type", "input", "previous_response_id", "command_id", "generate", "stream_id"}
)
"""Fields of a ``response.create`` frame that its automatic successors do not inherit."""


@dataclass(slots=True)
class Steer:
    id: str
    input: Any
    """As sent: what a failure returns."""
    items: list[Item]
    told_pending: bool = False


@dataclass(slots=True)
class Target:
    response_id: str
    lane: LaneKey
    settings: dict[str, Any]
    """The fields of its ``response.create`` that a successor inherits (until its end)."""
    run: Run | None
    """Until its stream ended (then let go: a connection keeps no finished run). Read
    only: the core is told of its steers (:class:`SteerResponse`)."""
    principal: Principal
    """Who created it: whom its steers are told to the core for."""
    unsupported: bool
    """Bound to a conversation, or compacting automatically: not steerable."""
    queued: list[Steer] = field(default_factory=list)
    deferred: list[ev.Notice] = field(default_factory=list)
    """Notices waiting for its stream's end."""
    status: str = "in_progress"
    waiting: list[dict[str, Any]] | None = None
    """The stubs of the input it waits for (completed with client-owned calls open)."""
    tail: int = -1
    """The next sequence number after its stream's end (-1: not ended)."""
    refused: int = 0
    """Steers it failed before accepting them: each returns its input in its stream."""


@dataclass(slots=True)
class Commit:
    """Queued steers handed to a create (a successor, or a continuation of the target)."""

    target: Target
    steers: list[Steer]

    @property
    def items(self) -> list[Item]:
        return [item for steer in self.steers for item in steer.items]


@dataclass(slots=True)
class Successor:
    frame: CreateFrame
    settings: dict[str, Any]
    commit: Commit


class Steering:
    def __init__(
        self, gateway: Gateway, max_pending: int, max_targets: int, put: Callable[[bytes], None]
    ):
        """``put`` sends one frame (through the connection's outbox)."""
        self._gateway = gateway
        self._max_pending = max_pending
        self._max_targets = max_targets
        self._put = put
        self._by_lane: OrderedDict[LaneKey, Target] = OrderedDict()
        self._by_id: dict[str, Target] = {}

    async def steer(self, frame: SteerFrame) -> None:
        """Answer a ``response.steer`` frame: accepted and queued, or failed. A response
        that refused ``max_pending`` steers already refuses more with the 429 error
        frame of a cap (each failure returns its input in the response's stream)."""
        response_id = frame.previous_response_id
        target = self._by_id.get(response_id)
        if target is None:
            message = f"No response {response_id!r} to steer on this connection."
            notice = steer_failed("response_not_found", message, response_id, frame.input)
            self._put(encode_event_json(0, notice))
            return
        if target.refused >= self._max_pending:  # its stream is not a sink for failures
            raise limit_exceeded(f"{self._max_pending} refused steers of one response")
        items: list[Item] = []
        try:
            items = decode_steer_input(frame.input)
        except InvalidRequest as error:
            refusal: tuple[str, str] | None = ("invalid_input", error.message)
        else:
            refusal = self._refusal(target)
        if refusal is not None:
            target.refused += 1
            await self._tell(target, steer_failed(*refusal, response_id, frame.input))
            return
        steer = Steer(new_id("steer"), frame.input, items)
        target.queued.append(steer)
        # A running target stops at its next safe boundary.
        await self._tell(target, steer_accepted(steer.id, response_id), stop=True)
        if target.waiting is not None:
            await self._pend(target, steer)

    def _refusal(self, target: Target) -> tuple[str, str] | None:
        if target.unsupported:
            return (
                "steering_not_supported",
                "A response bound to a conversation or compacting automatically cannot be steered.",
            )
        run = target.run
        status = run.state.status if run is not None and run.closed else target.status
        if status not in ("in_progress", "completed"):
            return "response_not_active", f"The response ended {status}; it takes no input."
        if target.tail >= 0 and target.waiting is None:
            return "response_already_completed", "The response completed; it takes no input."
        if len(target.queued) >= self._max_pending:
            return (
                "too_many_pending_steers",
                f"The response has {self._max_pending} steers queued already.",
            )
        return None

    async def track(
        self,
        lane: LaneKey,
        run: Run,
        settings: dict[str, Any],
        command: CreateResponse,
        principal: Principal,
    ) -> Target:
        """``run`` (created on ``lane`` for ``principal``) is the lane's target from now
        on."""
        unsupported = bool(command.conversation_id or command.settings.context_management)
        target = Target(run.id, lane, settings, run, principal, unsupported)
        self._by_lane[lane] = target
        self._by_id[run.id] = target
        while len(self._by_lane) > self._max_targets:
            ended = (kept for kept in self._by_lane.values() if kept.tail >= 0)
            oldest = next(ended, None)
            if oldest is None:
                break
            await self._let_go(oldest)
        return target

    async def begin(self, lane: LaneKey, command: CreateResponse | None) -> Commit | None:
        """A request starts on ``lane``: its target is let go, its queued steers failed,
        unless ``command`` continues it while it waits for input: then their input is
        prepended to the command's, and returned to be failed if the create fails."""
        target = self._by_lane.get(lane)
        if target is None:
            return None
        if (
            command is not None
            and command.previous_response_id == target.response_id
            and target.waiting is not None
            and target.queued
        ):
            commit = Commit(target, target.queued)
            target.queued = []
            command.input = commit.items + command.input
            await self._let_go(target)
            return commit
        await self._let_go(target)
        return None

    async def uncommitted(self, commit: Commit) -> None:
        """The create that took ``commit`` failed before it started: its steers fail."""
        message = "The response that would take this input could not be created."
        await self._fail(commit.target, commit.steers, "successor_creation_failed", message)

    async def finished(self, target: Target, *, draining: bool) -> Successor | None:
        """``target``'s stream ended (with its terminal event): what its queued input
        becomes. A successor to run on its lane, or None."""
        run = target.run
        assert run is not None
        assert run.closed
        state = run.state
        target.run = None
        # Read here only: an ended target keeps none of its create's fields (a client
        # giving each request a lane of its own leaves up to max_lanes ended targets).
        settings, target.settings = target.settings, {}
        target.status = state.status
        target.tail = len(run.events)
        for notice in target.deferred:
            await self._tell(target, notice)
        target.deferred.clear()
        if state.status == "completed":
            target.waiting = required_inputs(state.output) or None
        queued = target.queued
        if not queued:
            return None
        if target.waiting is not None:
            for steer in queued:
                await self._pend(target, steer)
            return None
        if state.status != "completed" and not ended_steered(state):
            target.queued = []
            message = f"The response ended {state.status}; its input was not taken."
            await self._fail(target, queued, "response_not_active", message)
            return None
        commit = Commit(target, queued)
        target.queued = []
        if draining:
            await self.uncommitted(commit)
            return None
        fields = {**settings, "type": "response.create", "input": []}
        fields["previous_response_id"] = target.response_id
        try:
            frame = decode_frame("response.create", fields)
        except GatewayError:
            await self.uncommitted(commit)
            return None
        assert isinstance(frame, CreateFrame)
        frame.command.input = commit.items
        frame.stream_id = target.lane
        return Successor(frame, settings, commit)

    async def _pend(self, target: Target, steer: Steer) -> None:
        if not steer.told_pending and target.waiting is not None:
            steer.told_pending = True
            notice = steer_pending(steer.id, target.response_id, target.waiting)
            await self._tell(target, notice)

    async def _fail(self, target: Target, steers: list[Steer], code: str, message: str) -> None:
        for steer in steers:
            failed = steer_failed(code, message, target.response_id, steer.input, steer.id)
            await self._tell(target, failed)

    async def _let_go(self, target: Target) -> None:
        del self._by_lane[target.lane]
        del self._by_id[target.response_id]
        queued, target.queued = target.queued, []
        message = "The response was not continued; its queued input was not taken."
        await self._fail(target, queued, "response_not_active", message)

    async def _tell(self, target: Target, notice: ev.Notice, *, stop: bool = False) -> None:
        """Send a notice about ``target`` at the next number of its stream: logged with it
        while it runs (``stop``: and the run stopped at its next safe boundary), else
        once its stream ended."""
        if target.tail < 0:
            if target.run is None or not await self._logged(target, notice, stop):
                target.deferred.append(notice)
            return
        self._put(with_stream_id(encode_event_json(target.tail, notice), target.lane))
        target.tail += 1

    async def _logged(self, target: Target, notice: ev.Notice, stop: bool) -> bool:
        """Whether the core logged ``notice`` in ``target``'s running stream."""
        steer = SteerResponse(target.response_id, notice, stop)
        noted = await self._gateway.execute(target.principal, steer)
        return noted.logged
