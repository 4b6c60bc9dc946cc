"""Event fan-out through the real Redis: batches published by one process reach the
followers of that response in others, in order; a channel is subscribed while followed
only; Redis being down loses batches (followers read the store), never raises."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import AsyncIterator

import pytest
from redis.asyncio import Redis

from stateway.coordination.event_fanout import MAX_OUTBOX, RedisEventFanout, decode, encode
from stateway.coordination.redis import connect
from stateway.core.coordination import Published
from stateway.core.ports import EventBatch


def batch(first: int, end: int) -> EventBatch:
    return EventBatch(first, [b'{"sequence_number":%d}' % n for n in range(first, end)])


def test_a_batch_survives_its_message() -> None:
    for sent in (Published(batch(0, 1), False), Published(batch(7, 10), True)):
        assert decode(encode(sent.batch, sent.last)) == sent
    for junk in (b"", b"7 1", b"x 1\n{}", b"7 2\n{}", b"7 1\n", b"-1 0\n{}"):
        assert decode(junk) is None
    mark = Published(EventBatch(7, []), False)
    assert decode(encode(mark.batch, mark.last)) == mark


@pytest.mark.redis
async def test_a_question_reaches_the_listening_processes_and_the_mark_its_asker(
    pair: tuple[RedisEventFanout, RedisEventFanout], redis_url: str
) -> None:
    owner, follower = pair
    asked: list[tuple[str, str]] = []

    def answer(tenant_id: str, response_id: str) -> None:
        asked.append((tenant_id, response_id))
        owner.publish(tenant_id, response_id, EventBatch(7, []), False)

    await owner.start(answer)
    await until_subscribed(redis_url, owner.channel("t", "resp_1").rpartition(":")[0])
    async with follower.follow("t", "resp_1") as following:
        await until_subscribed(redis_url, owner.channel("t", "resp_1"))
        follower.ask("t", "resp_1")
        assert await following.next(30) == Published(EventBatch(7, []), False)
    assert asked == [("t", "resp_1")], "heard by the process listening, not by the asker"


async def test_listening_without_redis_waits_for_it(caplog: pytest.LogCaptureFixture) -> None:
    fanout = RedisEventFanout(connect("redis://127.0.0.1:1/0"), "test:")
    try:
        with caplog.at_level(logging.WARNING):
            await fanout.start(lambda tenant_id, response_id: None)
        assert "Redis is unreachable" in caplog.text
        fanout.ask("t", "resp_1")  # dropped, never raised
    finally:
        await fanout.aclose()


@pytest.fixture
async def pair(redis_url: str) -> AsyncIterator[tuple[RedisEventFanout, RedisEventFanout]]:
    prefix = f"test:{uuid.uuid4().hex}:"
    owner, follower = (
        RedisEventFanout(connect(redis_url), prefix),
        RedisEventFanout(connect(redis_url), prefix),
    )
    yield owner, follower
    await owner.aclose()
    await follower.aclose()


async def subscribers(redis_url: str, channel: str) -> int:
    client = Redis.from_url(redis_url)
    try:
        counts = await client.pubsub_numsub(channel)
        return int(counts[0][1])
    finally:
        await client.aclose()


async def until_subscribed(redis_url: str, channel: str) -> None:
    """Wait until Redis has taken the subscription (SUBSCRIBE is only sent by follow)."""
    for _ in range(1000):
        if await subscribers(redis_url, channel):
            return
        await asyncio.sleep(0.005)
    raise AssertionError(f"{channel} was never subscribed")


@pytest.mark.redis
async def test_followers_elsewhere_get_each_batch_in_order(
    pair: tuple[RedisEventFanout, RedisEventFanout], redis_url: str
) -> None:
    owner, follower = pair
    async with (
        follower.follow("t", "resp_1") as first,
        follower.follow("t", "resp_1") as second,
        follower.follow("t", "resp_2") as other,
    ):
        await until_subscribed(redis_url, owner.channel("t", "resp_2"))
        assert await subscribers(redis_url, owner.channel("t", "resp_1")) == 1, "one per process"
        for n in range(5):
            owner.publish("t", "resp_1", batch(n, n + 1), n == 4)
        owner.publish("t", "resp_2", batch(0, 2), True)

        for following in (first, second):
            got = [await following.next(30) for _ in range(5)]
            assert got == [Published(batch(n, n + 1), n == 4) for n in range(5)]
        assert await other.next(30) == Published(batch(0, 2), True)
        assert first.pending() == 0
        assert await first.next(0.01) is None, "nothing more came"
    assert await subscribers(redis_url, owner.channel("t", "resp_1")) == 0, "let go with the last"


@pytest.mark.redis
async def test_pending_counts_the_bytes_received_and_not_taken(
    pair: tuple[RedisEventFanout, RedisEventFanout], redis_url: str
) -> None:
    owner, follower = pair
    async with follower.follow("t", "resp_1") as following:
        await until_subscribed(redis_url, owner.channel("t", "resp_1"))
        owner.publish("t", "resp_1", batch(0, 3), False)
        owner.publish("t", "resp_1", batch(3, 4), True)
        for _ in range(1000):  # until both arrived
            if following.pending() == sum(map(len, batch(0, 4).payloads)):
                break
            await asyncio.sleep(0.005)
        assert following.pending() == sum(map(len, batch(0, 4).payloads))
        assert await following.next(30) == Published(batch(0, 3), False)
        assert following.pending() == len(batch(3, 4).payloads[0])


@pytest.mark.redis
async def test_malformed_messages_are_ignored(
    pair: tuple[RedisEventFanout, RedisEventFanout], redis_url: str
) -> None:
    owner, follower = pair
    publisher = Redis.from_url(redis_url)
    try:
        async with follower.follow("t", "resp_1") as following:
            await until_subscribed(redis_url, owner.channel("t", "resp_1"))
            await publisher.publish(owner.channel("t", "resp_1"), b"not a batch")
            owner.publish("t", "resp_1", batch(0, 1), True)
            assert await following.next(30) == Published(batch(0, 1), True)
    finally:
        await publisher.aclose()


async def test_without_redis_batches_are_dropped_and_followers_wait_for_the_store(
    caplog: pytest.LogCaptureFixture,
) -> None:
    fanout = RedisEventFanout(connect("redis://127.0.0.1:1/0"), "test:")
    try:
        with caplog.at_level(logging.WARNING):
            async with fanout.follow("t", "resp_1") as following:
                fanout.publish("t", "resp_1", batch(0, 1), False)
                fanout.publish("t", "resp_1", batch(1, 2), False)
                assert await following.next(0.05) is None
            for _ in range(1000):
                if "followers elsewhere read the store" in caplog.text:
                    break
                await asyncio.sleep(0.005)
        assert "subscribing failed" in caplog.text
        published = [r for r in caplog.records if "followers elsewhere" in r.message]
        assert len(published) == 1, "one warning per outage"
    finally:
        await fanout.aclose()


async def test_batches_past_the_outbox_bound_are_dropped(
    caplog: pytest.LogCaptureFixture,
) -> None:
    fanout = RedisEventFanout(connect("redis://127.0.0.1:1/0"), "test:")
    try:
        with caplog.at_level(logging.WARNING):
            for n in range(MAX_OUTBOX + 1):  # all queued before the sender first runs
                fanout.publish("t", "resp_1", batch(n, n + 1), False)
        assert "too many batches are waiting to be published" in caplog.text
    finally:
        await fanout.aclose()


@pytest.mark.redis
async def test_following_survives_its_connection_being_killed(
    redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    prefix = f"test:{uuid.uuid4().hex}:"
    name = f"fanout-{uuid.uuid4().hex[:12]}"
    owner = RedisEventFanout(connect(redis_url), prefix)
    follower = RedisEventFanout(Redis.from_url(redis_url, client_name=name), prefix)
    admin = Redis.from_url(redis_url)
    try:
        async with follower.follow("t", "resp_1") as following:
            channel = owner.channel("t", "resp_1")
            await until_subscribed(redis_url, channel)
            clients = await admin.client_list(_type="pubsub")
            (mine,) = [c["id"] for c in clients if c.get("name") == name]
            with caplog.at_level(logging.WARNING):
                await admin.client_kill_filter(_id=mine)
                for _ in range(2000):  # until it has subscribed again
                    if "subscribing again" in caplog.text and await subscribers(redis_url, channel):
                        break
                    await asyncio.sleep(0.005)
            owner.publish("t", "resp_1", batch(0, 1), True)
            assert await following.next(30) == Published(batch(0, 1), True)
    finally:
        await admin.aclose()
        await owner.aclose()
        await follower.aclose()
