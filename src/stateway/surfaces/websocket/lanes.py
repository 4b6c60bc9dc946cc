"""A connection's lanes: its requests in order per ``stream_id``, its caps, and the
responses it keeps to continue them.

A lane runs its requests one after the other (FIFO), lanes run side by side; the default
lane (no ``stream_id``) is a lane like the others. A lane exists while it has requests;
its task exists while it runs one. Caps are checked before anything is kept, so a refused
frame (429) changes nothing: requests running or waiting (``max_requests``), bytes of
request frames waiting to start (``max_queued_bytes``), named lanes with requests
(``max_lanes``; the default lane is not counted, as hosted).

A *checkpoint* is the last response of a lane, kept whether or not it is stored: its
whole context (the items before its output, then its output), so that a frame naming it
as ``previous_response_id`` continues it without reading the store. Checkpoints are
bounded by bytes (``max_checkpoint_bytes``), each counted with what keeping it costs
besides its JSON (:data:`ENTRY_BYTES`); the oldest are let go first. A stored response's
checkpoint serves for :data:`~stateway.core.retention.ERASE_AFTER` after it was kept, no
longer: the response may have been deleted since, and a sweep erase its content once that
grace is past, so a continuation from memory would store a response whose stored chain
lost the context it ran on. Past it the store is read, as for a request over HTTP (a
deleted response is a 400 then). An unstored response's checkpoint holds its whole
context (its continuation stores it all) and serves as long as it is kept.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict, deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from typing import Final, Generic, TypeVar

import orjson

from stateway.core.errors import InvalidRequest
from stateway.core.items import Item
from stateway.core.retention import ERASE_AFTER
from stateway.websocket_config import WebSocketConfig

W = TypeVar("W")
LaneKey = str | None
"""A lane's ``stream_id`` (None: the default lane)."""
_NO_LANE: Final = object()
ENTRY_BYTES: Final = 384
"""What keeping a checkpoint costs besides its JSON and the characters of its response
id and lane: its object, its bytes' header, the strings' headers, an entry in each
table (measured: ~330). A lane per short response (a new ``stream_id`` each time, the
lanes over a connection's life being unbounded) kept ~3 times the bytes counted."""


def limit_exceeded(what: str, code: str = "websocket_limit_exceeded") -> InvalidRequest:
    """The 429 error frame of a cap (the lanes' has hosted's code for it)."""
    return InvalidRequest(
        f"This connection reached its limit of {what}; wait for a response to end, or "
        "open another connection.",
        code=code,
        status=429,
    )


class Lane(Generic[W]):
    __slots__ = ("begun", "key", "queue", "task")

    def __init__(self, key: LaneKey) -> None:
        self.key = key
        self.queue: deque[tuple[W, int]] = deque()
        """The work running (first) and waiting, with the bytes it counts as waiting: its
        frame's size, or 0 for work the lane started at once."""
        self.task: asyncio.Task[None] | None = None
        self.begun = False
        """Its task has begun (a task cancelled before that would never run its work)."""


class Lanes(Generic[W]):
    def __init__(self, config: WebSocketConfig, run: Callable[[LaneKey, W], Awaitable[None]]):
        """``run(lane, work)`` does one request's work (it handles its own errors)."""
        self._config = config
        self._run = run
        self._lanes: dict[LaneKey, Lane[W]] = {}
        self.requests = 0
        """Requests running or waiting."""
        self.queued_bytes = 0
        """Bytes of the frames of requests waiting to start."""
        self._idle: asyncio.Future[None] | None = None
        self.stopped = False
        """Set by :meth:`cancel`: no lane goes past the work it has taken up."""

    def __len__(self) -> int:
        return len(self._lanes)

    def admit(self, key: LaneKey, work: W, size: int) -> None:
        """Queue ``work`` (a frame of ``size`` bytes) on lane ``key``; past a cap, raise
        its 429 and keep nothing. A frame its lane starts at once waits for nothing, so
        only a frame behind another counts against ``max_queued_bytes`` (each frame is
        bounded by ``max_frame_bytes``): one larger than that cap is answered on an idle
        lane."""
        config = self._config
        if self.requests >= config.max_requests:
            raise limit_exceeded(f"{config.max_requests} requests running or queued")
        lane = self._lanes.get(key)
        waiting = size if lane is not None and lane.queue else 0
        if self.queued_bytes + waiting > config.max_queued_bytes:
            raise limit_exceeded(f"{config.max_queued_bytes} bytes of queued requests")
        if lane is None:
            named = len(self._lanes) - (None in self._lanes)  # the default lane is free
            if key is not None and named >= config.max_lanes:
                raise limit_exceeded(
                    f"{config.max_lanes} lanes (distinct stream_id values)",
                    "websocket_stream_limit_reached",
                )
            lane = self._lanes[key] = Lane(key)
        lane.queue.append((work, waiting))
        self.requests += 1
        self.queued_bytes += waiting
        if lane.task is None or lane.task.done():  # done: its end is not handled yet
            lane.begun = False
            lane.task = asyncio.get_running_loop().create_task(self._drain(lane))
            lane.task.add_done_callback(partial(self._ended, lane))

    async def _drain(self, lane: Lane[W]) -> None:
        lane.begun = True
        if self.stopped and lane.task is not None:  # stopped before this task began:
            lane.task.cancel()  # its first work is interrupted where it first waits
        while lane.queue:
            work, size = lane.queue[0]
            self.queued_bytes -= size
            try:
                await self._run(lane.key, work)
            finally:
                lane.queue.popleft()
                self.requests -= 1

    def _ended(self, lane: Lane[W], task: asyncio.Task[None]) -> None:
        """The lane's task ended (its queue done, or cancelled, maybe before it started):
        what still waits never started, and the lane goes (unless work came meanwhile,
        and a new task took it)."""
        if lane.task is not task:
            return
        lane.task = None
        for _work, size in lane.queue:
            self.queued_bytes -= size
        self.requests -= len(lane.queue)
        lane.queue.clear()
        del self._lanes[lane.key]
        if not self._lanes and self._idle is not None:
            if not self._idle.done():
                self._idle.set_result(None)
            self._idle = None

    async def idle(self) -> None:
        """Return once no lane has a request."""
        while self._lanes:
            self._idle = self._idle or asyncio.get_running_loop().create_future()
            await asyncio.shield(self._idle)

    def cancel(self) -> None:
        """Stop every lane, once (the client is gone): waiting requests never start; the
        request each lane has taken up is cancelled where it waits (a frame admitted to
        an idle lane just before, whose task has not begun yet, is taken up all the
        same), so work that must outlive the connection shields itself (a create's start:
        :func:`~stateway.surfaces.websocket.starts.started`)."""
        if self.stopped:
            return
        self.stopped = True
        for lane in list(self._lanes.values()):
            if lane.task is not None and lane.begun:
                lane.task.cancel()


def counted(lane: LaneKey, response_id: str, payload_bytes: int) -> int:
    """The bytes a checkpoint of ``payload_bytes`` of JSON counts, kept on ``lane``."""
    return payload_bytes + len(response_id) + len(lane or "") + ENTRY_BYTES


@dataclass(slots=True, frozen=True)
class Checkpoint:
    response_id: str
    payload: bytes
    """The JSON of the response's context: the items before its output, then its output."""
    stored: bool = True
    """The response is in the store (``store: true``)."""
    kept_at: float = 0.0
    """When it was kept (the :class:`Checkpoints`' clock)."""

    def counted(self, lane: LaneKey) -> int:
        """The bytes it counts against ``max_checkpoint_bytes``, kept on ``lane``."""
        return counted(lane, self.response_id, len(self.payload))

    @property
    def items(self) -> list[Item]:
        """The context's items, parsed afresh (a continuation's own copy)."""
        items: list[Item] = orjson.loads(self.payload)
        return items


class Checkpoints:
    """The last response of each lane, by lane and by response id, within ``limit``
    bytes.

    Each is kept as its JSON, counted at its size and what keeping it costs besides
    (:func:`counted`). Kept as parsed items, a context of
    many short items (an agent's calls and their outputs) held about 5 times its JSON's
    size (~17 MB for 20,000 short messages counted as 3.4 MB), so a connection at its
    ``max_checkpoint_bytes`` (32 MiB) could hold ~160 MB."""

    __slots__ = ("_by_id", "_by_lane", "_clock", "_limit", "size")

    def __init__(self, limit: int, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._limit = limit
        self._clock = clock
        self._by_lane: OrderedDict[LaneKey, Checkpoint] = OrderedDict()
        """Oldest first."""
        self._by_id: dict[str, LaneKey] = {}
        self.size = 0

    def find(self, response_id: str) -> Checkpoint | None:
        """The checkpoint of ``response_id``; None when none is kept, or a stored
        response's was kept :data:`ERASE_AFTER` ago or more (then let go)."""
        if response_id not in self._by_id:
            return None
        lane = self._by_id[response_id]
        checkpoint = self._by_lane[lane]
        if checkpoint.stored and self._clock() - checkpoint.kept_at >= ERASE_AFTER:
            self._drop(lane)
            return None
        return checkpoint

    def keep(
        self, lane: LaneKey, response_id: str, items: list[Item], *, stored: bool = True
    ) -> None:
        """Keep ``items`` as the lane's last response (the lane's previous one goes);
        one larger than the whole budget is not kept, older lanes' go to make room."""
        self._drop(lane)
        payload = orjson.dumps(items)
        size = counted(lane, response_id, len(payload))
        if size > self._limit:
            return
        while self.size + size > self._limit and self._by_lane:
            self._drop(next(iter(self._by_lane)))
        # A copy of its own size: orjson's bytes keep the buffer they were written into.
        self._by_lane[lane] = Checkpoint(
            response_id, bytes(memoryview(payload)), stored, self._clock()
        )
        self._by_id[response_id] = lane
        self.size += size

    def evict(self, response_id: str, lane: LaneKey) -> None:
        """Forget ``response_id``, a continuation on ``lane`` having failed, if it is that
        lane's: a fork from another lane that fails leaves the shared parent to its own
        lane, whose chain goes on (as hosted)."""
        if self._by_id.get(response_id, _NO_LANE) == lane:
            self._drop(lane)

    def _drop(self, lane: LaneKey) -> None:
        checkpoint = self._by_lane.pop(lane, None)
        if checkpoint is not None:
            del self._by_id[checkpoint.response_id]
            self.size -= checkpoint.counted(lane)

    def __len__(self) -> int:
        return len(self._by_lane)
