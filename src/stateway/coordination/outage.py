"""A Redis outage, as the adapters that let requests through without Redis see it (the
rate limit buckets: :mod:`.token_buckets`; the concurrent request slots:
:mod:`.request_slots`): the limits protect the service, an outage of Redis must not take
it down.

After a failure no request asks Redis again: each is let through at once, while a
background task probes Redis (one ``PING``, bounded by the client's ``redis_timeout``)
every :data:`RETRY_AFTER` seconds until one is answered. A Redis that does not answer (a
blackhole: each call waits out its socket timeout) so holds up only the requests that
asked it before its first failure, none after. The first failure of an outage is logged,
once, and so is Redis answering again: a call of the limits' own answered, not a probe (a
Redis out of memory, or a replica after a failover, answers ``PING`` and fails every
write: each probe answered lets a request ask again, which fails again, in one outage).
The buckets and the slots of one Redis share one outage (the factory's), so the first of
a request's takes to fail spares it the others' waits. The probe lives until Redis
answers or the outage is closed (:meth:`aclose`, by the adapters' own).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Final

from redis.exceptions import RedisError

RETRY_AFTER: Final = 5.0
"""Seconds between the probes of a Redis that failed (requests are let through meanwhile)."""


class RedisOutage:
    __slots__ = ("_closed", "_failing", "_log", "_probe", "_probing", "_sleep", "_warned", "_what")

    def __init__(
        self,
        log: logging.Logger,
        what: str,
        probe: Callable[[], Awaitable[object]],
        *,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        """``what``: the limits it lets requests through (the log lines name them);
        ``probe``: asks Redis once (a ``PING``), raising ``RedisError`` when it does not
        answer; ``sleep``: the pause between probes, for tests."""
        self._log = log
        self._what = what
        self._probe = probe
        self._sleep = sleep
        self._failing = False
        self._warned = False
        """The outage's warning is logged, and no call has been answered since."""
        self._probing: asyncio.Task[None] | None = None
        self._closed = False

    def skips(self) -> bool:
        """Whether a call lets its request through without asking Redis: Redis failed,
        and no probe has been answered since."""
        return self._failing

    def failed(self, exc: Exception) -> None:
        if not self._warned:
            self._log.warning("%s: redis: %s; letting requests through", self._what, exc)
            self._warned = True
        self._failing = True
        if self._probing is None and not self._closed:
            self._probing = asyncio.create_task(self._probe_until_answered())

    def answered(self) -> None:
        self._failing = False
        if self._warned:
            self._warned = False
            self._log.info("%s: redis answers again; applying the limits", self._what)

    async def aclose(self) -> None:
        """Stop probing (at shutdown, before the client the probe uses is closed)."""
        self._closed = True
        probing = self._probing
        if probing is not None:
            probing.cancel()
            await asyncio.wait([probing])
            self._probing = None  # cancelled before it started, it ran no ``finally``

    async def _probe_until_answered(self) -> None:
        try:
            while True:
                await self._sleep(RETRY_AFTER)
                if not self._failing:  # a call made before the failure was answered since
                    return
                try:
                    await self._probe()
                except RedisError:
                    continue
                except Exception:  # noqa: BLE001 - not the outage (a bug): probing goes on
                    self._log.exception("%s: probing redis failed", self._what)
                    continue
                self._failing = False  # requests ask again: the first answered logs it
                return
        finally:
            self._probing = None
