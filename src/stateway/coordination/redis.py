"""Coordination through Redis: processes sharing it deduplicate commands together and
cancel each other's background runs (redis-py's asyncio client).

Command outcomes: one key per command, ``{prefix}cmd:{sha256(tenant, principal, id)}``:

- a claim: ``p`` + a token of its holder + the request's fingerprint, set with ``SET NX``
  and an expiry of ``claim_ttl`` seconds that its holder renews while the command runs
  (a holder that died lets it expire: a retry then runs the command);
- an outcome: ``d`` + ``{"f": fingerprint, "r": response id}`` + a newline + the answer's
  bytes, kept ``result_ttl`` seconds.

Each tenant's outcomes are bounded, as in process (``max_results``, ``max_bytes`` of
answers), but per tenant: past either, the tenant's oldest outcomes are deleted, never
another tenant's, so one tenant's flood of keyed requests neither fills Redis nor has its
eviction policy push out other tenants' outcomes (or the gateway's other keys). The
tenant's record of them, at ``{prefix}outcomes:{sha256(tenant)}``: a sorted set of the
commands' digests in the order they were settled, and ``{prefix}outcome-bytes:{...}``, a
hash of each answer's bytes (``b``: their sum; ``n``: the last order given). Both expire
``result_ttl`` after the tenant's last outcome, with every outcome they name. An outcome
expired is counted until it is the oldest, so the first ones trimmed are those gone
already (the claim of a command running again under its key is left alone).

A waiter reads the key every few milliseconds (backing off to ``MAX_POLL``) until the
claim becomes an outcome, or disappears (the attempt failed: the waiter claims it).
Claiming and completing are one round trip each (``SET NX GET``, a script that replaces
the caller's own claim only, and trims the tenant's outcomes).

Cancel signals: a publish on ``{prefix}cancel``; every process subscribes and cancels the
run if it is its own.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import secrets
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any, Final, TypeVar

import orjson
from redis.asyncio import Redis
from redis.asyncio.client import PubSub
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError

from stateway.coordination.memory import DEFAULT_MAX_RESULT_BYTES, DEFAULT_MAX_RESULTS
from stateway.coordination.subscription import listen
from stateway.core.coordination import CancelHandler, CommandKey, Outcome
from stateway.core.errors import IdempotencyKeyReused, StorageError

log = logging.getLogger(__name__)

T = TypeVar("T")

DEFAULT_CLAIM_TTL: Final = 30.0
DEFAULT_RESULT_TTL: Final = 24 * 3600.0
FIRST_POLL: Final = 0.005
MAX_POLL: Final = 0.1
"""Seconds between a waiter's reads: from ``FIRST_POLL``, growing by half to this."""
TIMEOUT: Final = 5.0
"""Seconds a Redis command, or opening a connection, waits for Redis by default
(``[coordination] redis_timeout``)."""
PING_TIMEOUT: Final = 2.0
"""Seconds ``GET /ready`` waits for Redis to answer a ping."""
_UNAVAILABLE: Final = "The coordination store (Redis) is unavailable."
"""A Redis failure's message to clients (a 503)."""
_RESUBSCRIBE_DELAY: Final = 1.0
"""Seconds between attempts to subscribe to the cancel channel while Redis is down."""

_PENDING: Final = b"p"
_DONE: Final = b"d"

# KEYS[1] the command; KEYS[2], KEYS[3] its tenant's outcomes in order and their bytes;
# ARGV[1] the caller's claim; ARGV[2] the outcome ('' to release); ARGV[3] the outcome's
# lifetime in ms; ARGV[4] the command's digest; ARGV[5] its answer's bytes; ARGV[6],
# ARGV[7] the tenant's bounds (outcomes, bytes); ARGV[8] the prefix of command keys. Only
# the caller's own claim is replaced; past a bound the tenant's oldest outcomes are
# deleted (an outcome only: a claim under the same key runs its command again), never
# the newest.
_SETTLE: Final = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
if ARGV[2] == '' then redis.call('DEL', KEYS[1]) return 1 end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
local order, sizes, mine, size = KEYS[2], KEYS[3], ARGV[4], tonumber(ARGV[5])
local was = tonumber(redis.call('HGET', sizes, mine) or '0')
local n = redis.call('HINCRBY', sizes, 'n', 1)
redis.call('ZADD', order, n, mine)
redis.call('HSET', sizes, mine, size)
local bytes = redis.call('HINCRBY', sizes, 'b', size - was)
local count = redis.call('ZCARD', order)
while count > 1 and (count > tonumber(ARGV[6]) or bytes > tonumber(ARGV[7])) do
  local oldest = redis.call('ZRANGE', order, 0, 1)
  local gone = oldest[1] == mine and oldest[2] or oldest[1]
  local freed = tonumber(redis.call('HGET', sizes, gone) or '0')
  bytes = redis.call('HINCRBY', sizes, 'b', 0 - freed)  -- not -freed: Redis refuses '-0'
  redis.call('ZREM', order, gone)
  redis.call('HDEL', sizes, gone)
  count = count - 1
  local name = ARGV[8] .. gone
  if redis.call('GETRANGE', name, 0, 0) == 'd' then redis.call('DEL', name) end
end
if count == 1 and bytes ~= size then
  redis.call('DEL', sizes)
  redis.call('HSET', sizes, 'n', n, 'b', size, mine, size)
end
redis.call('PEXPIRE', order, ARGV[3])
redis.call('PEXPIRE', sizes, ARGV[3])
return 1
"""
_RENEW: Final = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
return redis.call('PEXPIRE', KEYS[1], ARGV[2])
"""


def connect(url: str, *, timeout: float = TIMEOUT) -> Redis:
    """A client (connection pool) for ``url``, e.g. ``redis://127.0.0.1:6379/0``.

    Each command waits ``timeout`` seconds at most for its answer, as does opening a
    connection: a Redis that stops answering without closing (a network partition, a
    frozen host) fails the command (``TimeoutError``, a ``RedisError``) instead of
    holding it for as long as TCP keeps the connection (redis-py before 8 waits for ever
    by default). A pub/sub connection's reads wait as long as their caller asks
    (:mod:`.subscription`), not this.

    A command whose pooled connection turns out closed (Redis restarted or failed over,
    its ``timeout`` dropped an idle client, a proxy reset it) is sent once more on a new
    connection: ``from_url`` retries nothing by default, so each stale connection of the
    pool failed its next command (a keyed request's 503, a lost outcome) although Redis
    answered again. Timeouts are not retried: an unresponsive Redis stays one socket
    timeout, not two."""
    return Redis.from_url(
        url,
        socket_timeout=timeout,
        socket_connect_timeout=timeout,
        retry=Retry(NoBackoff(), 1, supported_errors=(RedisConnectionError,)),
    )


class RedisCommandResults:
    """Outcomes in Redis, at most ``max_results`` per tenant whose answers hold
    ``max_bytes`` (beyond, the tenant's oldest are deleted; its newest is kept whatever
    its size), each kept ``result_ttl`` seconds; claims expiring ``claim_ttl`` seconds
    after their holder last renewed them."""

    shared = True

    def __init__(
        self,
        client: Redis,
        prefix: str = "stateway:",
        *,
        claim_ttl: float = DEFAULT_CLAIM_TTL,
        result_ttl: float = DEFAULT_RESULT_TTL,
        max_results: int = DEFAULT_MAX_RESULTS,
        max_bytes: int = DEFAULT_MAX_RESULT_BYTES,
    ) -> None:
        self._redis = client
        self._prefix = prefix
        self._cmd = prefix + "cmd:"
        """The prefix of the commands' keys."""
        self._bounds = (max_results, max_bytes)
        self._claim_ms = max(1, int(claim_ttl * 1000))
        self._result_ms = max(1, int(result_ttl * 1000))
        self._settle = client.register_script(_SETTLE)
        self._renew = client.register_script(_RENEW)
        self._held: dict[CommandKey, tuple[bytes, asyncio.Task[None]]] = {}
        """Claims of this process: their value, and the task renewing their expiry."""
        self._letting_go: set[asyncio.Task[None]] = set()
        """Claims taken for waiters cancelled meanwhile, being let go."""
        self._closed = False
        """Whether its client is closing: no claim is let go with it from then on."""

    def _key(self, key: CommandKey) -> str:
        return self._cmd + _digest(str(key))

    async def ping(self) -> None:
        """Within ``PING_TIMEOUT``: a Redis that does not answer at all is reported as
        down, not left to hold the readiness probe."""
        try:
            async with asyncio.timeout(PING_TIMEOUT):
                await _guarded(self._redis.ping())
        except TimeoutError:
            log.warning("redis: no answer to a ping within %g s", PING_TIMEOUT)
            raise StorageError(_UNAVAILABLE) from None

    async def claim(
        self, key: CommandKey, fingerprint: str, waiting: Callable[[], None] | None = None
    ) -> Outcome | None:
        name = self._key(key)
        mine = _PENDING + secrets.token_hex(8).encode() + fingerprint.encode()
        pause = FIRST_POLL
        while True:
            setting = asyncio.ensure_future(
                _guarded(self._redis.set(name, mine, nx=True, px=self._claim_ms, get=True))
            )
            try:
                found = await asyncio.shield(setting)  # what Redis did is learnt, whatever
            except asyncio.CancelledError:
                self._abandoned(key, mine, setting)
                raise
            assert found is None or isinstance(found, bytes)  # SET ... GET: the old value
            if found is None or found == mine:  # set (found: by a send that was retried)
                renewing = asyncio.create_task(self._keep(name, mine))
                self._held[key] = (mine, renewing)
                return None
            if found[:1] == _DONE:
                outcome = _decode(found)
                if outcome.fingerprint != fingerprint:
                    raise IdempotencyKeyReused()
                return outcome
            if found[17:].decode() != fingerprint:  # p + 16 hex token + fingerprint
                raise IdempotencyKeyReused()
            if waiting is not None:
                waiting()
                waiting = None
            await asyncio.sleep(pause)  # another attempt runs it: wait for its outcome
            pause = min(MAX_POLL, pause * 1.5)

    async def complete(self, key: CommandKey, outcome: Outcome) -> None:
        await self._end(key, _encode(outcome), len(outcome.body))

    async def release(self, key: CommandKey) -> None:
        await self._end(key, b"", 0)

    async def aclose(self) -> None:
        for _, renewing in self._held.values():
            renewing.cancel()
        self._held.clear()
        while self._letting_go:  # those begun meanwhile too
            await asyncio.gather(*self._letting_go, return_exceptions=True)
        self._closed = True
        await self._redis.aclose()

    def _abandoned(self, key: CommandKey, mine: bytes, setting: asyncio.Future[Any]) -> None:
        """A claim's ``SET`` whose caller was cancelled meanwhile (a waiter whose client
        left): a claim it took is let go, not left to hold the key, unrenewed, until it
        expires (closing waits for that); once the client closes, it is left to expire."""
        if self._closed:
            setting.add_done_callback(partial(_left, mine))
            return
        letting_go = asyncio.get_running_loop().create_task(self._let_go(key, mine, setting))
        self._letting_go.add(letting_go)
        letting_go.add_done_callback(self._letting_go.discard)

    async def _let_go(self, key: CommandKey, mine: bytes, setting: Awaitable[Any]) -> None:
        try:
            found = await setting
        except StorageError:
            return  # its SET failed, logged (``_guarded``): no claim known to be let go
        if found is not None and found != mine:
            return  # another attempt's: nothing of the waiter's to let go
        try:
            await self._replace(key, mine, b"", 0)
        except StorageError as exc:
            log.warning("a claim taken for a waiter that left is left to expire: %s", exc)

    async def _end(self, key: CommandKey, value: bytes, size: int) -> None:
        """Replace this process's claim of ``key`` by ``value``, an answer of ``size``
        bytes (``b""``: release it)."""
        held = self._held.pop(key, None)
        if held is None:
            return
        mine, renewing = held
        renewing.cancel()
        await self._replace(key, mine, value, size)

    async def _replace(self, key: CommandKey, mine: bytes, value: bytes, size: int) -> None:
        """Replace the claim ``mine`` of ``key`` by ``value`` (see :meth:`_end`)."""
        settle = self._settle(
            keys=[self._key(key), *self._outcomes(key.tenant_id)],
            args=[mine, value, self._result_ms, _digest(str(key)), size, *self._bounds, self._cmd],
        )
        try:
            settled = await settle
        except RedisError as exc:  # logged by the caller, which knows what is lost
            raise _unavailable(exc) from None
        if not settled:
            log.warning("the claim of a command expired before it ended; its outcome is lost")

    def _outcomes(self, tenant: str) -> tuple[str, str]:
        """The keys of the tenant's outcomes in order, and of their bytes."""
        digest = _digest(tenant)
        return self._prefix + "outcomes:" + digest, self._prefix + "outcome-bytes:" + digest

    async def _keep(self, name: str, mine: bytes) -> None:
        """Renew the claim's expiry every third of it while the command runs; stop once it
        is gone (its expiry passed while this process could not renew it), saying so: a
        retry elsewhere may have claimed the command, and run it, meanwhile."""
        while True:
            await asyncio.sleep(self._claim_ms / 3000)
            try:
                renewed = await self._renew(keys=[name], args=[mine, self._claim_ms])
            except RedisError as exc:
                log.warning("renewing a command's claim failed: %s", exc)
                continue
            if not renewed:
                log.warning(
                    "a command's claim expired while it ran (this process paused, or Redis"
                    " lost the key, for longer than claim_ttl): a retry may run the command"
                    " meanwhile"
                )
                return


class RedisCancelSignals:
    """Cancels published on one channel; every process hears them all."""

    shared = True

    def __init__(self, client: Redis, prefix: str = "stateway:") -> None:
        self._redis = client
        self._channel = prefix + "cancel"
        self._pubsub: PubSub | None = None
        self._task: asyncio.Task[None] | None = None

    async def send(self, tenant_id: str, response_id: str) -> None:
        message = orjson.dumps({"tenant": tenant_id, "response": response_id})
        await _guarded(self._redis.publish(self._channel, message))

    async def start(self, handler: CancelHandler) -> None:
        """Subscribe, then listen in the background. Redis unreachable at start-up does
        not stop the gateway (it serves on as it does when Redis goes away later: keyed
        requests and cross-process cancels answer 503): the listener subscribes once
        Redis answers."""
        self._pubsub = self._redis.pubsub(ignore_subscribe_messages=True)
        try:
            await self._pubsub.subscribe(self._channel)
        except RedisError as exc:
            log.warning(
                "cancel signals: Redis is unreachable (%s); subscribing again every %gs",
                exc,
                _RESUBSCRIBE_DELAY,
            )
        listening = listen(
            self._pubsub,
            lambda: (self._channel,),
            partial(_deliver, handler=handler),
            name="cancel signals",
            pause=_RESUBSCRIBE_DELAY,
            log=log,
        )
        self._task = asyncio.create_task(listening)

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.wait([self._task])
        if self._pubsub is not None:
            await self._pubsub.aclose()  # type: ignore[no-untyped-call, unused-ignore]  # typed from redis 8.2
        await self._redis.aclose()


def _deliver(message: dict[str, Any], handler: CancelHandler) -> None:
    if message.get("type") != "message":
        return
    try:
        fields = orjson.loads(message["data"])
        tenant, response = fields["tenant"], fields["response"]
    except (orjson.JSONDecodeError, KeyError, TypeError):
        log.warning("cancel signals: ignoring a malformed message")
        return
    if isinstance(tenant, str) and isinstance(response, str):
        handler(tenant, response)


def _encode(outcome: Outcome) -> bytes:
    header = orjson.dumps({"f": outcome.fingerprint, "r": outcome.response_id})
    return _DONE + header + b"\n" + outcome.body


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _decode(value: bytes) -> Outcome:
    header, _, body = value[1:].partition(b"\n")
    fields = orjson.loads(header)
    return Outcome(fields["f"], body, fields["r"])


def _left(mine: bytes, setting: asyncio.Future[Any]) -> None:
    """Done callback of the ``SET`` of a waiter that left once its adapter closed."""
    if setting.cancelled() or setting.exception() is not None:
        return  # its SET failed, logged (``_guarded``): no claim known to be left
    if setting.result() in (None, mine):
        log.warning("a claim taken for a waiter that left as the store closed is left to expire")


async def _guarded(call: Awaitable[T]) -> T:
    """Redis failures as the gateway's 503, logged: the answer's own log line shows only
    its generic message."""
    try:
        return await call
    except RedisError as exc:
        log.warning("redis: %s", exc)
        raise StorageError(_UNAVAILABLE) from None


def _unavailable(failure: RedisError) -> StorageError:
    """The gateway's 503 for a Redis failure its caller logs: what Redis said is its
    :attr:`~StorageError.reason`, in ``str(error)``."""
    error = StorageError(_UNAVAILABLE)
    error.reason = str(failure)
    return error
