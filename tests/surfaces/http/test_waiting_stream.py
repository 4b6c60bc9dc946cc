"""A waiting keyed stream's keep-alives (:class:`~stateway.surfaces.http.keyed_waits.WaitingStream`)
by themselves: its status line once, a keep-alive at every interval until its end, a write
under way finished by its end; none before its claim is known to wait for another
attempt. The routes that use it: ``test_keyed_waits.py``."""

from __future__ import annotations

import asyncio

from starlette.types import Message

from stateway.surfaces.http.keyed_waits import WaitingStream

KEEPALIVE = 0.001
IDLE = b": keep-alive\n\n"
HEADERS = {"content-type": "text/event-stream"}
SCOPE = {"type": "http"}
"""A request whose credential cannot stop holding: no revocation watched."""
FOREVER = 30.0
"""Seconds a test waits for what must come (a guard, not a timing)."""


class Client:
    """A client's side of the stream: what was sent, and a wait for the n-th message."""

    def __init__(self) -> None:
        self.sent: list[Message] = []
        self.changed = asyncio.Event()
        self.hold: asyncio.Event | None = None
        """When set to an event, a send waits for it (a write under way)."""

    async def send(self, message: Message) -> None:
        self.sent.append(message)
        self.changed.set()
        if self.hold is not None:
            await self.hold.wait()

    async def until(self, count: int) -> None:
        async def wait() -> None:
            while len(self.sent) < count:
                self.changed.clear()
                await self.changed.wait()

        await asyncio.wait_for(wait(), FOREVER)


async def test_a_keep_alive_goes_out_at_every_interval_after_one_status_line() -> None:
    client = Client()
    stream = WaitingStream(client.send, KEEPALIVE, IDLE, HEADERS, SCOPE)
    stream.waits()
    await client.until(4)
    assert await stream.end() is True
    assert client.sent[0]["type"] == "http.response.start"
    assert client.sent[0]["status"] == 200
    assert [m["type"] for m in client.sent[1:4]] == ["http.response.body"] * 3
    assert all(m["body"] == IDLE and m["more_body"] is True for m in client.sent[1:4])


async def test_a_stream_ended_before_its_first_interval_never_opened() -> None:
    client = Client()
    stream = WaitingStream(client.send, FOREVER, IDLE, HEADERS, SCOPE)
    stream.waits()
    assert await stream.end() is False
    assert client.sent == []


async def test_its_end_waits_for_a_write_under_way() -> None:
    client = Client()
    client.hold = asyncio.Event()
    stream = WaitingStream(client.send, KEEPALIVE, IDLE, HEADERS, SCOPE)
    stream.waits()
    await client.until(1)  # its status line, held
    ending = asyncio.ensure_future(stream.end())
    await asyncio.sleep(0)
    assert not ending.done()
    client.hold.set()
    assert await asyncio.wait_for(ending, FOREVER) is True
    assert [m["type"] for m in client.sent] == ["http.response.start", "http.response.body"]
    assert await stream.end() is True  # again


async def test_a_claim_not_known_to_wait_opens_nothing_however_long() -> None:
    """A first request whose claim is slow is no retry: it keeps its status line."""
    client = Client()
    stream = WaitingStream(client.send, KEEPALIVE, IDLE, HEADERS, SCOPE)
    for _ in range(20):  # many intervals pass
        await asyncio.sleep(KEEPALIVE)
    assert client.sent == []
    stream.waits()  # its interval passed already: it opens at once
    await client.until(2)
    assert await stream.end() is True
    assert client.sent[0]["type"] == "http.response.start"
