"""Rate limits while Redis fails: the buckets and the slots let requests through, and a
Redis that does not answer (a blackhole: each call waits out ``redis_timeout``) costs one
call at a time its wait, not every request, nor each limit of one request."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError

from stateway.config import Overrides, load_config
from stateway.coordination.factory import build_limits
from stateway.coordination.outage import RETRY_AFTER
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


async def test_after_the_pause_one_call_asks_redis_again_while_the_others_go_through() -> None:
    """Calls made while that one waits for Redis do not wait on it too."""
    now = [0.0]
    buckets = RedisTokenBuckets(connect("redis://127.0.0.1:1/0"), "test:", monotonic=lambda: now[0])
    asked = 0
    waiting, answer = asyncio.Event(), asyncio.Event()

    async def silent(**kwargs: Any) -> Any:
        nonlocal asked
        asked += 1
        if asked > 1:
            waiting.set()
            await answer.wait()  # a blackhole, until its timeout
        raise RedisConnectionError("no answer")

    buckets._take = silent  # type: ignore[assignment]
    try:
        assert await buckets.take("k", 1, 1, 1) == 0.0
        now[0] += RETRY_AFTER
        probe = asyncio.create_task(buckets.take("k", 1, 1, 1))
        async with asyncio.timeout(5):
            await waiting.wait()
            assert await buckets.take("k", 1, 1, 1) == 0.0
        assert asked == 2, "asked by one call at a time"
        answer.set()
        assert await probe == 0.0
        now[0] += RETRY_AFTER - 0.1
        assert await buckets.take("k", 1, 1, 1) == 0.0
        assert asked == 2, "the pause starts again at the failure"
    finally:
        await buckets.aclose()
