"""Token buckets (:class:`~stateway.core.limits.TokenBuckets`): in process, or in Redis.

A bucket holds at most ``per_minute`` and refills at ``per_minute / 60`` a second; it is
stored as its level and the time it had it, and refilled lazily by whoever takes from it.

- :class:`MemoryTokenBuckets`: one process (the embedded default), on its monotonic clock.
- :class:`RedisTokenBuckets`: every replica sharing a Redis server and key prefix takes
  from the same buckets, each take one script run atomically on the server, on the
  server's clock (``TIME``), so replicas' clocks need not agree. A bucket is a hash at
  ``{prefix}rate:{sha256(key)}`` that expires once it would be full again (a full bucket
  and a missing one are the same). When Redis cannot be reached requests are let through
  (a warning is logged once per outage): the limits protect the service, an outage of
  Redis must not take it down (:mod:`.outage`: after a failure no request asks Redis
  until a background probe is answered).
"""

from __future__ import annotations

import hashlib
import logging
import math
import time
from collections.abc import Callable
from typing import Final

from redis.asyncio import Redis
from redis.exceptions import RedisError

from stateway.coordination.outage import RedisOutage
from stateway.coordination.server_clock import lua_now

log = logging.getLogger(__name__)

MAX_KEYS: Final = 100_000
"""In process: buckets kept before the full ones are dropped."""

# KEYS[1] the bucket; ARGV[1] per minute; ARGV[2] need ('any': always met); ARGV[3] debit;
# ARGV[4] now in seconds ('': the server's clock). Returns the seconds to wait, as text
# (a Lua number would be truncated to an integer); '0' when the debit was taken.
_TAKE: Final = (
    """
local capacity = tonumber(ARGV[1])
local rate = capacity / 60
"""
    + lua_now(4)
    + """local state = redis.call('HMGET', KEYS[1], 'level', 'at')
local level = tonumber(state[1])
local at = tonumber(state[2])
if level == nil or at == nil then
  level = capacity
  at = now
end
level = math.min(capacity, level + math.max(0, now - at) * rate)
if ARGV[2] ~= 'any' then
  local need = tonumber(ARGV[2])
  if level < need then
    return tostring((need - level) / rate)
  end
end
level = level - tonumber(ARGV[3])
redis.call('HSET', KEYS[1], 'level', tostring(level), 'at', tostring(now))
redis.call('PEXPIRE', KEYS[1], math.ceil((capacity - level) / rate * 1000) + 1000)
return '0'
"""
)


class MemoryTokenBuckets:
    def __init__(
        self, clock: Callable[[], float] = time.monotonic, max_keys: int = MAX_KEYS
    ) -> None:
        self._clock = clock
        self._max_keys = max_keys
        self._buckets: dict[str, tuple[float, float, int]] = {}
        """Each bucket's level, when it had it, and its size."""

    async def take(self, key: str, per_minute: int, need: float, debit: float) -> float:
        now = self._clock()
        level = _refilled(self._buckets.get(key), per_minute, now)
        if level < need:
            return (need - level) * 60 / per_minute
        self._buckets[key] = (level - debit, now, per_minute)
        if len(self._buckets) > self._max_keys:
            self._drop_full(now)
        return 0.0

    def __len__(self) -> int:
        return len(self._buckets)

    async def aclose(self) -> None:
        self._buckets.clear()

    def _drop_full(self, now: float) -> None:
        full = [
            key
            for key, bucket in self._buckets.items()
            if _refilled(bucket, bucket[2], now) >= bucket[2]
        ]
        for key in full:
            del self._buckets[key]


def _refilled(bucket: tuple[float, float, int] | None, per_minute: int, now: float) -> float:
    if bucket is None:
        return float(per_minute)
    level, at, _ = bucket
    return min(float(per_minute), level + max(0.0, now - at) * per_minute / 60)


class RedisTokenBuckets:
    def __init__(
        self,
        client: Redis,
        prefix: str = "stateway:",
        *,
        clock: Callable[[], float] | None = None,
        outage: RedisOutage | None = None,
    ) -> None:
        """``clock``: seconds, for tests; by default the Redis server's own clock.
        ``outage``: the one the slots on the same Redis share (by default, its own,
        probing ``client``)."""
        self._redis = client
        self._prefix = prefix
        self._clock = clock
        self._take = client.register_script(_TAKE)
        self._outage = outage or RedisOutage(log, "rate limits", client.ping)

    async def take(self, key: str, per_minute: int, need: float, debit: float) -> float:
        if self._outage.skips():
            return 0.0  # Redis failed a moment ago: let the request through at once
        name = self._prefix + "rate:" + hashlib.sha256(key.encode()).hexdigest()
        now = "" if self._clock is None else repr(self._clock())
        wanted = "any" if need == -math.inf else repr(need)
        try:
            wait = await self._take(keys=[name], args=[per_minute, wanted, repr(debit), now])
        except RedisError as exc:
            self._outage.failed(exc)
            return 0.0
        self._outage.answered()
        return float(wait)

    async def aclose(self) -> None:
        await self._outage.aclose()
        await self._redis.aclose()
