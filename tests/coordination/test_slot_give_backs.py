"""Giving a Redis slot back: a request's end waits for Redis to remove it, within a bound;
until Redis answered, this process's next take of the principal drops it first, and no
longer after; a take whose client left gives back what it took, and closing waits for the
removals under way. Against the real server, its answers held back or failed by a test."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError

from stateway.coordination.redis import connect
from stateway.coordination.request_slots import RedisRequestSlots
from tests.coordination.conftest import Clock

pytestmark = pytest.mark.redis

Process = Callable[..., RedisRequestSlots]


@pytest.fixture
async def process(redis_url: str, clock: Clock) -> AsyncIterator[Process]:
    """``process(**options)``: one more gateway process's slots in Redis, on one key prefix
    and the test's clock; all closed at the test's end."""
    prefix = f"test:{uuid.uuid4().hex}:"
    opened: list[RedisRequestSlots] = []

    def open_one(**options: Any) -> RedisRequestSlots:
        opened.append(RedisRequestSlots(connect(redis_url), prefix, clock=clock, **options))
        return opened[-1]

    yield open_one
    for slots in opened:
        await slots.aclose()


def unanswered(never: asyncio.Event, asked: asyncio.Event | None = None) -> Any:
    """A ``ZREM`` Redis does not answer until ``never`` is set (then removing nothing)."""

    async def zrem(*args: Any) -> int:
        if asked is not None:
            asked.set()
        await never.wait()
        return 0

    return zrem


async def test_a_requests_end_waits_for_redis_to_remove_its_slot(process: Process) -> None:
    """A client sending its next request to another replica the moment it learns of the end
    must find the slot free."""
    slots, other = process(give_back_wait=5.0), process()
    asked, answer = asyncio.Event(), asyncio.Event()
    zrem = slots._redis.zrem

    async def answered_late(*args: Any) -> Any:
        asked.set()
        await answer.wait()
        return await zrem(*args)

    slot = await slots.take("k", 1)
    assert slot is not None
    slots._redis.zrem = answered_late  # type: ignore[method-assign]
    ending = asyncio.create_task(slot.given_back())
    try:
        await asked.wait()
        done, _ = await asyncio.wait([ending], timeout=0.05)
        assert not done, "the end went on before Redis removed the slot"
    finally:
        answer.set()  # before the fixture closes it, which waits for its ZREM
    await ending
    assert await other.take("k", 1) is not None


async def test_redis_slow_to_remove_a_slot_holds_the_end_back_no_longer_than_the_wait(
    process: Process,
) -> None:
    slots = process(give_back_wait=0.05)
    never = asyncio.Event()
    slot = await slots.take("k", 1)
    assert slot is not None
    slots._redis.zrem = unanswered(never)  # type: ignore[method-assign]
    try:
        await asyncio.wait_for(slot.given_back(), 5.0)
    finally:
        never.set()  # before the fixture closes it, which waits for its ZREM


async def test_a_given_back_slot_rides_the_next_takes_only_until_redis_removed_it(
    process: Process, caplog: pytest.LogCaptureFixture
) -> None:
    """A removal answered is forgotten at once; a failed one (Redis blinked) is dropped by
    the next take, and forgotten once that take is answered: no take carries, and no
    process keeps, the slots of every request it ever ended."""
    slots = process(give_back_wait=5.0)
    carried: list[list[Any]] = []
    script, zrem = slots._take, slots._redis.zrem

    async def recorded(**kwargs: Any) -> Any:
        carried.append(kwargs["args"][4:])
        return await script(**kwargs)

    async def failing(*args: Any) -> int:
        raise RedisConnectionError("blinked")

    slots._take = recorded  # type: ignore[assignment]
    with caplog.at_level(logging.WARNING):
        for zrem_now in (zrem, failing, zrem):
            slot = await slots.take("k", 1)
            assert slot is not None
            slots._redis.zrem = zrem_now  # type: ignore[method-assign]
            await slot.given_back()
            slots._redis.zrem = zrem  # type: ignore[method-assign]
        assert await slots.take("k", 1) is not None
    assert [len(ids) for ids in carried] == [0, 0, 1, 0]
    assert caplog.records == [], "nothing went wrong that a log should tell"


async def test_a_slot_still_being_removed_is_dropped_after_another_ones_removal_was_answered(
    process: Process,
) -> None:
    slots = process(give_back_wait=5.0)
    never = asyncio.Event()
    first, second = await slots.take("k", 2), await slots.take("k", 2)
    assert first is not None
    assert second is not None
    zrem = slots._redis.zrem
    asked = asyncio.Event()
    slots._redis.zrem = unanswered(never, asked)  # type: ignore[method-assign]
    try:
        second.release()
        await asked.wait()
        slots._redis.zrem = zrem  # type: ignore[method-assign]
        await first.given_back()
        assert await slots.take("k", 2) is not None
        assert await slots.take("k", 2) is not None, "the second's slot is still held"
    finally:
        never.set()


async def test_closing_waits_for_the_removals_under_way(process: Process) -> None:
    slots, other = process(), process()
    slot = await slots.take("k", 1)
    assert slot is not None
    slot.release()
    await slots.aclose()
    assert await other.take("k", 1) is not None


async def test_a_take_cancelled_while_redis_fails_it_leaves_nothing_to_report(
    process: Process, caplog: pytest.LogCaptureFixture
) -> None:
    """The answer of a take whose client left is read by a callback nobody awaits: an
    answer that is a Redis error is no slot to give back, and no error the event loop
    logs."""
    slots = process()
    asked, answer = asyncio.Event(), asyncio.Event()

    async def failing_late(**kwargs: Any) -> Any:
        asked.set()
        await answer.wait()
        raise RedisConnectionError("blinked")

    slots._take = failing_late  # type: ignore[assignment]
    take = asyncio.create_task(slots.take("k", 1))
    await asked.wait()
    take.cancel()
    with pytest.raises(asyncio.CancelledError):
        await take
    with caplog.at_level(logging.WARNING):
        answer.set()
        for _ in range(3):  # the answer, then its callback
            await asyncio.sleep(0)
    assert caplog.records == []
    assert slots.held == 0
