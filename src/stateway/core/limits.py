"""Rate limits: requests and tokens per minute for each principal, as token buckets.

Each principal (tenant and scope: an API key, a token's subject) has one bucket per limit,
holding at most a minute's allowance and refilled continuously at a sixtieth of it per
second, so a burst of a whole minute's allowance passes and then requests pace out.
The buckets live behind :class:`TokenBuckets`: in process (one gateway) or in Redis,
where every replica takes from the same buckets atomically.

- ``requests_per_minute``: each model request (``Gateway.execute`` of a create, a Chat
  Completions or Messages request, a compaction) takes one from its principal's bucket
  before anything runs; an empty bucket is a 429 with ``Retry-After``. A prewarm
  (WebSocket mode's ``generate: false``) asks no model and takes none.
- ``tokens_per_minute``: a model request is admitted while its principal's token bucket
  is not empty, and a run's tokens (input and output, as its usage reports them) are
  taken out when it ends (a compaction's when it returns), which may leave the bucket
  in debt: the next requests wait until it has refilled past zero. A run whose upstream
  never counted (a client that left just before the usage chunk, a cut answer) is charged
  its output, estimated, and, when its output had begun, its prompt, which the model read
  (:func:`charged_tokens`). A request forwarded
  untouched to a Chat Completions upstream is charged the tokens its answer reports once
  relayed (a stream reports them only when its client asked,
  ``stream_options.include_usage``: one that did not is translated instead, so that the
  gateway's own run counts them).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable
from typing import Final, Protocol

from stateway.core.coordination import joined_key
from stateway.core.errors import RateLimited
from stateway.core.principal import Principal
from stateway.core.response import ResponseState
from stateway.core.token_estimate import item_tokens

ANY: Final = -math.inf
"""A ``need`` every bucket meets: the debit is taken whatever the bucket holds."""


class TokenBuckets(Protocol):
    async def take(self, key: str, per_minute: int, need: float, debit: float) -> float:
        """Refill ``key``'s bucket (full at ``per_minute``, refilled at ``per_minute/60``
        a second) for the time since it was last used; then, when it holds at least
        ``need``, take ``debit`` out and return 0.0; else take nothing and return the
        seconds until it will hold ``need``."""
        ...

    async def aclose(self) -> None: ...


class RateLimits:
    def __init__(
        self,
        buckets: TokenBuckets,
        requests_per_minute: int | None = None,
        tokens_per_minute: int | None = None,
    ) -> None:
        self._buckets = buckets
        self._requests = requests_per_minute
        self._tokens = tokens_per_minute
        self._charging: set[asyncio.Task[None]] = set()

    @property
    def counts_tokens(self) -> bool:
        return self._tokens is not None

    async def admit(self, principal: Principal) -> None:
        """Let one model request of ``principal`` through, or raise :class:`RateLimited`.
        The token bucket is checked first: a request refused for tokens takes no request."""
        if self._tokens is not None:
            wait = await self._buckets.take(_key("tokens", principal), self._tokens, 1, 0)
            if wait > 0:
                raise RateLimited("tokens", self._tokens, wait)
        if self._requests is not None:
            wait = await self._buckets.take(_key("requests", principal), self._requests, 1, 1)
            if wait > 0:
                raise RateLimited("requests", self._requests, wait)

    async def charge(self, principal: Principal, tokens: int) -> None:
        """Take the ``tokens`` a run of ``principal`` used out of its token bucket."""
        if self._tokens is not None and tokens > 0:
            await self._buckets.take(_key("tokens", principal), self._tokens, ANY, tokens)

    def charge_after(
        self,
        principal: Principal,
        ended: Callable[[], Awaitable[object]] | None,
        tokens: Callable[[], int],
    ) -> None:
        """Take ``tokens()`` out of ``principal``'s bucket once ``ended()`` is done (None:
        at once), beside the answer: a bucket in Redis is a round trip."""
        if self._tokens is None:
            return

        async def charge() -> None:
            if ended is not None:
                await ended()
            await self.charge(principal, tokens())

        task = asyncio.create_task(charge())
        self._charging.add(task)
        task.add_done_callback(self._charging.discard)

    async def settled(self) -> None:
        """Once the charges under way are taken (tests, shutdown)."""
        await asyncio.gather(*self._charging)

    async def aclose(self) -> None:
        await self._buckets.aclose()


def charged_tokens(state: ResponseState) -> int:
    """The tokens a run is charged: its usage's; or, when no upstream counted them (a
    client that left mid-stream, a cut answer: Chat and Anthropic upstreams count at the
    end), its output's, estimated, so that leaving just before the end does not make an
    answer free; and, either way, the prompts of rounds cut short after their output
    began (:attr:`~stateway.core.response.ResponseState.uncounted_input`), which the
    model read whole. A run that produced nothing and counted nothing is charged
    nothing."""
    if state.usage is not None and state.usage.total_tokens:
        return state.usage.total_tokens + state.uncounted_input
    return sum(item_tokens(item) for item in state.output) + state.uncounted_input


def _key(kind: str, principal: Principal) -> str:
    return joined_key(kind, principal.tenant_id, principal.scope)
