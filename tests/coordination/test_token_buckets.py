"""Both token bucket adapters against one contract, on an injected clock: a minute's
allowance at once, then refills at a sixtieth of it a second; a debt is waited off. The
Redis one against the real server (its script, atomic on the server)."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

from stateway.coordination.redis import connect
from stateway.coordination.token_buckets import MemoryTokenBuckets, RedisTokenBuckets
from stateway.core.limits import ANY, TokenBuckets
from tests.coordination.conftest import Clock


@pytest.fixture(params=["memory", pytest.param("redis", marks=pytest.mark.redis)])
async def buckets(request: pytest.FixtureRequest, clock: Clock) -> AsyncIterator[TokenBuckets]:
    if request.param == "memory":
        adapter: TokenBuckets = MemoryTokenBuckets(clock)
    else:
        url: str = request.getfixturevalue("redis_url")
        adapter = RedisTokenBuckets(connect(url), f"test:{uuid.uuid4().hex}:", clock=clock)
    yield adapter
    await adapter.aclose()


async def test_a_full_minute_passes_then_requests_wait_for_a_refill(
    buckets: TokenBuckets, clock: Clock
) -> None:
    for _ in range(6):
        assert await buckets.take("k", 6, 1, 1) == 0.0
    assert await buckets.take("k", 6, 1, 1) == pytest.approx(10.0)  # 6 a minute: one per 10 s

    clock.now += 4.0
    assert await buckets.take("k", 6, 1, 1) == pytest.approx(6.0), "a refusal takes nothing"
    clock.now += 6.0
    assert await buckets.take("k", 6, 1, 1) == 0.0
    assert await buckets.take("k", 6, 1, 1) == pytest.approx(10.0)


async def test_an_idle_bucket_holds_one_minute_at_most(buckets: TokenBuckets, clock: Clock) -> None:
    for _ in range(3):
        assert await buckets.take("k", 3, 1, 1) == 0.0
    clock.now += 3600.0
    for _ in range(3):
        assert await buckets.take("k", 3, 1, 1) == 0.0
    assert await buckets.take("k", 3, 1, 1) > 0


async def test_a_debt_is_waited_off_before_the_next_admission(
    buckets: TokenBuckets, clock: Clock
) -> None:
    assert await buckets.take("tokens", 600, 1, 0) == 0.0  # admitted, nothing taken
    assert await buckets.take("tokens", 600, ANY, 1500) == 0.0  # the run used 1500
    # 600 - 1500 = -900 left; at 10 tokens a second, one token back takes 90.1 s
    assert await buckets.take("tokens", 600, 1, 0) == pytest.approx(90.1)
    clock.now += 91.0
    assert await buckets.take("tokens", 600, 1, 0) == 0.0


async def test_buckets_of_other_keys_are_apart(buckets: TokenBuckets) -> None:
    assert await buckets.take("a", 1, 1, 1) == 0.0
    assert await buckets.take("a", 1, 1, 1) > 0
    assert await buckets.take("b", 1, 1, 1) == 0.0


async def test_concurrent_takes_never_pass_more_than_the_allowance(
    buckets: TokenBuckets,
) -> None:
    taken = await asyncio.gather(*(buckets.take("k", 10, 1, 1) for _ in range(40)))
    assert sum(wait == 0.0 for wait in taken) == 10


async def test_the_memory_buckets_drop_full_ones_past_their_bound(clock: Clock) -> None:
    buckets = MemoryTokenBuckets(clock, max_keys=3)
    for key in "abc":
        await buckets.take(key, 60, 1, 1)
    clock.now += 1.0  # a, b and c are full again
    await buckets.take("d", 60, 1, 1)
    assert len(buckets) == 1


@pytest.mark.redis
async def test_redis_buckets_run_on_the_servers_clock_by_default(redis_url: str) -> None:
    buckets = RedisTokenBuckets(connect(redis_url), f"test:{uuid.uuid4().hex}:")
    try:
        assert await buckets.take("k", 1, 1, 1) == 0.0
        wait = await buckets.take("k", 1, 1, 1)
        assert 0 < wait <= 60
    finally:
        await buckets.aclose()


async def test_redis_buckets_let_requests_through_while_redis_is_down(
    caplog: pytest.LogCaptureFixture,
) -> None:
    client = connect("redis://127.0.0.1:1/0")
    buckets = RedisTokenBuckets(client, "test:")
    asked = 0
    script = buckets._take

    async def counted(**kwargs: Any) -> Any:
        nonlocal asked
        asked += 1
        return await script(**kwargs)

    buckets._take = counted  # type: ignore[assignment]
    try:
        with caplog.at_level(logging.WARNING):
            for _ in range(3):
                assert await buckets.take("k", 1, 1, 1) == 0.0
            assert asked == 1, "not asked again until a probe is answered"
        warnings = [r for r in caplog.records if "letting requests through" in r.message]
        assert len(warnings) == 1, "one warning per outage"
        told = warnings[0].getMessage()
        assert told.startswith("rate limits: redis: "), "the limit and Redis's own words"
        assert "127.0.0.1:1" in told
    finally:
        await buckets.aclose()


@pytest.mark.redis
async def test_a_bucket_is_one_hash_at_the_documented_key(redis_url: str, clock: Clock) -> None:
    """Replicas share a key's bucket by the key alone, whichever version each runs."""
    prefix = f"test:{uuid.uuid4().hex}:"
    buckets, reader = RedisTokenBuckets(connect(redis_url), prefix, clock=clock), connect(redis_url)
    try:
        assert await buckets.take("principal", 60, 1, 1) == 0.0
        keys = await reader.keys(prefix + "*")
        assert keys == [f"{prefix}rate:{hashlib.sha256(b'principal').hexdigest()}".encode()]
        assert float(await reader.hget(keys[0], "level")) == 59.0
    finally:
        await buckets.aclose()
        await reader.aclose()
