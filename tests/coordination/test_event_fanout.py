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

from stateway.coordination import event_fanout, subscription
from stateway.coordination.event_fanout import (
    MAX_OUTBOX,
    RedisEventFanout,
    decode,
    encode,
    encode_mark,
)
from stateway.coordination.redis import connect
from stateway.core.coordination import Published
from stateway.core.ports import EventBatch
from tests.support.switch import Switch


def batch(first: int, end: int) -> EventBatch:
    return EventBatch(first, [b'{"sequence_number":%d}' % n for n in range(first, end)])


def test_a_batch_survives_its_message() -> None:
    for sent in (Published(batch(0, 1), False), Published(batch(7, 10), True)):
        assert decode(encode(sent.batch, sent.last)) == sent
    for junk in (b"", b"7 1", b"x 1\n{}", b"7 2\n{}", b"7 1\n", b"-1 0\n{}"):
        assert decode(junk) is None
    for question in ("0f3a9c", None):
        mark = Published(EventBatch(7, []), False, question)
        assert decode(encode_mark(7, question)) == mark
    for junk in (b"7 1 0f3a\n", b"7 0 0f3a\n{}", b"7 0 0f 3a\n", b"7 0 0f-3a\n", b"7 0 \n"):
        assert decode(junk) is None


def test_a_batchs_payloads_are_split_at_newlines_only() -> None:
    """An event's JSON may hold spaces (a text delta's words); only newlines part events."""
    sent = EventBatch(3, [b'{"delta": "two words"}', b'{"text": "a\\nb c"}'])
    assert decode(encode(sent, True)) == Published(sent, True)


def decode_before_question_ids(data: bytes) -> Published | None:
    """:func:`decode` as processes older than question ids have it (verbatim)."""
    header, newline, body = data.partition(b"\n")
    first, _, last = header.partition(b" ")
    if not (newline and first.isdigit() and last in (b"0", b"1")):
        return None
    if not body:  # a mark; a run's last batch holds at least its terminal event
        return None if last == b"1" else Published(EventBatch(int(first), []), False)
    return Published(EventBatch(int(first), body.split(b"\n")), last == b"1")


def test_older_processes_read_marks_and_questions_safely_during_an_upgrade() -> None:
    """An old watcher ignores a mark answering a question with an id (never reads it as
    a batch, or as its own answer); it gets its answer in the old shape. An old owner
    reads a question with an id as one of a response it does not run."""
    assert decode_before_question_ids(encode_mark(7, "0f3a9c")) is None
    assert decode_before_question_ids(encode_mark(7, None)) == Published(EventBatch(7, []), False)
    for sent in (Published(batch(0, 1), False), Published(batch(7, 10), True)):
        assert decode_before_question_ids(encode(sent.batch, sent.last)) == sent
    tenant, _, response = "t\x1fresp_1\x1f0f3a9c".partition("\x1f")  # as an old owner
    assert (tenant, response) != ("t", "resp_1")


@pytest.mark.redis
async def test_a_question_reaches_the_listening_processes_and_the_mark_its_asker(
    pair: tuple[RedisEventFanout, RedisEventFanout], redis_url: str
) -> None:
    owner, follower = pair
    asked: list[tuple[str, str, str | None]] = []

    def answer(tenant_id: str, response_id: str, question: str | None) -> None:
        asked.append((tenant_id, response_id, question))
        owner.mark(tenant_id, response_id, 7, question)

    await owner.start(answer)
    await until_subscribed(redis_url, owner.channel("t", "resp_1").rpartition(":")[0])
    async with follower.follow("t", "resp_1") as following:
        await until_subscribed(redis_url, owner.channel("t", "resp_1"))
        follower.ask("t", "resp_1", "0f3a9c")
        assert await following.next(30) == Published(EventBatch(7, []), False, "0f3a9c")
    assert asked == [("t", "resp_1", "0f3a9c")], "heard by the process listening, not the asker"


@pytest.mark.redis
async def test_an_older_process_question_is_answered_in_its_own_shape(
    pair: tuple[RedisEventFanout, RedisEventFanout], redis_url: str
) -> None:
    owner, _ = pair
    asked: list[str | None] = []

    def answer(tenant_id: str, response_id: str, question: str | None) -> None:
        asked.append(question)
        owner.mark(tenant_id, response_id, 7, question)

    await owner.start(answer)
    standing = owner.channel("t", "resp_1").rpartition(":")[0]
    await until_subscribed(redis_url, standing)
    older = Redis.from_url(redis_url)
    try:
        async with older.pubsub() as pubsub:
            await pubsub.subscribe(owner.channel("t", "resp_1"))
            await until_subscribed(redis_url, owner.channel("t", "resp_1"))
            await older.publish(standing, b"t\x1fresp_1")  # as a process without ids asks
            while (message := await pubsub.get_message(True, timeout=30)) is None:
                pass
        assert message["data"] == b"7 0\n", "the mark it knows"
        assert asked == [None]
    finally:
        await older.aclose()


async def test_listening_without_redis_waits_for_it(caplog: pytest.LogCaptureFixture) -> None:
    fanout = RedisEventFanout(connect("redis://127.0.0.1:1/0"), "test:")
    try:
        with caplog.at_level(logging.WARNING):
            await fanout.start(lambda tenant_id, response_id, question: None)
        assert "Redis is unreachable" in caplog.text
        fanout.ask("t", "resp_1", "0f3a9c")  # dropped, never raised
    finally:
        await fanout.aclose()


async def test_questions_reach_the_handler_and_nothing_else_does(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """What arrives on the standing channel: a question (with an id, or without one from
    an older process) is handed on; a message of too few or too many fields, or with an
    empty one, is not a question; one that is not UTF-8 is logged and dropped."""
    asked: list[tuple[str, str, str | None]] = []
    fanout = RedisEventFanout(connect("redis://127.0.0.1:1/0"), "test:")
    try:
        with caplog.at_level(logging.ERROR):
            await fanout.start(
                lambda tenant, response, question: asked.append((tenant, response, question))
            )
        caplog.clear()

        def arrives(data: bytes) -> None:
            fanout._deliver({"type": "message", "channel": b"test:events", "data": data})

        arrives(b"t\x1fresp_1\x1f0f3a9c")
        arrives(b"t\x1fresp_1")
        assert asked == [("t", "resp_1", "0f3a9c"), ("t", "resp_1", None)]
        for junk in (
            b"t",
            b"t\x1fresp_1\x1f0f3a9c\x1fmore",
            b"t\x1f",
            b"t\x1f\x1f0f3a9c",
            b"t\x1fresp_1\x1f",
        ):
            arrives(junk)
        assert len(asked) == 2
        with caplog.at_level(logging.WARNING):
            arrives(b"t\x1fresp_\xff")
        assert len(asked) == 2
        assert [r.getMessage() for r in caplog.records if r.name == event_fanout.__name__] == [
            "event fan-out: ignoring a malformed question"
        ]
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


async def until_subscribed(redis_url: str, channel: str, count: int = 1) -> None:
    """Wait until Redis has taken the subscription (SUBSCRIBE is only sent by follow), or
    has ``count`` subscribers to ``channel``."""
    for _ in range(1000):
        if await subscribers(redis_url, channel) >= count:
            return
        await asyncio.sleep(0.005)
    raise AssertionError(f"{channel} was never subscribed {count} times")


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


@pytest.mark.redis
async def test_an_outage_is_warned_of_once_and_followed_through_quietly(
    redis_url: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Redis going away under a follower is one warning, not one or two a second for as
    long as it is away; the follower's channel is subscribed again once Redis answers,
    and its batches come again."""
    monkeypatch.setattr(event_fanout, "RESUBSCRIBE_PAUSE", 0.01)
    prefix = f"test:{uuid.uuid4().hex}:"
    owner = RedisEventFanout(connect(redis_url), prefix)
    async with Switch(redis_url) as switch:
        follower = RedisEventFanout(connect(switch.url), prefix)
        try:
            async with follower.follow("t", "resp_1") as following:
                channel = owner.channel("t", "resp_1")
                await until_subscribed(redis_url, channel)
                with caplog.at_level(logging.INFO, logger=event_fanout.__name__):
                    switch.off()
                    await switch.refused(6)  # three attempts or more to subscribe again
                    switch.on()
                    await until_subscribed(redis_url, channel)
                owner.publish("t", "resp_1", batch(0, 1), True)
                assert await following.next(30) == Published(batch(0, 1), True)
        finally:
            await owner.aclose()
            await follower.aclose()
    warned = [
        r.message
        for r in caplog.records
        if r.name == event_fanout.__name__ and r.levelno >= logging.WARNING
    ]
    assert len(warned) == 1, warned
    assert "subscribing again" in warned[0]
    assert "event fan-out: Redis answers; subscribed again" in caplog.text


@pytest.mark.redis
async def test_a_follower_whose_connection_went_silent_follows_on_a_new_one(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pub/sub connection that stops answering without closing is noticed (a ping sent
    once quiet, never answered) and replaced: the followed channel and the standing one are
    subscribed on a new connection, and batches and questions come again."""
    monkeypatch.setattr(subscription, "HEARTBEAT", 0.1)
    monkeypatch.setattr(event_fanout, "RESUBSCRIBE_PAUSE", 0.01)
    prefix = f"test:{uuid.uuid4().hex}:"
    owner = RedisEventFanout(connect(redis_url), prefix)
    asked: asyncio.Queue[tuple[str, str, str | None]] = asyncio.Queue()
    async with Switch(redis_url) as switch:
        follower = RedisEventFanout(connect(switch.url), prefix)
        await follower.start(lambda t, r, q: asked.put_nowait((t, r, q)))
        try:
            async with follower.follow("t", "resp_1") as following:
                channel = owner.channel("t", "resp_1")
                await until_subscribed(redis_url, channel)
                switch.freeze()
                await until_subscribed(redis_url, channel, count=2)
                await until_subscribed(redis_url, prefix + "events", count=2)
                owner.publish("t", "resp_1", batch(0, 1), True)
                assert await following.next(30) == Published(batch(0, 1), True)
                owner.ask("t", "resp_2", "q1")
                assert await asyncio.wait_for(asked.get(), 10) == ("t", "resp_2", "q1")
        finally:
            await owner.aclose()
            await follower.aclose()


async def test_a_follower_that_leaves_while_its_channel_is_subscribed_leaves_nothing() -> None:
    """A watcher that leaves while the SUBSCRIBE of its channel waits for a Redis that does
    not answer (up to its socket timeout) keeps no channel: else the channel stayed, with
    no follower, subscribed again on every new connection for as long as the process."""
    async with Switch("redis://127.0.0.1:1/0") as switch:
        switch.silence()  # connections accepted, never answered
        follower = RedisEventFanout(connect(switch.url, timeout=30), "test:")
        entered = asyncio.Event()

        async def watch() -> None:
            async with follower.follow("t", "resp_1"):
                entered.set()

        watching = asyncio.create_task(watch())
        try:
            await asyncio.sleep(0.2)  # its SUBSCRIBE waits for an answer
            watching.cancel()
            await asyncio.gather(watching, return_exceptions=True)
            assert not entered.is_set()
            assert not follower._followers
        finally:
            await follower.aclose()


@pytest.mark.redis
async def test_a_follower_that_joins_as_the_last_one_leaves_keeps_the_channel(
    pair: tuple[RedisEventFanout, RedisEventFanout], redis_url: str
) -> None:
    """The last follower's leaving lets the channel go once it has the lock; a follower
    that had the lock first joined the same followers meanwhile, and keeps the channel."""
    owner, follower = pair
    channel = owner.channel("t", "resp_1")
    leaving = follower.follow("t", "resp_1")
    await leaving.__aenter__()
    joined = asyncio.Event()
    done = asyncio.Event()

    async def join() -> Published | None:
        async with follower.follow("t", "resp_1") as following:
            joined.set()
            await done.wait()
            return await following.next(30)

    async with follower._lock:  # the joiner waits for the lock first, then the leaver
        joining = asyncio.create_task(join())
        await asyncio.sleep(0.01)
        left = asyncio.create_task(leaving.__aexit__(None, None, None))
        await asyncio.sleep(0.01)
    await left
    await joined.wait()
    assert channel.encode() in follower._followers
    await until_subscribed(redis_url, channel)
    owner.publish("t", "resp_1", batch(0, 1), True)
    done.set()
    assert await joining == Published(batch(0, 1), True)


@pytest.mark.redis
async def test_a_follower_cancelled_again_while_leaving_still_lets_the_channel_go(
    pair: tuple[RedisEventFanout, RedisEventFanout], redis_url: str
) -> None:
    """Cancelled, its last follower waits for the lock to let the channel go; cancelled
    again meanwhile (a server shutting down cancels every task), the channel still goes."""
    owner, follower = pair
    channel = owner.channel("t", "resp_1")
    entered = asyncio.Event()

    async def watch() -> None:
        async with follower.follow("t", "resp_1"):
            entered.set()
            await asyncio.Event().wait()

    watching = asyncio.create_task(watch())
    await entered.wait()
    await until_subscribed(redis_url, channel)
    async with follower._lock:
        watching.cancel()
        await asyncio.sleep(0.01)  # leaving: waiting for the lock
        watching.cancel()
        await asyncio.gather(watching, return_exceptions=True)
    for _ in range(100):
        if not follower._followers:
            break
        await asyncio.sleep(0.01)
    assert not follower._followers
    assert await subscribers(redis_url, channel) == 0
