"""A Redis gone silent (a network partition, a frozen host: connections open, no answer
ever): each command fails within the client's timeout instead of waiting for ever (a
keyed request's 503, a cancel's; rate limits let requests through), the client answers
again as soon as Redis does, and subscriptions, which wait on their own terms, outlive
quiet spells longer than that timeout."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import AsyncIterator

import pytest

from stateway.coordination.factory import build_coordination
from stateway.coordination.redis import RedisCancelSignals, RedisCommandResults, connect
from stateway.coordination.token_buckets import RedisTokenBuckets
from stateway.coordination_config import CoordinationConfig
from stateway.core.coordination import CommandKey, Outcome
from stateway.core.errors import StorageError
from tests.coordination.test_event_fanout import until_subscribed
from tests.support.switch import Switch

pytestmark = pytest.mark.redis

TIMEOUT = 0.2
"""Seconds a command waits for Redis here."""
BOUND = 30.0
"""Seconds a failure is given to come: one waiting longer hangs, and fails its test."""
IN_TIME = 10 * TIMEOUT
"""Seconds a claim's failure comes within: one timeout, not redis-py's default of 5 s nor
a timeout retried after a backoff."""


@pytest.fixture
async def switch(redis_url: str) -> AsyncIterator[Switch]:
    async with Switch(redis_url) as switch:
        yield switch


@pytest.fixture
def prefix() -> str:
    return f"test:{uuid.uuid4().hex}:"


async def test_a_claim_fails_in_time_then_redis_answers_again(switch: Switch, prefix: str) -> None:
    config = CoordinationConfig(redis_url=switch.url, key_prefix=prefix, redis_timeout=TIMEOUT)
    results, signals = build_coordination(config)
    assert isinstance(results, RedisCommandResults)
    assert signals is not None
    await signals.aclose()
    try:
        assert await results.claim(CommandKey("t", "p", "before"), "f") is None
        switch.silence()
        started = asyncio.get_running_loop().time()
        async with asyncio.timeout(BOUND):
            with pytest.raises(StorageError) as raised:
                await results.claim(CommandKey("t", "p", "during"), "f")
        assert raised.value.status == 503
        assert asyncio.get_running_loop().time() - started < IN_TIME

        switch.on()
        async with asyncio.timeout(BOUND):
            await results.complete(CommandKey("t", "p", "before"), Outcome("f", b"ran"))
            assert await results.claim(CommandKey("t", "p", "before"), "f") == Outcome("f", b"ran")
            assert await results.claim(CommandKey("t", "p", "during"), "f") is None
    finally:
        await results.aclose()


async def test_a_command_that_timed_out_is_not_sent_again(prefix: str) -> None:
    """An unresponsive Redis costs one timeout, not one per retry: only a connection
    found closed is replaced and the command sent again (redis-py's default retries
    timeouts too, three times, with a backoff)."""
    accepted = 0

    async def frozen(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal accepted
        accepted += 1
        await reader.read()  # hears everything, answers nothing
        writer.close()

    server = await asyncio.start_server(frozen, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    results = RedisCommandResults(connect(f"redis://127.0.0.1:{port}/0", timeout=TIMEOUT), prefix)
    try:
        async with asyncio.timeout(BOUND):
            with pytest.raises(StorageError):
                await results.claim(CommandKey("t", "p", "k"), "f")
        assert accepted == 1
    finally:
        await results.aclose()
        server.close()


async def test_rate_limits_let_requests_through_in_time(switch: Switch, prefix: str) -> None:
    buckets = RedisTokenBuckets(connect(switch.url, timeout=TIMEOUT), prefix)
    try:
        assert await buckets.take("k", 60, 1, 1) == 0.0
        switch.silence()
        async with asyncio.timeout(BOUND):
            assert await buckets.take("k", 60, 1, 1) == 0.0
    finally:
        await buckets.aclose()


async def test_a_cancel_signal_fails_in_time(switch: Switch, prefix: str) -> None:
    signals = RedisCancelSignals(connect(switch.url, timeout=TIMEOUT), prefix)
    try:
        await signals.send("t", "resp_1")
        switch.silence()
        async with asyncio.timeout(BOUND):
            with pytest.raises(StorageError):
                await signals.send("t", "resp_2")
    finally:
        await signals.aclose()


async def test_a_subscription_outlives_quiet_spells_longer_than_the_command_timeout(
    redis_url: str, prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Its reads wait for the heartbeat, not the command timeout: nothing is warned of,
    nothing subscribed again, and a cancel after the quiet spell is heard."""
    owner = RedisCancelSignals(connect(redis_url, timeout=TIMEOUT), prefix)
    sender = RedisCancelSignals(connect(redis_url), prefix)
    heard: asyncio.Queue[tuple[str, str]] = asyncio.Queue()
    with caplog.at_level(logging.INFO, logger="stateway.coordination"):
        await owner.start(lambda t, r: heard.put_nowait((t, r)))
        try:
            await until_subscribed(redis_url, prefix + "cancel")
            await asyncio.sleep(5 * TIMEOUT)  # quiet, for five command timeouts
            await sender.send("default", "resp_1")
            assert await asyncio.wait_for(heard.get(), 10) == ("default", "resp_1")
        finally:
            for signals in (owner, sender):
                await signals.aclose()
    assert not [r for r in caplog.records if r.name.startswith("stateway.coordination")]
