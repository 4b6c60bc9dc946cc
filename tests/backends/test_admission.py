"""The gateway's own queue: fair bounded waits for connection slots, early refusals."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
from aiohttp import web

from stateway.backends.admission import ConnectionSlots, WaitingRoom
from stateway.backends.upstream_http import UpstreamClient
from stateway.backends.upstream_target import UpstreamTarget
from stateway.core.errors import Overloaded
from tests.backends.conftest import Loopback


@asynccontextmanager
async def held(slots: ConnectionSlots) -> AsyncIterator[None]:
    """One slot, held for the block (as an upstream call holds it)."""
    await slots.acquire()
    try:
        yield
    finally:
        slots.release()


async def hold_until(slots: ConnectionSlots, entered: asyncio.Event, leave: asyncio.Event) -> None:
    async with held(slots):
        entered.set()
        await leave.wait()


async def test_waiters_get_slots_first_come_first_served() -> None:
    slots = ConnectionSlots("up", 1, 5.0, WaitingRoom(100))
    entered, leave = asyncio.Event(), asyncio.Event()
    holder = asyncio.create_task(hold_until(slots, entered, leave))
    await entered.wait()
    order: list[int] = []

    async def waiter(number: int) -> None:
        async with held(slots):
            order.append(number)
            await asyncio.sleep(0)  # let the others run while the slot is held

    waiters = []
    for number in range(5):
        waiters.append(asyncio.create_task(waiter(number)))
        await asyncio.sleep(0)  # each starts waiting before the next is created
    leave.set()
    await asyncio.gather(holder, *waiters)
    assert order == [0, 1, 2, 3, 4]


async def test_a_wait_past_pool_timeout_is_overloaded_with_retry_after() -> None:
    room = WaitingRoom(100)
    slots = ConnectionSlots("up", 1, 0.2, room)
    entered, leave = asyncio.Event(), asyncio.Event()
    holder = asyncio.create_task(hold_until(slots, entered, leave))
    await entered.wait()
    with pytest.raises(Overloaded) as caught:
        async with held(slots):
            pass
    error = caught.value
    assert (error.status, error.code, error.type) == (503, "overloaded", "server_error")
    assert error.headers == {"Retry-After": "1"}
    assert "pool_timeout" in error.message
    assert room.waiting == 0
    leave.set()
    await holder


async def test_a_full_waiting_room_refuses_at_once() -> None:
    room = WaitingRoom(1)
    slots = ConnectionSlots("up", 1, 5.0, room)
    entered, leave = asyncio.Event(), asyncio.Event()
    holder = asyncio.create_task(hold_until(slots, entered, leave))
    await entered.wait()
    waiting = asyncio.create_task(hold_until(slots, asyncio.Event(), leave))
    await asyncio.sleep(0)
    assert room.waiting == 1
    with pytest.raises(Overloaded, match="already wait"):
        async with held(slots):
            pass
    leave.set()
    await asyncio.gather(holder, waiting)
    assert room.waiting == 0


async def test_both_refusals_name_the_model_server() -> None:
    room = WaitingRoom(1)
    slots = room.slots("up", 1, 0.05)
    async with held(slots):
        with pytest.raises(Overloaded) as waited:
            await slots.acquire()
        assert "model server 'up' came free within 0.05 s" in waited.value.message
        entered, leave = asyncio.Event(), asyncio.Event()
        room.capacity = 0  # every waiting place taken
        with pytest.raises(Overloaded) as refused:
            await hold_until(slots, entered, leave)
        assert "connection to model server 'up'" in refused.value.message
    assert room.waiting == 0


async def test_no_waiting_places_refuses_only_when_every_slot_is_taken() -> None:
    slots = ConnectionSlots("up", 1, 5.0, WaitingRoom(0))
    async with held(slots):
        with pytest.raises(Overloaded):
            async with held(slots):
                pass
    async with held(slots):  # the slot came back, even after a refusal
        pass


async def test_full_only_when_every_slot_and_every_waiting_place_is_taken() -> None:
    room = WaitingRoom(1)
    slots = ConnectionSlots("up", 1, 5.0, room)
    entered, leave = asyncio.Event(), asyncio.Event()
    assert not slots.full()
    assert not slots.full(pending=1)  # it takes the free slot
    assert slots.full(pending=2)  # and the waiting place
    holder = asyncio.create_task(hold_until(slots, entered, leave))
    await entered.wait()
    assert not slots.full()  # a waiting place is free
    assert slots.full(pending=1)
    waiting = asyncio.create_task(hold_until(slots, asyncio.Event(), leave))
    await asyncio.sleep(0)
    assert slots.full()
    assert not ConnectionSlots("other", 1, 5.0, room).full()  # its own slot is free
    leave.set()
    await asyncio.gather(holder, waiting)
    assert not slots.full(pending=1)  # its slot came back, released by hold and acquire
    await slots.acquire()  # a relayed answer's way of holding one
    assert slots.full(pending=1)
    slots.release()
    assert not slots.full(pending=1)


async def test_each_release_gives_back_one_slot_of_several() -> None:
    slots = ConnectionSlots("up", 3, 5.0, WaitingRoom(0))
    await slots.acquire()
    await slots.acquire()
    assert slots.full(pending=1)
    slots.release()
    assert not slots.full(pending=1)
    assert slots.full(pending=2)
    slots.release()
    assert not slots.full(pending=2)


async def test_a_slot_is_returned_when_the_call_fails() -> None:
    slots = ConnectionSlots("up", 1, 0.2, WaitingRoom(10))
    with pytest.raises(RuntimeError):
        async with held(slots):
            raise RuntimeError("boom")
    async with held(slots):
        pass


async def test_waiting_for_a_slot_does_not_count_against_connect_timeout(
    loopback: Loopback,
) -> None:
    async def answers_slowly(request: web.Request) -> web.Response:
        await asyncio.sleep(0.3)
        return web.Response(body=b"{}")

    target = UpstreamTarget(
        "up", await loopback.serve(answers_slowly), connect_timeout=0.05, max_connections=1
    )
    client = loopback.adopt(UpstreamClient(target, WaitingRoom(10)))

    async def post() -> bytes:
        async with client.post("/chat/completions", {}) as reply:
            return await reply.read()

    # The second and third wait ~0.3 s and ~0.6 s for the slot: far past connect_timeout.
    assert await asyncio.gather(post(), post(), post()) == [b"{}"] * 3


async def test_clients_of_one_backend_share_its_slots_across_generations(
    loopback: Loopback,
) -> None:
    """A reload builds the backend's client again (a new generation); calls of the old one
    still running count against the same max_connections, and queue in the same line."""
    inside = 0
    most = 0

    async def answers_slowly(request: web.Request) -> web.Response:
        nonlocal inside, most
        inside += 1
        most = max(most, inside)
        await asyncio.sleep(0.2)
        inside -= 1
        return web.Response(body=b"{}")

    room = WaitingRoom(10)
    target = UpstreamTarget("up", await loopback.serve(answers_slowly), max_connections=1)
    old = loopback.adopt(UpstreamClient(target, room))
    new = loopback.adopt(UpstreamClient(target, room))

    async def post(client: UpstreamClient) -> bytes:
        async with client.post("/chat/completions", {}) as reply:
            return await reply.read()

    assert await asyncio.gather(post(old), post(new), post(old), post(new)) == [b"{}"] * 4
    assert most == 1
    wider = UpstreamTarget(target.name, target.base_url, max_connections=2)
    assert room.slots("up", 2, 30.0, target.base_url) is not room.slots(
        "up", 1, 30.0, target.base_url
    )
    assert loopback.adopt(UpstreamClient(wider, room))._slots is room.slots(
        "up", 2, 30.0, target.base_url
    )


@pytest.mark.usefixtures("young_heap")
async def test_a_superseded_queue_lasts_while_its_calls_hold_or_wait_for_its_slot() -> None:
    """A reload that changed the limits leaves the old generation's calls their queue:
    the one holding its slot and the one waiting for it both finish and give it back;
    then the room keeps nothing of it."""
    room = WaitingRoom(10)
    old = room.slots("up", 1, 5.0)
    entered, leave = asyncio.Event(), asyncio.Event()
    holder = asyncio.create_task(hold_until(old, entered, leave))
    await entered.wait()
    waiter = asyncio.create_task(hold_until(old, asyncio.Event(), leave))
    await asyncio.sleep(0)
    del old  # its generation retired: only its calls hold it now
    gc.collect()
    new = room.slots("up", 2, 5.0)
    assert room.queues == 2
    assert room.waiting == 1
    leave.set()
    await asyncio.gather(holder, waiter)
    del holder, waiter
    gc.collect()
    assert room.queues == 1
    assert room.slots("up", 2, 5.0) is new
