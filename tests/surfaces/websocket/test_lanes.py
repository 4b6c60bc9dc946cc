"""Lanes in memory: FIFO within a lane, side by side across lanes, caps that keep
nothing, and checkpoints bounded by bytes."""

from __future__ import annotations

import asyncio

import pytest

from stateway.core.errors import InvalidRequest
from stateway.core.retention import ERASE_AFTER
from stateway.surfaces.websocket.lanes import Checkpoints, LaneKey, Lanes, counted
from stateway.websocket_config import WebSocketConfig


class Recorder:
    def __init__(self) -> None:
        self.started: list[tuple[LaneKey, str]] = []
        self.gates: dict[str, asyncio.Event] = {}

    async def run(self, lane: LaneKey, work: str) -> None:
        self.started.append((lane, work))
        gate = self.gates.setdefault(work, asyncio.Event())
        await gate.wait()

    def release(self, work: str) -> None:
        self.gates.setdefault(work, asyncio.Event()).set()


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_fifo_within_a_lane_and_lanes_side_by_side() -> None:
    recorder = Recorder()
    lanes: Lanes[str] = Lanes(WebSocketConfig(), recorder.run)
    lanes.admit("a", "a1", 10)
    lanes.admit("a", "a2", 10)
    lanes.admit(None, "d1", 10)
    await settle()
    assert recorder.started == [("a", "a1"), (None, "d1")]
    assert (lanes.requests, lanes.queued_bytes) == (3, 10)
    recorder.release("a1")
    await settle()
    assert recorder.started[-1] == ("a", "a2")
    for work in ("a2", "d1"):
        recorder.release(work)
    await lanes.idle()
    assert (len(lanes), lanes.requests, lanes.queued_bytes) == (0, 0, 0)


@pytest.mark.parametrize(
    ("config", "admitted", "refused", "word", "code"),
    [
        (
            WebSocketConfig(max_requests=2),
            [("a", 1), ("b", 1)],
            ("c", 1),
            "requests",
            "websocket_limit_exceeded",
        ),
        # hosted's code for a lane past the stream_id cap (the openai SDK's guide names it)
        (
            WebSocketConfig(max_lanes=1),
            [("a", 1), ("a", 1)],
            ("b", 1),
            "lanes",
            "websocket_stream_limit_reached",
        ),
        (
            WebSocketConfig(max_queued_bytes=2048),
            [("a", 1), ("a", 2000)],
            ("a", 100),
            "bytes",
            "websocket_limit_exceeded",
        ),
    ],
)
async def test_a_cap_is_a_429_that_keeps_nothing(
    config: WebSocketConfig,
    admitted: list[tuple[str, int]],
    refused: tuple[str, int],
    word: str,
    code: str,
) -> None:
    recorder = Recorder()
    lanes: Lanes[str] = Lanes(config, recorder.run)
    for number, (lane, size) in enumerate(admitted):
        lanes.admit(lane, f"w{number}", size)
    before = (len(lanes), lanes.requests, lanes.queued_bytes)
    with pytest.raises(InvalidRequest) as caught:
        lanes.admit(refused[0], "refused", refused[1])
    assert (caught.value.status, caught.value.code) == (429, code)
    assert word in caught.value.message
    assert (len(lanes), lanes.requests, lanes.queued_bytes) == before
    lanes.cancel()
    await lanes.idle()
    assert (len(lanes), lanes.requests, lanes.queued_bytes) == (0, 0, 0)


async def test_the_default_lane_is_not_counted_against_the_lanes_cap() -> None:
    """As hosted (the SDK's WebSocket guide: "32 distinct named IDs per connection; the
    default lane does not count"): ``max_lanes`` caps the named lanes only, so a busy
    default lane takes no named lane's room, and named lanes at their cap leave the
    default lane open."""
    recorder = Recorder()
    lanes: Lanes[str] = Lanes(WebSocketConfig(max_lanes=1), recorder.run)
    lanes.admit(None, "d1", 1)
    lanes.admit("a", "a1", 1)
    lanes.admit(None, "d2", 1)
    with pytest.raises(InvalidRequest) as caught:
        lanes.admit("b", "refused", 1)
    assert caught.value.code == "websocket_stream_limit_reached"
    lanes.cancel()
    await lanes.idle()
    assert (len(lanes), lanes.requests) == (0, 0)
    lanes = Lanes(WebSocketConfig(max_lanes=1), recorder.run)
    lanes.admit("a", "a2", 1)
    lanes.admit(None, "d3", 1)
    assert len(lanes) == 2
    lanes.cancel()
    await lanes.idle()


async def test_a_frame_its_lane_starts_at_once_waits_for_nothing() -> None:
    """``max_queued_bytes`` bounds the frames waiting behind others: a frame larger than it
    runs at once on an idle lane (the frame is bounded by ``max_frame_bytes``), and is
    refused behind another."""
    recorder = Recorder()
    lanes: Lanes[str] = Lanes(WebSocketConfig(max_queued_bytes=2048), recorder.run)
    lanes.admit("a", "large", 4096)
    lanes.admit("b", "large too", 4096)
    await settle()
    assert recorder.started == [("a", "large"), ("b", "large too")]
    assert (lanes.requests, lanes.queued_bytes) == (2, 0)
    with pytest.raises(InvalidRequest) as caught:
        lanes.admit("a", "behind", 4096)
    assert (caught.value.status, caught.value.code) == (429, "websocket_limit_exceeded")
    lanes.admit("a", "small behind", 1024)
    assert lanes.queued_bytes == 1024
    for work in ("large", "large too", "small behind"):
        recorder.release(work)
    await lanes.idle()
    assert recorder.started[-1] == ("a", "small behind")
    assert (len(lanes), lanes.requests, lanes.queued_bytes) == (0, 0, 0)


async def test_the_queued_bytes_cap_holds_exactly_its_bytes_and_not_an_idle_lanes_frame() -> None:
    """Frames waiting up to ``max_queued_bytes`` exactly are kept; a full queue refuses
    the next frame behind, not one an idle lane starts at once."""
    recorder = Recorder()
    lanes: Lanes[str] = Lanes(WebSocketConfig(max_queued_bytes=2048), recorder.run)
    lanes.admit("a", "running", 10)
    assert lanes.queued_bytes == 0
    lanes.admit("a", "behind", 1024)
    lanes.admit("a", "behind too", 1024)
    assert lanes.queued_bytes == 2048
    with pytest.raises(InvalidRequest):
        lanes.admit("a", "one byte more", 1)
    lanes.admit("b", "idle lane", 10)
    assert (lanes.requests, lanes.queued_bytes) == (4, 2048)
    lanes.cancel()
    await asyncio.wait_for(lanes.idle(), 1)


async def test_lanes_ending_report_nothing_to_the_loop() -> None:
    """A lane's end is handled in its task's done callback: whether or not anyone waits
    for the lanes to be idle, before and after someone did, it raises nothing there."""
    loop = asyncio.get_running_loop()
    reported: list[dict[str, object]] = []
    previous = loop.get_exception_handler()
    loop.set_exception_handler(lambda loop, context: reported.append(context))
    try:
        recorder = Recorder()
        lanes: Lanes[str] = Lanes(WebSocketConfig(), recorder.run)
        for work in ("unwaited", "waited", "unwaited again"):
            lanes.admit("a", work, 10)
            await settle()
            recorder.release(work)
            if work == "waited":
                await asyncio.wait_for(lanes.idle(), 1)
            else:
                await settle()
            assert len(lanes) == 0
    finally:
        loop.set_exception_handler(previous)
    assert reported == []


async def test_cancelled_before_its_task_began_a_lane_still_takes_up_its_first_work() -> None:
    """A frame admitted to an idle lane and the client's close read at once: before, the
    lane's task was cancelled before it began, and the request never started. Now it is
    taken up, and interrupted where it first waits (a create shields its start there);
    what waits behind it never starts, and a second cancel changes nothing."""
    recorder = Recorder()
    lanes: Lanes[str] = Lanes(WebSocketConfig(), recorder.run)
    lanes.admit("a", "head", 10)
    lanes.admit("a", "behind", 10)
    lanes.cancel()
    lanes.cancel()
    await asyncio.wait_for(lanes.idle(), 1)
    assert recorder.started == [("a", "head")]
    assert (len(lanes), lanes.requests, lanes.queued_bytes) == (0, 0, 0)


async def test_cancel_interrupts_the_work_a_lane_has_begun() -> None:
    recorder = Recorder()
    lanes: Lanes[str] = Lanes(WebSocketConfig(), recorder.run)
    lanes.admit("a", "running", 10)
    lanes.admit("a", "behind", 10)
    await settle()
    lanes.cancel()
    await asyncio.wait_for(lanes.idle(), 1)
    assert recorder.started == [("a", "running")]
    assert (len(lanes), lanes.requests, lanes.queued_bytes) == (0, 0, 0)


def test_checkpoints_by_lane_and_id_within_their_bytes() -> None:
    item = {"type": "message", "role": "user", "content": "x" * 100}
    size = counted("a", "resp_1", len(b'[{"type":"message","role":"user","content":""}]') + 100)
    checkpoints = Checkpoints(limit=2 * size)
    checkpoints.keep("a", "resp_1", [item])
    checkpoints.keep("a", "resp_2", [item])  # the lane's last one replaces its previous
    assert checkpoints.find("resp_1") is None
    found = checkpoints.find("resp_2")
    assert found is not None
    assert found.items == [item]
    checkpoints.keep("b", "resp_3", [item])
    checkpoints.keep("c", "resp_4", [item])  # the oldest lane's goes to make room
    assert checkpoints.find("resp_2") is None
    assert len(checkpoints) == 2
    assert checkpoints.size == 2 * size
    checkpoints.keep("d", "resp_big", [item] * 20)  # larger than all: not kept
    assert checkpoints.find("resp_big") is None
    checkpoints.evict("resp_3", "a")  # another lane's: kept
    assert checkpoints.find("resp_3") is not None
    checkpoints.evict("resp_3", "b")
    assert checkpoints.find("resp_3") is None
    assert checkpoints.size == size


def test_a_stored_checkpoint_older_than_the_erasure_s_grace_is_not_used() -> None:
    """Its response may have been deleted and its content erased by a sweep since: a
    continuation from memory would store a response naming it, whose stored chain had
    lost the context it ran on. The store is read instead, as over HTTP; an unstored
    response's checkpoint holds its whole context and stays."""
    now = [0.0]
    checkpoints = Checkpoints(limit=4096, clock=lambda: now[0])
    item = {"type": "message", "role": "user", "content": "x"}
    checkpoints.keep("a", "resp_stored", [item])
    checkpoints.keep("b", "resp_unstored", [item], stored=False)
    now[0] = ERASE_AFTER - 1
    assert checkpoints.find("resp_stored") is not None
    now[0] = ERASE_AFTER
    assert checkpoints.find("resp_stored") is None
    assert checkpoints.find("resp_unstored") is not None
    assert len(checkpoints) == 1
    assert checkpoints.size == counted(
        "b", "resp_unstored", len(b'[{"type":"message","role":"user","content":"x"}]')
    )


def test_evicting_a_response_no_longer_kept_leaves_the_default_lane_s() -> None:
    """A fork's parent, dropped for room while the fork ran on the default lane, names no
    lane when the fork fails: the default lane's own checkpoint stays."""
    checkpoints = Checkpoints(limit=1024)
    checkpoints.keep(None, "resp_1", [{"type": "message", "role": "user", "content": "x"}])
    checkpoints.evict("resp_gone", None)
    assert checkpoints.find("resp_1") is not None


def test_a_checkpoint_holds_about_the_bytes_it_counts() -> None:
    """A context of many short items, kept parsed, held ~5 times the JSON size it was
    counted at (a connection's ``max_checkpoint_bytes`` of 32 MiB held ~160 MB)."""
    import tracemalloc

    import orjson

    def context() -> list[dict[str, object]]:
        return [
            {
                "type": "function_call_output",
                "id": f"fco_{n:032x}",
                "call_id": f"call_{n}",
                "output": f"ok {n}",
                "status": "completed",
            }
            for n in range(20_000)
        ]

    checkpoints = Checkpoints(limit=32 * 1024 * 1024)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        checkpoints.keep("a", "resp_1", context())
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert held < 1.5 * checkpoints.size
    found = checkpoints.find("resp_1")
    assert found is not None
    assert found.items == context()
    assert checkpoints.size == counted("a", "resp_1", len(orjson.dumps(context())))


def test_many_small_checkpoints_hold_about_the_bytes_they_count() -> None:
    """A client naming a new ``stream_id`` for every short response keeps a checkpoint
    per lane; counted at its JSON alone, each held ~3 times that (its object, its id and
    lane, two table entries), so a connection at its ``max_checkpoint_bytes`` held ~3
    times the bytes it allows."""
    import tracemalloc

    limit = 1024 * 1024
    checkpoints = Checkpoints(limit=limit)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for n in range(20_000):
            output = {"type": "message", "id": f"msg_{n:048x}", "content": "w1"}
            context = [{"type": "message", "role": "user", "content": "x"}, output]
            checkpoints.keep(f"lane-{n:08d}", f"resp_{n:048x}", context)
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert checkpoints.size <= limit
    assert held < 1.25 * limit
    assert checkpoints.find(f"resp_{19_999:048x}") is not None
