"""The outbox in memory: bounded by bytes, never dropping, one big event still sent,
a writer task only while frames wait, and a client that stops reading reported."""

from __future__ import annotations

import asyncio

from stateway.surfaces.websocket.outbox import Outbox


class Client:
    def __init__(self) -> None:
        self.received: list[bytes] = []
        self.reading = asyncio.Event()
        self.reading.set()

    async def send(self, frame: bytes) -> None:
        await self.reading.wait()
        self.received.append(frame)


async def test_every_frame_goes_out_in_order_and_the_writer_ends_when_idle() -> None:
    client = Client()
    outbox = Outbox(client.send, 1024, lambda: 0, lambda: None)
    frames = [bytes([65 + n]) * 100 for n in range(30)]
    for frame in frames:
        await outbox.room()
        outbox.put(frame)
    await outbox.flushed()
    assert client.received == frames
    assert outbox.pending == 0
    assert outbox._writer is None


class OneFrame(Client):
    """A client that reads one frame, then stops (``read``: it has)."""

    def __init__(self) -> None:
        super().__init__()
        self.read = asyncio.Event()

    async def send(self, frame: bytes) -> None:
        await super().send(frame)
        self.reading.clear()
        self.read.set()


async def test_a_mark_is_sent_once_the_frames_put_before_it_went_out() -> None:
    client = OneFrame()
    outbox = Outbox(client.send, 1024, lambda: 0, lambda: None)
    outbox.put(b"first")
    outbox.put(b"second")
    assert outbox.put_count == 2
    await client.read.wait()  # the writer is then waiting to send the second
    assert (outbox.sent(1), outbox.sent(2)) == (True, False)
    client.reading.set()
    await outbox.flushed()
    assert outbox.sent(2)


async def test_room_waits_while_the_bound_is_reached_and_a_big_frame_still_goes() -> None:
    client = Client()
    client.reading.clear()
    outbox = Outbox(client.send, 1024, lambda: 0, lambda: None)
    outbox.put(b"x" * 5000)  # larger than the bound: put whole
    waiting = asyncio.ensure_future(outbox.room())
    await asyncio.sleep(0)
    assert not waiting.done()
    client.reading.set()
    await waiting
    await outbox.flushed()
    assert client.received == [b"x" * 5000]


async def test_a_client_that_stops_reading_while_far_behind_is_reported() -> None:
    client = Client()
    client.reading.clear()
    slow = asyncio.Event()
    behind = 0
    outbox = Outbox(client.send, 1024, lambda: behind, slow.set, check_every=0.01)
    outbox.put(b"y" * 10)
    behind = 10_000
    await slow.wait()
    outbox.close()
    assert outbox.closed
    await outbox.room()  # never waits once closed
    outbox.put(b"z")
    assert outbox.pending == 0
