"""Cancel signals through the real Redis: every subscribed process hears each cancel."""

from __future__ import annotations

import asyncio
import logging
import socket
import uuid
from urllib.parse import urlsplit

import pytest
from redis.asyncio import Redis

from stateway.coordination import redis as redis_module
from stateway.coordination import subscription
from stateway.coordination.redis import RedisCancelSignals, connect
from stateway.core.errors import StorageError
from tests.coordination.test_event_fanout import until_subscribed
from tests.support.switch import Switch, pipe

pytestmark = pytest.mark.redis


async def test_a_cancel_sent_by_one_process_reaches_every_process(redis_url: str) -> None:
    prefix = f"test:{uuid.uuid4().hex}:"
    sender, owner, other = (RedisCancelSignals(connect(redis_url), prefix) for _ in range(3))
    heard: dict[str, asyncio.Queue[tuple[str, str]]] = {
        "owner": asyncio.Queue(),
        "other": asyncio.Queue(),
    }
    await owner.start(lambda t, r: heard["owner"].put_nowait((t, r)))
    await other.start(lambda t, r: heard["other"].put_nowait((t, r)))
    try:
        assert sender.shared
        await sender.send("default", "resp_1")
        assert await heard["owner"].get() == ("default", "resp_1")
        assert await heard["other"].get() == ("default", "resp_1")
    finally:
        for signals in (sender, owner, other):
            await signals.aclose()


async def test_malformed_messages_on_the_channel_are_ignored(
    redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Ignored, those that are no such message with a warning: ids that are no strings
    are dropped quietly."""
    prefix = f"test:{uuid.uuid4().hex}:"
    owner = RedisCancelSignals(connect(redis_url), prefix)
    heard: asyncio.Queue[tuple[str, str]] = asyncio.Queue()
    await owner.start(lambda t, r: heard.put_nowait((t, r)))
    publisher = Redis.from_url(redis_url)
    junk = (
        b"not json",
        b'{"tenant": "default"}',
        b'{"tenant": 1, "response": 2}',
        b'{"tenant": "t", "response": 2}',
        b'{"tenant": 1, "response": "r"}',
    )
    try:
        with caplog.at_level(logging.WARNING, logger=redis_module.__name__):
            for message in junk:
                await publisher.publish(prefix + "cancel", message)
            await publisher.publish(prefix + "cancel", b'{"tenant": "t", "response": "r"}')
            assert await heard.get() == ("t", "r")  # the first one heard is the valid one
    finally:
        await owner.aclose()
        await publisher.aclose()
    warned = [r.getMessage() for r in ours(caplog)]
    assert warned == ["cancel signals: ignoring a malformed message"] * 2


async def test_sending_without_redis_is_a_503(caplog: pytest.LogCaptureFixture) -> None:
    """The client gets the generic 503; the log line says what Redis's client said."""
    signals = RedisCancelSignals(connect("redis://127.0.0.1:1/0"), "test:")
    try:
        with (
            caplog.at_level(logging.WARNING, logger=redis_module.__name__),
            pytest.raises(
                StorageError, match=r"^The coordination store \(Redis\) is unavailable\.$"
            ),
        ):
            await signals.send("default", "resp_1")
    finally:
        await signals.aclose()
    [warned] = [r.getMessage() for r in ours(caplog)]
    assert warned.startswith("redis: ")
    assert "127.0.0.1:1" in warned


async def test_redis_down_at_start_up_is_subscribed_to_once_it_answers(
    redis_url: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Start-up does not fail when Redis is unreachable (the gateway serves on, as when
    Redis goes away later), and says so with Redis's error: the listener subscribes once
    it answers and hears cancels."""
    monkeypatch.setattr(redis_module, "_RESUBSCRIBE_DELAY", 0.05)
    target = urlsplit(redis_url)
    with socket.socket() as probe:  # a port nothing listens on yet
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    prefix = f"test:{uuid.uuid4().hex}:"
    owner = RedisCancelSignals(connect(f"redis://127.0.0.1:{port}{target.path}"), prefix)
    heard: asyncio.Queue[tuple[str, str]] = asyncio.Queue()
    with caplog.at_level(logging.WARNING, logger=redis_module.__name__):
        await owner.start(lambda t, r: heard.put_nowait((t, r)))  # does not raise
    [warned] = [r.getMessage() for r in ours(caplog)]
    assert warned.startswith("cancel signals: Redis is unreachable (")
    assert f"127.0.0.1:{port}" in warned, "the client's error"
    assert warned.endswith("); subscribing again every 0.05s")

    async def forward(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        to_redis = await asyncio.open_connection(target.hostname, target.port or 6379)
        await asyncio.gather(pipe(reader, to_redis[1]), pipe(to_redis[0], writer))

    server = await asyncio.start_server(forward, "127.0.0.1", port)  # Redis answers now
    sender = RedisCancelSignals(connect(redis_url), prefix)
    try:
        await until_subscribed(redis_url, prefix + "cancel")
        await sender.send("default", "resp_1")
        assert await asyncio.wait_for(heard.get(), 10) == ("default", "resp_1")
    finally:
        for signals in (owner, sender):
            await signals.aclose()
        server.close()


async def test_an_outage_is_warned_of_once_and_subscribed_through_quietly(
    redis_url: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Redis going away mid-life is one warning, not one or two a second for as long as
    it is away (as at start-up); the listener subscribes again once it answers and
    hears cancels again."""
    monkeypatch.setattr(redis_module, "_RESUBSCRIBE_DELAY", 0.01)
    prefix = f"test:{uuid.uuid4().hex}:"
    async with Switch(redis_url) as switch:
        owner = RedisCancelSignals(connect(switch.url), prefix)
        sender = RedisCancelSignals(connect(redis_url), prefix)
        heard: asyncio.Queue[tuple[str, str]] = asyncio.Queue()
        await owner.start(lambda t, r: heard.put_nowait((t, r)))
        try:
            await until_subscribed(redis_url, prefix + "cancel")
            with caplog.at_level(logging.DEBUG, logger=redis_module.__name__):
                switch.off()
                await switch.refused(6)  # three attempts or more to subscribe again
                switch.on()
                await until_subscribed(redis_url, prefix + "cancel")
                await sender.send("default", "resp_1")
                assert await asyncio.wait_for(heard.get(), 10) == ("default", "resp_1")
        finally:
            for signals in (owner, sender):
                await signals.aclose()
    warned = [r.message for r in ours(caplog) if r.levelno >= logging.WARNING]
    assert len(warned) == 1, warned
    assert warned[0].startswith("cancel signals: ")
    assert warned[0].endswith("; subscribing again every 0.01s")
    said = [r.getMessage() for r in ours(caplog) if r.levelno == logging.INFO]
    assert said == ["cancel signals: Redis answers; subscribed again"]
    attempts = [r.getMessage() for r in ours(caplog) if r.levelno == logging.DEBUG]
    assert attempts, "each failed attempt, at debug"
    failed = "cancel signals: subscribing failed: "  # then redis-py's words
    assert all(a.startswith(failed) for a in attempts), attempts
    assert all(a.removeprefix(failed) not in ("", "None") for a in attempts), attempts


async def test_a_connection_gone_silent_is_noticed_and_subscribed_again(
    redis_url: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A connection that stops answering without closing (Redis's host died without a
    word; a NAT or firewall forgot the connection) is noticed by a ping sent once it has
    been quiet a while and never answered: the listener subscribes on a new one and hears
    cancels again, instead of waiting on the dead one for as long as the process lives."""
    monkeypatch.setattr(subscription, "HEARTBEAT", 0.1)
    monkeypatch.setattr(redis_module, "_RESUBSCRIBE_DELAY", 0.01)
    prefix = f"test:{uuid.uuid4().hex}:"
    async with Switch(redis_url) as switch:
        owner = RedisCancelSignals(connect(switch.url), prefix)
        sender = RedisCancelSignals(connect(redis_url), prefix)
        heard: asyncio.Queue[tuple[str, str]] = asyncio.Queue()
        await owner.start(lambda t, r: heard.put_nowait((t, r)))
        try:
            await until_subscribed(redis_url, prefix + "cancel")
            with caplog.at_level(logging.WARNING, logger=redis_module.__name__):
                switch.freeze()  # Redis still counts the frozen subscriber
                await until_subscribed(redis_url, prefix + "cancel", count=2)
            await sender.send("default", "resp_1")
            assert await asyncio.wait_for(heard.get(), 10) == ("default", "resp_1")
        finally:
            for signals in (owner, sender):
                await signals.aclose()
    warned = [r.message for r in ours(caplog) if r.levelno >= logging.WARNING]
    assert len(warned) == 1, warned
    assert "cancel signals: no answer to a ping" in warned[0]


async def test_a_quiet_connection_that_answers_its_pings_is_kept(
    redis_url: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Pings answered keep a quiet connection: nothing is warned of, nothing subscribed
    again, however long no cancel comes. The heartbeat is short, but not so short that a
    loaded machine's stalled loop reads as a ping left unanswered."""
    monkeypatch.setattr(subscription, "HEARTBEAT", 0.2)
    prefix = f"test:{uuid.uuid4().hex}:"
    owner = RedisCancelSignals(connect(redis_url), prefix)
    sender = RedisCancelSignals(connect(redis_url), prefix)
    heard: asyncio.Queue[tuple[str, str]] = asyncio.Queue()
    with caplog.at_level(logging.INFO, logger=redis_module.__name__):
        await owner.start(lambda t, r: heard.put_nowait((t, r)))
        try:
            await until_subscribed(redis_url, prefix + "cancel")
            await asyncio.sleep(1.0)  # five quiet heartbeats
            await sender.send("default", "resp_1")
            assert await asyncio.wait_for(heard.get(), 10) == ("default", "resp_1")
        finally:
            for signals in (owner, sender):
                await signals.aclose()
    assert ours(caplog) == []


def ours(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    """The records of the cancel signals' logger: not another test's leftovers (asyncio's
    "Task exception was never retrieved" for a task collected meanwhile)."""
    return [r for r in caplog.records if r.name == redis_module.__name__]
