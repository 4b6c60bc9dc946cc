"""Concurrent request slots: both adapters against one contract; the Redis one against the
real server (its scripts, atomic on the server), on an injected clock for its leases."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError

from stateway.coordination.redis import connect
from stateway.coordination.request_slots import LEASE, RedisRequestSlots
from stateway.core.concurrency import MemoryRequestSlots, RequestSlots
from tests.coordination.conftest import Clock


@pytest.fixture(params=["memory", pytest.param("redis", marks=pytest.mark.redis)])
async def slots(request: pytest.FixtureRequest, clock: Clock) -> AsyncIterator[RequestSlots]:
    if request.param == "memory":
        adapter: RequestSlots = MemoryRequestSlots()
    else:
        url: str = request.getfixturevalue("redis_url")
        adapter = RedisRequestSlots(connect(url), f"test:{uuid.uuid4().hex}:", clock=clock)
    yield adapter
    await adapter.aclose()


async def test_slots_up_to_the_limit_then_none_until_one_is_given_back(
    slots: RequestSlots,
) -> None:
    first, second = await slots.take("k", 2), await slots.take("k", 2)
    assert first is not None
    assert second is not None
    assert await slots.take("k", 2) is None, "a refusal takes nothing"
    assert await slots.take("other", 2) is not None, "keys are apart"

    first.release()
    first.release()  # once: the second call gives nothing more back
    await asyncio.sleep(0)  # Redis: its ZREM sent
    third = await slots.take("k", 2)
    assert third is not None
    assert await slots.take("k", 2) is None


async def test_concurrent_takes_never_hold_more_than_the_limit(slots: RequestSlots) -> None:
    taken = await asyncio.gather(*(slots.take("k", 10) for _ in range(40)))
    assert sum(slot is not None for slot in taken) == 10


async def test_the_memory_slots_keep_only_keys_with_a_slot_held() -> None:
    slots = MemoryRequestSlots()
    held = [await slots.take(key, 1) for key in "abc"]
    for slot in held:
        assert slot is not None
        slot.release()
    assert len(slots) == 0


Process = Callable[..., RedisRequestSlots]


@pytest.fixture
async def process(redis_url: str) -> AsyncIterator[Process]:
    """``process(**options)``: one more gateway process's slots in Redis, every one on the
    same key prefix (the same principals); all closed at the test's end."""
    prefix = f"test:{uuid.uuid4().hex}:"
    opened: list[RedisRequestSlots] = []

    def open_one(**options: Any) -> RedisRequestSlots:
        opened.append(RedisRequestSlots(connect(redis_url), prefix, **options))
        return opened[-1]

    yield open_one
    for slots in opened:
        await slots.aclose()


@pytest.mark.redis
async def test_a_dead_processs_slot_is_free_once_its_lease_ran_out(
    process: Process, clock: Clock
) -> None:
    dead, alive = process(clock=clock), process(clock=clock)
    assert await dead.take("k", 1) is not None  # and never renewed nor given back
    clock.now += LEASE - 1
    assert await alive.take("k", 1) is None
    clock.now += 2
    assert await alive.take("k", 1) is not None


@pytest.mark.redis
async def test_a_live_process_keeps_its_slots_by_renewing_them(
    process: Process, clock: Clock
) -> None:
    holder, other = process(clock=clock), process(clock=clock)
    assert await holder.take("k", 1) is not None
    assert await holder.take("j", 1) is not None
    clock.now += LEASE * 2 / 3
    await holder.renew()  # both in one round trip
    clock.now += LEASE * 2 / 3  # past the first lease, within the renewed one
    assert await other.take("k", 1) is None
    assert await other.take("j", 1) is None
    clock.now += LEASE / 3 + 1
    assert await other.take("k", 1) is not None


@pytest.mark.redis
async def test_a_slot_given_back_is_free_to_its_process_before_redis_heard_of_it(
    process: Process, clock: Clock
) -> None:
    """A request that follows another's end (a steered successor) must not find its slot
    held because the ZREM is still on its way: the take drops it first."""
    slots = process(clock=clock)
    never = asyncio.Event()

    async def unanswered(*args: Any) -> int:
        await never.wait()
        return 0

    try:
        slot = await slots.take("k", 1)
        assert slot is not None
        slots._redis.zrem = unanswered  # type: ignore[method-assign]
        slot.release()
        assert await slots.take("k", 1) is not None
        assert slots.held == 1
    finally:
        never.set()  # before the fixture closes it, which waits for its ZREM


@pytest.mark.redis
async def test_redis_slots_run_on_the_servers_clock_by_default(process: Process) -> None:
    slots = process()
    slot = await slots.take("k", 1)
    assert slot is not None
    assert slot.held
    assert await slots.take("k", 1) is None
    await slots.renew()
    assert await slots.take("k", 1) is None


async def test_redis_slots_let_requests_through_while_redis_is_down(
    caplog: pytest.LogCaptureFixture,
) -> None:
    slots = RedisRequestSlots(connect("redis://127.0.0.1:1/0"), "test:")
    asked = 0
    script = slots._take

    async def counted(**kwargs: Any) -> Any:
        nonlocal asked
        asked += 1
        return await script(**kwargs)

    slots._take = counted  # type: ignore[assignment]
    try:
        with caplog.at_level(logging.WARNING):
            for _ in range(3):
                slot = await slots.take("k", 1)
                assert slot is not None
                assert not slot.held
            assert asked == 1, "not asked again until a probe is answered"
        warnings = [r for r in caplog.records if "letting requests through" in r.message]
        assert len(warnings) == 1, "one warning per outage"
        told = warnings[0].getMessage()
        assert told.startswith("concurrent requests: redis: "), "the limit and Redis's own words"
        assert "127.0.0.1:1" in told
        assert slots.held == 0
    finally:
        await slots.aclose()


@pytest.mark.redis
async def test_a_process_renews_its_slots_every_third_of_a_lease(process: Process) -> None:
    """On the server's clock: a slot held past several leases is still held."""
    holder, other = process(lease=0.3), process(lease=0.3)
    assert await holder.take("k", 1) is not None
    await asyncio.sleep(0.75)  # the time itself is what is tested: 2.5 leases
    assert await other.take("k", 1) is None


@pytest.mark.redis
async def test_renewing_goes_on_after_a_renewal_fails_for_a_reason_not_redis(
    process: Process, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """One renewal raising what is no Redis error (a bug) must not stop the renewals
    for good, which would let every held slot run out and the limit go unenforced; the
    bug is logged, with its traceback."""
    holder, other = process(lease=0.3), process(lease=0.3)
    renew, failed = holder.renew, []

    async def failing_once() -> None:
        if not failed:
            failed.append(True)
            raise RuntimeError("a bug")
        await renew()

    monkeypatch.setattr(holder, "renew", failing_once)
    assert await holder.take("k", 1) is not None
    await asyncio.sleep(0.75)  # the time itself is what is tested: 2.5 leases
    assert failed
    assert await other.take("k", 1) is None
    (logged,) = [r for r in caplog.records if r.exc_info is not None]
    assert logged.getMessage() == "concurrent requests: renewing the slots' leases failed"
    assert logged.exc_info[1] is not None
    assert str(logged.exc_info[1]) == "a bug"


@pytest.mark.redis
async def test_a_take_cancelled_while_redis_answers_holds_no_slot(
    process: Process, clock: Clock
) -> None:
    """A client that leaves while its request's take is on its way (the script ran on the
    server, its answer not yet read) must not leave a slot held for a whole lease."""
    slots, other = process(clock=clock), process(clock=clock)
    ran, answer = asyncio.Event(), asyncio.Event()
    script = slots._take

    async def answered_late(**kwargs: Any) -> Any:
        taken = await script(**kwargs)
        ran.set()
        await answer.wait()
        return taken

    slots._take = answered_late  # type: ignore[assignment]
    try:
        take = asyncio.create_task(slots.take("k", 1))
        await ran.wait()
        take.cancel()
        with pytest.raises(asyncio.CancelledError):
            await take
        answer.set()
        for _ in range(100):  # the answer, then its ZREM
            if await other.take("k", 1) is not None:
                break
            await asyncio.sleep(0.01)
        else:
            raise AssertionError("the cancelled take's slot is still held")
        assert slots.held == 0
    finally:
        answer.set()  # before the fixture closes them


@pytest.mark.redis
async def test_a_slot_whose_give_back_failed_is_free_to_its_process_once_redis_is_back(
    process: Process, clock: Clock
) -> None:
    """A request that ended while Redis blinked (its ZREM failed) must not keep its
    principal's next request out for a lease once Redis answers again."""
    slots = process(clock=clock)
    zrem = slots._redis.zrem

    async def failing(*args: Any) -> int:
        raise RedisConnectionError("blinked")

    slot = await slots.take("k", 1)
    assert slot is not None
    slots._redis.zrem = failing  # type: ignore[method-assign]
    slot.release()
    await asyncio.wait(slots._removing)
    slots._redis.zrem = zrem  # type: ignore[method-assign]
    assert await slots.take("k", 1) is not None


@pytest.mark.redis
async def test_a_renewal_redis_fails_lets_requests_through_naming_the_cause(
    process: Process, clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    slots = process(clock=clock)
    assert await slots.take("k", 1) is not None

    async def failing(**kwargs: Any) -> Any:
        raise RedisConnectionError("blinked")

    slots._renew = failing  # type: ignore[assignment]
    with caplog.at_level(logging.WARNING):
        await slots.renew()
    assert [r.getMessage() for r in caplog.records] == [
        "concurrent requests: redis: blinked; letting requests through"
    ]
    slot = await slots.take("k", 1)
    assert slot is not None
    assert not slot.held, "let through, not asked, while Redis is away"


@pytest.mark.redis
async def test_a_principals_slots_are_one_sorted_set_at_the_documented_key(
    redis_url: str, clock: Clock
) -> None:
    """Replicas share a principal's slots by its key alone, whichever version each runs."""
    prefix = f"test:{uuid.uuid4().hex}:"
    slots, reader = RedisRequestSlots(connect(redis_url), prefix, clock=clock), connect(redis_url)
    try:
        assert await slots.take("principal", 2) is not None
        assert await slots.take("principal", 2) is not None
        keys = await reader.keys(prefix + "*")
        assert keys == [f"{prefix}slots:{hashlib.sha256(b'principal').hexdigest()}".encode()]
        assert await reader.zcard(keys[0]) == 2
    finally:
        await slots.aclose()
        await reader.aclose()
