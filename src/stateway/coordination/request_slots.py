"""Concurrent request slots (:class:`~stateway.core.concurrency.RequestSlots`) in Redis,
shared by every replica with the same Redis server and key prefix.

A principal's slots are a sorted set at ``{prefix}slots:{sha256(key)}``: one member per
slot held (a random id), scored with the time its lease runs out, on the Redis server's
clock (``TIME``), so replicas' clocks need not agree. Taking one is one script, atomic on
the server: drop the members whose lease ran out, then add one if fewer than the limit
are left. Each process renews the leases of every slot it holds in one round trip every
third of :data:`LEASE` (a background run keeps its slot for as long as it runs); a
process that dies stops renewing, and its slots are free again within a lease. Giving
one back is a ``ZREM``, sent as the request ends, and the end waits for its answer
(:meth:`Slot.given_back <stateway.core.concurrency.Slot.given_back>`) before it is
stored or told (a run's terminal event, a relay's last bytes, an answer, an error): a
client sending its next request to another replica the moment it learns of the end finds
the slot free. The wait is bounded by :data:`GIVE_BACK_WAIT`, so a Redis slow to answer
holds no end back longer; past it the ``ZREM`` goes on beside the end. Until it is
answered, this process's next take of the same principal drops it first, so a request
that follows another's end here (a steered successor) never finds its slot still held;
a ``ZREM`` that failed (Redis away a moment) is left to that take too, and to the lease
elsewhere. A take whose request is cancelled while Redis answers (its client left) gives
back the slot it took once the answer comes, instead of leaving it held for a lease.

When Redis cannot be reached requests are let through, holding no slot (a warning is
logged once per outage), and no request asks Redis again until a background probe is
answered (:mod:`.outage`), as the token buckets do: the limits protect the service, an
outage of Redis must not take it down.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import secrets
from collections.abc import Callable, Iterable
from functools import partial
from typing import Final

from redis.asyncio import Redis
from redis.exceptions import RedisError

from stateway.coordination.outage import RedisOutage
from stateway.coordination.server_clock import lua_now
from stateway.core.concurrency import Slot

log = logging.getLogger(__name__)

LEASE: Final = 30.0
"""Seconds a slot outlives the last renewal of its process (renewed every third of it)."""
GIVE_BACK_WAIT: Final = 0.075
"""Seconds a request's end waits at most for Redis to answer its slot's ``ZREM``."""

_NOW: Final = (
    lua_now(2)
    + """local lease = tonumber(ARGV[1])
"""
)
"""A script's ``now`` (ARGV[2]: seconds, '' for the server's clock) and ``lease``
(ARGV[1])."""

# KEYS[1] the principal's slots; ARGV[3] the limit; ARGV[4] the new slot's id; ARGV[5..]
# slots this process gave back, their ZREM not yet answered. Returns 1 when taken, else 0.
_TAKE: Final = (
    _NOW
    + """
for i = 5, #ARGV do
  redis.call('ZREM', KEYS[1], ARGV[i])
end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[3]) then
  return 0
end
redis.call('ZADD', KEYS[1], now + lease, ARGV[4])
redis.call('PEXPIRE', KEYS[1], math.ceil(lease * 1000) + 1000)
return 1
"""
)

# KEYS[i] the set of ARGV[2 + i], a slot this process holds. A slot that ran out meanwhile
# (its process paused past its lease) is not taken again ('XX').
_RENEW: Final = (
    _NOW
    + """
for i, key in ipairs(KEYS) do
  redis.call('ZADD', key, 'XX', now + lease, ARGV[i + 2])
  redis.call('PEXPIRE', key, math.ceil(lease * 1000) + 1000)
end
return 0
"""
)


class RedisRequestSlots:
    def __init__(
        self,
        client: Redis,
        prefix: str = "stateway:",
        *,
        lease: float = LEASE,
        give_back_wait: float = GIVE_BACK_WAIT,
        clock: Callable[[], float] | None = None,
        outage: RedisOutage | None = None,
    ) -> None:
        """``clock``: seconds, for tests; by default the Redis server's own clock.
        ``outage``: the one the token buckets on the same Redis share (by default, its
        own, probing ``client``)."""
        self._redis = client
        self._prefix = prefix
        self._lease = lease
        self._give_back_wait = give_back_wait
        self._clock = clock
        self._take = client.register_script(_TAKE)
        self._renew = client.register_script(_RENEW)
        self._held: dict[str, str] = {}
        """The slots this process holds: each one's id, and its set."""
        self._given_back: dict[str, set[str]] = {}
        """By set, the slots given back whose ``ZREM`` is not answered yet."""
        self._removing: set[asyncio.Task[None]] = set()
        self._renewing: asyncio.Task[None] | None = None
        self._outage = outage or RedisOutage(log, "concurrent requests", client.ping)

    async def take(self, key: str, limit: int) -> Slot | None:
        if self._outage.skips():
            return Slot()  # Redis failed a moment ago: let the request through at once
        name = self._prefix + "slots:" + hashlib.sha256(key.encode()).hexdigest()
        slot_id = secrets.token_hex(12)
        given_back = tuple(self._given_back.get(name, ()))
        args: list[str | int] = [repr(self._lease), self._now(), limit, slot_id, *given_back]
        answer = asyncio.ensure_future(self._take(keys=[name], args=args))
        try:
            taken = await asyncio.shield(answer)  # its caller cancelled: taken for nobody
        except asyncio.CancelledError:
            answer.add_done_callback(partial(self._taken_for_nobody, name, slot_id))
            raise
        except RedisError as exc:
            self._outage.failed(exc)
            return Slot()
        self._outage.answered()
        self._removed(name, given_back)
        if not taken:
            return None
        self._held[slot_id] = name
        if self._renewing is None:
            self._renewing = asyncio.create_task(self._renew_forever())
        return Slot(partial(self._give_back, name, slot_id), self._give_back_wait)

    async def renew(self) -> None:
        """Renew the lease of every slot this process holds, in one round trip."""
        held = list(self._held.items())
        if not held:
            return
        args = [repr(self._lease), self._now(), *(slot_id for slot_id, _ in held)]
        try:
            await self._renew(keys=[name for _, name in held], args=args)
        except RedisError as exc:
            self._outage.failed(exc)

    @property
    def held(self) -> int:
        """The slots this process holds."""
        return len(self._held)

    async def aclose(self) -> None:
        if self._renewing is not None:
            self._renewing.cancel()
            await asyncio.wait([self._renewing])
        if self._removing:
            await asyncio.wait(self._removing)
        await self._outage.aclose()
        await self._redis.aclose()

    def _taken_for_nobody(self, name: str, slot_id: str, answer: asyncio.Future[int]) -> None:
        """The answer of a take whose caller left while Redis answered: a slot it took is
        given back at once, not left held for a lease."""
        if not answer.cancelled() and answer.exception() is None and answer.result():
            self._give_back(name, slot_id)

    def _give_back(self, name: str, slot_id: str) -> asyncio.Future[None]:
        """Remove the slot in Redis: the removal under way (done once Redis answered, or
        failed to)."""
        self._held.pop(slot_id, None)
        self._given_back.setdefault(name, set()).add(slot_id)
        task = asyncio.create_task(self._remove(name, slot_id))
        self._removing.add(task)
        task.add_done_callback(self._removing.discard)
        return task

    async def _remove(self, name: str, slot_id: str) -> None:
        try:
            await self._redis.zrem(name, slot_id)
        except RedisError:
            return  # no longer renewed, it runs out within its lease, or the next take drops it
        self._removed(name, (slot_id,))

    def _removed(self, name: str, slot_ids: Iterable[str]) -> None:
        """Redis answered the removal of ``slot_ids`` from ``name``."""
        given_back = self._given_back.get(name)
        if given_back is not None:
            given_back.difference_update(slot_ids)
            if not given_back:
                del self._given_back[name]

    async def _renew_forever(self) -> None:
        while True:
            await asyncio.sleep(self._lease / 3)
            try:
                await self.renew()
            except Exception:  # not Redis's (that is an outage): renewing must go on
                log.exception("concurrent requests: renewing the slots' leases failed")

    def _now(self) -> str:
        return "" if self._clock is None else repr(self._clock())
