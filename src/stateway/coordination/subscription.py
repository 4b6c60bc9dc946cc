"""A Redis pub/sub connection read for as long as it lives, subscribed again after each
drop (redis-py's asyncio client): the listening loop of the cancel signals
(:mod:`.redis`) and of the event fan-out (:mod:`.event_fanout`).

A subscriber only reads, so a connection that dies without closing (Redis's host lost
without a word, a NAT or firewall between that forgot it) would never be noticed: it
would wait for ever, every signal and batch sent meanwhile lost to this process. So a
connection quiet for ``HEARTBEAT`` seconds is sent a ``PING``, and one that says nothing
for ``HEARTBEAT`` more is taken as dropped: closed, and subscribed again on a new one.
A quiet process costs Redis one ping every ``HEARTBEAT`` per connection.

An outage is one warning, however long it lasts: the attempts to subscribe again, every
``pause`` seconds until Redis answers, are logged at debug, and the end of the outage at
info. Each caller's logger and name are on its lines (``cancel signals: ...``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from typing import Any, Final, cast

from redis.asyncio.client import PubSub
from redis.asyncio.connection import Connection
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError

HEARTBEAT: Final = 5.0
"""Seconds of quiet before a connection is pinged, and then without an answer before it
is taken as dropped."""


async def listen(
    pubsub: PubSub,
    channels: Callable[[], Iterable[str | bytes]],
    deliver: Callable[[dict[str, Any]], None],
    *,
    name: str,
    pause: float,
    log: logging.Logger,
) -> None:
    """Hand each message ``pubsub`` receives to ``deliver`` until it is unsubscribed
    from everything. A connection that never subscribed (Redis was down when it tried:
    its caller warned of it), or that drops, subscribes to ``channels()`` again, as they
    are at each attempt."""
    while True:
        if not pubsub.subscribed:
            await _subscribe_when_answered(pubsub, channels, name=name, pause=pause, log=log)
        try:
            await _read(pubsub, deliver)
            return
        except RedisError as exc:  # the connection dropped, or went silent
            log.warning("%s: %s; subscribing again every %gs", name, exc, pause)
            # A silent one is still open: closed here (redis-py types the attribute None).
            connection = cast("Connection | None", pubsub.connection)
            if connection is not None:
                await connection.disconnect()
            await _subscribe_when_answered(pubsub, channels, name=name, pause=pause, log=log)


async def _read(pubsub: PubSub, deliver: Callable[[dict[str, Any]], None]) -> None:
    """Hand each message to ``deliver`` until ``pubsub`` is unsubscribed from
    everything; ping the connection once quiet for ``HEARTBEAT``, and raise once it has
    said nothing for ``HEARTBEAT`` more (a pong, or any message, is an answer)."""
    clock = asyncio.get_running_loop().time
    heard = clock()
    pinged = False
    while pubsub.subscribed:
        message = await pubsub.get_message(timeout=HEARTBEAT)
        now = clock()
        if message is not None:
            heard, pinged = now, False
            deliver(message)
        elif now - heard < HEARTBEAT:
            continue  # a subscription's confirmation (not handed on), or woken early
        elif not pinged:
            await pubsub.ping()
            heard, pinged = now, True
        else:
            raise RedisConnectionError(f"no answer to a ping within {HEARTBEAT:g} s")


async def _subscribe_when_answered(
    pubsub: PubSub,
    channels: Callable[[], Iterable[str | bytes]],
    *,
    name: str,
    pause: float,
    log: logging.Logger,
) -> None:
    """Subscribe to ``channels()``, every ``pause`` seconds until Redis answers."""
    while True:
        await asyncio.sleep(pause)
        try:
            await pubsub.subscribe(*channels())
        except RedisError as exc:
            log.debug("%s: subscribing failed: %s", name, exc)
        else:
            log.info("%s: Redis answers; subscribed again", name)
            return
