"""A trait of a server learned from its listing: asked within a short deadline, and while
no answer comes, not asked by every call: asked again once a back-off (growing, up to a
cap) has passed, the calls meanwhile going on as for a server that lacks it; servers on
loopback that hang, fail or refuse, and a clock the tests move."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest
from aiohttp import web

from stateway.backends.listed_trait import FIRST_BACK_OFF, LONGEST_BACK_OFF, ListedTrait
from stateway.backends.upstream_http import UpstreamClient
from stateway.backends.upstream_target import UpstreamTarget
from tests.backends.conftest import Loopback

WITHIN = 0.2
"""The listing's deadline in these tests: short, the hanging server never answering."""
REFUSED = "http://127.0.0.1:9/v1"
"""Nothing listens there: the connection is refused."""
MARKED = [{"id": "m", "object": "model", "owned_by": "marked"}]


def marked(listing: Sequence[object]) -> bool:
    return any(isinstance(m, dict) and m.get("owned_by") == "marked" for m in listing)


class Clock:
    """Monotonic seconds the test moves."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Counted(UpstreamClient):
    """An upstream client counting the listings it asks (reaching a server or not)."""

    asked = 0

    async def model_page(
        self, params: Any = None, within: float = 5.0
    ) -> tuple[list[str], dict[str, Any]]:
        self.asked += 1
        return await super().model_page(params, within)


class Listing:
    """A server whose ``/v1/models`` answers ``status`` (200: :data:`MARKED`), or, with
    ``hangs``, nothing until the test ends."""

    def __init__(self, loopback: Loopback, status: int = 200, *, hangs: bool = False) -> None:
        self.loopback = loopback
        self.status = status
        self.hangs = hangs

    async def handle(self, http: web.Request) -> web.StreamResponse:
        if self.hangs:
            await self.loopback.hold()
        if self.status != 200:
            return web.json_response({"error": {"message": "no"}}, status=self.status)
        return web.json_response({"object": "list", "data": MARKED})


async def trait(
    loopback: Loopback, url: str, clock: Clock | None = None
) -> tuple[ListedTrait, Counted]:
    client = Counted(UpstreamTarget("up", url))
    loopback.adopt(client)
    return ListedTrait(client, marked, within=WITHIN, clock=clock or Clock()), client


async def failing(loopback: Loopback, failure: str, clock: Clock) -> tuple[ListedTrait, Counted]:
    """A trait of a server whose listing gives no answer: ``failure`` says how."""
    if failure == "refused":
        return await trait(loopback, REFUSED, clock)
    server = Listing(loopback, hangs=failure == "hangs")
    if failure.isdigit():
        server.status = int(failure)
    return await trait(loopback, await loopback.serve(server.handle), clock)


async def test_concurrent_calls_do_not_queue_behind_a_hanging_listing(loopback: Loopback) -> None:
    """The one asking gives up at the deadline; the calls waiting behind it then go on
    with its failure rather than each asking in turn."""
    server = Listing(loopback, hangs=True)
    listed, client = await trait(loopback, await loopback.serve(server.handle))
    async with asyncio.timeout(5):  # generous: the listing answers only when the test ends
        held = await asyncio.gather(*(listed.held() for _ in range(8)))
    assert held == [False] * 8
    assert client.asked == 1
    assert listed.known is None  # not an answer: asked again later


@pytest.mark.parametrize("failure", ["hangs", "refused", "503", "429"])
async def test_a_listing_giving_no_answer_is_not_asked_by_every_call(
    loopback: Loopback, failure: str
) -> None:
    clock = Clock()
    listed, client = await failing(loopback, failure, clock)
    assert not await listed.held()
    clock.now += FIRST_BACK_OFF / 2
    for _ in range(5):
        assert not await listed.held()
    assert client.asked == 1


@pytest.mark.parametrize("failure", ["refused", "503", "429"])
async def test_it_is_asked_again_after_the_back_off_which_grows_to_a_cap(
    loopback: Loopback, failure: str
) -> None:
    clock = Clock()
    listed, client = await failing(loopback, failure, clock)
    await listed.held()
    back_off = FIRST_BACK_OFF
    for asked in range(2, 12):
        clock.now += back_off / 2
        await listed.held()
        assert client.asked == asked - 1  # within the back-off
        clock.now += back_off / 2
        await listed.held()
        assert client.asked == asked  # asked once it passed
        back_off = min(2 * back_off, LONGEST_BACK_OFF)
    assert back_off == LONGEST_BACK_OFF


async def test_an_answer_after_failures_is_learned_and_kept(loopback: Loopback) -> None:
    clock = Clock()
    server = Listing(loopback, 503)
    listed, client = await trait(loopback, await loopback.serve(server.handle), clock)
    assert not await listed.held()
    server.status = 200  # up now
    assert not await listed.held()  # within the back-off: not asked yet
    clock.now += FIRST_BACK_OFF
    assert await listed.held()
    clock.now += 10 * LONGEST_BACK_OFF
    assert await listed.held()
    assert client.asked == 2  # an answer is kept: never asked again


async def test_a_refusal_is_an_answer_kept(loopback: Loopback) -> None:
    clock = Clock()
    server = Listing(loopback, 404)
    listed, client = await trait(loopback, await loopback.serve(server.handle), clock)
    assert not await listed.held()
    clock.now += 10 * LONGEST_BACK_OFF
    assert not await listed.held()
    assert (listed.known, client.asked) == (False, 1)


async def test_a_listing_read_elsewhere_tells_it_during_a_back_off(loopback: Loopback) -> None:
    """The window discovery's listing, read while the calls' asking backs off."""
    listed, client = await trait(loopback, REFUSED)
    assert not await listed.held()
    listed.learn(MARKED)
    assert await listed.held()
    assert client.asked == 1
