"""Rate limits while Redis fails: the buckets and the slots let requests through, and a
Redis that does not answer (a blackhole: each call waits out ``redis_timeout``) holds up
no request after its first failure (a background probe waits on it instead), nor each
limit of one request."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from stateway.config import Overrides, load_config
from stateway.coordination.factory import build_limits
from stateway.coordination.outage import RETRY_AFTER, RedisOutage
from stateway.coordination.redis import connect
from stateway.coordination.request_slots import RedisRequestSlots
from stateway.coordination.token_buckets import RedisTokenBuckets
from stateway.core.principal import Principal

ALICE = Principal("acme", "alice")


async def test_a_request_asks_a_failing_redis_once_whatever_its_limits(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The buckets and the slots are one Redis, so one outage: once the first take of a
    request fails, its other takes (tokens, requests, a slot) do not ask again, which
    would make a silent Redis cost it a whole timeout for each limit."""
    env = {
        "STATEWAY_REDIS_URL": "redis://127.0.0.1:1/0",
        "STATEWAY_REQUESTS_PER_MINUTE": "60",
        "STATEWAY_TOKENS_PER_MINUTE": "1000",
        "STATEWAY_CONCURRENT_REQUESTS": "2",
    }
    limits = build_limits(load_config(Overrides(), env))
    assert limits is not None
    buckets, slots = limits._buckets, limits._slots
    assert isinstance(buckets, RedisTokenBuckets)
    assert isinstance(slots, RedisRequestSlots)
    asked = 0

    def counted(script: Any) -> Any:
        async def ask(**kwargs: Any) -> Any:
            nonlocal asked
            asked += 1
            return await script(**kwargs)

        return ask

    buckets._take = counted(buckets._take)  # type: ignore[method-assign]
    slots._take = counted(slots._take)  # type: ignore[method-assign]
    try:
        with caplog.at_level(logging.WARNING):
            slot = await limits.admit(ALICE)
        assert slot is not None
        assert not slot.held
        assert asked == 1
        warnings = [r for r in caplog.records if "letting requests through" in r.message]
        assert len(warnings) == 1, "one warning per outage"
    finally:
        await limits.aclose()


class Pauses:
    """The outage's pauses between probes, each ended by the test (:meth:`end_one`)."""

    def __init__(self) -> None:
        self.ends: asyncio.Queue[None] = asyncio.Queue()
        self.taken = 0
        self.pausing = asyncio.Event()

    async def __call__(self, seconds: float) -> None:
        assert seconds == RETRY_AFTER
        self.taken += 1
        self.pausing.set()
        await self.ends.get()

    def end_one(self) -> None:
        self.ends.put_nowait(None)


class Probe:
    """A fake ``PING``: silent (it waits until answered or failed), counted."""

    def __init__(self) -> None:
        self.pings = 0
        self.asked = asyncio.Event()
        self.outcome: asyncio.Future[None] | None = None

    async def __call__(self) -> None:
        self.pings += 1
        self.outcome = asyncio.get_running_loop().create_future()
        self.asked.set()
        await self.outcome

    async def reply(self, error: Exception | None = None) -> None:
        """Answer (or fail) the ping under way, once one is."""
        async with asyncio.timeout(5):
            await self.asked.wait()
        self.asked.clear()
        assert self.outcome is not None
        if error is None:
            self.outcome.set_result(None)
        else:
            self.outcome.set_exception(error)


def failing_buckets(outage: RedisOutage) -> tuple[RedisTokenBuckets, list[int]]:
    """Buckets whose every take Redis fails, counted."""
    buckets = RedisTokenBuckets(connect("redis://127.0.0.1:1/0"), "test:", outage=outage)
    asked = [0]

    async def refused(**kwargs: Any) -> Any:
        asked[0] += 1
        raise RedisConnectionError("refused")

    buckets._take = refused  # type: ignore[assignment]
    return buckets, asked


async def test_after_a_failure_no_request_asks_redis_until_a_probe_is_answered(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A silent Redis holds up no request after its first failure: the requests pass
    at once while one probe at a time waits on it, every RETRY_AFTER."""
    pauses, probe = Pauses(), Probe()
    outage = RedisOutage(logging.getLogger("test.outage"), "rate limits", probe, sleep=pauses)
    buckets, asked = failing_buckets(outage)
    try:
        with caplog.at_level(logging.INFO, logger="test.outage"):
            assert await buckets.take("k", 1, 1, 1) == 0.0
            pauses.end_one()
            await probe.reply(RedisTimeoutError("no answer"))  # a probe waited it out
            pauses.end_one()
            async with asyncio.timeout(5):
                await probe.asked.wait()  # the next probe is waiting on Redis now
            for _ in range(3):
                assert await buckets.take("k", 1, 1, 1) == 0.0  # not held by it
            assert (asked[0], probe.pings) == (1, 2)
            probing = outage._probing
            assert probing is not None
            await probe.reply()  # Redis answers again
            await asyncio.wait_for(probing, 5)
            assert not outage.skips()
            assert await buckets.take("k", 1, 1, 1) == 0.0
            assert asked[0] == 2, "asked again once a probe was answered"
        assert [r.getMessage() for r in caplog.records] == [
            "rate limits: redis: refused; letting requests through",  # refused again since
        ]
    finally:
        await buckets.aclose()
    assert outage._probing is None


async def test_closing_ends_the_probe_and_starts_no_other() -> None:
    pauses, probe = Pauses(), Probe()
    outage = RedisOutage(logging.getLogger("test.outage"), "rate limits", probe, sleep=pauses)
    buckets, _ = failing_buckets(outage)
    assert await buckets.take("k", 1, 1, 1) == 0.0
    probing = outage._probing
    assert probing is not None
    await asyncio.wait_for(pauses.pausing.wait(), 5)  # the probe is in its pause

    await buckets.aclose()

    assert probing.done()
    assert outage._probing is None
    outage.failed(RedisConnectionError("refused"))  # a call that failed as it closed
    assert outage._probing is None
    assert pauses.taken == 1


async def test_a_probe_that_is_no_outage_is_logged_and_probing_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    pauses, probe = Pauses(), Probe()
    outage = RedisOutage(logging.getLogger("test.outage"), "rate limits", probe, sleep=pauses)
    buckets, _ = failing_buckets(outage)
    try:
        assert await buckets.take("k", 1, 1, 1) == 0.0
        pauses.end_one()
        await probe.reply(ValueError("a bug"))
        pauses.end_one()
        probing = outage._probing
        assert probing is not None
        await probe.reply()
        await asyncio.wait_for(probing, 5)
        assert not outage.skips()
        failures = [r for r in caplog.records if r.levelno == logging.ERROR]
        assert [r.getMessage() for r in failures] == ["rate limits: probing redis failed"]
    finally:
        await buckets.aclose()


def probes_pending() -> list[asyncio.Task[Any]]:
    """The outage probes still running in this loop."""
    return [
        task
        for task in asyncio.all_tasks()
        if not task.done() and "_probe_until_answered" in repr(task.get_coro())
    ]


async def test_calls_failing_together_start_one_probe_and_closing_ends_it() -> None:
    """Requests in flight when Redis went silent fail together: one probe for them all,
    and none left running once the outage is closed."""
    pauses, probe = Pauses(), Probe()
    outage = RedisOutage(logging.getLogger("test.outage"), "rate limits", probe, sleep=pauses)
    for _ in range(3):
        outage.failed(RedisTimeoutError("no answer"))
    await asyncio.wait_for(pauses.pausing.wait(), 5)
    assert len(probes_pending()) == 1

    await outage.aclose()

    assert probes_pending() == []
    assert pauses.taken == 1


async def test_a_probe_asks_nothing_once_a_call_was_answered_meanwhile() -> None:
    """A call sent before the failure and answered after it ends the outage: the probe
    stops without a ping, and the next failure starts another."""
    pauses, probe = Pauses(), Probe()
    outage = RedisOutage(logging.getLogger("test.outage"), "rate limits", probe, sleep=pauses)
    outage.failed(RedisTimeoutError("no answer"))
    probing = outage._probing
    assert probing is not None
    outage.answered()
    pauses.end_one()
    await asyncio.wait_for(probing, 5)
    assert probe.pings == 0
    assert outage._probing is None
    try:
        outage.failed(RedisTimeoutError("no answer"))
        assert outage._probing is not None, "the next outage is probed too"
        assert outage.skips()
    finally:
        await outage.aclose()


async def test_every_outage_is_probed_until_redis_answers() -> None:
    pauses, probe = Pauses(), Probe()
    outage = RedisOutage(logging.getLogger("test.outage"), "rate limits", probe, sleep=pauses)
    try:
        for _ in range(2):
            outage.failed(RedisConnectionError("refused"))
            probing = outage._probing
            assert probing is not None
            pauses.end_one()
            await probe.reply()
            await asyncio.wait_for(probing, 5)
            assert not outage.skips()
        assert (pauses.taken, probe.pings) == (2, 2)
    finally:
        await outage.aclose()


async def test_slots_close_the_outage_they_made_themselves() -> None:
    """Slots built without the factory's shared outage probe Redis themselves: closing
    them ends that probe before their client is closed."""
    slots = RedisRequestSlots(connect("redis://127.0.0.1:1/0"), "test:")

    async def refused(**kwargs: Any) -> Any:
        raise RedisConnectionError("refused")

    slots._take = refused  # type: ignore[assignment]
    slot = await slots.take("k", 1)
    assert slot is not None
    assert len(probes_pending()) == 1

    await slots.aclose()

    assert probes_pending() == []


async def test_a_redis_that_answers_pings_but_not_the_limits_is_warned_about_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A Redis out of memory (or a replica after a failover) answers ``PING`` and fails
    every write: each probe lets one request ask again, which fails again. That is one
    outage, warned about once, not a warning and an 'answers again' every RETRY_AFTER;
    Redis answering again is logged once a call of the limits' own is answered."""
    pauses, probe = Pauses(), Probe()
    outage = RedisOutage(logging.getLogger("test.outage"), "rate limits", probe, sleep=pauses)
    buckets = RedisTokenBuckets(connect("redis://127.0.0.1:1/0"), "test:", outage=outage)
    full = ResponseError("OOM command not allowed when used memory > 'maxmemory'.")
    outcomes: list[Exception | None] = [full, full, full, None, None]

    async def take(**kwargs: Any) -> Any:
        outcome = outcomes.pop(0)
        if outcome is not None:
            raise outcome
        return 0

    buckets._take = take  # type: ignore[assignment]
    try:
        with caplog.at_level(logging.INFO, logger="test.outage"):
            assert await buckets.take("k", 1, 1, 1) == 0.0
            for _ in range(2):  # a probe answered, the limits asked again: refused again
                probing = outage._probing
                assert probing is not None
                pauses.end_one()
                await probe.reply()
                await asyncio.wait_for(probing, 5)
                assert await buckets.take("k", 1, 1, 1) == 0.0
            assert outage.skips()
            probing = outage._probing
            assert probing is not None
            pauses.end_one()
            await probe.reply()
            await asyncio.wait_for(probing, 5)
            for _ in range(2):
                assert await buckets.take("k", 1, 1, 1) == 0.0
            assert outcomes == []
        assert [r.getMessage() for r in caplog.records] == [
            f"rate limits: redis: {full}; letting requests through",
            "rate limits: redis answers again; applying the limits",
        ]
    finally:
        await buckets.aclose()
