"""A Redis pub/sub connection read for as long as it lives, subscribed again after each
drop (redis-py's asyncio client): the listening loop of the cancel signals
(:mod:`.redis`) and of the event fan-out (:mod:`.event_fanout`).

An outage is one warning, however long it lasts: the attempts to subscribe again, every
``pause`` seconds until Redis answers, are logged at debug, and the end of the outage at
info. Each caller's logger and name are on its lines (``cancel signals: ...``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from typing import Any

from redis.asyncio.client import PubSub
from redis.exceptions import RedisError


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
            async for message in pubsub.listen():
                deliver(message)
            return
        except RedisError as exc:  # the connection dropped
            log.warning("%s: %s; subscribing again every %gs", name, exc, pause)
            await _subscribe_when_answered(pubsub, channels, name=name, pause=pause, log=log)


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
