"""A Redis outage, as the adapters that let requests through without Redis see it (the
rate limit buckets: :mod:`.token_buckets`; the concurrent request slots:
:mod:`.request_slots`): the limits protect the service, an outage of Redis must not take
it down.

After a failure Redis is not asked again for :data:`RETRY_AFTER` seconds, and then by one
call at a time, so that a Redis that does not answer (a blackhole: each call waits out its
socket timeout) costs one request in that time, not every one; the first failure of an
outage is logged, once. The buckets and the slots of one Redis share one outage (the
factory's), so the first of a request's takes to fail spares it the others' waits.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from typing import Final

RETRY_AFTER: Final = 5.0
"""Seconds requests are let through without asking Redis after it failed to answer."""


class RedisOutage:
    __slots__ = ("_failing", "_log", "_monotonic", "_paused_until", "_what")

    def __init__(
        self, log: logging.Logger, what: str, monotonic: Callable[[], float] = time.monotonic
    ) -> None:
        """``what``: the limits it lets requests through (the warning names them);
        ``monotonic``: this process's clock."""
        self._log = log
        self._what = what
        self._monotonic = monotonic
        self._failing = False
        self._paused_until = -math.inf

    def skips(self) -> bool:
        """Whether a call lets its request through without asking Redis: it failed less
        than :data:`RETRY_AFTER` ago, or another call is asking it again. The first call
        past the pause asks, and starts the pause again for the calls made meanwhile."""
        if not self._failing:
            return False
        now = self._monotonic()
        if now < self._paused_until:
            return True
        self._paused_until = now + RETRY_AFTER
        return False

    def failed(self, exc: Exception) -> None:
        if not self._failing:
            self._log.warning("%s: redis: %s; letting requests through", self._what, exc)
        self._failing = True
        self._paused_until = self._monotonic() + RETRY_AFTER

    def answered(self) -> None:
        self._failing = False
